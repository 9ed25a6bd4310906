"""DataLoader(workers="process"): the same batches as worker threads, in
step order and resumable; failures name their step and never hang; closing
(or dropping) the loader ends its processes and leaves nothing in /dev/shm."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import procw_funcs as funcs
import pytest
from trees import assert_same, copy_tree

from loaderx.converter import from_iterator, from_numpy
from loaderx.dataloader import DataLoader, PackedBatch
from loaderx.dataset import DenseDataset, RaggedDataset
from loaderx.errors import ClosedError, WorkerError
from loaderx.sampler import WeightedSampler

pytestmark = pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="needs /dev/shm (Linux)")

ROOT = Path(__file__).resolve().parent.parent
N = 203
SHM_PREFIX = f"loaderx-{os.getpid()}-"  # this process's segments only: another run may share /dev/shm




@pytest.fixture
def stores(tmp_path: Path) -> dict[str, Any]:
    rng = np.random.default_rng(5)
    data = rng.integers(0, 255, size=(N, 3, 5), dtype=np.uint8)
    from_numpy(tmp_path / "data", data, codec="zstd")
    from_numpy(tmp_path / "label", np.arange(N, dtype=np.int64))
    recs = [rng.integers(-99, 99, size=int(rng.integers(0, 30))).astype(np.int32) for _ in range(N)]
    from_iterator(tmp_path / "tok", recs, codec="raw")
    np.save(tmp_path / "extra.npy", rng.standard_normal((N + 10, 4)).astype(np.float32))
    return {"dir": tmp_path, "data": data}


def shm_names() -> set[str]:
    return {n for n in os.listdir("/dev/shm") if n.startswith(SHM_PREFIX)}


def make_streams(d: Path, kind: str) -> dict[str, Any]:
    if kind == "stores":
        return {"data": DenseDataset(d / "data"), "label": DenseDataset(d / "label")}
    if kind == "arrays":  # an in-memory array and a memmap slice next to a store
        extra = np.load(d / "extra.npy", mmap_mode="r")[5 : 5 + N]
        return {
            "data": np.array(DenseDataset(d / "data")[np.arange(N)]),
            "label": DenseDataset(d / "label"),
            "extra": extra,
        }
    if kind == "ragged":
        return {"tok": RaggedDataset(d / "tok"), "label": DenseDataset(d / "label")}
    raise AssertionError(kind)


CASES = [
    ("stores", {"sampler": "cyclic", "seed": 0}, None),
    ("stores", {"sampler": "iid", "seed": 11}, funcs.flip_scale),
    ("stores", {"sampler": "sequential", "epoch": True}, funcs.as_pair),  # short last batch
    ("stores", {"sampler": "cyclic", "seed": 3, "epoch": True, "drop_last": True}, funcs.as_array),
    ("arrays", {"sampler": "cyclic", "seed": 7}, None),
    ("stores", {"sampler": funcs.EverySeventh(N, funcs.BATCH)}, funcs.flip_scale),
    ("stores", {"sampler": WeightedSampler(np.linspace(0, 1, N), funcs.BATCH, seed=4)}, None),
    ("ragged", {"sampler": "cyclic", "seed": 2}, None),
    ("ragged", {"sampler": "iid", "seed": 9, "offsets_dtype": np.int32}, funcs.as_list),
    ("ragged", {"sampler": "cyclic", "seed": 1, "pad": {"tok": ("multiple", 8)}}, None),
]


@pytest.mark.parametrize(("kind", "settings", "transform"), CASES)
def test_process_batches_equal_thread_batches(stores, deadline, kind, settings, transform):
    d = stores["dir"]
    kw = {"batch_size": funcs.BATCH, "transform": transform, "num_workers": 2, **settings}
    if "epoch" not in settings:
        kw["steps"] = 40  # several cycles: slots are recycled and reused
    threads = DataLoader(make_streams(d, kind), workers="thread", **kw)
    want = [copy_tree(b) for b in threads]
    threads.close()
    held = []
    with DataLoader(make_streams(d, kind), workers="process", **kw) as procs:
        assert len(procs) == len(want)
        for step, got in enumerate(procs):
            assert_same(got, want[step], f"step {step}")
            if step % 3 == 0:
                held.append((step, got))  # held batches are never overwritten
        for step, got in held:
            assert_same(got, want[step], f"held step {step}")
    if kind == "ragged" and "pad" not in settings and transform is None:
        assert isinstance(want[0]["tok"], PackedBatch)


def test_resume_continues_bit_identically(stores, deadline):
    d = stores["dir"]
    kw = {"batch_size": funcs.BATCH, "transform": funcs.flip_scale, "num_workers": 2, "seed": 5}
    with DataLoader(make_streams(d, "stores"), workers="thread", **kw) as straight:
        want = [copy_tree(next(straight)) for _ in range(20)]
    with DataLoader(make_streams(d, "stores"), workers="process", **kw) as first:
        for step in range(7):
            assert_same(next(first), want[step], f"step {step}")
        state = first.state_dict()
    assert state["step"] == 7
    with DataLoader(make_streams(d, "stores"), workers="process", **kw) as resumed:
        resumed.load_state_dict(state)
        for step in range(7, 20):
            assert_same(next(resumed), want[step], f"resumed step {step}")
        # seeking back on a running loader drops the prefetched steps
        resumed.load_state_dict({**state, "step": 2})
        for step in range(2, 12):
            assert_same(next(resumed), want[step], f"rewound step {step}")
        assert resumed.state_dict()["step"] == 12


def test_a_raising_transform_names_the_step_and_iteration_goes_on(stores, deadline):
    d = stores["dir"]
    kw = {"batch_size": funcs.BATCH, "sampler": "sequential", "transform": funcs.fail_at_step_3,
          "num_workers": 2}
    with DataLoader(make_streams(d, "stores"), workers="process", **kw) as loader:
        for _ in range(3):
            next(loader)
        with pytest.raises(WorkerError, match=r"^step 3: ValueError: bad record 24") as info:
            next(loader)
        cause = info.value.__cause__
        assert type(cause) is ValueError and str(cause) == "bad record 24"
        assert "fail_at_step_3" in str(cause.__cause__)  # the worker's traceback
        batch = next(loader)  # the failed step counts as consumed
        np.testing.assert_array_equal(batch["label"], np.arange(32, 40))


def test_an_unsupported_batch_type_fails_its_step(stores, deadline):
    d = stores["dir"]
    with DataLoader(make_streams(d, "stores"), batch_size=4, transform=funcs.returns_a_set,
                    num_workers=1, workers="process") as loader:
        with pytest.raises(WorkerError, match=r"step 0: TypeError: the transform returned builtins.set "
                                              r"at the batch\['names'\]"):
            next(loader)


def test_a_killed_worker_fails_its_step_and_a_new_worker_goes_on(stores, deadline):
    d = stores["dir"]
    kw = {"batch_size": funcs.BATCH, "sampler": "sequential", "transform": funcs.slow, "num_workers": 2,
          "prefetch": 4}
    with DataLoader(make_streams(d, "stores"), workers="process", **kw) as loader:
        next(loader)
        pids = loader._procs.pids()
        assert len(pids) == 2
        os.kill(pids[0], signal.SIGKILL)
        failed = None
        labels = {}
        for _ in range(12):
            try:
                batch = next(loader)
            except WorkerError as e:
                assert failed is None, "one death fails one step"
                failed = e
                continue
            labels[int(batch["label"][0]) // funcs.BATCH] = batch["label"].copy()
        assert failed is not None
        msg = str(failed)
        assert "died while making it (killed by SIGKILL)" in msg, msg
        step = int(msg.split(":")[0].removeprefix("step "))
        assert 1 <= step <= 5 and step not in labels
        assert sorted(labels) == [s for s in range(1, 13) if s != step]  # the others, in order
        for s, got in labels.items():
            np.testing.assert_array_equal(got, np.arange(s * funcs.BATCH, (s + 1) * funcs.BATCH))
        assert pids[0] not in loader._procs.pids()


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"workers": "processes"}, ValueError,
         r"workers must be 'auto' .*'thread' .* or 'process' .*got 'processes'"),
        ({"workers": 2}, ValueError, r"workers must be 'auto'.*got 2"),
        ({"workers": "process", "start_method": "fork"}, ValueError,
         r"start_method must be 'spawn' or 'forkserver', got 'fork' \(the Go runtime"),
        ({"workers": "process", "start_method": "Spawn"}, ValueError, r"start_method must be .*got 'Spawn'"),
        ({"workers": "thread", "start_method": "spawn"}, ValueError,
         r"start_method='spawn' applies to workers='process' or 'auto' only"),
        ({"start_method": "Spawn"}, ValueError, r"start_method must be .*got 'Spawn'"),  # checked for auto too
        ({"workers": "process", "num_workers": 0}, ValueError, r"workers='process' needs num_workers of 1"),
        ({"workers": "process", "transform": lambda b: b}, TypeError,
         r"workers='process' needs transform to be picklable, and <function <lambda>"),
    ],
)
def test_bad_arguments_name_the_argument(stores, kwargs, error, match):
    with pytest.raises(error, match=match):
        DataLoader(make_streams(stores["dir"], "stores"), batch_size=4, **kwargs)


class _LockedSampler(funcs.EverySeventh):
    def __init__(self) -> None:
        super().__init__(N, 4)
        self.lock = threading.Lock()


def test_an_unpicklable_sampler_is_named(stores):
    with pytest.raises(TypeError, match=r"needs the sampler to be picklable, and .*_LockedSampler"):
        DataLoader(make_streams(stores["dir"], "stores"), sampler=_LockedSampler(), workers="process")


def test_closed_loader_refuses(stores, deadline):
    loader = DataLoader(make_streams(stores["dir"], "stores"), batch_size=4, workers="process", num_workers=1)
    next(loader)
    loader.close()
    loader.close()
    with pytest.raises(ClosedError):
        next(loader)


CLEANUP_SCRIPT = textwrap.dedent(
    """
    import gc, os, signal, sys, time
    import numpy as np
    import procw_funcs as funcs
    from loaderx.dataloader import DataLoader
    from loaderx.dataset import DenseDataset
    from loaderx.errors import WorkerError

    def streams(d):
        return {"data": DenseDataset(d + "/data"), "label": DenseDataset(d + "/label"),
                "copy": np.arange(203 * 3, dtype=np.float64).reshape(203, 3)}

    def shm():
        return sorted(n for n in os.listdir("/dev/shm") if n.startswith("loaderx-%d-" % os.getpid()))

    def alive(pids):
        out = []
        for p in pids:
            try:
                os.kill(p, 0)
                out.append(p)
            except ProcessLookupError:
                pass
        return out

    if __name__ == "__main__":
        d, how = sys.argv[1], sys.argv[2]
        # the slow transform keeps the workers busy, so the killed one dies making a step
        kw = dict(batch_size=8, num_workers=2, workers="process", prefetch=4,
                  transform=funcs.slow if how == "killed-worker" else funcs.flip_scale)
        loader = DataLoader(streams(d), **kw)
        held = [next(loader) for _ in range(3)]
        pids = loader._procs.pids()
        print("during", len(shm()) > 0, len(pids), flush=True)
        if how == "stop-mid-iteration":
            loader.close()
        elif how == "killed-worker":
            os.kill(pids[1], signal.SIGKILL)
            try:
                for _ in range(6):
                    next(loader)
            except WorkerError as e:
                print("raised", str(e).split(":")[0], flush=True)
            pids += loader._procs.pids()
            loader.close()
        elif how == "garbage-collected":
            del loader
            gc.collect()
        elif how == "with":
            with DataLoader(streams(d), **kw) as other:
                pids += other._procs.pids() if other._procs.pids() else []
                next(other)
                pids += other._procs.pids()
            loader.close()
        elif how == "exit-without-close":
            print("after", "[]", [], flush=True)
            sys.exit(0)
        elif how == "consumer-killed":
            print("pids", " ".join(map(str, pids)), flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        held_ok = all(b["data"].shape == (8, 3, 5) for b in held)  # held views outlive the names
        print("after", shm(), alive(pids), held_ok, flush=True)
    """
)


@pytest.mark.parametrize(
    "how", ["stop-mid-iteration", "killed-worker", "garbage-collected", "with", "exit-without-close",
            "consumer-killed"]
)
def test_nothing_is_left_in_dev_shm(stores, tmp_path, how):
    script = tmp_path / "cleanup.py"
    script.write_text(CLEANUP_SCRIPT)
    before = shm_names()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")])}
    proc = subprocess.run([sys.executable, str(script), str(stores["dir"]), how], capture_output=True,
                          text=True, timeout=600, env=env)
    lines = proc.stdout.splitlines()
    assert lines and lines[0] == "during True 2", proc.stdout + proc.stderr
    if how == "consumer-killed":
        assert proc.returncode == -signal.SIGKILL
        pids = [int(p) for p in lines[1].split()[1:]]
        end = time.monotonic() + 120  # the orphaned workers notice, unlink and exit
        while time.monotonic() < end and (shm_names() - before or any(_alive(p) for p in pids)):
            time.sleep(0.1)
        assert not any(_alive(p) for p in pids)
    else:
        assert proc.returncode == 0, proc.stdout + proc.stderr
        after = next(line for line in lines if line.startswith("after"))
        if how != "exit-without-close":
            assert after == "after [] [] True", proc.stdout + proc.stderr
        if how == "killed-worker":
            assert any(line.startswith("raised step ") for line in lines), proc.stdout
    assert shm_names() - before == set()
    assert "resource_tracker" not in proc.stderr and "leaked" not in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie (exited, not reaped: its parent was killed) counts as gone
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[1][0] != "Z"
    except OSError:
        return False


def test_a_worker_that_cannot_set_up_breaks_the_loader(stores, deadline):
    with DataLoader(make_streams(stores["dir"], "stores"), batch_size=4, transform=funcs.BreaksInTheWorker(),
                    num_workers=2, workers="process") as loader:
        for _ in range(2):  # every next() says so; none hangs
            with pytest.raises(WorkerError, match=r"could not set up .*RuntimeError: no rebuilding here") as info:
                next(loader)
        assert "_refuse" in str(info.value.__cause__.__cause__)


def test_forkserver_workers_yield_the_same_batches(stores, deadline):
    d = stores["dir"]
    kw = {"batch_size": funcs.BATCH, "transform": funcs.flip_scale, "num_workers": 2, "seed": 8, "steps": 12}
    with DataLoader(make_streams(d, "arrays"), workers="thread", **kw) as threads:
        want = [copy_tree(b) for b in threads]
    with DataLoader(make_streams(d, "arrays"), workers="process", start_method="forkserver", **kw) as procs:
        assert "workers='process'" in repr(procs)
        for step, got in enumerate(procs):
            assert_same(got, want[step], f"step {step}")


def test_a_memmap_slice_is_reopened_from_its_file(tmp_path):
    from loaderx.loader._procpool import _memmap_source

    np.save(tmp_path / "m.npy", np.arange(400, dtype=np.float32).reshape(100, 4))
    whole = np.load(tmp_path / "m.npy", mmap_mode="r")
    rows = whole[5:50]  # a slice keeps its parent's .offset; the source must not
    src = _memmap_source(rows)
    assert src is not None and src.path == str(tmp_path / "m.npy")
    reopened, segments = src.open()
    assert segments == [] and reopened.shape == (45, 4)
    np.testing.assert_array_equal(reopened, rows)
    assert _memmap_source(whole[::2]) is None  # not contiguous: copied into shared memory instead
    assert _memmap_source(np.array(whole)) is None  # in memory


def test_seeking_back_reuses_the_slots_of_dropped_steps(stores, deadline):
    """Batches made ahead of a load_state_dict are dropped, and their
    shared-memory slots go back to the pool instead of piling up."""
    d = stores["dir"]
    kw = {"batch_size": funcs.BATCH, "num_workers": 2, "sampler": "sequential", "prefetch": 4}
    with DataLoader(make_streams(d, "stores"), workers="process", **kw) as loader:
        next(loader)
        state = loader.state_dict()
        counts = []
        for _ in range(8):
            next(loader)
            time.sleep(0.2)  # let the prefetched steps arrive
            loader.load_state_dict(state)
            counts.append(len(shm_names()))
        # the pool fills up to a few more slots than steps in flight, then
        # stays; with the dropped slots lost, each seek added about 3
        assert counts[-1] <= counts[0] + 6, counts
    assert not shm_names()


def test_a_copy_on_write_memmap_is_sent_with_its_edits(tmp_path, deadline):
    path = tmp_path / "a.npy"
    np.save(path, np.arange(40 * 3, dtype=np.float32).reshape(40, 3))
    cow = np.load(path, mmap_mode="c")
    cow[5] = -1.0  # an edit in this process only, never in the file
    with DataLoader({"a": cow}, batch_size=8, sampler="sequential", num_workers=2, workers="process") as loader:
        np.testing.assert_array_equal(next(loader)["a"], cow[:8])
