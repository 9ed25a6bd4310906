"""bfloat16 and the float8 types of ml_dtypes: stored by name, read back exactly."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import loaderx
from loaderx.store import _native

ml_dtypes = pytest.importorskip("ml_dtypes", reason="ml_dtypes is not installed (pip install 'loaderx[ml]')")
HAS_TORCH = importlib.util.find_spec("torch") is not None
HAS_JAX = importlib.util.find_spec("jax") is not None
ROOT = Path(__file__).resolve().parent.parent

TYPES = ["bfloat16", "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "int4"]


def values(name: str, shape: tuple[int, ...]) -> np.ndarray:
    dt = np.dtype(getattr(ml_dtypes, name))
    raw = np.random.default_rng(1).uniform(-4, 4, size=shape)
    return raw.round().astype(dt) if name.startswith(("int", "uint")) else raw.astype(np.float32).astype(dt)


@pytest.mark.parametrize("name", TYPES)
def test_dense_round_trip_keeps_the_dtype(tmp_path, name):
    a = values(name, (50, 6))
    loaderx.from_numpy(tmp_path / "s", a)
    assert _native.schema_read(tmp_path / "s")[1] == name
    with loaderx.DenseDataset(tmp_path / "s") as ds:
        assert ds.dtype == a.dtype
        back = ds[:]
        assert back.dtype == a.dtype
        assert back.tobytes() == a.tobytes()
        assert ds[[3, 1]].tobytes() == a[[3, 1]].tobytes()


def test_ragged_round_trip(tmp_path):
    recs = [values("bfloat16", (n, 2)) for n in (3, 0, 5)]
    loaderx.from_iterator(tmp_path / "r", recs)
    with loaderx.RaggedDataset(tmp_path / "r") as rs:
        assert rs.dtype == recs[0].dtype
        for got, want in zip(rs[:], recs):
            assert got.dtype == want.dtype and got.tobytes() == want.tobytes()


def test_the_schema_does_not_record_the_void_string(tmp_path):
    a = values("bfloat16", (4,))
    assert a.dtype.str == "<V2"  # what would be recorded without a name
    loaderx.from_numpy(tmp_path / "s", a)
    assert _native.schema_read(tmp_path / "s")[1] == "bfloat16"


def test_ml_dtypes_is_imported_lazily(tmp_path):
    loaderx.from_numpy(tmp_path / "f", np.zeros((3, 2), dtype=np.float32))
    loaderx.from_numpy(tmp_path / "b", values("bfloat16", (3, 2)))
    code = (
        "import sys, loaderx\n"
        f"ds = loaderx.DenseDataset({str(tmp_path / 'f')!r}); ds[:]\n"
        "assert 'ml_dtypes' not in sys.modules, 'imported for a float32 store'\n"
        f"bs = loaderx.DenseDataset({str(tmp_path / 'b')!r})\n"
        "assert 'ml_dtypes' in sys.modules and str(bs.dtype) == 'bfloat16'\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr


def test_a_missing_ml_dtypes_is_named(tmp_path):
    loaderx.from_numpy(tmp_path / "b", values("bfloat16", (3,)))
    code = (
        "import sys; sys.modules['ml_dtypes'] = None\n"
        "import loaderx\n"
        f"loaderx.DenseDataset({str(tmp_path / 'b')!r}).dtype\n"  # the schema is read at first use
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode != 0
    assert "ImportError" in r.stderr and "bfloat16" in r.stderr and "loaderx[ml]" in r.stderr


def test_dataloader_batches_keep_bfloat16(tmp_path):
    a = values("bfloat16", (64, 4))
    loaderx.from_numpy(tmp_path / "s", a)
    loader = loaderx.DataLoader({"x": loaderx.DenseDataset(tmp_path / "s")}, batch_size=8, num_workers=0, sampler="sequential")
    batch = next(iter(loader))["x"]
    assert batch.dtype == a.dtype and batch.tobytes() == a[:8].tobytes()


def test_append_refuses_a_different_float(tmp_path):
    a = values("bfloat16", (4, 2))
    loaderx.from_numpy(tmp_path / "s", a)
    with loaderx.DenseDataset(tmp_path / "s", writable=True) as ds:
        with pytest.raises(TypeError, match="float16"):
            ds.append(np.zeros((2, 2), dtype=np.float16))
        ds.append(values("bfloat16", (2, 2)))
        assert len(ds) == 6 and ds.dtype == a.dtype


def test_to_dlpack_returns_numpy_arrays_unchanged():
    a = np.arange(3, dtype=np.float32)
    assert loaderx.to_dlpack(a) is a
    with pytest.raises(TypeError, match="ndarray"):
        loaderx.to_dlpack([1, 2])
    with pytest.raises(BufferError, match="int4"):
        loaderx.to_dlpack(values("int4", (3,)))


@pytest.mark.skipif(not HAS_TORCH, reason="torch is not installed")
@pytest.mark.parametrize(("name", "torch_name"), [("bfloat16", "bfloat16"), ("float8_e4m3fn", "float8_e4m3fn"),
                                                  ("float8_e5m2", "float8_e5m2")])
def test_torch_from_dlpack(tmp_path, name, torch_name):
    import torch

    if not hasattr(torch, torch_name):
        pytest.skip(f"this torch has no {torch_name}")
    a = values(name, (16, 3))
    loaderx.from_numpy(tmp_path / "s", a)
    with loaderx.DenseDataset(tmp_path / "s") as ds:
        batch = ds[2:10]
    t = torch.from_dlpack(loaderx.to_dlpack(batch))
    assert t.dtype == getattr(torch, torch_name) and tuple(t.shape) == batch.shape
    np.testing.assert_array_equal(t.float().numpy(), batch.astype(np.float32))
    batch[0, 0] = batch[1, 1]  # no copy: the tensor sees the change
    assert t[0, 0].item() == t[1, 1].item()
    strided = torch.from_dlpack(loaderx.to_dlpack(batch[:, ::2]))
    np.testing.assert_array_equal(strided.float().numpy(), batch[:, ::2].astype(np.float32))


@pytest.mark.skipif(not HAS_JAX, reason="jax is not installed")
def test_jax_from_dlpack(tmp_path):
    # in a child process: a JAX runtime in the test process would make the
    # fork tests elsewhere in the suite unsafe
    a = values("bfloat16", (8, 3))
    loaderx.from_numpy(tmp_path / "s", a)
    code = (
        "import numpy as np, jax.numpy as jnp, loaderx\n"
        f"batch = loaderx.DenseDataset({str(tmp_path / 's')!r})[:]\n"
        "x = jnp.from_dlpack(loaderx.to_dlpack(batch))\n"
        "assert x.dtype == jnp.bfloat16, x.dtype\n"
        "np.testing.assert_array_equal(np.asarray(x.astype(jnp.float32)), batch.astype(np.float32))\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert r.returncode == 0, r.stderr
