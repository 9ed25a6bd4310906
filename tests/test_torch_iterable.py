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
        from loaderx.store import _native
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
                          timeout=600, cwd=ROOT)
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


def _stores(tmp_path: Path, n: int = 50) -> tuple[str, str, str]:
    from loaderx.converter import from_iterator

    x, y = str(tmp_path / "x"), str(tmp_path / "y")
    from_numpy(x, np.arange(n * 2, dtype=np.float32).reshape(n, 2))
    from_numpy(y, np.arange(n, dtype=np.int64))
    tok = str(tmp_path / "tok")
    from_iterator(tok, [np.full(1 + i % 7, i, dtype=np.int32) for i in range(n)])
    return x, y, tok


def _run_in_child(code: str) -> None:
    """Torch forks its workers: run in a fresh interpreter whose parent never
    loaded the library."""
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=600, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip().endswith("ok"), proc.stdout


def test_epoch_custom_sampler_and_ragged_streams_match_one_loader(tmp_path: Path) -> None:
    x, y, tok = _stores(tmp_path)
    out = str(tmp_path)
    _run_in_child(f"""
        import numpy as np, torch
        from loaderx.store import _native
        from loaderx.sampler import WeightedSampler
        from loaderx.dataset import RaggedDataset
        from loaderx.torch import LoaderIterable
        x, y, tok = {x!r}, {y!r}, {tok!r}
        cases = {{
            "epoch": dict(batch_size=8, sampler="cyclic", seed=3, epoch=True),
            "epoch_drop": dict(batch_size=8, sampler="sequential", epoch=True, drop_last=True),
            "weighted": dict(batch_size=6, sampler=WeightedSampler(np.linspace(0, 1, 50), 6, seed=4),
                             steps=9),
        }}
        for name, kw in cases.items():
            it = LoaderIterable({{"y": y, "tok": RaggedDataset(tok)}}, **kw)
            got = list(torch.utils.data.DataLoader(it, batch_size=None, num_workers=3))
            assert len(got) == len(it), (name, len(got), len(it))
            assert not _native.loaded()
            for k, b in enumerate(got):
                np.save({out!r} + f"/{{name}}_{{k}}_y.npy", b["y"].numpy())
                np.save({out!r} + f"/{{name}}_{{k}}_tok.npy", b["tok"].values.numpy())
        print("ok")
    """)
    from loaderx.dataloader import DataLoader
    from loaderx.dataset import DenseDataset, RaggedDataset
    from loaderx.sampler import WeightedSampler

    cases = {
        "epoch": dict(batch_size=8, sampler="cyclic", seed=3, epoch=True),
        "epoch_drop": dict(batch_size=8, sampler="sequential", epoch=True, drop_last=True),
        "weighted": dict(batch_size=6, sampler=WeightedSampler(np.linspace(0, 1, 50), 6, seed=4), steps=9),
    }
    for name, kw in cases.items():
        with DataLoader({"y": DenseDataset(y), "tok": RaggedDataset(tok)}, num_workers=1, **kw) as ref:
            want = list(ref)
        assert len(want) == {"epoch": 7, "epoch_drop": 6, "weighted": 9}[name]
        for k, b in enumerate(want):
            np.testing.assert_array_equal(np.load(tmp_path / f"{name}_{k}_y.npy"), b["y"], err_msg=name)
            np.testing.assert_array_equal(np.load(tmp_path / f"{name}_{k}_tok.npy"), b["tok"].values)
        if name == "epoch":  # one pass: every record once, the last batch short
            seen = np.concatenate([b["y"] for b in want])
            assert sorted(seen.tolist()) == list(range(50)) and len(want[-1]["y"]) == 2


def test_state_round_trips_with_the_dataloader_and_refuses_other_data(tmp_path: Path) -> None:
    x, y, _ = _stores(tmp_path)
    out = str(tmp_path)
    _run_in_child(f"""
        import json, numpy as np, torch
        from loaderx.store import _native
        from loaderx.torch import LoaderIterable
        x, y = {x!r}, {y!r}
        it = LoaderIterable({{"x": x, "y": y}}, batch_size=4, seed=9, steps=12)
        seen = []
        for k, b in enumerate(torch.utils.data.DataLoader(it, batch_size=None, num_workers=2)):
            seen.append(b["y"].numpy())
            if k == 4:
                break
        state = json.loads(json.dumps(it.state_dict(len(seen))))
        resumed = LoaderIterable({{"x": x, "y": y}}, batch_size=4, seed=9, steps=12)
        resumed.load_state_dict(state)
        assert len(resumed) == 7
        seen += [b["y"].numpy() for b in torch.utils.data.DataLoader(resumed, batch_size=None, num_workers=2)]
        assert not _native.loaded()
        np.save({out!r} + "/resumed.npy", np.stack(seen))
        with open({out!r} + "/state.json", "w") as f:
            json.dump(state, f)
        print("ok")
    """)
    import json

    from loaderx.dataloader import DataLoader
    from loaderx.dataset import DenseDataset
    from loaderx.torch import LoaderIterable

    streams = {"x": DenseDataset(x), "y": DenseDataset(y)}
    with DataLoader(streams, batch_size=4, seed=9, steps=12, num_workers=0) as ref:
        want = np.stack([b["y"] for b in ref])
    np.testing.assert_array_equal(np.load(tmp_path / "resumed.npy"), want)
    state = json.loads((tmp_path / "state.json").read_text())
    assert state["step"] == 5
    with DataLoader(streams, batch_size=4, seed=9, steps=12, num_workers=0) as loader:
        loader.load_state_dict(state)  # the loader takes the iterable's state, and the reverse
        np.testing.assert_array_equal(next(loader)["y"], want[5])
        back = LoaderIterable({"x": x, "y": y}, batch_size=4, seed=9, steps=12)
        back.load_state_dict(loader.state_dict())
        assert back.start_step == 6
    other = LoaderIterable({"x": x, "y": y}, batch_size=4, seed=10, steps=12)
    with pytest.raises(ValueError, match="state_dict has seed=9 but this loader has seed=10"):
        other.load_state_dict(state)
    fewer = str(tmp_path / "y40")
    from_numpy(fewer, np.arange(40, dtype=np.int64))
    with pytest.raises(ValueError, match="stream 'y' had 50 records, this loader's has 40"):
        LoaderIterable({"x": x, "y": fewer}, batch_size=4, seed=9, steps=12).load_state_dict(state)


def test_bad_arguments_fail_at_construction_naming_them(tmp_path: Path) -> None:
    from loaderx.torch import LoaderIterable

    x, y, _ = _stores(tmp_path)
    streams = {"x": x, "y": y}
    with pytest.raises(ValueError, match="batch_size must be at least 1, got 0"):
        LoaderIterable(streams, 0)
    with pytest.raises(TypeError, match="drop_last=True applies to an epoch=True pass only"):
        LoaderIterable(streams, 4, drop_last=True)
    with pytest.raises(TypeError, match="sampler must be one of"):
        LoaderIterable(streams, 4, sampler=object())
    with pytest.raises(ValueError, match="start_step=20 is past the end of this 13-step pass"):
        LoaderIterable(streams, 4, epoch=True, start_step=20)
    with pytest.raises(TypeError, match="transform must be callable"):
        LoaderIterable(streams, 4, transform=3)
    with pytest.raises(TypeError, match="endless LoaderIterable has no len"):
        len(LoaderIterable(streams, 4))
    assert len(LoaderIterable(streams, 4, epoch=True, start_step=3)) == 10
    assert repr(LoaderIterable(streams, 4, seed=2)) == (
        "LoaderIterable(streams=['x', 'y'], batch_size=4, sampler='cyclic', seed=2, shard=(0, 1), "
        "start_step=0, steps=None, epoch=False)"
    )
