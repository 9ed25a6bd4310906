"""Time one raw gather through each layer, against np.take on a memmap.

Writes the same array as a raw zrecord store and as a .npy file, then gathers
the same batches of sorted random indices (without replacement, as
``scripts/bench store`` draws them) through:

- ``np.take``: ``np.take(mm, idx, axis=0, out=buf, mode="clip")`` on
  ``np.load(path, mmap_mode="r")``, the npy-mmap contender;
- ``C export``: ``lx_store_gather`` called through cffi with the arguments
  converted once, outside the timing;
- ``_native``: ``loaderx.store._native.store_gather``, the binding's wrapper;
- ``unchecked``: ``DenseDataset._gather_unchecked``, the loader's path;
- ``gather``: ``DenseDataset.gather(idx, out=buf)``, the public method.

Each round times every layer over all batches once, in an order that rotates
from round to round, so a burst of load elsewhere on the machine lands on all
of them alike; before each layer's turn, a pass over other memory (--evict)
leaves the caches without its data, as the other contenders of
``scripts/bench store`` do between slices. Reported per record: the calling thread's CPU time (first
quartile and median over the rounds; on a machine shared with other work the
steadier figure), the process's CPU time (includes gather helpers) and wall
time (median); the last column is np.take's median thread CPU time over
the layer's. The Go layer alone is ``BenchmarkGatherSmall`` in
``zrecord/bench_test.go``.

Run from the repository root after ``python3 python/build_native.py``::

    PYTHONPATH=. python3 scripts/gather_layers.py            # 2 KiB: int32[512]
    PYTHONPATH=. python3 scripts/gather_layers.py --shape 64x192 --dtype uint8 --records 4800
"""

from __future__ import annotations

import argparse
import gc
import os
import tempfile
import time
from collections.abc import Callable

import numpy as np

from loaderx.converter import from_numpy
from loaderx.dataset import DenseDataset
from loaderx.store import _native


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shape", default="512", help="record shape, e.g. 512 or 64x192 (default 512)")
    ap.add_argument("--dtype", default="int32", help="record dtype (default int32)")
    ap.add_argument("--records", type=int, default=19200, help="records in the store (default 19200)")
    ap.add_argument("--batch", type=int, default=256, help="records per gather (default 256)")
    ap.add_argument("--batches", type=int, default=150, help="batches per round (default 150)")
    ap.add_argument("--rounds", type=int, default=40, help="timed rounds (default 40)")
    ap.add_argument("--misalign", type=int, default=16,
                    help="bytes the output buffer starts past a cache line (default 16)")
    ap.add_argument("--evict", type=int, default=64,
                    help="MiB of other memory written before each layer's turn, so that every layer starts "
                         "with caches holding none of its data, as in scripts/bench (default 64; 0: off)")
    ap.add_argument("--tmp", default=None, help="directory for the data (default: the system's)")
    args = ap.parse_args()
    shape = tuple(int(x) for x in args.shape.split("x"))
    n, b = args.records, args.batch

    with tempfile.TemporaryDirectory(prefix="gather_layers", dir=args.tmp) as d:
        rng = np.random.default_rng(0)
        src = rng.integers(0, 256, size=(n, *shape)).astype(args.dtype)
        from_numpy(os.path.join(d, "store"), src, codec="raw")
        np.save(os.path.join(d, "array.npy"), src)
        mm = np.load(os.path.join(d, "array.npy"), mmap_mode="r")
        ds = DenseDataset(os.path.join(d, "store"))
        # The output starts args.misalign bytes past a cache line: a NumPy
        # buffer of a few hundred KiB usually starts 16 bytes into a page.
        raw = np.empty(b * src[0].nbytes + 128, np.uint8)
        start = -raw.ctypes.data % 64 + args.misalign
        buf = raw[start : start + b * src[0].nbytes].view(src.dtype).reshape((b, *shape))
        batches = [np.sort(rng.choice(n, b, replace=False)).astype(np.int64) for _ in range(args.batches)]
        for start in range(0, n, b):  # warm the page cache and the mappings
            window = np.arange(start, min(n, start + b), dtype=np.int64)
            ds.gather(window)
            np.take(mm, window, axis=0)
        ds.gather(batches[0], out=buf)
        if not np.array_equal(buf, src[batches[0]]):
            raise SystemExit("the store returned other bytes than the array holds")

        h, stride = ds._h, ds._stride
        ffi, lib = _native.ffi, _native.lib
        err = ffi.new("char[]", 1024)
        out_view = ffi.from_buffer("char[]", buf, True)
        index_views = [ffi.from_buffer("int64_t[]", x) for x in batches]
        export = lib.lx_store_gather

        def take() -> None:
            for x in batches:
                np.take(mm, x, axis=0, out=buf, mode="clip")

        def c_export() -> None:
            for iv in index_views:
                if export(h, iv, b, out_view, len(out_view), stride, err, 1024):
                    raise SystemExit(ffi.string(err))

        def native() -> None:
            for x in batches:
                _native.store_gather(h, x, buf, stride)

        def unchecked() -> None:
            for x in batches:
                ds._gather_unchecked(x, buf)

        def gather() -> None:
            for x in batches:
                ds.gather(x, out=buf)

        layers: dict[str, Callable[[], None]] = {
            "np.take": take, "C export": c_export, "_native": native, "unchecked": unchecked, "gather": gather,
        }
        names = list(layers)
        per = args.batches * b
        thread: dict[str, list[float]] = {k: [] for k in names}
        proc: dict[str, list[float]] = {k: [] for k in names}
        wall: dict[str, list[float]] = {k: [] for k in names}
        evict = np.zeros(args.evict << 20, np.uint8)
        gc.disable()
        try:
            for r in range(args.rounds):
                for j in range(len(names)):
                    name = names[(j + r) % len(names)]
                    if args.evict:
                        evict += 1  # a pass over other memory, as other work would leave the caches
                    p0, c0, t0 = time.process_time_ns(), time.thread_time_ns(), time.perf_counter_ns()
                    layers[name]()
                    t1, c1, p1 = time.perf_counter_ns(), time.thread_time_ns(), time.process_time_ns()
                    thread[name].append((c1 - c0) / per)
                    proc[name].append((p1 - p0) / per)
                    wall[name].append((t1 - t0) / per)
        finally:
            gc.enable()
        ds.close()

    def q(v: list[float], f: float) -> float:
        s = sorted(v)
        return s[int(f * (len(s) - 1))]

    base = q(thread["np.take"], 0.5)
    print(f"{n:,} records of {shape} {args.dtype} ({src[0].nbytes:,} bytes), batches of {b}, "
          f"{args.rounds} rounds of {args.batches} batches, output {args.misalign} bytes past a cache line; "
          "ns per record")
    print("| layer     | thread CPU q1 | thread CPU median | process CPU median | wall median | np.take / layer |")
    print("|-----------|--------------:|------------------:|-------------------:|------------:|----------------:|")
    for name in names:
        med = q(thread[name], 0.5)
        print(f"| {name:9s} | {q(thread[name], 0.25):13.1f} | {med:17.1f} | {q(proc[name], 0.5):18.1f} | "
              f"{q(wall[name], 0.5):11.1f} | {base / med:14.2f}x |")


if __name__ == "__main__":
    main()
