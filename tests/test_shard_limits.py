"""Sharded datasets of thousands of shards against the process's limits.

A sharded dataset opens no shard until a read needs it, keeps at most
``max_open_shards`` open (each holds its mappings and no descriptor), and
closes the least recently used when it needs room. These tests count what
the process holds (``/proc/self/fd``, ``/proc/self/maps``), in child
processes of their own so that nothing else in the test process counts:
under ``ulimit -n 1024`` a dataset of thousands of shards opens and reads
with a handful of descriptors; with a cap of 8 the mappings grow by about
two per open shard, from several threads at once, while every byte of
random batches across all the shards reads right. A shard removed or
replaced while the dataset is open is CorruptStoreError naming it, and
running out of descriptors anyway is an error naming the limit and the
setting; ``max_open_shards`` is checked and survives pickling.
"""

from __future__ import annotations

import os
import pickle
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from loaderx.arrow import MSDataset
from loaderx.dataset import DenseDataset
from loaderx.errors import CorruptStoreError
from loaderx.store import _native, shards

REPO = str(Path(__file__).resolve().parent.parent)

linux_only = pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts /proc/self/fd and maps (Linux)")

#: records per shard, and the int32 lanes of a record: record i holds i in every lane
PER_SHARD = 3
LANES = 4


def write_shards(root: str, n: int, start: int = 0, value: int | None = None) -> list[str]:
    """n raw shards of PER_SHARD records each under root, record i holding
    i (or value) in every lane; returns their names."""
    names = []
    for k in range(start, start + n):
        name = f"s{k:05d}"
        first = k * PER_SHARD
        data = np.repeat(np.arange(first, first + PER_SHARD, dtype=np.int32)[:, None], LANES, axis=1)
        if value is not None:
            data[:] = value
        h = _native.store_create(os.path.join(root, name), "raw", schema=("dense", "<i4", (LANES,)))
        try:
            offsets = np.arange(PER_SHARD + 1, dtype=np.int64) * (LANES * 4)
            _native.store_append_packed(h, data.reshape(-1).view(np.uint8), offsets)
        finally:
            _native.store_close_unsynced(h)
        names.append(name)
    return names


@pytest.fixture(scope="module")
def thousands() -> Iterator[str]:
    """A committed dataset of 3,000 shards (under /dev/shm where there is
    one: writing them there syncs nothing)."""
    base = "/dev/shm" if os.path.isdir("/dev/shm") else None
    root = tempfile.mkdtemp(prefix="loaderx-shards-", dir=base)
    try:
        shards.commit(root, write_shards(root, 3000), sync=False)
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def run_child(code: str, *args: str) -> str:
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        env={**os.environ, "PYTHONPATH": REPO}, capture_output=True, text=True, timeout=300,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout


_UNDER_1024 = """
import os, resource, sys, threading
import numpy as np
# as `ulimit -n 1024` sets it: soft and hard (a Go runtime raises the soft
# limit to the hard one when it starts, so a soft limit alone would not hold)
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (min(1024, hard), min(1024, hard)))
from loaderx.dataset import DenseDataset

def fds():
    return len(os.listdir("/proc/self/fd"))

ds = DenseDataset(sys.argv[1])
n = len(ds)
assert n == 3000 * 3, n
most = fds()
rng = np.random.default_rng(1)
for _ in range(40):
    idx = rng.integers(0, n, size=256)
    batch = ds[idx]
    assert (batch == idx[:, None]).all(), "a record read another's bytes"
    most = max(most, fds())
every = ds[:]  # every record of every shard: all 3,000 open at once
assert (every == np.arange(n)[:, None]).all()
most = max(most, fds())
print("fds", most)
"""


@linux_only
def test_thousands_of_shards_open_and_read_under_ulimit_1024(thousands):
    # Before stores gave up their descriptors, 400 shards broke this limit.
    out = run_child(_UNDER_1024, thousands)
    most = int(out.split()[-1])
    assert most <= 64, f"{most} descriptors open while reading 3,000 shards"


_CAPPED = """
import sys, threading
import numpy as np
from loaderx.dataset import DenseDataset

cap = int(sys.argv[2])
ds = DenseDataset(sys.argv[1], max_open_shards=cap)
n = len(ds)
warm = threading.Barrier(5)
stop = threading.Event()
reads, errors = [], []

def reader(seed):
    try:
        rng = np.random.default_rng(seed)
        ds[[0]]  # this thread and the runtime's threads exist before the count starts
        warm.wait()
        k = 0
        while not stop.is_set() and k < 100_000:
            idx = rng.integers(0, n, size=int(rng.integers(1, 40)))
            if not (ds[idx] == idx[:, None]).all():
                errors.append("a record read another's bytes")
            k += 1
        reads.append(k)
    except BaseException as e:
        errors.append(repr(e))

threads = [threading.Thread(target=reader, args=(s,)) for s in range(4)]
for t in threads:
    t.start()
warm.wait()
print("warm", flush=True)
sys.stdin.readline()  # the parent has counted the mappings at rest
print("go", flush=True)
sys.stdin.readline()  # the parent has counted them while the threads read
stop.set()
for t in threads:
    t.join()
assert not errors, errors
print("reads", sum(reads))
"""


def frozen_maps(pid: int, root: str) -> tuple[int, int]:
    """The mappings of process pid, and those of root's files, counted while
    every thread of it is stopped. A read of a running process's
    /proc/PID/maps is no snapshot: the kernel writes it a page at a time, so
    a mapping unmapped and another made meanwhile can both be counted."""
    os.kill(pid, signal.SIGSTOP)
    try:
        deadline = time.monotonic() + 10
        while True:
            states = []
            for tid in os.listdir(f"/proc/{pid}/task"):
                try:
                    with open(f"/proc/{pid}/task/{tid}/stat") as f:
                        states.append(f.read().rsplit(")", 1)[1].split()[0])
                except FileNotFoundError:
                    pass  # a thread that ended
            if all(state in "tTZX" for state in states):
                break  # none is inside a call that maps or unmaps
            assert time.monotonic() < deadline, f"the child did not stop: {states}"
            time.sleep(0.0005)
        with open(f"/proc/{pid}/maps") as f:
            lines = f.readlines()
    finally:
        os.kill(pid, signal.SIGCONT)
    return len(lines), sum(1 for line in lines if root in line)


@linux_only
def test_a_cap_bounds_the_mappings_while_threads_read_every_shard(thousands):
    cap = 8
    child = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(_CAPPED), thousands, str(cap)],
        env={**os.environ, "PYTHONPATH": REPO}, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True,
    )
    try:
        assert child.stdout.readline() == "warm\n", child.communicate(timeout=60)
        base = frozen_maps(child.pid, thousands)
        child.stdin.write("\n")
        child.stdin.flush()
        assert child.stdout.readline() == "go\n"
        samples = []
        for _ in range(150):  # at random moments of the threads' reads
            samples.append(frozen_maps(child.pid, thousands))
            time.sleep(0.002)
        child.stdin.write("\n")
        child.stdin.flush()
        out, err = child.communicate(timeout=120)
    finally:
        child.kill()
        child.wait()
    assert child.returncode == 0, out + err
    assert int(out.split()[-1]) > 0, out
    growth = max(s[0] for s in samples) - base[0]
    files = max(s[1] for s in samples)
    # an open shard of one chunk holds two mappings, of its chunk and its
    # table: never more than 2 * cap of the dataset's files are mapped
    assert 0 < files <= 2 * cap, f"{files} mappings of the dataset's files under a cap of {cap} shards"
    # and the process's mappings grow by those and a few of the threads'
    # allocations (glibc's arenas), where an uncapped read of the 3,000
    # shards grows them by thousands
    assert growth <= 2 * cap + 16, f"the mappings grew by {growth} under a cap of {cap} shards"


def test_a_shard_replaced_or_removed_while_open_is_an_error_naming_it(tmp_path):
    root = str(tmp_path / "d")
    names = write_shards(root, 3)
    shards.commit(root, names, sync=False)
    with DenseDataset(root, max_open_shards=1) as ds:
        np.testing.assert_array_equal(ds[[0, 1, 2]][:, 0], [0, 1, 2])  # shard 0 opens
        np.testing.assert_array_equal(ds[[3]][:, 0], [3])  # shard 1 takes the one place
        shutil.rmtree(os.path.join(root, names[0]))
        write_shards(root, 1, start=0, value=-7)  # the same name, length and schema; other records
        shutil.rmtree(os.path.join(root, names[2]))
        with pytest.raises(CorruptStoreError, match=rf"{names[0]}.*changed since the set first opened it"):
            ds[1]
        with pytest.raises(CorruptStoreError, match=rf"shard {names[2]!r} is missing"):
            ds[7]
        np.testing.assert_array_equal(ds[[4, 5]][:, 0], [4, 5])  # shard 1 still reads
    with DenseDataset(root) as fresh:  # opened anew: shard 0 is what it is now
        np.testing.assert_array_equal(fresh[[0, 2]], np.full((2, LANES), -7, np.int32))


_EMFILE = """
import errno, os, resource, sys
import numpy as np
resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))  # both, as `ulimit -n 256` sets them
from loaderx.dataset import DenseDataset

ds = DenseDataset(sys.argv[1])
assert (ds[[0]] == 0).all()  # the library is loaded and shard 0 open
hoard = []
try:
    while True:
        hoard.append(os.open("/dev/null", os.O_RDONLY))
except OSError as e:
    assert e.errno == errno.EMFILE
try:
    ds[[0, 40]]  # shard 13 must open
except OSError as e:
    assert e.errno == errno.EMFILE, e
    print(str(e))
else:
    raise SystemExit("reading past the descriptor limit did not fail")
for fd in hoard:
    os.close(fd)
assert (ds[[0, 40]] == np.array([[0], [40]])).all()  # nothing was lost
print("recovered")
"""


@linux_only
def test_running_out_of_descriptors_names_the_limit(tmp_path):
    root = str(tmp_path / "d")
    shards.commit(root, write_shards(root, 20), sync=False)
    out = run_child(_EMFILE, root)
    assert out.strip().endswith("recovered"), out
    for words in ("RLIMIT_NOFILE", "ulimit -n", "256", "max_open_shards", "s00013"):
        assert words in out, f"{words!r} not in {out!r}"


def test_max_open_shards_is_checked_and_survives_pickling(tmp_path):
    root = str(tmp_path / "d")
    shards.commit(root, write_shards(root, 4), sync=False)
    for bad, err in ((0, ValueError), (-2, ValueError), ("8", TypeError), (True, TypeError), (2.5, TypeError)):
        with pytest.raises(err, match=rf"max_open_shards={re.escape(repr(bad))}"):
            DenseDataset(root, max_open_shards=bad)
        with pytest.raises(err, match=rf"max_open_shards={re.escape(repr(bad))}"):
            MSDataset(root, max_open_shards=bad)
    ds = DenseDataset(root, max_open_shards=2)
    copy = pickle.loads(pickle.dumps(ds))
    assert copy._max_open == 2
    idx = np.arange(4 * PER_SHARD)[::-1].copy()
    np.testing.assert_array_equal(copy[idx][:, 0], idx)
    assert repr(ds).endswith("shards=4)") and ds.codec == "raw"
    ds.close()
    copy.close()


_STORE_EMFILE = """
import errno, os, resource, sys
import numpy as np
resource.setrlimit(resource.RLIMIT_NOFILE, (128, 128))
from loaderx.dataset import DenseDataset
from loaderx.store import _native

_native.get_threads()  # the library is loaded, but has opened no file yet
hoard = []
try:
    while True:
        hoard.append(os.open("/dev/null", os.O_RDONLY))
except OSError as e:
    assert e.errno == errno.EMFILE
os.close(hoard.pop())  # room for the schema, not for the store's files
try:
    DenseDataset(sys.argv[1])[0]
except OSError as e:
    assert e.errno == errno.EMFILE, e
    print(str(e))
else:
    raise SystemExit("opening a store past the descriptor limit did not fail")
for fd in hoard:
    os.close(fd)
assert (DenseDataset(sys.argv[1])[[0, 9]] == [[0, 1, 2, 3], [36, 37, 38, 39]]).all()
print("recovered")
"""


@linux_only
def test_a_store_opened_past_the_descriptor_limit_is_an_error_naming_it(tmp_path):
    """Out of descriptors at a store's first open (the library loaded, no
    file opened by it yet): OSError(EMFILE) naming the limit, the process
    lives on (the runtime's poller is made when the library loads, not at
    the first open, where failing to make it would abort the process), and
    the store opens once descriptors are free."""
    path = str(tmp_path / "s")
    from loaderx.converter import from_numpy

    from_numpy(path, np.arange(40, dtype=np.int32).reshape(10, 4), codec="raw")
    got = run_child(_STORE_EMFILE, path)
    assert "RLIMIT_NOFILE" in got and "ulimit -n" in got and "recovered" in got, got
