"""The Python layer under heavy thread contention.

These run on the GIL build, but they exercise exactly the paths a
free-threaded interpreter would no longer serialise: many threads gathering
from one store at once, many loaders and samplers driven from threads at
once, and the DataLoader's buffer reuse while the consumer keeps batches
alive. Every assertion is on exact bytes: a race that hands two steps one
buffer, or refills a buffer a caller still holds, shows up as wrong data.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from loaderx import sample
from loaderx.converter import from_numpy
from loaderx.dataloader import DataLoader
from loaderx.dataset import DenseDataset
from loaderx.zrecord import Zrecord

N = 2048
SHAPE = (8, 16)
THREADS = 16


def _run_threads(n: int, target: Callable[[int], None]) -> None:
    """Start n threads on target(k) behind one barrier; re-raise the first failure."""
    barrier = threading.Barrier(n)
    errors: list[BaseException] = []

    def body(k: int) -> None:
        try:
            barrier.wait()
            target(k)
        except BaseException as e:
            errors.append(e)

    threads = [
        threading.Thread(target=body, args=(k,), name=f"contender-{k}")
        for k in range(n)
    ]
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as the interpreter allows
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
    finally:
        sys.setswitchinterval(old)
    assert not any(t.is_alive() for t in threads), (
        "a contending thread did not finish in 120 s"
    )
    if errors:
        raise errors[0]


def _records(ids: np.ndarray) -> np.ndarray:
    """The content of the records ids: each one distinct and recomputable."""
    base = ids.astype(np.int64)[:, None, None] * 1_000_003
    return ((base + np.arange(np.prod(SHAPE)).reshape(SHAPE)) % 2_147_483_647).astype(
        np.int32
    )


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("threads")
    ids = np.arange(N)
    from_numpy(root / "raw", _records(ids), codec="raw")
    from_numpy(root / "zstd", _records(ids), codec="zstd")
    from_numpy(root / "label", ids.astype(np.int64), codec="raw")
    return {"raw": root / "raw", "zstd": root / "zstd", "label": root / "label"}


@pytest.mark.parametrize("codec", ["raw", "zstd"])
def test_many_threads_gather_one_dataset(stores: dict[str, Path], codec: str) -> None:
    ds = DenseDataset(stores[codec])

    def work(k: int) -> None:
        rng = np.random.default_rng(k)
        out = np.empty((64,) + SHAPE, dtype=np.int32)
        for _ in range(60):
            idx = rng.integers(0, N, size=64)
            ds.gather(idx, out)
            np.testing.assert_array_equal(
                out, _records(idx), err_msg=f"thread {k}, indices {idx[:4]}..."
            )
            one = int(rng.integers(0, N))
            np.testing.assert_array_equal(ds[one], _records(np.array([one]))[0])

    _run_threads(THREADS, work)


def test_many_threads_gather_one_zrecord(stores: dict[str, Path]) -> None:
    """Byte records through one shared Zrecord handle."""
    root = stores["label"].parent / "bytes"
    z = Zrecord(root, create=True, codec="zstd")
    payloads = [
        bytes([i % 251]) * (1 + (i * 37) % 3000) + i.to_bytes(4, "little")
        for i in range(512)
    ]
    z.append(payloads)
    z.sync()

    def work(k: int) -> None:
        rng = np.random.default_rng(100 + k)
        for _ in range(80):
            idx = rng.integers(0, len(payloads), size=16)
            got = z.gather(idx)
            for i, g in zip(idx.tolist(), got):
                assert g == payloads[i], (
                    f"thread {k}: record {i} came back as {len(g)} wrong bytes"
                )

    try:
        _run_threads(THREADS, work)
    finally:
        z.close()


def test_many_threads_call_sampler(stores: dict[str, Path]) -> None:
    """The per-thread cached sample() arguments never leak between threads."""
    expect = {
        (mode, step): sample(mode, N, 128, seed=7, step=step).copy()
        for mode in ("sequential", "iid", "cyclic")
        for step in range(40)
    }

    def work(k: int) -> None:
        keys = list(expect)
        rng = np.random.default_rng(k)
        for j in rng.permutation(len(keys)).tolist() * 2:
            mode, step = keys[j]
            got = sample(mode, N, 128, seed=7, step=step)
            np.testing.assert_array_equal(
                got, expect[mode, step], err_msg=f"thread {k}: {mode} step {step}"
            )

    _run_threads(THREADS, work)


def _expected_batch(mode: str, step: int, batch_size: int, seed: int) -> np.ndarray:
    return sample(mode, N, batch_size, seed=seed, step=step).copy()


@pytest.mark.parametrize("workers", [0, 3])
def test_many_loaders_iterated_at_once(stores: dict[str, Path], workers: int) -> None:
    """Several loaders over the same stores, each consumed by its own thread."""
    streams = {
        "image": DenseDataset(stores["zstd"]),
        "label": DenseDataset(stores["label"]),
    }
    steps = 30

    def work(k: int) -> None:
        seed = k % 4
        with DataLoader(
            streams, batch_size=32, num_workers=workers, sampler="iid", seed=seed
        ) as loader:
            for step in range(steps):
                batch = next(loader)
                idx = _expected_batch("iid", step, 32, seed)
                np.testing.assert_array_equal(
                    batch["label"], idx, err_msg=f"loader {k} step {step}"
                )
                np.testing.assert_array_equal(
                    batch["image"], _records(idx), err_msg=f"loader {k} step {step}"
                )

    _run_threads(8, work)


def test_held_batches_are_never_refilled(stores: dict[str, Path]) -> None:
    """Batches the consumer keeps (whole, as a view, or in another thread)
    keep their bytes while the loader's workers refill the buffer pool."""
    streams = {
        "image": DenseDataset(stores["raw"]),
        "label": DenseDataset(stores["label"]),
    }
    held: list[tuple[int, dict[str, np.ndarray], np.ndarray]] = []
    views: list[tuple[int, np.ndarray]] = []
    lock = threading.Lock()
    done = threading.Event()
    handed: list[tuple[int, dict[str, np.ndarray]]] = []

    def checker(k: int) -> None:
        # other threads take references to batches the consumer handed over
        # and verify them while the loader keeps producing
        while not done.is_set() or handed:
            with lock:
                item = handed.pop() if handed else None
            if item is None:
                continue
            step, batch = item
            idx = _expected_batch("cyclic", step, 64, 5)
            for _ in range(3):
                np.testing.assert_array_equal(
                    batch["label"], idx, err_msg=f"checker {k}, step {step}"
                )
                np.testing.assert_array_equal(
                    batch["image"], _records(idx), err_msg=f"checker {k}, step {step}"
                )

    def consumer(_: int) -> None:
        try:
            with DataLoader(
                streams,
                batch_size=64,
                num_workers=4,
                sampler="cyclic",
                seed=5,
                prefetch=6,
            ) as loader:
                for step in range(200):
                    batch = next(loader)
                    if step % 7 == 0:
                        held.append((step, batch, batch["image"].copy()))
                    elif step % 5 == 0:
                        views.append((step, batch["image"][1:3]))
                    elif step % 3 == 0:
                        with lock:
                            handed.append((step, batch))
                    del batch
        finally:
            done.set()

    errors: list[BaseException] = []

    def guarded(fn: Callable[[int], None], k: int) -> None:
        try:
            fn(k)
        except BaseException as e:
            errors.append(e)
            done.set()

    threads = [threading.Thread(target=guarded, args=(consumer, 0))]
    threads += [threading.Thread(target=guarded, args=(checker, k)) for k in range(4)]
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
    finally:
        sys.setswitchinterval(old)
    if errors:
        raise errors[0]
    assert held and views
    for step, batch, copy in held:
        idx = _expected_batch("cyclic", step, 64, 5)
        np.testing.assert_array_equal(
            batch["image"], copy, err_msg=f"held batch of step {step} was overwritten"
        )
        np.testing.assert_array_equal(batch["image"], _records(idx))
        np.testing.assert_array_equal(batch["label"], idx)
    for step, view in views:
        idx = _expected_batch("cyclic", step, 64, 5)
        np.testing.assert_array_equal(
            view, _records(idx)[1:3], err_msg=f"view into step {step} was overwritten"
        )
