"""What the examples share: their ``--workdir`` (a fixed temporary directory
by default), and scikit-learn's digits (8x8 images, 10 classes) as loaderx
stores, converted once; later runs open the stores."""

from __future__ import annotations

import argparse
import os
import tempfile

import numpy as np

import loaderx


def add_workdir(parser: argparse.ArgumentParser, name: str) -> None:
    """``--workdir``, by default ``<temp dir>/loaderx-<name>``: a fixed place,
    so that a second run finds the stores and the checkpoint of the first."""
    default = os.path.join(tempfile.gettempdir(), f"loaderx-{name}")
    parser.add_argument("--workdir", default=default,
                        help=f"where the stores and checkpoints go (default: {default})")


def open_workdir(workdir: str, announce: bool = True) -> str:
    """Make ``workdir`` and say where it is."""
    os.makedirs(workdir, exist_ok=True)
    if announce:
        print(f"workdir: {workdir}", flush=True)
    return workdir


def digits_arrays(limit: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Pixels scaled to [0, 1] as float32 (n, 64) and labels as int64 (n,)."""
    try:
        from sklearn.datasets import load_digits
    except ImportError:
        raise SystemExit("these examples use scikit-learn's digits: pip install scikit-learn") from None
    d = load_digits()
    x = (d.data / 16.0).astype(np.float32)
    y = d.target.astype(np.int64)
    return (x[:limit], y[:limit]) if limit else (x, y)


def digits_stores(workdir: str, limit: int | None = None) -> tuple[str, str, str, str]:
    """Paths of the train and test stores (x, y, x, y): the first 80 % of the
    records train, the rest test. Written on the first call."""
    paths = tuple(os.path.join(workdir, n) for n in ("train_x", "train_y", "test_x", "test_y"))
    if not all(os.path.isdir(p) for p in paths):
        x, y = digits_arrays(limit)
        cut = len(x) * 4 // 5
        for path, arr in zip(paths, (x[:cut], y[:cut], x[cut:], y[cut:]), strict=True):
            loaderx.from_numpy(path, arr, overwrite=True)
    return paths  # type: ignore[return-value]
