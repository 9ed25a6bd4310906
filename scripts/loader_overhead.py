#!/usr/bin/env python3
"""What the DataLoader costs on top of the gathers it makes.

Side by side in one run, on the same store and the same batches (the indices
of steps 0..S-1 from the loader's own sampler):

* ``gather``: a bare loop of ``DenseDataset.gather(indices, out=buffer)`` into
  one reused buffer, indices computed beforehand: the floor of what a loader
  can cost, with no sampling, no threads and no allocation.
* ``gather, 2 bufs``: the same loop alternating between two buffers, as any
  loader must (the caller still holds the previous batch while the next one
  is filled).
* ``loader``: a long-lived ``DataLoader`` with an identity transform, for
  each ``--workers`` value, rewound to step 0 and consuming S batches.

Rounds alternate between the two so drift on a shared machine hits both; the
report is the median batches/s per variant and its ratio to the bare loop.

    python3 scripts/loader_overhead.py                       # 12 KiB records, batch 256
    python3 scripts/loader_overhead.py --record-kib 256 --records 1024

loaderx must be importable: installed, or from a source tree with the library
built, ``PYTHONPATH=.`` from the repo root.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

import numpy as np

import loaderx
from loaderx.converter import from_numpy
from loaderx.dataloader import DataLoader, LoaderOptions
from loaderx.dataset import DenseDataset


def identity(batch):
    return batch


def bare(ds: DenseDataset, indices: list, outs: list) -> float:
    """Batches/s of gathers into the buffers of outs, taken in turn."""
    k = len(outs)
    t0 = time.perf_counter()
    for i, idx in enumerate(indices):
        ds.gather(idx, out=outs[i % k])
    return len(indices) / (time.perf_counter() - t0)


def make_loader(ds: DenseDataset, args, workers: int) -> DataLoader:
    return DataLoader({"x": ds}, batch_size=args.batch, num_workers=workers, sampler=args.sampler,
                      seed=1, transform=identity)


def loader_rate(loader: DataLoader, steps: int) -> float:
    """Batches/s over steps 0..steps-1. The loader is long-lived, as in
    training: its threads and recycled buffers are warm, so what is timed is
    the steady state, not the first allocation of its batch buffers."""
    loader.load_state_dict({**loader.state_dict(), "step": 0})
    t0 = time.perf_counter()
    for _ in range(steps):
        batch = next(loader)
    del batch
    return steps / (time.perf_counter() - t0)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--record-kib", type=int, default=12)
    p.add_argument("--records", type=int, default=8192)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--codec", default="raw", choices=["raw", "zstd"])
    p.add_argument("--sampler", default="cyclic", choices=["cyclic", "iid", "sequential"])
    p.add_argument("--workers", default="0,1,2,4", help="comma-separated num_workers values")
    p.add_argument("--native-threads", type=int, default=0,
                   help="loaderx.set_num_threads for the whole run (0: the library default)")
    args = p.parse_args()
    loaderx.set_num_threads(args.native_threads)
    workers = [int(w) for w in args.workers.split(",")]

    floats = args.record_kib * 1024 // 4
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as tmp:
        # mildly compressible: smooth values plus noise
        data = np.empty((args.records, floats), dtype=np.float32)
        for s in range(0, args.records, 256):
            e = min(args.records, s + 256)
            data[s:e] = np.round(rng.standard_normal((e - s, floats)), 2)
        from_numpy(os.path.join(tmp, "x"), data, codec=args.codec, progress=False)
        del data
        ds = DenseDataset(os.path.join(tmp, "x"))
        with DataLoader({"x": ds}, batch_size=args.batch, num_workers=0, sampler=args.sampler,
                        seed=1) as probe:
            indices = [probe.sampler(s) for s in range(args.steps)]
        out = np.empty((args.batch, floats), dtype=np.float32)
        out2 = np.empty_like(out)
        batch_mib = out.nbytes / (1 << 20)
        bare(ds, indices, [out, out2])  # warm the page cache, the threads and both buffers
        loaders = {w: make_loader(ds, args, w) for w in workers}
        for loader in loaders.values():
            loader_rate(loader, args.steps)  # warm threads and buffers

        rates: dict = {"gather": [], "gather, 2 bufs": []}
        rates.update({f"loader w={w}": [] for w in workers})
        threads = {w: LoaderOptions(num_workers=w).worker_threads for w in workers}
        for _ in range(args.rounds):
            rates["gather"].append(bare(ds, indices, [out]))
            rates["gather, 2 bufs"].append(bare(ds, indices, [out, out2]))
            for w in workers:
                rates[f"loader w={w}"].append(loader_rate(loaders[w], args.steps))
        for loader in loaders.values():
            loader.close()
        ds.close()

    print(f"records {args.records} x {args.record_kib} KiB, batch {args.batch} ({batch_mib:.1f} MiB), "
          f"codec {args.codec}, sampler {args.sampler}, {args.steps} steps x {args.rounds} rounds, "
          f"{os.cpu_count()} CPUs, {loaderx.get_num_threads()} native threads")
    base = statistics.median(rates["gather"])
    print("worker threads started: " + ", ".join(f"w={w} -> {t}" for w, t in threads.items()))
    print(f"{'variant':<14} {'batches/s':>10} {'MiB/s':>9} {'vs gather':>10}")
    for name, values in rates.items():
        r = statistics.median(values)
        print(f"{name:<14} {r:>10.1f} {r * batch_mib:>9.0f} {r / base:>9.2f}x")


if __name__ == "__main__":
    main()
