"""Concat packing on the native step pipeline: which packed loaders take it
(one concat stream over a local RaggedDataset or a record-weighted Mixture
of them), its batches bit-identical to the Python pipeline's (the
reference, LOADERX_PIPELINE=python) and to the source records, its resume,
its failures (named by step, stream and record) and its close."""

from __future__ import annotations

import json
import os
import time

import numpy as np
import pytest

from loaderx import DataLoader, Mixture, Pack, RaggedDataset
from loaderx.converter import from_iterator
from loaderx.errors import ClosedError, CorruptStoreError
from loaderx.loader._packing import PackStream
from loaderx.packing import PackedRows
from loaderx.store import _native as native

STEPS = 50
WEIGHTS = {"a": 0.5, "b": 0.3, "c": 0.2}
ARRAYS = ("values", "segment_ids", "positions", "cu_seqlens", "num_segments", "records", "starts", "sources")


def _records(seed: int, n: int, item: tuple[int, ...] = (), base: int = 0) -> list[np.ndarray]:
    """``n`` records of 0 to 300 tokens (some of length 0, many longer than a row)."""
    rng = np.random.default_rng(seed)
    lens = rng.integers(0, 301, n)
    lens[::17] = 0
    if item:
        return [rng.standard_normal((int(k), *item)).astype(np.float32) for k in lens]
    return [(rng.integers(0, 1 << 20, int(k)) + base).astype(np.int32) for k in lens]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """name -> (records, dataset): "int" and "float3" stores, and the sources a, b, c of a mixture."""
    root = tmp_path_factory.mktemp("nativepack")
    made = {"int": _records(1, 300), "float3": _records(2, 200, (3,))}
    for k, name in enumerate(WEIGHTS):
        made[name] = _records(10 + k, (260, 150, 90)[k], base=(k + 1) << 24)
    out = {}
    for name, recs in made.items():
        from_iterator(str(root / name), iter(recs), progress=False)
        out[name] = (recs, RaggedDataset(str(root / name)))
    yield out
    for _, ds in out.values():
        ds.close()


def _src(data, name: str, **mix):
    """A loader's streams: one store as "tokens", or ("mix") a Mixture of a, b, c."""
    if name != "mix":
        return {"tokens": data[name][1]}
    return Mixture({n: {"tokens": data[n][1]} for n in WEIGHTS}, mix.pop("weights", WEIGHTS), **mix)


def _copy(b: PackedRows) -> PackedRows:
    return PackedRows(*(np.copy(a) if isinstance(a, np.ndarray) else a for a in b))


def _take(loader: DataLoader, n: int = STEPS, finite: bool = False) -> list[PackedRows]:
    """``n`` steps of an endless loader, or every step of a ``finite`` one."""
    if finite:
        return [_copy(b["tokens"]) for b in loader]
    return [_copy(next(loader)["tokens"]) for _ in range(n)]


def _python(monkeypatch, make, n: int = STEPS, finite: bool = False) -> list[PackedRows]:
    """The reference: the batches of ``make()`` on the Python pipeline."""
    monkeypatch.setenv("LOADERX_PIPELINE", "python")
    try:
        with make() as ref:
            assert ref.stats()["pipeline"] == "python"
            return _take(ref, n, finite)
    finally:
        monkeypatch.delenv("LOADERX_PIPELINE")


def _same(got: list[PackedRows], want: list[PackedRows], where: str = "") -> None:
    assert len(got) == len(want), where
    for s, (g, w) in enumerate(zip(got, want)):
        for f in ARRAYS:
            a, b = getattr(g, f), getattr(w, f)
            assert a.dtype == b.dtype and a.shape == b.shape, f"{where} step {s} {f}: {a.dtype}{a.shape} {b.dtype}{b.shape}"
            np.testing.assert_array_equal(a, b, err_msg=f"{where} step {s} {f}")
        assert g.dropped == w.dropped, f"{where} step {s}"


def _live_after(deadline_s: float, want: int) -> int:
    end = time.monotonic() + deadline_s
    while native.pipe_live() != want and time.monotonic() < end:
        time.sleep(0.001)
    return native.pipe_live()


# -- which loaders take the native path --------------------------------------


@pytest.mark.parametrize("workers", [None, 2])
@pytest.mark.parametrize("name", ["int", "mix"])
def test_concat_packing_of_a_store_or_a_record_mixture_is_native(data, name, workers):
    kw = {} if workers is None else {"num_workers": workers}
    for pack in (64, Pack(64, rows=3)):
        with DataLoader(_src(data, name), batch_size=4, pack={"tokens": pack}, **kw) as loader:
            assert loader.stats()["pipeline"] == "native", loader.stats()
            next(loader)
            st = loader.stats()
            assert st["pipeline"] == "native" and st["pipeline_reason"] is None, st


def test_other_packed_loaders_stay_python_and_say_why(data, monkeypatch):
    cases = [
        (lambda: _src(data, "int"), dict(pack={"tokens": Pack(64, mode="first_fit")})),
        (lambda: _src(data, "mix"), dict(pack={"tokens": Pack(64, mode="first_fit")})),
        (lambda: _src(data, "mix", by="tokens"), dict(pack={"tokens": 64})),
        (lambda: _src(data, "int"), dict(pack={"tokens": 64}, transform=lambda b: b)),
        (lambda: _src(data, "mix"), dict(pack={"tokens": 64}, transform=lambda b: b)),
    ]
    forced = [(lambda name=name: _src(data, name), dict(pack={"tokens": 64}, env=True)) for name in ("int", "mix")]
    for src, kw in cases + forced:
        if kw.pop("env", False):  # the environment variable forces it
            monkeypatch.setenv("LOADERX_PIPELINE", "python")
        with DataLoader(src(), batch_size=4, num_workers=2, **kw) as loader:
            next(loader)
            st = loader.stats()
            assert st["pipeline"] == "python", (kw, st)
            assert isinstance(st["pipeline_reason"], str) and st["pipeline_reason"], (kw, st)


# -- the same batches as the Python pipeline ---------------------------------

#: name -> (source, loader arguments)
CASES = {
    "int32 records": ("int", dict(batch_size=4, pack={"tokens": 64}, seed=1)),
    "(n, 3) float32 items": ("float3", dict(batch_size=4, pack={"tokens": 64}, seed=2)),
    "rows != batch_size, iid": ("int", dict(batch_size=8, pack={"tokens": Pack(128, rows=3)}, sampler="iid", seed=3)),
    "sequential": ("int", dict(batch_size=5, pack={"tokens": Pack(64, rows=2)}, sampler="sequential")),
    "rank 0 of 2": ("int", dict(batch_size=3, pack={"tokens": Pack(64, rows=2)}, shard=(0, 2), seed=4)),
    "rank 1 of 2": ("int", dict(batch_size=3, pack={"tokens": Pack(64, rows=2)}, shard=(1, 2), seed=4)),
    "start_step": ("int", dict(batch_size=4, pack={"tokens": 64}, start_step=17, seed=5)),
    "steps=N": ("int", dict(batch_size=4, pack={"tokens": 64}, steps=43, seed=6)),
    "int32 offsets": ("int", dict(batch_size=4, pack={"tokens": 64}, offsets_dtype=np.int32, seed=10)),
    "mixture": ("mix", dict(batch_size=6, pack={"tokens": 128}, seed=7)),
    "mixture rank 1 of 2 from step 9": (
        "mix", dict(batch_size=4, pack={"tokens": Pack(64, rows=2)}, shard=(1, 2), start_step=9, seed=8)),
    "mixture steps=N": ("mix", dict(batch_size=5, pack={"tokens": Pack(64, rows=7)}, steps=41, seed=9)),
}


@pytest.mark.parametrize("case", list(CASES))
def test_native_packed_batches_are_the_python_pipelines(data, monkeypatch, case):
    name, kw = CASES[case]
    finite = "steps" in kw
    want = _python(monkeypatch, lambda: DataLoader(_src(data, name), num_workers=2, **kw), finite=finite)
    assert len(want) == (kw["steps"] - kw.get("start_step", 0) if finite else STEPS)
    for workers in (1, 3):
        with DataLoader(_src(data, name), num_workers=workers, **kw) as loader:
            assert loader.stats()["pipeline"] == "native", loader.stats()
            got = _take(loader, finite=finite)
        _same(got, want, f"{case}, {workers} workers")


def test_many_tiny_records_per_step_grow_the_buffers(tmp_path, monkeypatch):
    rng = np.random.default_rng(5)
    # 3000 tiny records in a row, then long ones that make the mean record 22
    # tokens: a step of tiny ones holds far more records than the batch size
    # or the mean suggest
    lens = np.concatenate([rng.integers(1, 4, 3000), np.full(20, 3000)])
    recs = [rng.integers(0, 1 << 30, int(k)).astype(np.int32) for k in lens]
    from_iterator(str(tmp_path / "tiny"), iter(recs), progress=False)
    with RaggedDataset(str(tmp_path / "tiny")) as ds:
        kw = dict(batch_size=4, pack={"tokens": Pack(256, rows=8)}, sampler="sequential")
        want = _python(monkeypatch, lambda: DataLoader({"tokens": ds}, num_workers=2, **kw), 60)
        counts = [len(b.records) for b in want]
        assert max(counts) > 500 and min(counts) <= 16, counts  # tiny steps, and steps inside a long record
        made_here: list[int] = []  # the steps that outgrew their slot, made by the consumer instead

        def counted(self, idx, slot, step=0, gather_into=PackStream.gather_into):
            made_here.append(step)
            return gather_into(self, idx, slot, step)

        monkeypatch.setattr(PackStream, "gather_into", counted)
        for workers in (1, 3):
            with DataLoader({"tokens": ds}, num_workers=workers, **kw) as loader:
                assert loader.stats()["pipeline"] == "native", loader.stats()
                got = _take(loader, 60)
            _same(got, want, f"{workers} workers")
        assert made_here, "no step outgrew its slot's buffers"


# -- resume ------------------------------------------------------------------


@pytest.mark.parametrize("name", ["int", "mix"])
def test_a_resumed_native_loader_yields_the_next_batches(data, monkeypatch, name):
    kw = dict(batch_size=4, pack={"tokens": Pack(64, rows=3)}, seed=11, num_workers=2)
    want = _python(monkeypatch, lambda: DataLoader(_src(data, name), **kw), 40)
    for k in (1, 13, 29):
        with DataLoader(_src(data, name), **kw) as first:
            assert first.stats()["pipeline"] == "native", first.stats()
            head = _take(first, k)
            state = json.loads(json.dumps(first.state_dict()))
            assert state["step"] == k
            rest = _take(first, 8)
        _same(head + rest, want[: k + 8], f"uninterrupted, state at {k}")
        for warm in (0, 2):  # a fresh loader, and one that already made steps
            with DataLoader(_src(data, name), **kw) as second:
                assert second.stats()["pipeline"] == "native", second.stats()
                _take(second, warm)
                second.load_state_dict(state)
                assert second.step == k
                _same(_take(second, 8), rest, f"resumed at {k} after {warm} steps")
                assert second.stats()["pipeline"] == "native", second.stats()


# -- against the source records ----------------------------------------------


def _check_against_sources(batches: list[PackedRows], rows: int, length: int, lookup) -> None:
    """Every segment is its record's tokens from its start; segment ids,
    positions, num_segments and cu_seqlens agree; and consecutive segments
    continue the stream (a record goes on where it left off, the next one
    starts at 0)."""
    prev = None  # (source, record, end) of the segment before
    for s, b in enumerate(batches):
        item = b.values.shape[2:]
        assert b.values.shape[:2] == b.segment_ids.shape == b.positions.shape == (rows, length)
        flat = b.values.reshape(-1, *item)
        seg, pos = b.segment_ids.reshape(-1), b.positions.reshape(-1)
        cu = b.cu_seqlens.astype(np.int64)
        assert cu[0] == 0 and cu[-1] == rows * length and (np.diff(cu) > 0).all(), s
        assert b.records.shape == b.starts.shape == b.sources.shape == (len(cu) - 1,)
        assert b.dropped == 0 and (b.records >= 0).all()  # concat: no padding
        for k in range(len(cu) - 1):
            lo, hi = int(cu[k]), int(cu[k + 1])
            assert lo // length == (hi - 1) // length, f"step {s} segment {k} crosses a row"
            src, rec, at = int(b.sources[k]), int(b.records[k]), int(b.starts[k])
            record = lookup(src, rec)
            np.testing.assert_array_equal(flat[lo:hi], record[at : at + hi - lo], err_msg=f"step {s} segment {k}")
            assert at + hi - lo <= len(record)
            np.testing.assert_array_equal(pos[lo:hi], np.arange(hi - lo))
            assert (seg[lo:hi] == (1 if lo % length == 0 else seg[lo - 1] + 1)).all(), (s, k)
            if prev is not None and prev[2] < len(lookup(prev[0], prev[1])):
                assert (src, rec, at) == prev, f"step {s} segment {k} does not continue record {prev[1]}"
            else:
                assert at == 0, (s, k)
            prev = (src, rec, at + hi - lo)
        np.testing.assert_array_equal(b.num_segments, b.segment_ids.max(axis=1))


@pytest.mark.parametrize("name", ["int", "float3"])
def test_native_rows_are_the_store_records(data, name):
    recs = data[name][0]

    def lookup(src, rec):
        assert src == 0
        return recs[rec]

    with DataLoader(_src(data, name), batch_size=4, pack={"tokens": Pack(64, rows=3)}, seed=2, num_workers=2) as dl:
        assert dl.stats()["pipeline"] == "native", dl.stats()
        _check_against_sources(_take(dl), 3, 64, lookup)


def test_native_rows_are_the_mixture_records(data):
    mix = _src(data, "mix")
    arrays = [data[n][0] for n in mix.names]
    seen = set()

    def lookup(src, rec):
        where, local = mix.locate(np.array([rec]))
        assert int(where[0]) == src, (src, rec)
        seen.add(src)
        return arrays[src][int(local[0])]

    with DataLoader(mix, batch_size=6, pack={"tokens": 128}, seed=4, num_workers=3) as dl:
        assert dl.stats()["pipeline"] == "native", dl.stats()
        _check_against_sources(_take(dl), 6, 128, lookup)
    assert seen == {0, 1, 2}


# -- failures and close ------------------------------------------------------


def test_a_damaged_record_fails_its_step_naming_stream_and_record(tmp_path):
    rng = np.random.default_rng(8)
    recs = [rng.integers(0, 1 << 30, int(k)).astype(np.int32) for k in rng.integers(1, 50, 120)]
    path = str(tmp_path / "raw")
    from_iterator(path, iter(recs), codec="raw", progress=False)
    bad, per_step = 40, 2 * 64
    ends = np.cumsum([len(r) for r in recs])
    step = int(ends[bad - 1]) // per_step  # the step of the record's first token
    assert step == (int(ends[bad]) - 1) // per_step and int(ends[bad]) < (step + 1) * per_step - 1
    with open(os.path.join(path, "0.chunk"), "r+b") as f:  # raw records lie in order in 0.chunk
        at = int(sum(r.nbytes for r in recs[:bad])) + 1
        f.seek(at)
        b = f.read(1)
        f.seek(at)
        f.write(bytes([b[0] ^ 0x04]))
    stream = np.concatenate(recs * 2)
    with RaggedDataset(path) as ds, DataLoader({"tokens": ds}, batch_size=4, sampler="sequential", num_workers=2,
                                                pack={"tokens": Pack(64, rows=2)}) as loader:
        assert loader.stats()["pipeline"] == "native", loader.stats()
        for s in range(step):
            got = next(loader)["tokens"].values.reshape(-1)
            np.testing.assert_array_equal(got, stream[s * per_step : (s + 1) * per_step])
        with pytest.raises(CorruptStoreError) as info:
            next(loader)
        msg = str(info.value)
        assert msg.startswith(f"step {step}, stream 'tokens': "), msg
        assert f"record {bad}" in msg, msg
        assert loader.step == step + 1
        got = next(loader)["tokens"].values.reshape(-1)  # the run goes on
        np.testing.assert_array_equal(got, stream[(step + 1) * per_step : (step + 2) * per_step])


@pytest.mark.parametrize("name", ["int", "mix"])
def test_close_ends_the_native_packing_workers_promptly(data, name):
    base = native.pipe_live()
    loader = DataLoader(_src(data, name), batch_size=4, pack={"tokens": 64}, num_workers=3)
    next(loader)
    assert loader.stats()["pipeline"] == "native", loader.stats()
    assert native.pipe_live() > base
    t0 = time.monotonic()
    loader.close()
    assert time.monotonic() - t0 < 0.5
    assert _live_after(0.5, base) == base
    with pytest.raises(ClosedError):
        next(loader)
    loader = DataLoader(_src(data, name), batch_size=4, pack={"tokens": 64}, num_workers=1)
    next(loader)
    assert native.pipe_live() > base
    del loader  # dropped without close: its workers end too
    assert _live_after(0.5, base) == base


# -- Ctrl-C ------------------------------------------------------------------


class _InterruptAt:
    """A trace function raising KeyboardInterrupt (as a signal would) at the
    ``at``-th line event of the call traced, in the native pipeline's Python
    code or the binding."""

    def __init__(self, at: int, files: set[str]) -> None:
        self.at, self.files, self.seen, self.fired = at, files, 0, False

    def __call__(self, frame, event, arg):
        return self.local if frame.f_code.co_filename in self.files and frame.f_code.co_name != "__del__" else None

    def local(self, frame, event, arg):
        if event == "line" and not self.fired:
            self.seen += 1
            if self.seen == self.at:
                self.fired = frame.f_code.co_name
                raise KeyboardInterrupt(f"injected at line event {self.at}")
        return self.local


@pytest.mark.parametrize("name", ["int", "mix"])
def test_ctrl_c_anywhere_in_next_loses_and_repeats_no_step(data, monkeypatch, name):
    """Interrupted at one line or another of next() (the plan appended to
    every few steps), then called again, the loader hands out every step
    once, in order, each the Python pipeline's."""
    import sys

    from loaderx.loader import _native_pipe, _packing

    monkeypatch.setattr(_packing, "CHUNK_STEPS", 1)  # the plan grows in most calls
    make = lambda: DataLoader(_src(data, name), batch_size=4, seed=3, pack={"tokens": 256}, num_workers=2)  # noqa: E731
    steps = 300
    want = _python(monkeypatch, make, steps)
    files = {_native_pipe.__file__, native.__file__}
    got, fired, where = [], 0, set()
    with make() as loader:
        got.append(_copy(next(loader)["tokens"]))
        assert loader.stats()["pipeline"] == "native"
        at = 0
        while len(got) < steps:
            at = at % 150 + 1  # the line of this call to interrupt at
            tracer = _InterruptAt(at, files)
            sys.settrace(tracer)
            try:
                batch = next(loader)
            except KeyboardInterrupt:
                fired += 1
                batch = next(loader)  # the call again, uninterrupted
            finally:
                sys.settrace(None)
            got.append(_copy(batch["tokens"]))
            where.add(tracer.fired)
    assert fired > 50 and "_plan" in where, (fired, where)
    _same(got, want, "interrupted")
