"""DataLoader: order, resumption, alignment, workers, buffer reuse, shutdown."""

from __future__ import annotations

import gc
import json
import os
import threading
import time

import numpy as np
import pytest

from loaderx.converter import from_iterator, from_numpy
from loaderx.dataloader import PREFETCH_BYTES, DataLoader, LoaderOptions
from loaderx.dataset import DenseDataset, RaggedDataset
from loaderx.errors import ClosedError
from loaderx.loader import dataloader
from loaderx.loader.options import SMALL_PREFETCH_BYTES, SMALL_PREFETCH_STEPS
from loaderx.sampler import MODES, Sampler
from loaderx.store import _native as native

N = 97  # not a multiple of any batch size used here


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    root = tmp_path_factory.mktemp("stores")
    ids = np.arange(N, dtype=np.int64)
    # record i of every stream is derived from i, in different dtypes and shapes
    from_numpy(root / "image", (ids[:, None, None] * 1000 + np.arange(12).reshape(3, 4)).astype(np.float32))
    from_numpy(root / "label", ids)
    from_numpy(root / "label16", (ids % 1000).astype(np.uint16), codec="raw")
    from_numpy(root / "short", ids[:50])
    from_iterator(root / "ragged", [np.arange(i % 5 + 1) for i in range(N)])
    return root


@pytest.fixture
def streams(stores):
    ds = {name: DenseDataset(stores / name) for name in ("image", "label", "label16")}
    yield ds
    for d in ds.values():
        d.close()


@pytest.fixture(params=["native", "per-step workers", "one gatherer"])
def pipeline_shape(request, monkeypatch):
    """Run a test under every pipeline: the native one (the default where
    the configuration allows it) and the Python pipeline's two shapes: small
    batches, where every worker samples, gathers and transforms whole steps,
    and large ones, where one thread gathers and the workers only transform
    (forced here by lowering the large-batch threshold to zero)."""
    if request.param != "native":  # the Python pipeline's two shapes
        monkeypatch.setenv("LOADERX_PIPELINE", "python")
    if request.param == "one gatherer":
        monkeypatch.setattr(dataloader, "SHARED_GATHER_BYTES", 0)
    return request.param


def take(loader, k):
    """k batches, copied (so later steps cannot touch them)."""
    out = []
    for _ in range(k):
        b = next(loader)
        out.append({name: np.array(v, copy=True) for name, v in b.items()})
    return out


def assert_batches_equal(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x.keys() == y.keys()
        for name in x:
            assert x[name].dtype == y[name].dtype and x[name].shape == y[name].shape
            assert x[name].tobytes() == y[name].tobytes(), name


# -- batches ----------------------------------------------------------------------


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.usefixtures("pipeline_shape")
def test_batches_follow_the_sampler(streams, workers):
    with DataLoader(streams, batch_size=8, num_workers=workers, sampler="cyclic", seed=3) as loader:
        sampler = Sampler("cyclic", N, 8, seed=3)
        for step in range(15):
            batch = next(loader)
            assert set(batch) == {"image", "label", "label16"}
            assert batch["image"].shape == (8, 3, 4) and batch["image"].dtype == np.float32
            assert batch["label"].shape == (8,) and batch["label"].dtype == np.int64
            np.testing.assert_array_equal(batch["label"], sampler(step))
            np.testing.assert_array_equal(batch["image"], streams["image"][sampler(step)])
        assert loader.step == 15


def test_streams_line_up(streams):
    """Every stream is gathered at the same indices, whatever its dtype."""
    with DataLoader(streams, batch_size=16, num_workers=3, sampler="iid", seed=1) as loader:
        for _ in range(20):
            b = next(loader)
            np.testing.assert_array_equal(b["label"] % 1000, b["label16"].astype(np.int64))
            np.testing.assert_array_equal(b["image"][:, 0, 0].astype(np.int64), b["label"] * 1000)
            np.testing.assert_array_equal(b["image"][:, 2, 3].astype(np.int64), b["label"] * 1000 + 11)


@pytest.mark.usefixtures("pipeline_shape")
def test_output_does_not_depend_on_num_workers(streams):
    runs = []
    for workers in (0, 1, 3):
        with DataLoader(streams, batch_size=8, num_workers=workers, sampler="iid", seed=9) as loader:
            runs.append(take(loader, 25))
    assert_batches_equal(runs[0], runs[1])
    assert_batches_equal(runs[0], runs[2])


@pytest.mark.parametrize("workers", [0, 3])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.usefixtures("pipeline_shape")
def test_resume_equals_an_uninterrupted_run(streams, mode, workers):
    k, m = 13, 17  # k crosses a cyclic boundary (97 // 8 = 12 steps per cycle)
    with DataLoader(streams, batch_size=8, num_workers=workers, sampler=mode, seed=42) as ref:
        reference = take(ref, k + m)
    first = DataLoader(streams, batch_size=8, num_workers=workers, sampler=mode, seed=42)
    assert_batches_equal(take(first, k), reference[:k])
    state = json.loads(json.dumps(first.state_dict()))  # survives a JSON checkpoint
    first.close()
    assert set(state.pop("data")) == {"image", "label", "label16"}  # a fingerprint of each stream's records
    assert state == {
        "step": k, "seed": 42, "sampler": mode, "batch_size": 8, "shard": [0, 1],
        "streams": {"image": N, "label": N, "label16": N},
        "pass": {"steps": None, "epoch": False, "drop_last": False},
    }
    resumed = DataLoader(streams, batch_size=8, num_workers=workers, sampler=mode, seed=42)
    resumed.load_state_dict(state)
    assert resumed.step == k
    assert_batches_equal(take(resumed, m), reference[k:])
    resumed.close()
    # start_step is the same seek
    with DataLoader(streams, batch_size=8, num_workers=workers, sampler=mode, seed=42,
                    start_step=k) as direct:
        assert_batches_equal(take(direct, m), reference[k:])


@pytest.mark.usefixtures("pipeline_shape")
def test_load_state_dict_mid_run_discards_prefetched_work(streams):
    with DataLoader(streams, batch_size=8, num_workers=3, seed=5) as loader:
        reference = take(loader, 10)
        loader.load_state_dict({**loader.state_dict(), "step": 2})
        assert_batches_equal(take(loader, 8), reference[2:])
        assert loader.state_dict()["step"] == 10


def test_load_state_dict_validates(streams):
    loader = DataLoader(streams, batch_size=8, num_workers=0, seed=5, sampler="iid")
    good = loader.state_dict()
    with pytest.raises(ValueError, match="seed=6 but this loader has seed=5"):
        loader.load_state_dict({**good, "seed": 6})
    with pytest.raises(ValueError, match="sampler='cyclic' but this loader has sampler='iid'"):
        loader.load_state_dict({**good, "sampler": "cyclic"})
    with pytest.raises(ValueError, match="batch_size=4"):
        loader.load_state_dict({**good, "batch_size": 4})
    with pytest.raises(ValueError, match=r"global batch 16 \(batch_size=8 x world 2\).*batch_size=16 with world 1"):
        loader.load_state_dict({**good, "shard": [1, 2]})
    loader.load_state_dict({**good, "batch_size": 4, "shard": [1, 2], "step": 3})  # the same global batch
    assert loader.step == 3
    with pytest.raises(ValueError, match=r"missing \['step'\]"):
        loader.load_state_dict({k: v for k, v in good.items() if k != "step"})
    with pytest.raises(ValueError, match=r"unexpected \['epoch'\]"):
        loader.load_state_dict({**good, "epoch": 1})
    with pytest.raises(ValueError, match="step must be a non-negative int64, got -1"):
        loader.load_state_dict({**good, "step": -1})
    with pytest.raises(TypeError, match="dict"):
        loader.load_state_dict([("step", 1)])
    loader.load_state_dict({**good, "shard": (0, 1), "step": 4})
    assert loader.step == 4
    loader.close()


# -- sharding ---------------------------------------------------------------------


def test_shards_are_disjoint_through_the_loader(streams):
    world = 3
    loaders = [
        DataLoader(streams, batch_size=8, num_workers=2, seed=11, shard=(r, world)) for r in range(world)
    ]
    single = DataLoader(streams, batch_size=8 * world, num_workers=0, seed=11)
    for _ in range(12):
        parts = [next(l)["label"].copy() for l in loaders]
        union = np.concatenate(parts)
        assert len(np.unique(union)) == len(union) == 8 * world
        np.testing.assert_array_equal(union, next(single)["label"])
    for l in loaders + [single]:
        l.close()


# -- transform ----------------------------------------------------------------------


@pytest.mark.parametrize("workers", [0, 3])
@pytest.mark.usefixtures("pipeline_shape")
def test_transform_runs_on_worker_threads(streams, workers):
    seen = set()

    def collate(batch):
        seen.add(threading.current_thread().name)
        return {"x": batch["image"].reshape(len(batch["image"]), -1).astype(np.float64) / 1000.0,
                "y": batch["label"]}

    with DataLoader(streams, batch_size=4, num_workers=workers, transform=collate) as loader:
        for _ in range(10):
            out = next(loader)
            assert out["x"].shape == (4, 12) and out["x"].dtype == np.float64
            np.testing.assert_array_equal(np.floor(out["x"][:, 0]), out["y"])
    if workers:
        assert seen and all(name.startswith("loaderx-worker-") for name in seen)
        assert threading.main_thread().name not in seen
    else:
        assert seen == {threading.current_thread().name}


class Boom(RuntimeError):
    pass


def exploding_transform(batch):
    if (batch["label"] == 0).any():
        raise Boom(f"bad batch {batch['label'].tolist()}")
    return batch


@pytest.mark.parametrize("workers", [0, 3])
@pytest.mark.usefixtures("pipeline_shape")
def test_transform_exception_propagates_at_its_step(streams, workers):
    loader = DataLoader(streams, batch_size=5, num_workers=workers, sampler="sequential",
                        transform=exploding_transform)
    # sequential, batch 5 over 97 records: step 0 holds record 0, and so does step 97
    with pytest.raises(Boom, match=r"bad batch \[0, 1, 2, 3, 4\]") as info:
        next(loader)
    assert any(entry.name == "exploding_transform" for entry in info.traceback)
    assert loader.step == 1  # the failed step counts as consumed
    b = next(loader)
    np.testing.assert_array_equal(b["label"], [5, 6, 7, 8, 9])
    loader.close()


# -- buffer reuse -------------------------------------------------------------------


@pytest.mark.parametrize("workers", [0, 3])
@pytest.mark.usefixtures("pipeline_shape")
def test_held_batches_are_never_overwritten(streams, workers):
    with DataLoader(streams, batch_size=8, num_workers=workers, seed=2) as loader:
        held = next(loader)
        snapshot = {k: v.copy() for k, v in held.items()}
        view = next(loader)["image"][2:5]  # only a view of step 1's buffer survives
        view_copy = view.copy()
        addresses = set()
        for _ in range(60):
            b = next(loader)
            addresses.add(b["image"].__array_interface__["data"][0])
            del b
        for k in held:
            assert held[k].tobytes() == snapshot[k].tobytes()
        assert view.tobytes() == view_copy.tobytes()
        # and buffers nobody holds are recycled rather than allocated per batch
        assert len(addresses) <= loader.prefetch + 4


@pytest.mark.usefixtures("pipeline_shape")
def test_transform_holding_views_is_safe(streams):
    kept = []

    def keep_view(batch):
        kept.append((batch["label"][:3], batch["label"][:3].copy()))
        return {"n": len(batch["label"])}

    with DataLoader(streams, batch_size=8, num_workers=2, transform=keep_view) as loader:
        for _ in range(30):
            assert next(loader) == {"n": 8}
    for view, copy in kept:
        np.testing.assert_array_equal(view, copy)


# -- lifetime ------------------------------------------------------------------------


def _workers():
    """The loader's worker threads, and the native pipeline's workers."""
    threads = [t.name for t in threading.enumerate() if t.name.startswith("loaderx-")]
    return threads + ["native worker"] * native.pipe_live()


@pytest.mark.usefixtures("pipeline_shape")
def test_close_is_prompt_and_final(streams):
    def slow(batch):
        time.sleep(0.05)
        return batch

    loader = DataLoader(streams, batch_size=4, num_workers=4, transform=slow)
    next(loader)
    t0 = time.monotonic()
    loader.close()
    assert time.monotonic() - t0 < 1.5
    deadline = time.monotonic() + 30  # polled: the threads end within milliseconds unless something is wrong
    while _workers() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert _workers() == []
    assert loader.closed
    with pytest.raises(ClosedError):
        next(loader)
    with pytest.raises(ClosedError):
        loader.load_state_dict(loader.state_dict())
    loader.close()  # twice is fine
    # the datasets stay usable
    assert len(streams["label"]) == N


def test_dropping_the_loader_stops_its_workers(streams):
    loader = DataLoader(streams, batch_size=4, num_workers=3)
    next(loader)
    native = loader.stats()["pipeline"] == "native"
    want = loader.options.native_workers if native else loader.options.worker_threads
    assert len(_workers()) == want == loader.stats()["num_workers"] >= 1
    del loader
    gc.collect()
    deadline = time.monotonic() + 30
    while _workers() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert _workers() == []


def test_context_manager_and_repr(streams):
    with DataLoader(streams, batch_size=4, num_workers=2, seed=1, prefetch=5) as loader:
        assert repr(loader) == (
            "DataLoader(streams=['image', 'label', 'label16'], batch_size=4, sampler='cyclic', "
            "seed=1, shard=(0, 1), num_workers=2, prefetch=5, step=0)"
        )
        next(loader)
        assert "step=1" in repr(loader)
        assert iter(loader) is loader
    assert loader.closed and repr(loader).endswith("step=1, closed)")


# -- validation ------------------------------------------------------------------------


def test_stream_validation(stores, streams):
    short = DenseDataset(stores / "short")
    with pytest.raises(ValueError, match="equal lengths; got image=97, short=50"):
        DataLoader({"image": streams["image"], "short": short})
    ragged = RaggedDataset(stores / "ragged")
    with DataLoader({"tokens": ragged}, batch_size=4) as loader:  # a ragged stream is packed
        assert next(loader)["tokens"].offsets.shape == (5,)
    with pytest.raises(
        TypeError, match="'x' must be a DenseDataset, a RaggedDataset or a NumPy array, got list"
    ):
        DataLoader({"x": [0.0, 0.0, 0.0]})
    with pytest.raises(ValueError, match="streams is empty"):
        DataLoader({})
    with pytest.raises(TypeError, match="dict of name"):
        DataLoader([streams["label"]])
    with pytest.raises(TypeError, match="stream names must be str, got 0"):
        DataLoader({0: streams["label"]})
    short.close()
    ragged.close()


def test_option_validation(streams):
    s = {"label": streams["label"]}
    cases = [
        (dict(batch_size=0), ValueError, "batch_size must be at least 1, got 0"),
        (dict(num_workers=-1), ValueError, "num_workers must be 0 or more, got -1"),
        (dict(sampler="shuffle"), ValueError, "'shuffle'"),
        (dict(shard=(1, 1)), ValueError, r"shard=\(1, 1\)"),
        (dict(prefetch=0), ValueError, "prefetch must be at least 1, got 0"),
        (dict(start_step=-3), ValueError, "got -3"),
        (dict(seed=-1), ValueError, "got -1"),
        (dict(batch_size=200), ValueError, "at most n = 97"),
        (dict(transform=3), TypeError, "transform must be callable or None, got 3"),
        (dict(batch_size=2.0), TypeError, "batch_size must be an integer, got 2.0"),
    ]
    for kwargs, exc, msg in cases:
        with pytest.raises(exc, match=msg):
            DataLoader(s, **kwargs)
    # iid may draw batches larger than the dataset
    with DataLoader(s, batch_size=200, sampler="iid", num_workers=0) as loader:
        assert next(loader)["label"].shape == (200,)
    with pytest.raises(ValueError, match="'bogus'"):
        LoaderOptions(sampler="bogus")
    with pytest.raises(ValueError, match=r"shard=\(0, 0\)"):
        LoaderOptions(shard=(0, 0))
    assert LoaderOptions(shard=[1, 2]).shard == (1, 2)
    opts = LoaderOptions(batch_size=3, num_workers=0)
    assert opts.resolved_prefetch(1024) == 2 and opts.worker_threads == 0
    many = LoaderOptions(num_workers=10_000)
    assert 1 <= many.worker_threads <= (os.cpu_count() or 1)
    assert many.resolved_prefetch(1024) == max(2, 2 * many.worker_threads)
    # on the native pipeline, small batches: as many as fit in SMALL_PREFETCH_BYTES, up to SMALL_PREFETCH_STEPS
    assert many.resolved_prefetch(1024, small_deeper=True) == max(2 * many.worker_threads, SMALL_PREFETCH_STEPS)
    assert many.resolved_prefetch(SMALL_PREFETCH_BYTES // 8, small_deeper=True) == max(2 * many.worker_threads, 8)
    assert many.resolved_prefetch(SMALL_PREFETCH_BYTES, small_deeper=True) == max(2, 2 * many.worker_threads)
    assert many.resolved_prefetch(PREFETCH_BYTES // 2) == 2  # large batches: fewer in flight
    assert many.resolved_prefetch(PREFETCH_BYTES * 4) == 1
    assert LoaderOptions(prefetch=7).resolved_prefetch(PREFETCH_BYTES * 4) == 7
    assert LoaderOptions(num_workers=1).worker_threads == 1
    # the native pipeline's consumer makes steps too: one worker fewer than the CPUs, at least one
    cpus = len(os.sched_getaffinity(0))
    assert many.native_workers == max(1, cpus - 1)
    assert LoaderOptions(num_workers=1).native_workers == 1
    assert LoaderOptions(num_workers=0).native_workers == 0
    with DataLoader(s, batch_size=8, num_workers=1) as loader:  # 8 labels of 8 bytes, native: a small batch
        assert loader.prefetch == SMALL_PREFETCH_STEPS
    with DataLoader(s, batch_size=8, num_workers=1, transform=lambda b: b) as loader:  # the Python pipeline
        assert loader.prefetch == 2
    with DataLoader(s, batch_size=8, num_workers=1, prefetch=2) as loader:
        assert loader.prefetch == 2
    assert repr(opts) == (
        "LoaderOptions(batch_size=3, num_workers=0, sampler='cyclic', seed=0, shard=(0, 1), "
        "start_step=0, prefetch=None)"
    )


def test_closed_stream_error_reaches_the_consumer(stores):
    ds = DenseDataset(stores / "label")
    loader = DataLoader({"label": ds}, batch_size=4, num_workers=2)
    next(loader)
    ds.close()
    with pytest.raises(ClosedError):  # after the steps made ahead before the close, at the latest
        for _ in range(loader.prefetch + 20):
            next(loader)
    loader.close()


def test_large_batches_are_gathered_by_one_thread(streams, monkeypatch):
    def names():
        return sorted(t.name for t in threading.enumerate() if t.name.startswith("loaderx-"))

    big = 3 * 4 * 4 * 8  # bytes of one batch of 8 images: just at the threshold
    monkeypatch.setattr(dataloader, "SHARED_GATHER_BYTES", big)
    monkeypatch.setenv("LOADERX_PIPELINE", "python")  # the Python pipeline's threads
    with DataLoader(streams, batch_size=8, num_workers=2) as loader:
        next(loader)
        assert names() == ["loaderx-gather"]
    with DataLoader(streams, batch_size=8, num_workers=2, transform=lambda b: b) as loader:
        next(loader)
        assert names() == ["loaderx-gather", "loaderx-worker-0", "loaderx-worker-1"][: 1 + loader.options.worker_threads]
    monkeypatch.setattr(dataloader, "SHARED_GATHER_BYTES", 1 << 40)
    with DataLoader(streams, batch_size=8, num_workers=2) as loader:
        next(loader)
        assert "loaderx-gather" not in names()
