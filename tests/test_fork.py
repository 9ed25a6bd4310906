"""Datasets and loaders in forked children: every path raises ForkError
promptly, and a fork-context pool reports it as the task's failure.

Each scenario runs in its own interpreter under a timeout, so a hang fails
the test instead of hanging the suite."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from loaderx.converter import from_iterator, from_numpy
from loaderx.dataset import DenseDataset, RaggedDataset

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")


def run(code: str, timeout: float = 600) -> str:
    """Run ``code`` in a fresh interpreter and return its stdout; fail on a
    non-zero exit or on the timeout."""
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True, text=True, timeout=timeout, cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


@pytest.fixture
def stores(tmp_path):
    dense = str(tmp_path / "dense")
    ragged = str(tmp_path / "ragged")
    from_numpy(dense, np.arange(40, dtype=np.int32).reshape(20, 2), codec="raw")
    from_iterator(ragged, [np.arange(k, dtype=np.int16) for k in range(1, 6)])
    return dense, ragged


def test_unpickling_makes_no_native_call_and_opens_on_use(stores):
    dense, ragged = stores
    for cls, path in ((DenseDataset, dense), (RaggedDataset, ragged)):
        with cls(path) as ds:
            copy = pickle.loads(pickle.dumps(ds))
        assert not copy.closed and "not opened yet" in repr(copy)
        assert copy.path == path
        if cls is DenseDataset:
            assert copy.item_shape == (2,) and copy.dtype == np.int32
            assert np.array_equal(copy[[3, 1]], [[6, 7], [2, 3]])
        else:
            assert len(copy) == 5 and copy.dtype == np.int16
            assert np.array_equal(copy[4], np.arange(5))
        copy.close()
        assert copy.closed


@pytest.mark.parametrize("use", ["getitem", "len", "dtype", "gather", "iter"])
def test_fork_pool_reports_fork_error_as_the_task_failure(stores, use):
    dense, _ = stores
    out = run(f"""
        import multiprocessing as mp, time
        from loaderx.dataset import DenseDataset
        from loaderx.errors import ForkError

        def task(ds):
            use = {use!r}
            if use == "getitem":
                return ds[0].tolist()
            if use == "len":
                return len(ds)
            if use == "dtype":
                return str(ds.dtype)
            if use == "gather":
                return ds.gather([1, 2]).tolist()
            return [r.tolist() for r in ds]

        ds = DenseDataset({dense!r})
        ds[0]  # the parent has loaded the library and used the store
        t0 = time.monotonic()
        with mp.get_context("fork").Pool(2) as pool:
            try:
                pool.apply_async(task, (ds,)).get(timeout=300)
            except ForkError as e:
                print("ForkError", round(time.monotonic() - t0, 1), e)
            else:
                print("no error")
        print("parent still reads", ds[1].tolist())
    """)
    assert out.startswith("ForkError"), out
    assert float(out.split()[1]) < 10
    assert "parent still reads [2, 3]" in out


def test_forked_child_constructor_and_inherited_dataset_raise(stores):
    dense, ragged = stores
    out = run(f"""
        import os
        from loaderx.dataset import DenseDataset, RaggedDataset
        from loaderx.errors import ForkError
        ds = DenseDataset({dense!r})
        ds[0]  # the parent uses the library (building a dataset alone does not load it)
        pid = os.fork()
        if pid == 0:
            codes = 0
            for k, f in enumerate((lambda: ds[0], lambda: len(ds), lambda: DenseDataset({dense!r}),
                                   lambda: RaggedDataset({ragged!r})[0])):
                try:
                    f()
                except ForkError:
                    codes |= 1 << k
            os._exit(codes)
        _, status = os.waitpid(pid, 0)
        print(os.waitstatus_to_exitcode(status))
    """)
    assert out.split() == ["15"], out


@pytest.mark.parametrize("workers", [0, 2])
def test_dataloader_next_in_forked_child_raises_fork_error(stores, workers):
    dense, _ = stores
    out = run(f"""
        import os, sys
        from loaderx.dataloader import DataLoader
        from loaderx.dataset import DenseDataset
        from loaderx.errors import ForkError
        loader = DataLoader({{"x": DenseDataset({dense!r})}}, batch_size=4, num_workers={workers})
        next(loader)
        next(loader)  # with workers, later steps are prefetched now
        pid = os.fork()
        if pid == 0:
            try:
                next(loader)
            except ForkError:
                os._exit(7)
            except BaseException as e:
                print("child:", type(e).__name__, e, flush=True)
                os._exit(1)
            os._exit(2)  # a batch prefetched before the fork
        _, status = os.waitpid(pid, 0)
        print(os.waitstatus_to_exitcode(status))
        print(next(loader)["x"].shape)
    """)
    assert out.split()[:1] == ["7"], out
    assert "(4, 2)" in out
