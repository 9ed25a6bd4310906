"""A per-sample Python augmentation on worker processes.

The transform below loops over the images of a batch in Python, the way
augmentation code usually looks. On worker threads the GIL runs one such
loop at a time; with ``workers="process"`` each worker process runs its own.
The default, ``workers="auto"``, starts on threads, times the first steps
and moves to processes when they would be faster. The script times the
three modes on the same synthetic images, prints what the default chose and
why, checks that all three yield the same batches, and that a process-mode
loader resumed from its ``state_dict`` continues exactly. It needs only
NumPy and runs in seconds::

    python3 examples/process_augment.py --steps 40

The transform is defined at module level so that it pickles: each spawned
worker imports this file (as ``__mp_main__``; the ``__main__`` guard keeps it
from running the script again) and unpickles the transform from it.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import numpy as np

from loaderx import DataLoader, DenseDataset, from_numpy

SIZE, CROP = 48, 40


def augment(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Per image: a crop and a flip chosen from its label, brightness
    normalisation and a little blur. Deterministic, so both modes agree and
    a resumed run repeats an uninterrupted one (a random augmentation would
    draw from a generator seeded by the record or the step)."""
    images, labels = batch["image"], batch["label"]
    out = np.empty((len(images), CROP, CROP), dtype=np.float32)
    for i in range(len(images)):
        y0 = int(labels[i]) % (SIZE - CROP)
        x = images[i, y0 : y0 + CROP, 4 : 4 + CROP].astype(np.float32) / 255.0
        if labels[i] % 2:
            x = x[:, ::-1]
        x = (x - x.mean()) / (x.std() + 1e-3)
        out[i] = 0.5 * x + 0.25 * (np.roll(x, 1, axis=0) + np.roll(x, 1, axis=1))
    return {"image": out, "label": labels}


def make_stores(workdir: str, n: int) -> dict[str, DenseDataset]:
    image_path, label_path = os.path.join(workdir, "images"), os.path.join(workdir, "labels")
    if not os.path.isdir(image_path):
        rng = np.random.default_rng(0)
        from_numpy(image_path, rng.integers(0, 256, size=(n, SIZE, SIZE), dtype=np.uint8))
        from_numpy(label_path, rng.integers(0, 1000, size=n, dtype=np.int64))
    return {"image": DenseDataset(image_path), "label": DenseDataset(label_path)}


def run(workdir: str, workers: str, steps: int, num_workers: int) -> tuple[float, list[np.ndarray], str]:
    """Seconds for ``steps`` batches (after the first, which includes
    starting the workers), a checksum per batch, and what the loader says
    it ran on."""
    sums = []
    with DataLoader(make_stores(workdir, 4096), batch_size=128, transform=augment, seed=0,
                    num_workers=num_workers, workers=workers) as loader:
        first = next(loader)
        sums.append(first["image"].sum(axis=(1, 2)))
        t0 = time.perf_counter()
        for _ in range(steps):
            sums.append(next(loader)["image"].sum(axis=(1, 2)))
        seconds = time.perf_counter() - t0
        stats = loader.stats()
    moved = stats["workers_switch_step"]
    where = f"{stats['workers_chosen']}s" + (f" from step {moved}" if moved is not None else "")
    return seconds, sums, f"{where}: {stats['workers_reason']}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workdir", default=None, help="where the stores go (default: a temporary directory)")
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        workdir = args.workdir or tmp
        t_threads, threads, _ = run(workdir, "thread", args.steps, args.workers)
        t_procs, procs, _ = run(workdir, "process", args.steps, args.workers)
        t_auto, auto, chose = run(workdir, "auto", args.steps, args.workers)
        print(f"threads:   {args.steps / t_threads:6.1f} batches/s")
        print(f"processes: {args.steps / t_procs:6.1f} batches/s ({t_threads / t_procs:.2f}x)")
        print(f"default:   {args.steps / t_auto:6.1f} batches/s ({t_threads / t_auto:.2f}x), on {chose}")
        assert all(np.array_equal(a, b) for a, b in zip(threads, procs)), "thread and process workers disagree"
        assert all(np.array_equal(a, b) for a, b in zip(threads, auto)), "the default loader disagrees"
        print("same batches in both modes (and with the default)")

        # resume: stop after 10 steps, continue from the saved state in a new loader
        kw = {"batch_size": 128, "transform": augment, "seed": 0, "num_workers": args.workers,
              "workers": "process"}
        with DataLoader(make_stores(workdir, 4096), **kw) as loader:
            for _ in range(10):
                next(loader)
            state = loader.state_dict()
        with DataLoader(make_stores(workdir, 4096), **kw) as resumed:
            resumed.load_state_dict(state)
            again = [next(resumed)["image"].sum(axis=(1, 2)) for _ in range(5)]
        assert all(np.array_equal(a, b) for a, b in zip(again, threads[10:15])), "resume diverged"
        print(f"resumed at step {state['step']}: the next 5 batches are identical")


if __name__ == "__main__":
    main()
