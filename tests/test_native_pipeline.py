"""The native step pipeline behind the default DataLoader: which loaders take
it, its lifetime (close and Ctrl-C end its workers promptly, with nothing
left), the batches a consumer holds (never written again), and failures
(named by step, stream and record, and the run goes on)."""

from __future__ import annotations

import os
import signal
import threading
import time
import weakref

import numpy as np
import pytest

from loaderx import DataLoader, DenseDataset, RaggedDataset, from_numpy
from loaderx.converter import from_iterator
from loaderx.errors import ClosedError, CorruptStoreError
from loaderx.loader import _native_pipe
from loaderx.loader._ragged import RaggedStream
from loaderx.mixture import Mixture
from loaderx.store import _native as native

N = 211
ROW = 96  # bytes of one record of "x"


@pytest.fixture
def stores(tmp_path):
    x = (np.arange(N * ROW) % 251).astype(np.uint8).reshape(N, ROW)
    y = np.arange(N, dtype=np.int64) * 3
    from_numpy(str(tmp_path / "x"), x, codec="raw")
    from_numpy(str(tmp_path / "y"), y)
    ds = {"x": DenseDataset(str(tmp_path / "x")), "y": DenseDataset(str(tmp_path / "y"))}
    yield ds, x, y
    for d in ds.values():
        d.close()


def _live_after(deadline_s: float, want: int) -> int:
    end = time.monotonic() + deadline_s
    while native.pipe_live() != want and time.monotonic() < end:
        time.sleep(0.001)
    return native.pipe_live()


def test_the_default_loader_takes_the_native_path_and_others_say_why(stores, tmp_path):
    ds, x, _ = stores
    with DataLoader(ds, batch_size=8) as loader:
        assert loader.stats()["pipeline"] == "native"
        next(loader)
        assert isinstance(loader._pipe, _native_pipe.NativePipeline)
        assert loader.stats()["pipeline_reason"] is None
    cases = [
        (dict(transform=lambda b: b), "transform"),
        (dict(num_workers=0), "num_workers=0"),
        (dict(workers="process"), None),
    ]
    for kwargs, why in cases:
        with DataLoader(ds, batch_size=8, **kwargs) as loader:
            next(loader)
            st = loader.stats()
            assert st["pipeline"] != "native", kwargs
            if why is not None:
                assert why in st["pipeline_reason"], st
    with DataLoader({"x": x}, batch_size=8) as loader:
        assert "NumPy array" in loader.stats()["pipeline_reason"]
    mix = Mixture({"a": {"x": ds["x"]}, "b": {"x": ds["x"]}}, {"a": 1, "b": 1})
    with DataLoader(mix, batch_size=8) as loader:
        next(loader)
        assert loader.stats()["pipeline"] == "python"


def test_native_batches_match_the_python_pipeline(stores, monkeypatch):
    ds, _, _ = stores
    for kwargs in (dict(seed=3), dict(sampler="iid", seed=5), dict(epoch=True, seed=1),
                   dict(sampler="sequential", epoch=True, shard=(1, 3)), dict(shard=(2, 3), start_step=7)):
        want = []
        monkeypatch.setenv("LOADERX_PIPELINE", "python")
        with DataLoader(ds, batch_size=16, steps=40, **kwargs) as loader:
            want = [{k: v.copy() for k, v in b.items()} for b in loader]
        monkeypatch.delenv("LOADERX_PIPELINE")
        for workers in (1, 3):
            with DataLoader(ds, batch_size=16, steps=40, num_workers=workers, **kwargs) as loader:
                assert loader.stats()["pipeline"] == "native"
                got = [{k: v.copy() for k, v in b.items()} for b in loader]
            assert len(got) == len(want), kwargs
            for g, w in zip(got, want):
                np.testing.assert_array_equal(g["x"], w["x"])
                np.testing.assert_array_equal(g["y"], w["y"])


def test_close_ends_every_native_worker_promptly(stores):
    ds, _, _ = stores
    base = native.pipe_live()
    threads = threading.active_count()
    loader = DataLoader(ds, batch_size=8, num_workers=3, prefetch=6)
    next(loader)
    workers = loader.options.native_workers
    assert native.pipe_live() == base + workers
    assert threading.active_count() == threads  # the native path starts no Python thread
    t0 = time.monotonic()
    loader.close()
    assert time.monotonic() - t0 < 0.5
    assert native.pipe_live() == base  # close waited for them
    with pytest.raises(ClosedError):
        next(loader)
    # a loader dropped without close stops them too
    loader = DataLoader(ds, batch_size=8, num_workers=1)
    next(loader)
    assert native.pipe_live() == base + 1
    del loader
    assert _live_after(0.5, base) == base


def test_ctrl_c_in_next_is_prompt_and_loses_no_step(tmp_path):
    # batches of 16 MiB: each step is a long native gather, so the signal
    # lands while next() waits for one
    n, row = 64, 1 << 20
    from_numpy(str(tmp_path / "big"), np.zeros((n, row), dtype=np.uint8), codec="raw")
    base = native.pipe_live()
    with DenseDataset(str(tmp_path / "big")) as big:
        loader = DataLoader({"x": big}, batch_size=16, prefetch=1)
        next(loader)
        fired = []

        def interrupt():
            fired.append(time.monotonic())
            os.kill(os.getpid(), signal.SIGINT)

        # Python raises KeyboardInterrupt only with its own handler in
        # place; a process started in the background of a shell without job
        # control inherits SIGINT ignored
        previous = signal.signal(signal.SIGINT, signal.default_int_handler)
        timer = threading.Timer(0.02, interrupt)
        got = 0
        timer.start()
        try:
            with pytest.raises(KeyboardInterrupt):
                while True:
                    next(loader)
                    got += 1
            raised = time.monotonic()
        finally:
            timer.cancel()
            signal.signal(signal.SIGINT, previous)
        assert raised - fired[0] < 0.5
        step = loader.step
        assert step == 1 + got
        np.testing.assert_array_equal(loader.indices(step), loader.indices(step))
        next(loader)  # the run goes on from the step not handed out
        assert loader.step == step + 1
        t0 = time.monotonic()
        loader.close()
        assert time.monotonic() - t0 < 0.5
    assert native.pipe_live() == base


def test_held_batches_and_views_are_never_overwritten(stores):
    ds, x, y = stores
    with DataLoader(ds, batch_size=8, num_workers=2, prefetch=2) as loader:
        held = []
        for k in range(60):
            b = next(loader)
            idx = loader.indices(loader.step - 1)
            if k % 3 == 0:
                held.append((idx, b))  # the whole batch
            elif k % 3 == 1:
                held.append((idx, {"x": b["x"][2:5], "y": b["y"][:1]}))  # views only
            del b
        for idx, b in held:
            rows = np.arange(len(b["x"])) + (2 if len(b["x"]) == 3 else 0)
            np.testing.assert_array_equal(b["x"], x[idx[rows]])
            np.testing.assert_array_equal(b["y"], y[idx[: len(b["y"])]])


def test_a_released_batch_is_recycled(stores):
    ds, _, _ = stores
    with DataLoader(ds, batch_size=8, num_workers=1, prefetch=1) as loader:
        addresses = set()
        for _ in range(50):
            b = next(loader)
            addresses.add(b["x"].ctypes.data)
            del b
        # slots are reused, not allocated per step
        assert len(addresses) <= loader._pipe.slots.__len__()


@pytest.mark.parametrize("names", [["x"], ["x", "y"]])
@pytest.mark.parametrize("habit", ["dropped", "for-loop", "two kept"])
def test_slots_let_go_are_reused_not_retired(stores, names, habit):
    """A consumer that lets its batches go gets the same slot arrays back
    for good: none is retired (given new arrays) however it holds them."""
    ds, x, _ = stores
    with DataLoader({n: ds[n] for n in names}, batch_size=4, seed=1) as loader:
        next(loader)
        pipe = loader._pipe
        assert isinstance(pipe, _native_pipe.NativePipeline)
        before = [[weakref.ref(a) for a in slot[1:]] for slot in pipe.slots]
        general = 0
        next_any = pipe._next_any

        def counted(p):
            nonlocal general
            general += 1
            return next_any(p)

        pipe._next_any = counted
        kept: list = []
        b = None
        for _ in range(200):
            if habit == "dropped":
                next(loader)
            elif habit == "for-loop":
                b = next(loader)  # the previous batch is held while the next is made
            else:
                kept = [*kept[-1:], next(loader)]
        idx = loader.indices(loader.step - 1)
        last = kept[-1] if kept else b
        if last is not None:
            np.testing.assert_array_equal(last["x"], x[idx])
        del b, kept, last
        after = pipe.slots
        assert all(w() is a for ws, slot in zip(before, after) for w, a in zip(ws, slot[1:])), \
            "a slot was given new arrays"
        if names == ["x"]:  # one dense stream: its own path, the general one only for a step not ready in time
            assert general <= 20, f"{general} of 200 steps took the general path"


def test_list_of_a_finite_pass_keeps_every_batch(stores):
    ds, x, _ = stores
    with DataLoader(ds, batch_size=10, epoch=True, seed=2) as loader:
        batches = list(loader)
        order = np.concatenate([loader.indices(s) for s in range(len(loader))])
    assert sorted(order.tolist()) == list(range(N))
    np.testing.assert_array_equal(np.concatenate([b["x"] for b in batches]), x[order])
    assert batches[-1]["x"].shape == (N % 10, ROW)


def _damage(store: str, index: int) -> None:
    path = os.path.join(store, "0.chunk")
    with open(path, "r+b") as f:
        f.seek(index * ROW + 7)
        b = f.read(1)
        f.seek(index * ROW + 7)
        f.write(bytes([b[0] ^ 0x04]))


def test_a_damaged_record_is_an_error_of_its_step_naming_stream_and_record(stores, tmp_path):
    ds, x, _ = stores
    ds["x"].close()
    _damage(str(tmp_path / "x"), 100)
    ds["x"] = DenseDataset(str(tmp_path / "x"))
    with DataLoader(ds, batch_size=8, sampler="sequential", epoch=True, num_workers=2) as loader:
        assert loader.stats()["pipeline"] == "native"
        for s in range(12):  # records 0..95
            np.testing.assert_array_equal(next(loader)["x"], x[8 * s:8 * s + 8])
        with pytest.raises(CorruptStoreError) as info:
            next(loader)  # step 12 holds record 100
        msg = str(info.value)
        assert msg.startswith("step 12, stream 'x': "), msg
        assert "record 100" in msg, msg
        assert loader.step == 13
        np.testing.assert_array_equal(next(loader)["x"], x[104:112])  # the run goes on


def test_a_record_of_the_wrong_size_is_named_as_damage(tmp_path):
    from_numpy(str(tmp_path / "s"), np.zeros((40, 8), dtype=np.uint8), codec="raw")
    # the schema now says 4-byte items: every record is of the wrong size
    native.schema_write(str(tmp_path / "s"), "dense", "|u1", (4,))
    with DenseDataset(str(tmp_path / "s")) as d, DataLoader({"v": d}, batch_size=4) as loader:
        assert loader.stats()["pipeline"] == "native"
        with pytest.raises(CorruptStoreError) as info:
            next(loader)
    msg = str(info.value)
    assert msg.startswith("step 0, stream 'v': ") and "is 8 bytes" in msg, msg


def _ragged(tmp_path):
    rng = np.random.default_rng(4)
    # mostly short records and a few long ones: a batch holding one outgrows the first buffers
    lengths = np.where(np.arange(N) % 37 == 5, 200, rng.integers(0, 4, N))
    recs = [rng.integers(-99, 99, size=(int(k), 3), dtype=np.int32) for k in lengths]
    from_iterator(str(tmp_path / "r"), recs, codec="raw")
    return recs, RaggedDataset(str(tmp_path / "r"))


def test_ragged_streams_packed_and_padded_on_the_native_path(stores, tmp_path, monkeypatch):
    ds, x, _ = stores
    _, rs = _ragged(tmp_path)
    with rs:
        for pad in ({}, {"r": "max"}):
            monkeypatch.setenv("LOADERX_PIPELINE", "python")
            with DataLoader({"r": rs, "x": ds["x"]}, batch_size=12, steps=30, pad=pad, seed=9) as ref:
                want = [tuple(np.array(a) for a in b["r"]) for b in ref]
            monkeypatch.delenv("LOADERX_PIPELINE")
            # the buffers grow while batches are held
            grown: list[int] = []

            def counted(*a, grown=grown, gather_into=RaggedStream.gather_into):
                grown.append(1)
                return gather_into(*a)

            monkeypatch.setattr(RaggedStream, "gather_into", counted)
            with DataLoader({"r": rs, "x": ds["x"]}, batch_size=12, steps=30, pad=pad, seed=9) as loader:
                assert loader.stats()["pipeline"] == "native"
                got = []
                for s, b in enumerate(loader):
                    got.append(b)
                    np.testing.assert_array_equal(b["x"], x[loader.indices(s)])
            monkeypatch.undo()
            assert grown, "no batch outgrew its slot's buffers"
            for g, w in zip(got, want, strict=True):
                for a, c in zip(g["r"], w, strict=True):
                    np.testing.assert_array_equal(a, c)


def test_env_var_picks_the_pipeline(stores, monkeypatch):
    ds, _, _ = stores
    monkeypatch.setenv("LOADERX_PIPELINE", "python")
    with DataLoader(ds, batch_size=8) as loader:
        assert loader.stats()["pipeline"] == "python"
        assert "LOADERX_PIPELINE=python" in loader.stats()["pipeline_reason"]
    monkeypatch.setenv("LOADERX_PIPELINE", "fast")
    with pytest.raises(ValueError, match="LOADERX_PIPELINE='fast'"):
        DataLoader(ds, batch_size=8)


def test_a_store_closed_under_the_loader_fails_its_step_naming_it(stores):
    ds, _, _ = stores
    with DataLoader(ds, batch_size=8, num_workers=1, prefetch=1) as loader:
        next(loader)
        ds["y"].close()
        with pytest.raises(ClosedError) as info:
            for _ in range(10):  # a step or two may have been made before the close
                next(loader)
        assert "stream 'y'" in str(info.value) and "DataLoader is closed" not in str(info.value), info.value
    with pytest.raises(ClosedError, match="the DataLoader is closed"):
        next(loader)
