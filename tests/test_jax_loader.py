"""loaderx.jax: batches laid out over two CPU devices by a sharding, each
device holding its slice; prefetching does not move the saved position."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("jax")

from loaderx.converter import from_numpy

ROOT = Path(__file__).resolve().parent.parent


def test_sharded_prefetch_and_resume(tmp_path: Path) -> None:
    from_numpy(str(tmp_path / "x"), np.arange(64 * 2, dtype=np.float32).reshape(64, 2))
    from_numpy(str(tmp_path / "y"), np.arange(64, dtype=np.int32))
    code = f"""
        import json
        import jax, numpy as np
        from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
        from loaderx.dataloader import DataLoader
        from loaderx.dataset import DenseDataset
        from loaderx.jax import DeviceLoader

        devices = jax.devices()
        assert len(devices) == 2, devices
        sharding = NamedSharding(Mesh(np.array(devices), ("data",)), P("data"))

        def make():
            streams = {{"x": DenseDataset({str(tmp_path / "x")!r}), "y": DenseDataset({str(tmp_path / "y")!r})}}
            return DeviceLoader(DataLoader(streams, batch_size=8, seed=3, num_workers=1), sharding, prefetch=3)

        def reference(step):
            with DataLoader({{"y": DenseDataset({str(tmp_path / "y")!r})}}, batch_size=8, seed=3,
                            start_step=step, num_workers=0) as ref:
                return next(ref)["y"]

        dl = make()
        for step in range(5):
            b = next(dl)
            y, x = b["y"], b["x"]
            assert isinstance(y, jax.Array) and y.sharding == sharding and y.shape == (8,)
            want = reference(step)
            assert np.array_equal(np.asarray(y), want)
            assert np.array_equal(np.asarray(x)[:, 0], want * 2)
            shards = sorted(y.addressable_shards, key=lambda s: s.index[0].start)
            assert [s.device for s in shards] == devices
            assert np.array_equal(np.asarray(shards[0].data), want[:4])
            assert np.array_equal(np.asarray(shards[1].data), want[4:])
        # the checkpoint: training state and the loader's JSON state together
        checkpoint = json.dumps({{"params": [1.0], "loader": dl.state_dict()}})
        assert json.loads(checkpoint)["loader"]["step"] == 5   # 3 more are in flight
        after = [np.asarray(next(dl)["y"]) for _ in range(4)]
        dl.close()
        resumed = make()
        resumed.load_state_dict(json.loads(checkpoint)["loader"])
        again = [np.asarray(next(resumed)["y"]) for _ in range(4)]
        assert all(np.array_equal(a, b) for a, b in zip(after, again))
        resumed.close()
        # batches kept while the loader goes on still hold their own records
        # (the loader refills a host buffer once nothing references it)
        dl = make()
        held = [next(dl) for _ in range(24)]
        dl.close()
        for step, b in enumerate(held):
            want = reference(step)
            assert np.array_equal(np.asarray(b["y"]), want), step
            assert np.array_equal(np.asarray(b["x"])[:, 1], want * 2 + 1), step
        print("ok")
    """
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=2", JAX_PLATFORMS="cpu")
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=600, cwd=ROOT, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip().endswith("ok")


def test_bad_arguments() -> None:
    import jax

    from loaderx.jax import DeviceLoader

    sharding = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    with pytest.raises(TypeError, match="loaderx DataLoader"):
        DeviceLoader([np.zeros(2)], sharding)  # type: ignore[arg-type]


def test_packed_rows_on_the_mesh(tmp_path: Path) -> None:
    """A PackedRows comes out a PackedRows: rows on the devices, split by the
    sharding; per-segment fields on the host, padded with max_segments."""
    import loaderx

    rng = np.random.default_rng(0)
    for name in ("a", "b"):
        loaderx.from_iterator(str(tmp_path / name), (rng.integers(1, 99, int(k)).astype(np.int32)
                                                     for k in rng.integers(1, 40, 200)), progress=False)
    code = f"""
        import jax, numpy as np
        from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
        import loaderx
        from loaderx.jax import DeviceLoader
        from loaderx.packing import PackedRows

        devices = jax.devices()
        sharding = NamedSharding(Mesh(np.array(devices), ("data",)), P("data"))

        def loader():
            mix = loaderx.Mixture({{n: {{"t": loaderx.RaggedDataset({str(tmp_path)!r} + "/" + n)}} for n in "ab"}},
                                  {{"a": 0.75, "b": 0.25}}, by="tokens")
            return loaderx.DataLoader(mix, batch_size=4, seed=1, num_workers=0, pack={{"t": 32}})

        ref = loader()
        want = [ref.__next__()["t"] for _ in range(3)]
        want = [PackedRows(*[np.array(x, copy=True) if isinstance(x, np.ndarray) else x for x in w]) for w in want]
        ref.close()
        for bound in (None, 64):
            with DeviceLoader(loader(), sharding, prefetch=1, max_segments=bound) as dl:
                for w in want:
                    got = next(dl)["t"]
                    assert isinstance(got, PackedRows)
                    for f in ("values", "segment_ids", "positions", "num_segments"):
                        arr = getattr(got, f)
                        assert isinstance(arr, jax.Array) and arr.sharding == sharding, f
                        assert np.array_equal(np.asarray(arr), getattr(w, f)), f
                    n = w.records.shape[0]
                    for f, fill in (("cu_seqlens", w.cu_seqlens[-1]), ("records", -1), ("starts", 0), ("sources", -1)):
                        arr = getattr(got, f)
                        assert isinstance(arr, np.ndarray), f
                        if bound is None:
                            assert np.array_equal(arr, getattr(w, f)), f
                        else:
                            assert arr.shape[0] == bound + (f == "cu_seqlens"), f
                            assert np.array_equal(arr[: getattr(w, f).shape[0]], getattr(w, f)), f
                            assert (arr[getattr(w, f).shape[0]:] == fill).all(), f
                    assert got.dropped == 0
                    np.testing.assert_array_equal(got.token_sources, w.token_sources)
        with DeviceLoader(loader(), sharding, max_segments=2) as dl:
            try:
                next(dl)
            except ValueError as e:
                assert "more than max_segments=2" in str(e), e
            else:
                raise AssertionError("no error over max_segments")
        print("ok")
    """
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=2", JAX_PLATFORMS="cpu")
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=600, cwd=ROOT, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip().endswith("ok")
