#!/usr/bin/env python3
"""The main job, end to end: make a sample image dataset, convert it to loaderx
stores with every default left alone, stream batches through the DataLoader, and
stream the same indices with ``np.take`` from memory-mapped ``.npy`` files of the
same arrays, in the same run, for a ratio.

    python3 scripts/demo.py [--dir DIR] [--records N] [--steps N] [--codec auto]

The sample set is generated here (smooth synthetic 64x64 images with a class
label each), so the demo needs nothing but loaderx itself, importable: installed
(`make demo` installs it first), or from a source tree with the library built,
`PYTHONPATH=. python3 scripts/demo.py` from the repo root.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

import numpy as np

import loaderx
from loaderx._progress import Progress
from loaderx.converter import from_numpy
from loaderx.dataloader import DataLoader
from loaderx.dataset import DenseDataset


def sample_images(n: int, side: int = 64, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """n smooth images (a class-dependent blob on a gradient, plus noise) and labels."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 10, size=n, dtype=np.int64)
    yy, xx = np.mgrid[0:side, 0:side].astype(np.float32) / side
    images = np.empty((n, side, side), dtype=np.uint8)
    for start in range(0, n, 1024):
        stop = min(n, start + 1024)
        lab = labels[start:stop, None, None].astype(np.float32)
        cx = 0.2 + 0.06 * lab
        cy = 0.8 - 0.06 * lab
        blob = np.exp(-((xx - cx) ** 2 + (yy - cy) ** 2) * 40.0)
        grad = 0.3 * (xx + yy)
        noise = rng.normal(0.0, 0.03, size=(stop - start, side, side)).astype(np.float32)
        images[start:stop] = np.clip((blob + grad + noise) * 160.0, 0, 255).astype(np.uint8)
    return images, labels


def stream_loader(loader: DataLoader, steps: range, progress: Progress, row_bytes: int) -> tuple[float, dict]:
    """Seconds to take ``steps`` from the loader (already positioned at their
    first), and the last batch."""
    t0 = time.perf_counter()
    for _ in steps:
        batch = next(loader)
        progress.update(len(batch["label"]), len(batch["label"]) * row_bytes)
    return time.perf_counter() - t0, batch


def stream_npy(loader: DataLoader, images: np.ndarray, labels: np.ndarray, steps: range,
               progress: Progress, row_bytes: int) -> tuple[float, dict]:
    """The same steps' indices (drawn beforehand, so only the gather is timed)
    gathered with ``np.take`` from the memory-mapped arrays."""
    draws = [loader.indices(s) for s in steps]
    t0 = time.perf_counter()
    for idx in draws:
        batch = {"image": np.take(images, idx, axis=0), "label": np.take(labels, idx)}
        progress.update(len(idx), len(idx) * row_bytes)
    return time.perf_counter() - t0, batch


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", default=None, help="where to write the stores (default: a temporary directory)")
    ap.add_argument("--records", type=int, default=60000)
    ap.add_argument("--steps", type=int, default=400, help="steps timed per contender, in 4 alternating rounds")
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--codec", default="auto", choices=["auto", "raw", "narrow", "zstd", "zstd_dict"])
    args = ap.parse_args()

    root = args.dir or tempfile.mkdtemp(prefix="loaderx-demo-")
    data_path, label_path = os.path.join(root, "images"), os.path.join(root, "labels")
    for p in (data_path, label_path):
        if os.path.exists(p):
            shutil.rmtree(p)
    print(f"workdir: {root}")

    images, labels = sample_images(args.records)
    t0 = time.perf_counter()
    from_numpy(data_path, images, codec=args.codec)
    from_numpy(label_path, labels)
    t_convert = time.perf_counter() - t0
    data, label = DenseDataset(data_path), DenseDataset(label_path)
    print(f"converted {len(data)} images {data.item_shape} {data.dtype} + labels "
          f"in {t_convert:.2f} s ({images.nbytes / 2**20 / t_convert:.0f} MiB/s)")
    for name, ds in (("images", data), ("labels", label)):
        st = ds.stats()
        choice = st.get("codec_choice")
        why = f": {choice['reason']}" if choice else " (asked for)"
        print(f"{name}: codec {st['codec']}, {st['chunk_bytes'] / 2**20:.1f} MiB on disk{why}")

    npy_images, npy_labels = os.path.join(root, "images.npy"), os.path.join(root, "labels.npy")
    np.save(npy_images, images)
    np.save(npy_labels, labels)
    mm_images, mm_labels = np.load(npy_images, mmap_mode="r"), np.load(npy_labels, mmap_mode="r")

    row_bytes = data.nbytes_per_item + label.nbytes_per_item
    loader = DataLoader({"image": data, "label": label}, batch_size=args.batch_size, seed=0)
    next(loader)  # start-up: threads and first buffers
    rounds = 4
    per_round = max(1, args.steps // rounds)
    total = 2 * (rounds + 1) * per_round * args.batch_size
    progress = Progress("streaming", total_records=total, total_bytes=total * row_bytes)
    t_loader, t_npy, ratios = 0.0, 0.0, []
    step = 1
    for r in range(rounds + 1):  # alternate, so that a noisy neighbour hurts both alike
        steps = range(step, step + per_round)
        a, batch = stream_loader(loader, steps, progress, row_bytes)
        b, npy_batch = stream_npy(loader, mm_images, mm_labels, steps, progress, row_bytes)
        step += per_round
        if r == 0:  # a round untimed: each contender's first touch of its files' pages
            continue
        t_loader, t_npy = t_loader + a, t_npy + b
        ratios.append(b / a)
    progress.close()
    last = loader.step - 1
    same = all(np.array_equal(batch[k], npy_batch[k]) for k in batch)
    stats = loader.stats()
    loader.close()

    steps_run = rounds * per_round
    mib = steps_run * args.batch_size * row_bytes / 2**20
    pipeline = ("native step pipeline" if stats["pipeline"] == "native"
                else f"{stats['pipeline']} pipeline: {stats['pipeline_reason']}")
    workers = stats["num_workers"]
    print(f"loaderx:          {steps_run / t_loader:8,.0f} batches/s, {mib / t_loader:8,.0f} MiB/s "
          f"({pipeline}, {workers} worker{'' if workers == 1 else 's'})")
    print(f"np.take on .npy:  {steps_run / t_npy:8,.0f} batches/s, {mib / t_npy:8,.0f} MiB/s (memory-mapped)")
    print(f"loaderx / np.take: {statistics.median(ratios):.2f}x (median of {rounds} alternating rounds of "
          f"{per_round} steps of {args.batch_size}, after one untimed; native threads: {loaderx.get_num_threads()})")
    print(f"step {last}: the same batch from both: {'yes' if same else 'NO'}")
    data.close()
    label.close()
    if args.dir is None:
        shutil.rmtree(root)
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
