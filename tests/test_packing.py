"""DataLoader(pack=...): ragged streams packed into fixed (rows, L) rows.

The records hold distinct token values (record ``i``'s token ``j`` is
``i * STRIDE + j``), with seeded random lengths of 1 to 3 L, so every token
in a batch names the record and place it came from. Every check compares the
loader's rows with what the rule says they must hold, computed here from the
sampler's indices and the records in plain Python and numpy.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

import loaderx
from loaderx.converter import from_iterator
from loaderx.dataloader import DataLoader
from loaderx.dataset import DenseDataset, RaggedDataset
from loaderx.packing import Pack, PackedRows
from loaderx.sampler import Sampler

STRIDE = 1 << 10
L = 16
N = 240


def make_records(seed: int, n: int = N, length: int = L) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    lens = rng.integers(1, 3 * length, size=n, endpoint=True)
    return [np.arange(k, dtype=np.int32) + i * STRIDE for i, k in enumerate(lens)]


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    path = tmp_path_factory.mktemp("packing") / "tokens"
    records = make_records(7)
    from_iterator(str(path), records, progress=False)
    ds = RaggedDataset(str(path))
    yield ds, records, str(path)
    ds.close()


def stream_of(records: list[np.ndarray], sampler: Sampler, steps: int) -> np.ndarray:
    """The concatenation of the records in sampler order over ``steps`` sampler steps."""
    return np.concatenate([records[i] for t in range(steps) for i in sampler(t)])


def check_segments(b: PackedRows, records: list[np.ndarray], rows: int, length: int) -> None:
    """segment_ids, positions, cu_seqlens, num_segments, records and starts
    agree with each other and with the tokens."""
    assert b.values.shape[:2] == (rows, length)
    assert b.segment_ids.shape == b.positions.shape == (rows, length)
    assert b.segment_ids.dtype == b.positions.dtype == np.int32
    cu = b.cu_seqlens.astype(np.int64)
    assert cu[0] == 0 and cu[-1] == rows * length and (np.diff(cu) > 0).all()
    assert b.records.shape == b.starts.shape == (len(cu) - 1,)
    seg = b.segment_ids.reshape(-1)
    pos = b.positions.reshape(-1)
    flat = b.values.reshape(-1)
    real = 0
    for k in range(len(cu) - 1):
        lo, hi = int(cu[k]), int(cu[k + 1])
        assert lo // length == (hi - 1) // length, f"segment {k} crosses a row boundary"
        if b.records[k] < 0:  # padding: the rest of its row
            assert hi % length == 0 and (seg[lo:hi] == 0).all() and (pos[lo:hi] == 0).all()
            assert (flat[lo:hi] == 0).all()
            continue
        real += 1
        assert len(np.unique(seg[lo:hi])) == 1 and seg[lo] >= 1
        first_in_row = lo % length == 0
        assert seg[lo] == (1 if first_in_row else seg[lo - 1] + 1)
        np.testing.assert_array_equal(pos[lo:hi], np.arange(hi - lo))
        rec, at = int(b.records[k]), int(b.starts[k])
        np.testing.assert_array_equal(flat[lo:hi], records[rec][at : at + hi - lo])
    assert b.num_segments.dtype == np.int32
    np.testing.assert_array_equal(b.num_segments, b.segment_ids.max(axis=1))
    assert int(b.num_segments.sum()) == real


# -- concat ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("mode", "seed", "batch", "rows", "length"),
    [("cyclic", 0, 8, None, L), ("cyclic", 3, 5, 3, 7), ("iid", 1, 4, 6, L), ("sequential", 0, 7, 2, 33)],
)
def test_concat_uses_every_token_once_in_sampler_order(store, mode, seed, batch, rows, length):
    ds, records, _ = store
    steps = 40
    with DataLoader({"t": ds}, batch_size=batch, sampler=mode, seed=seed, num_workers=0,
                    pack={"t": Pack(length, rows=rows)}) as dl:
        got = []
        for _ in range(steps):
            b = next(dl)["t"]
            check_segments(b, records, rows or batch, length)
            assert b.dropped == 0 and b.padding == 0.0
            got.append(b.values.reshape(-1).copy())
    got = np.concatenate(got)
    sampler = Sampler(mode, N, batch, seed=seed)
    want = stream_of(records, sampler, 1 + len(got) // batch)  # more than enough sampler steps
    np.testing.assert_array_equal(got, want[: len(got)])


def test_concat_reaches_past_one_index_chunk(store, monkeypatch):
    """Steps beyond the first chunk of summed sampler steps, reached first
    by a seek (so the earlier chunks are summed on the way)."""
    from loaderx.loader import _packing

    monkeypatch.setattr(_packing, "CHUNK_STEPS", 3)
    monkeypatch.setattr(_packing, "CACHED_CHUNKS", 2)
    ds, records, _ = store
    with DataLoader({"t": ds}, batch_size=4, seed=5, num_workers=0, pack={"t": L}, start_step=30) as dl:
        got = np.concatenate([next(dl)["t"].values.reshape(-1).copy() for _ in range(6)])
    want = stream_of(records, Sampler("cyclic", N, 4, seed=5), 400)
    np.testing.assert_array_equal(got, want[30 * 4 * L : 36 * 4 * L])


def test_concat_item_shape_and_int32_offsets(tmp_path):
    rng = np.random.default_rng(2)
    recs = [rng.integers(0, 100, size=(int(k), 3), dtype=np.int16) for k in rng.integers(1, 20, size=50)]
    from_iterator(str(tmp_path / "pairs"), recs, progress=False)
    with RaggedDataset(str(tmp_path / "pairs")) as ds, DataLoader(
        {"p": ds}, batch_size=3, sampler="sequential", num_workers=0, pack={"p": 8}, offsets_dtype=np.int32
    ) as dl:
        b = next(dl)["p"]
        b2 = next(dl)["p"]
        assert b.values.shape == (3, 8, 3) and b.values.dtype == np.int16
        assert b.cu_seqlens.dtype == np.int32
        flat = np.concatenate(recs)
        np.testing.assert_array_equal(b.values.reshape(-1, 3), flat[:24])
        np.testing.assert_array_equal(b2.values.reshape(-1, 3), flat[24:48])


# -- first_fit ---------------------------------------------------------------


def reference_first_fit(lens: list[int], length: int, rows: int, truncate: bool):
    """Each record in order into the first row with room, piece by piece;
    a record with a piece that fits nowhere is left out whole."""
    content: list[list[tuple[int, int, int]]] = [[] for _ in range(rows)]  # (record pos, start, n)
    free = [length] * rows
    dropped = 0
    for k, n in enumerate(lens):
        if n == 0:
            continue
        pieces = [(0, min(n, length))] if truncate else [(a, min(length, n - a)) for a in range(0, n, length)]
        taken = []
        for start, m in pieces:
            row = next((r for r in range(rows) if free[r] >= m), None)
            if row is None:
                for r, _ in taken:
                    content[r].pop()
                    free[r] += _
                dropped += 1
                break
            content[row].append((k, start, m))
            free[row] -= m
            taken.append((row, m))
    return content, dropped


@pytest.mark.parametrize(("batch", "rows", "long"), [(8, 4, "split"), (12, 5, "truncate"), (6, None, "split")])
def test_first_fit_places_records_as_the_rule_says(store, batch, rows, long):
    ds, records, _ = store
    nrows = rows or batch
    with DataLoader({"t": ds}, batch_size=batch, seed=11, num_workers=0,
                    pack={"t": Pack(L, mode="first_fit", rows=rows, long=long)}) as dl:
        sampler = Sampler("cyclic", N, batch, seed=11)
        for step in range(25):
            b = next(dl)["t"]
            check_segments(b, records, nrows, L)
            idx = sampler(step)
            content, dropped = reference_first_fit([len(records[i]) for i in idx], L, nrows, long == "truncate")
            assert b.dropped == dropped
            for r in range(nrows):
                want = [records[idx[k]][a : a + m] for k, a, m in content[r]]
                used = sum(m for _, _, m in content[r])
                row = b.values[r]
                np.testing.assert_array_equal(row[:used], np.concatenate(want) if want else row[:0])
                assert (row[used:] == 0).all() and (b.segment_ids[r, used:] == 0).all()
                assert b.num_segments[r] == len(content[r])
            pad = float(np.count_nonzero(b.segment_ids == 0)) / b.segment_ids.size
            assert b.padding == pad


def test_first_fit_never_splits_a_record_that_fits(store):
    ds, records, _ = store
    with DataLoader({"t": ds}, batch_size=10, seed=2, num_workers=0,
                    pack={"t": Pack(L, mode="first_fit", rows=6)}) as dl:
        for _ in range(30):
            b = next(dl)["t"]
            seen: dict[int, list[int]] = {}
            cu = b.cu_seqlens
            for k, rec in enumerate(b.records.tolist()):
                if rec >= 0:
                    seen.setdefault(rec, []).append(int(cu[k + 1] - cu[k]))
            for rec, pieces in seen.items():
                n = len(records[rec])
                if n <= L:
                    assert pieces == [n], (rec, n, pieces)
                else:  # cut into pieces of L, the last shorter
                    assert sorted(pieces, reverse=True) == [min(L, n - a) for a in range(0, n, L)]


def test_first_fit_gathers_other_streams_at_the_steps_indices(store):
    ds, _, _ = store
    labels = np.arange(N, dtype=np.int64) * 3
    with DataLoader({"t": ds, "label": labels}, batch_size=8, seed=4, num_workers=2, workers="thread",
                    pack={"t": Pack(L, mode="first_fit", rows=4)}) as dl:
        for step in range(5):
            batch = next(dl)
            idx = dl.indices(step)
            np.testing.assert_array_equal(batch["label"], labels[idx])
            assert set(batch["t"].records[batch["t"].records >= 0].tolist()) <= set(idx.tolist())


# -- resume, threads, processes, recycling -----------------------------------


@pytest.mark.parametrize("pack", [Pack(L), Pack(L, mode="first_fit", rows=3)])
def test_resume_at_random_steps_is_bit_identical(store, pack):
    ds, _, _ = store
    kw = {"batch_size": 6, "seed": 9, "pack": {"t": pack}}
    with DataLoader({"t": ds}, num_workers=0, **kw) as dl:
        run = [tuple(np.copy(a) for a in next(dl)["t"][:7]) for _ in range(40)]
    rng = np.random.default_rng(1)
    for start in rng.choice(40, size=5, replace=False):
        start = int(start)
        with DataLoader({"t": ds}, num_workers=2, workers="thread", **kw) as other:
            next(other)
            state = json.loads(json.dumps({**other.state_dict(), "step": start}))
            other.load_state_dict(state)
            for s in range(start, min(40, start + 4)):
                got = next(other)["t"]
                for a, b in zip(got[:7], run[s]):
                    assert a.dtype == b.dtype
                    np.testing.assert_array_equal(a, b)


def test_a_held_batch_is_never_overwritten(store):
    ds, _, _ = store
    for pack in (Pack(L), Pack(L, mode="first_fit", rows=4)):
        with DataLoader({"t": ds}, batch_size=8, num_workers=2, workers="thread", pack={"t": pack}) as dl:
            held = next(dl)["t"]
            copies = [np.copy(a) for a in held[:7]]
            for _ in range(20):
                next(dl)
            for a, b in zip(held[:7], copies):
                np.testing.assert_array_equal(a, b)


@pytest.mark.usefixtures("deadline")
def test_processes_yield_what_threads_do(store):
    _, _, path = store
    kw = {"batch_size": 6, "seed": 3, "num_workers": 2, "start_step": 5}
    for pack in ({"t": Pack(L)}, {"t": Pack(L, mode="first_fit", rows=3, long="truncate")}):
        with RaggedDataset(path) as ds:
            with DataLoader({"t": ds}, workers="thread", pack=pack, **kw) as threads:
                want = [tuple(np.copy(a) for a in next(threads)["t"][:7]) for _ in range(8)]
            with DataLoader({"t": ds}, workers="process", pack=pack, **kw) as procs:
                for w in want:
                    got = next(procs)["t"]
                    assert isinstance(got, PackedRows)
                    for a, b in zip(got[:7], w):
                        np.testing.assert_array_equal(a, b)


# -- bad input ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("pack", "error", "quoted"),
    [
        ({"t": 0}, ValueError, "0"),
        ({"t": -3}, ValueError, "-3"),
        ({"t": 1.5}, TypeError, "1.5"),
        ({"t": "16"}, TypeError, "'16'"),
        ({"t": True}, TypeError, "True"),
        ({"nope": 16}, ValueError, "'nope'"),
        ({"label": 16}, ValueError, "'label'"),
        ([("t", 16)], TypeError, "[('t', 16)]"),
    ],
)
def test_bad_pack_values_are_refused_quoting_them(store, pack, error, quoted):
    ds, _, _ = store
    with pytest.raises(error, match="pack") as info:
        DataLoader({"t": ds, "label": np.zeros(N)}, batch_size=4, pack=pack)
    assert quoted in str(info.value)


@pytest.mark.parametrize(
    ("kwargs", "quoted"),
    [
        ({"length": 0}, "0"),
        ({"length": 8, "mode": "best_fit"}, "'best_fit'"),
        ({"length": 8, "rows": 0}, "0"),
        ({"length": 8, "mode": "first_fit", "long": "drop"}, "'drop'"),
        ({"length": 8, "long": "truncate"}, "'truncate'"),
    ],
)
def test_bad_pack_options_are_refused(kwargs, quoted):
    with pytest.raises((TypeError, ValueError)) as info:
        Pack(**kwargs)
    assert quoted in str(info.value)


def test_pack_and_pad_of_one_stream_are_refused(store):
    ds, _, _ = store
    with pytest.raises(ValueError, match="both pack=.*and pad="):
        DataLoader({"t": ds}, batch_size=4, pack={"t": 16}, pad={"t": "max"})


def test_concat_refuses_what_it_leaves_undefined(store, tmp_path):
    ds, _, _ = store
    from_iterator(str(tmp_path / "other"), make_records(1), progress=False)
    with pytest.raises(ValueError, match="stream 'label' is not packed"):
        DataLoader({"t": ds, "label": np.zeros(N)}, batch_size=4, pack={"t": 16})
    with RaggedDataset(str(tmp_path / "other")) as other:
        with pytest.raises(ValueError, match="stream 'o' is not packed"):
            DataLoader({"t": ds, "o": other}, batch_size=4, pack={"t": 16})
        with DataLoader({"t": ds, "o": other}, batch_size=4, num_workers=0, pack={"t": 16, "o": 16}) as dl:
            b = next(dl)
            assert b["t"].values.shape == b["o"].values.shape == (4, 16)
    with pytest.raises(ValueError, match="epoch=True"):
        DataLoader({"t": ds}, batch_size=4, pack={"t": 16}, epoch=True)


def test_a_dense_store_is_not_a_ragged_stream(tmp_path, store):
    ds, _, _ = store
    loaderx.from_numpy(str(tmp_path / "dense"), np.zeros((N, 4), np.int32))
    with DenseDataset(str(tmp_path / "dense")) as dense:
        with pytest.raises(ValueError, match="pack=\\{'d': 16\\} names a DenseDataset, not a ragged stream"):
            DataLoader({"t": ds, "d": dense}, batch_size=4, pack={"d": 16})


def test_a_state_of_other_packing_is_refused(store):
    ds, _, _ = store
    with DataLoader({"t": ds}, batch_size=4, num_workers=0, pack={"t": 16}) as a:
        state = a.state_dict()
        assert state["pack"] == {"t": [16, "concat", None, "split"]}
    with DataLoader({"t": ds}, batch_size=4, num_workers=0, pack={"t": 8}) as b:
        with pytest.raises(ValueError, match="pack="):
            b.load_state_dict(state)
    with DataLoader({"t": ds}, batch_size=4, num_workers=0) as c:
        assert "pack" not in c.state_dict()
        with pytest.raises(ValueError, match="pack="):
            c.load_state_dict(state)


def test_first_fit_epoch_pass_packs_the_short_last_batch(store):
    ds, records, _ = store
    with DataLoader({"t": ds}, batch_size=50, sampler="sequential", epoch=True, num_workers=0,
                    pack={"t": Pack(L, mode="first_fit", rows=150)}) as dl:
        seen = []
        for b in dl:
            check_segments(b["t"], records, 150, L)
            assert b["t"].dropped == 0
            seen += [r for r in b["t"].records.tolist() if r >= 0]
    assert sorted(set(seen)) == list(range(N))


def test_records_of_length_zero_are_no_segments(tmp_path):
    sizes = [0, 3, 0, 0, 5, 0, 2, 7, 0]
    recs = [np.arange(n, dtype=np.int32) + i * STRIDE for i, n in enumerate(sizes)]
    from_iterator(str(tmp_path / "z"), recs, progress=False)
    with RaggedDataset(str(tmp_path / "z")) as ds:
        with DataLoader({"t": ds}, batch_size=3, sampler="sequential", num_workers=0, pack={"t": 4}) as dl:
            got = []
            for _ in range(6):
                b = next(dl)["t"]
                check_segments(b, recs, 3, 4)
                assert (b.records >= 0).all() and all(sizes[r] > 0 for r in b.records.tolist())
                got.append(b.values.reshape(-1).copy())
        np.testing.assert_array_equal(np.concatenate(got), np.concatenate(recs * 5)[:72])
        with DataLoader({"t": ds}, batch_size=9, sampler="sequential", num_workers=0,
                        pack={"t": Pack(4, mode="first_fit", rows=5)}) as dl:
            b = next(dl)["t"]
            check_segments(b, recs, 5, 4)
            assert b.dropped == 0 and sorted(set(b.records[b.records >= 0].tolist())) == [1, 4, 6, 7]


def test_a_stream_without_tokens_fails_its_step_clearly(tmp_path):
    from_iterator(str(tmp_path / "e"), [np.zeros(0, np.int32)] * 5, progress=False)
    with RaggedDataset(str(tmp_path / "e")) as ds:
        with DataLoader({"t": ds}, batch_size=2, num_workers=0, pack={"t": 4}) as dl:
            with pytest.raises(ValueError, match="only records of length 0"):
                next(dl)
        with DataLoader({"t": ds}, batch_size=2, num_workers=0, pack={"t": Pack(4, mode="first_fit")}) as dl:
            b = next(dl)["t"]
            assert b.padding == 1.0 and (b.records == -1).all() and b.cu_seqlens.tolist() == [0, 4, 8]


# -- elastic resume: packing is global ---------------------------------------

#: the fields of PackedRows laid out per row, which the ranks' batches concatenate
ROW_FIELDS = ("values", "segment_ids", "positions", "num_segments")


def ranks_rows(loaders: list[DataLoader]) -> tuple[dict[str, np.ndarray], list[PackedRows]]:
    """One step of every rank: their rows concatenated in rank order."""
    got = [next(dl)["t"] for dl in loaders]
    return {f: np.concatenate([getattr(b, f) for b in got]) for f in ROW_FIELDS}, got


@pytest.mark.parametrize("mode", ["concat", "first_fit"])
@pytest.mark.parametrize("sampler", ["cyclic", "iid", "sequential"])
def test_packed_rows_are_global_so_elastic_resume_is_exact(store, mode, sampler):
    ds, records, _ = store
    rng = np.random.default_rng(hash((mode, sampler)) % 1000)
    for _ in range(3):
        g = int(rng.choice([12, 24, 36]))
        rows = g // 2  # global rows: first_fit packs g records into them
        worlds = [d for d in range(1, rows + 1) if rows % d == 0]
        w1, w2 = int(rng.choice(worlds)), int(rng.choice(worlds))
        stop = int(rng.integers(0, 6))

        def make(world: int, rank: int, g: int = g, rows: int = rows, **kw) -> DataLoader:
            return DataLoader({"t": ds}, batch_size=g // world, sampler=sampler, seed=5, shard=(rank, world),
                              pack={"t": Pack(L, mode=mode, rows=rows // world)}, **kw)

        with make(1, 0, num_workers=0) as ref:
            want = [ranks_rows([ref])[0] for _ in range(stop + 4)]
        before = [make(w1, r, num_workers=0) for r in range(w1)]
        for s in range(stop):
            got, parts = ranks_rows(before)
            for f in ROW_FIELDS:
                np.testing.assert_array_equal(got[f], want[s][f], err_msg=f"{f} step {s} world {w1}")
            for b in parts:
                check_segments(b, records, rows // w1, L)
        state = json.loads(json.dumps(before[int(rng.integers(w1))].state_dict()))
        for dl in before:
            dl.close()
        after = [make(w2, r, num_workers=1, workers="thread") for r in range(w2)]
        for dl in after:
            dl.load_state_dict(state)
        for s in range(stop, stop + 4):
            got, _ = ranks_rows(after)
            for f in ROW_FIELDS:
                np.testing.assert_array_equal(got[f], want[s][f], err_msg=f"{f} step {s} {w1} -> {w2}")
        for dl in after:
            dl.close()


def test_a_custom_sampler_packs_its_own_indices_and_refuses_another_world(store):
    from loaderx.sampler import WeightedSampler

    ds, records, _ = store
    w = np.linspace(1, 2, N)
    pack = {"t": Pack(L, mode="first_fit", rows=3)}
    with DataLoader({"t": ds}, sampler=WeightedSampler(w, 6, seed=1, shard=(1, 2)), num_workers=0, pack=pack) as a:
        b = next(a)["t"]
        check_segments(b, records, 3, L)
        assert set(b.records[b.records >= 0].tolist()) <= set(a.indices(0).tolist())
        state = a.state_dict()
    with DataLoader({"t": ds}, sampler=WeightedSampler(w, 6, seed=1, shard=(0, 2)), num_workers=0, pack=pack) as same:
        same.load_state_dict(state)  # the same world: accepted
    with DataLoader({"t": ds}, sampler=WeightedSampler(w, 12, seed=1), num_workers=0,
                    pack={"t": Pack(L, mode="first_fit", rows=6)}) as other:
        with pytest.raises(ValueError, match="from world 2, this packed loader is in world 1.*WeightedSampler"):
            other.load_state_dict(state)


@pytest.mark.usefixtures("deadline")
def test_processes_pack_a_rank_of_a_world_as_threads_do(store):
    _, _, path = store
    for pack in (Pack(L, rows=2), Pack(L, mode="first_fit", rows=2)):
        with RaggedDataset(path) as ds:
            out = {}
            for workers in ("thread", "process"):
                with DataLoader({"t": ds}, batch_size=4, shard=(1, 3), seed=2, steps=6, num_workers=2,
                                workers=workers, pack={"t": pack}) as dl:
                    out[workers] = [[np.copy(a) for a in b["t"] if isinstance(a, np.ndarray)] for b in dl]
            assert len(out["process"]) == 6
            for x, y in zip(out["thread"], out["process"]):
                for a, b in zip(x, y):
                    np.testing.assert_array_equal(a, b)
