#!/usr/bin/env python3
"""The main job, end to end: make a sample image dataset, convert it to loaderx
stores, stream batches through the DataLoader and print the throughput.

    python3 scripts/demo.py [--dir DIR] [--records N] [--steps N] [--codec zstd]

The sample set is generated here (smooth synthetic 64x64 images with a class
label each), so the demo needs nothing but loaderx itself, importable: installed
(`make demo` installs it first), or from a source tree with the library built,
`PYTHONPATH=. python3 scripts/demo.py` from the repo root.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

import numpy as np

import loaderx
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


class Bar:
    """A one-line progress display on a terminal; silent when stderr is not a TTY."""

    def __init__(self, total: int, label: str) -> None:
        self.total, self.label, self.t0 = total, label, time.perf_counter()
        self.tty = sys.stderr.isatty()

    def update(self, done: int, extra: str = "") -> None:
        if not self.tty:
            return
        frac = done / self.total if self.total else 1.0
        filled = int(frac * 30)
        sys.stderr.write(f"\r{self.label} [{'#' * filled}{'.' * (30 - filled)}] {done}/{self.total} {extra}")
        sys.stderr.flush()

    def close(self) -> None:
        if self.tty:
            sys.stderr.write("\n")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", default=None, help="where to write the stores (default: a temporary directory)")
    ap.add_argument("--records", type=int, default=60000)
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--codec", default="zstd", choices=["raw", "zstd", "zstd_dict"])
    args = ap.parse_args()

    root = args.dir or tempfile.mkdtemp(prefix="loaderx-demo-")
    data_path, label_path = os.path.join(root, "images"), os.path.join(root, "labels")
    for p in (data_path, label_path):
        if os.path.exists(os.path.join(p, "meta.zr")):
            shutil.rmtree(p)

    images, labels = sample_images(args.records)
    t0 = time.perf_counter()
    from_numpy(data_path, images, codec=args.codec)
    from_numpy(label_path, labels, codec="raw")
    t_convert = time.perf_counter() - t0
    data, label = DenseDataset(data_path), DenseDataset(label_path)
    print(f"converted {len(data)} images {data.item_shape} {data.dtype} + labels "
          f"in {t_convert:.2f} s ({images.nbytes / 2**20 / t_convert:.0f} MiB/s), codec {args.codec}")
    print(f"on disk: {data.stats()['chunk_bytes'] / 2**20:.1f} MiB for {images.nbytes / 2**20:.1f} MiB of pixels")

    loader = DataLoader({"image": data, "label": label}, batch_size=args.batch_size,
                        num_workers=args.workers, sampler="cyclic", seed=0)
    bar = Bar(args.steps, "streaming")
    batch_bytes = args.batch_size * (data.nbytes_per_item + label.nbytes_per_item)
    it = iter(loader)
    next(it)  # start-up: threads and first buffers
    t0 = time.perf_counter()
    for step in range(1, args.steps + 1):
        batch = next(it)
        if step % 20 == 0 or step == args.steps:
            el = time.perf_counter() - t0
            bar.update(step, f"{step / el:,.0f} batches/s")
    elapsed = time.perf_counter() - t0
    bar.close()
    loader.close()
    print(f"streamed {args.steps} batches of {args.batch_size}: {args.steps / elapsed:,.0f} batches/s, "
          f"{args.steps * args.batch_size / elapsed:,.0f} samples/s, "
          f"{args.steps * batch_bytes / elapsed / 2**20:,.0f} MiB/s (native threads: {loaderx.get_num_threads()})")
    print(f"last batch: image {batch['image'].shape} {batch['image'].dtype}, label {batch['label'].shape}")
    data.close()
    label.close()
    if args.dir is None:
        shutil.rmtree(root)
    return 0


if __name__ == "__main__":
    sys.exit(main())
