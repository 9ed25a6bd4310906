"""loaderx.torch: a loader split across torch's workers yields the steps a
single loaderx DataLoader yields, in order, per rank."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")

from loaderx.converter import from_numpy

ROOT = Path(__file__).resolve().parent.parent


def test_workers_and_ranks_split_steps(tmp_path: Path) -> None:
    x = np.arange(103 * 3, dtype=np.float32).reshape(103, 3)
    y = np.arange(103, dtype=np.int64)
    from_numpy(str(tmp_path / "x"), x)
    from_numpy(str(tmp_path / "y"), y)
    # A fresh interpreter: torch forks its workers, and the library must not
    # be loaded before the fork.
    code = f"""
        import numpy as np, torch
        from loaderx import _native
        from loaderx.dataloader import DataLoader
        from loaderx.torch import LoaderIterable
        x, y = {str(tmp_path / "x")!r}, {str(tmp_path / "y")!r}
        for workers in (2, 3):
            for rank in (0, 1):
                it = LoaderIterable({{"x": x, "y": y}}, batch_size=4, seed=5, shard=(rank, 2),
                                    start_step=3, steps=3 + 11)
                assert len(it) == 11
                got = list(torch.utils.data.DataLoader(it, batch_size=None, num_workers=workers))
                assert not _native.loaded()
                np.save({str(tmp_path)!r} + f"/got_{{workers}}_{{rank}}_x.npy", np.stack([b["x"].numpy() for b in got]))
                np.save({str(tmp_path)!r} + f"/got_{{workers}}_{{rank}}_y.npy", np.stack([b["y"].numpy() for b in got]))
        print("ok")
    """
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=240, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    from loaderx.dataloader import DataLoader
    from loaderx.dataset import DenseDataset

    for rank in (0, 1):
        streams = {"x": DenseDataset(str(tmp_path / "x")), "y": DenseDataset(str(tmp_path / "y"))}
        with DataLoader(streams, batch_size=4, seed=5, shard=(rank, 2), start_step=3, num_workers=1) as ref:
            want = [next(ref) for _ in range(11)]
        want_y = np.stack([b["y"] for b in want])
        want_x = np.stack([b["x"] for b in want])
        for workers in (2, 3):
            got_y = np.load(tmp_path / f"got_{workers}_{rank}_y.npy")
            assert np.array_equal(got_y, want_y), (workers, rank)
            assert np.array_equal(np.load(tmp_path / f"got_{workers}_{rank}_x.npy"), want_x)
            assert np.array_equal(want_x[..., 0], want_y * 3)
    # the two ranks draw disjoint records at every step
    r0, r1 = np.load(tmp_path / "got_2_0_y.npy"), np.load(tmp_path / "got_2_1_y.npy")
    assert all(not set(a) & set(b) for a, b in zip(r0.tolist(), r1.tolist(), strict=True))
