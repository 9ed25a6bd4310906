"""codec="narrow": integer records stored as a frame of reference in the
fewest bytes, through every converter, both dataset kinds and the loader."""

from __future__ import annotations

import numpy as np
import pytest

from loaderx.converter import from_iterator, from_numpy
from loaderx.dataloader import DataLoader
from loaderx.dataset import DenseDataset, RaggedDataset
from loaderx.store import _native
from loaderx.zrecord import Zrecord

INT_DTYPES = [np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.int64, np.uint64]


def _values(dtype, shape, seed=0) -> np.ndarray:
    """Values of ``dtype`` that narrow: a record-specific offset near the
    type's minimum or maximum plus a small spread, with some records at the
    type's extremes and some all equal."""
    info = np.iinfo(dtype)
    rng = np.random.default_rng(seed)
    n = shape[0]
    spread = min(200, (int(info.max) - int(info.min)) // 2)
    out = np.empty(shape, dtype)
    for i in range(n):
        row = rng.integers(0, spread + 1, size=shape[1:], dtype=np.uint64).astype(object)
        if i % 3 == 0:
            base = int(info.min)
        elif i % 3 == 1:
            base = int(info.max) - spread
        else:
            base = min(0, int(info.max) - spread)
        rec = np.array([base + int(v) for v in np.ravel(row)], dtype=object).reshape(shape[1:])
        if i % 5 == 4:
            rec[...] = base  # all equal
        out[i] = rec.astype(dtype)
    return out


@pytest.mark.parametrize("dtype", INT_DTYPES, ids=lambda d: np.dtype(d).name)
def test_dense_round_trip_and_loader(tmp_path, dtype):
    a = _values(dtype, (60, 33))  # 33 values: the widening kernels' tails run too
    from_numpy(tmp_path / "s", a, codec="narrow")
    with DenseDataset(tmp_path / "s") as ds:
        assert ds.codec == "narrow" and ds.dtype == a.dtype
        np.testing.assert_array_equal(ds[:], a)
        np.testing.assert_array_equal(ds[[59, 0, 7, 7]], a[[59, 0, 7, 7]])
        st = ds.stats()
        assert st["version"] == 5 and st["checksummed"]
        if np.dtype(dtype).itemsize > 1:
            assert st["live_bytes"] < a.nbytes  # spans of 200 fit a byte
        assert st["codec_choice"] is None
        with DataLoader({"x": ds}, batch_size=8, sampler="sequential", num_workers=0) as loader:
            for step in range(10):
                batch = next(loader)["x"]
                idx = [(step * 8 + k) % len(a) for k in range(8)]
                np.testing.assert_array_equal(batch, a[idx])
                assert batch.dtype == a.dtype


@pytest.mark.parametrize("dtype", INT_DTYPES, ids=lambda d: np.dtype(d).name)
def test_ragged_round_trip_and_loader(tmp_path, dtype):
    rng = np.random.default_rng(1)
    flat = _values(dtype, (40, 50), seed=2)
    recs = [flat[i, : int(rng.integers(0, 51))] for i in range(40)]
    from_iterator(tmp_path / "r", recs, codec="narrow")
    with RaggedDataset(tmp_path / "r") as rs:
        assert rs.codec == "narrow"
        for got, want in zip(rs[list(range(len(recs)))], recs):
            np.testing.assert_array_equal(got, want)
            assert got.dtype == want.dtype
        with DataLoader({"r": rs}, batch_size=5, sampler="sequential", num_workers=0) as loader:
            for step in range(8):
                batch = next(loader)["r"]
                want = [recs[(step * 5 + k) % len(recs)] for k in range(5)]
                np.testing.assert_array_equal(batch.lengths, [len(w) for w in want])
                np.testing.assert_array_equal(batch.values, np.concatenate(want))


def test_loader_workers_read_narrow_batches(tmp_path):
    a = (np.random.default_rng(3).zipf(1.2, (500, 256)) % 50000).astype(np.int32)
    from_numpy(tmp_path / "t", a, codec="narrow")
    from_numpy(tmp_path / "i", np.arange(len(a), dtype=np.int64), codec="raw")
    with DenseDataset(tmp_path / "t") as ds, DenseDataset(tmp_path / "i") as ids, DataLoader(
        {"t": ds, "i": ids}, batch_size=32, sampler="iid", num_workers=2, seed=4
    ) as loader:
        for _ in range(20):
            b = next(loader)
            np.testing.assert_array_equal(b["t"], a[b["i"]])


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.bool_, np.complex64, np.float16])
def test_non_integer_dtypes_are_refused(tmp_path, dtype):
    a = np.zeros((4, 3), dtype)
    name = np.dtype(dtype).name
    with pytest.raises(ValueError, match=f"codec 'narrow' stores arrays of integers.*dtype {name}"):
        from_numpy(tmp_path / "n", a, codec="narrow")
    with pytest.raises(ValueError, match=f"dtype {name}"):
        from_iterator(tmp_path / "n", [a[0], a[1]], codec="narrow")
    assert not (tmp_path / "n").exists()


def test_from_arrow_narrow(tmp_path):
    pa = pytest.importorskip("pyarrow")
    ids = (np.random.default_rng(5).zipf(1.2, (30, 64)) % 50000).astype(np.int64)
    table = pa.table({"ids": pa.FixedSizeListArray.from_arrays(pa.array(ids.reshape(-1)), 64),
                      "label": pa.array(np.arange(30, dtype=np.int16))})
    import loaderx

    with loaderx.from_arrow(tmp_path / "o", table, codec="narrow") as ms:
        assert ms["ids"].codec == "narrow" and ms["label"].codec == "narrow"
        np.testing.assert_array_equal(ms["ids"][:], ids)
        np.testing.assert_array_equal(ms["label"][:], np.arange(30, dtype=np.int16))
        assert ms["ids"].stats()["live_bytes"] < ids.nbytes / 3
    mixed = pa.table({"ids": pa.array(np.arange(5, dtype=np.int32)), "score": pa.array(np.ones(5, np.float32))})
    with pytest.raises(ValueError, match="column 'score' has dtype float32"):
        loaderx.from_arrow(tmp_path / "m", mixed, codec="narrow")
    assert not (tmp_path / "m").exists() or not any((tmp_path / "m").iterdir())


def test_zrecord_narrow_needs_an_integer_element(tmp_path):
    with pytest.raises(ValueError, match="needs element="):
        Zrecord(tmp_path / "a", create=True, codec="narrow")
    with pytest.raises(ValueError, match="dtype float32"):
        Zrecord(tmp_path / "a", create=True, codec="narrow", element="float32")
    with pytest.raises(ValueError, match="applies to codec 'narrow' only"):
        Zrecord(tmp_path / "a", create=True, codec="zstd", element="int32")
    recs = [np.arange(100, 164, dtype=np.uint16).tobytes(), b"", b"\x01\x02\x03", np.full(10, 7, np.uint16).tobytes()]
    with Zrecord(tmp_path / "z", create=True, codec="narrow", element=np.uint16) as zr:
        zr.append(recs)
        assert zr.gather([0, 1, 2, 3]) == recs
        assert zr.codec == "narrow"
        # 64 values in one byte each after a 3-byte header; 10 equal values in the header alone
        assert zr.stats()["live_bytes"] == (3 + 64) + 0 + 3 + 3
        assert zr.verify().ok


def test_native_codec_spec_checks(tmp_path):
    with pytest.raises(ValueError, match="element type \"float32\""):
        _native.store_create(tmp_path / "x", "narrow", element="float32")
    with pytest.raises(ValueError, match="applies to codec 'narrow' only"):
        _native.store_create(tmp_path / "x", "raw", element="int8")
    with pytest.raises(ValueError, match="only narrow takes an element type"):
        _native.store_create(tmp_path / "x", "zstd:int8")
    data = np.arange(64, dtype=np.int64).view(np.uint8)
    p = _native.codec_probe("narrow", data, np.array([0, 256, 512], np.int64), element="int64")
    assert p["stored_bytes"] == 2 * (1 + 8 + 32) and p["compressed"] == 2


def test_a_dataset_made_before_the_library_loads_reads_a_narrow_store(tmp_path):
    """A process that builds datasets without loading the library (so it can
    fork workers) reads len() from the version-5 header in Python."""
    import os
    import subprocess
    import sys

    a = (np.arange(40 * 16) % 300).astype(np.int32).reshape(40, 16)
    from_numpy(tmp_path / "s", a, codec="narrow")
    code = ("import numpy as np, sys; from loaderx.store import _native; from loaderx.dataset import DenseDataset; "
            "ds = DenseDataset(sys.argv[1]); n = len(ds); assert not _native.loaded(); "
            "print(n, int(ds[39].sum()))")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    r = subprocess.run([sys.executable, "-c", code, str(tmp_path / "s")], capture_output=True, text=True,
                       env={**os.environ, "PYTHONPATH": root})
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["40", str(int(a[39].sum()))]


def test_a_store_from_a_newer_loaderx_is_refused_plainly(tmp_path):
    from loaderx.errors import CorruptStoreError
    from loaderx.store._store import header_length

    from_numpy(tmp_path / "s", np.arange(12, dtype=np.int16).reshape(3, 4), codec="narrow")
    meta = tmp_path / "s" / "meta.zr"
    b = bytearray(meta.read_bytes())
    b[4] = 9
    meta.write_bytes(bytes(b))
    with pytest.raises(CorruptStoreError, match="written by a newer loaderx; this one reads format versions 1, 3, 4, 5"):
        header_length(str(tmp_path / "s"))
    with pytest.raises(CorruptStoreError, match="format version 9: the store was written by a newer loaderx.*1, 3, 4 and 5"):
        _native.store_open(tmp_path / "s")
