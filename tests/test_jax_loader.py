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
