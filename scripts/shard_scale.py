"""Open and read a sharded dataset of very many shards under `ulimit -n 1024`.

    python3 scripts/shard_scale.py [--shards 100000] [--dir DIR] [--keep]

Writes a dataset of --shards small raw shards (3 records of int32[4] each,
record i holding i; under /dev/shm where there is one, since writing there
syncs nothing) unless DIR already holds one of that many, then, in a child
process whose descriptor limit is 1024 (soft and hard, as `ulimit -n 1024`
sets it), times reading the manifest and opening the dataset, and reads
random batches of 256 records across all the shards, checking every byte,
while it counts the process's descriptors (/proc/self/fd) and mappings
(/proc/self/maps). It prints one line per figure.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from loaderx.store import _native, shards  # noqa: E402

PER_SHARD, LANES = 3, 4


def build(root: str, n: int) -> None:
    if shards.is_sharded(root) and len(shards.read_manifest(root).shards) == n:
        print(f"reusing the {n} shards in {root}")
        return
    os.makedirs(root, exist_ok=True)
    t0 = time.perf_counter()
    names = []
    offsets = np.arange(PER_SHARD + 1, dtype=np.int64) * (LANES * 4)
    for k in range(n):
        # Each store is made in a directory of at most 1,000 and moved into
        # the dataset's: a store's creation looks through its parent
        # directory for what an interrupted one left, which in a directory
        # of 100,000 entries would make writing them all quadratic.
        name = f"s{k:06d}"
        stage = os.path.join(root, ".build", str(k // 1000))
        os.makedirs(stage, exist_ok=True)
        first = k * PER_SHARD
        data = np.repeat(np.arange(first, first + PER_SHARD, dtype=np.int32)[:, None], LANES, axis=1)
        h = _native.store_create(os.path.join(stage, name), "raw", schema=("dense", "<i4", (LANES,)))
        try:
            _native.store_append_packed(h, data.reshape(-1).view(np.uint8), offsets)
        finally:
            _native.store_close_unsynced(h)
        os.rename(os.path.join(stage, name), os.path.join(root, name))
        names.append(name)
        if (k + 1) % 10000 == 0:
            print(f"  wrote {k + 1} shards, {time.perf_counter() - t0:.0f} s", flush=True)
    shutil.rmtree(os.path.join(root, ".build"))
    t1 = time.perf_counter()
    shards.commit(root, names, sync=False)
    print(f"wrote {n} shards in {t1 - t0:.1f} s, committed them in {time.perf_counter() - t1:.1f} s")


_CHILD = """
import os, resource, sys, time
import numpy as np
resource.setrlimit(resource.RLIMIT_NOFILE, (1024, 1024))
from loaderx.dataset import DenseDataset
from loaderx.store import _native, shards

_native.get_threads()  # the library is loaded: the dataset opens its set at once, not at its first read

def fds():
    return len(os.listdir("/proc/self/fd"))

def maps():
    with open("/proc/self/maps") as f:
        return sum(1 for _ in f)

root = sys.argv[1]
print("descriptor limit (soft, hard):", resource.getrlimit(resource.RLIMIT_NOFILE))
t0 = time.perf_counter()
m = shards.read_manifest(root)
print(f"read and checked the manifest of {len(m.shards)} shards: {time.perf_counter() - t0:.3f} s")
fd0, maps0 = fds(), maps()
t0 = time.perf_counter()
ds = DenseDataset(root)
t_open = time.perf_counter() - t0
print(f"DenseDataset(root) (the manifest read and checked, the native set of {len(m.shards)} shards made): "
      f"{t_open:.3f} s, len {len(ds)}")
print(f"descriptors: {fd0} before the open, {fds()} after it")
rng = np.random.default_rng(7)
n = len(ds)
most_fds, most_maps = fds(), maps()
t0 = time.perf_counter()
batches = int(sys.argv[2])
for _ in range(batches):
    idx = rng.integers(0, n, size=256)
    batch = ds[idx]
    assert (batch == idx[:, None]).all(), "a record read another's bytes"
    most_fds, most_maps = max(most_fds, fds()), max(most_maps, maps())
dt = time.perf_counter() - t0
print(f"{batches} random batches of 256 across all shards, every byte checked: {dt / batches * 1e3:.2f} ms a batch "
      f"(each of its shards opened at its first read)")
warm = 3 * 10_000  # the records of the first 10,000 shards: read once, so that they are open
assert (ds[:warm] == np.arange(warm)[:, None]).all()
t0 = time.perf_counter()
for _ in range(batches):
    idx = rng.integers(0, warm, size=256)
    assert (ds[idx] == idx[:, None]).all()
print(f"{batches} random batches of 256 across 10,000 shards already open: "
      f"{(time.perf_counter() - t0) / batches * 1e3:.3f} ms a batch")
print(f"most descriptors while reading: {most_fds}; mappings: {maps0} before the open, "
      f"at most {most_maps} while reading")
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shards", type=int, default=100_000)
    ap.add_argument("--dir", default=None,
                    help="where the dataset is (or is written); a temporary directory by default")
    ap.add_argument("--batches", type=int, default=20)
    ap.add_argument("--keep", action="store_true", help="keep a temporary dataset")
    a = ap.parse_args()
    base = "/dev/shm" if os.path.isdir("/dev/shm") else None
    root = a.dir or tempfile.mkdtemp(prefix="loaderx-scale-", dir=base)
    try:
        build(root, a.shards)
        subprocess.run([sys.executable, "-c", textwrap.dedent(_CHILD), root, str(a.batches)],
                       env={**os.environ, "PYTHONPATH": REPO}, check=True)
    finally:
        if a.dir is None and not a.keep:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
