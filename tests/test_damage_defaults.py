"""Damage with every default left alone: single bits flipped in every file of
a store, read back through DenseDataset and the DataLoader as a user would
(no verify flag, no option). Each damaged store must either read back
identical or raise; wrong bytes without an error are a failure.

The Go package runs the exhaustive sweep (zrecord/sweep_test.go); this one
checks that the Python layers above it keep its promise: the schema that
says how bytes become arrays, the handles' defaults and the loader's error
path."""

from __future__ import annotations

import os
import shutil

import numpy as np
import pytest

from loaderx import DataLoader, DenseDataset, from_numpy
from loaderx.errors import CorruptStoreError

ROWS, WIDTH = 96, 64


def _source() -> np.ndarray:
    """int32 rows: half of them smooth (a zstd store compresses those), half
    noise (a zstd store keeps those raw), so every store holds raw records."""
    rng = np.random.default_rng(7)
    smooth = np.repeat(np.arange(ROWS // 2, dtype=np.int32)[:, None], WIDTH, axis=1)
    noise = rng.integers(-(2**31), 2**31 - 1, size=(ROWS // 2, WIDTH), dtype=np.int32)
    out = np.empty((ROWS, WIDTH), np.int32)
    out[0::2], out[1::2] = smooth, noise
    return out


def _positions(size: int, limit: int = 160) -> list[int]:
    """Every byte of a small file, an even spread of a large one."""
    if size <= limit:
        return list(range(size))
    return sorted(set(np.linspace(0, size - 1, limit).round().astype(int).tolist()))


def _outcome(path: str, src: np.ndarray) -> str:
    try:
        with DenseDataset(path) as ds:
            got = ds[:]
            perm = np.random.default_rng(1).permutation(len(ds))
            picked = ds[perm]
        if got.dtype != src.dtype or got.shape != src.shape or not np.array_equal(got, src):
            return "silent"
        if not np.array_equal(picked, src[perm]):
            return "silent"
        return "identical"
    except (CorruptStoreError, ValueError, OSError, IndexError):
        return "error"


@pytest.mark.parametrize("codec", ["raw", "zstd", "auto"])
def test_no_flipped_bit_reads_back_silently(tmp_path, codec):
    src = _source()
    store = str(tmp_path / "s")
    from_numpy(store, src, codec=codec)
    files = sorted(f for f in os.listdir(store) if os.path.isfile(os.path.join(store, f)))
    assert "schema.msgpack" in files and "0.chunk" in files
    counts = {"identical": 0, "error": 0, "silent": 0}
    silent = []
    for name in files:
        path = os.path.join(store, name)
        with open(path, "rb") as f:
            data = bytearray(f.read())
        for pos in _positions(len(data)):
            bit = pos % 8
            data[pos] ^= 1 << bit
            with open(path, "wb") as f:
                f.write(data)
            what = _outcome(store, src)
            counts[what] += 1
            if what == "silent":
                silent.append(f"{name} byte {pos} bit {bit}")
            data[pos] ^= 1 << bit
        with open(path, "wb") as f:
            f.write(data)
    assert not silent, f"{len(silent)} silent of {sum(counts.values())}: {silent[:10]}"
    assert counts["error"] > 0  # the sweep reached bytes that matter
    assert _outcome(store, src) == "identical"


def _damage_raw_record(store: str, src: np.ndarray, index: int) -> None:
    """Flip one bit inside record ``index`` of a raw store (records are packed
    in order in 0.chunk)."""
    path = os.path.join(store, "0.chunk")
    with open(path, "r+b") as f:
        f.seek(index * src[0].nbytes + 5)
        b = f.read(1)
        f.seek(index * src[0].nbytes + 5)
        f.write(bytes([b[0] ^ 0x10]))


@pytest.mark.parametrize("workers", ["thread", "process"])
def test_loader_raises_corrupt_store_error_naming_step_store_and_record(tmp_path, workers):
    src = _source()
    store = str(tmp_path / "s")
    from_numpy(store, src, codec="raw")
    _damage_raw_record(store, src, 37)
    with DataLoader({"x": DenseDataset(store)}, batch_size=16, sampler="sequential", epoch=True,
                    num_workers=1, workers=workers) as loader:
        it = iter(loader)
        good = [next(it) for _ in range(2)]  # steps 0 and 1: records 0..31
        for k, batch in enumerate(good):
            np.testing.assert_array_equal(batch["x"], src[16 * k:16 * (k + 1)])
        with pytest.raises(CorruptStoreError) as info:
            next(it)  # step 2 holds record 37
    msg = str(info.value)
    assert "step 2" in msg and "'x'" in msg, msg
    assert "record 37" in msg and os.path.join(store, "0.chunk") in msg, msg


def test_verify_off_is_an_explicit_opt_out(tmp_path):
    src = _source()
    store = str(tmp_path / "s")
    from_numpy(store, src, codec="raw")
    _damage_raw_record(store, src, 3)
    with DenseDataset(store) as ds:
        assert ds.stats()["verified"] is True
        with pytest.raises(CorruptStoreError, match="record 3"):
            ds[3]
        ds.set_verify(False)
        assert ds.stats()["verified"] is False
        assert not np.array_equal(ds[3], src[3])  # the damage, returned as asked
        np.testing.assert_array_equal(ds[4], src[4])


def test_info_says_what_reads_check(tmp_path, capsys):
    from loaderx.cli import main

    store = str(tmp_path / "s")
    from_numpy(store, _source(), codec="raw")
    assert main(["info", store]) == 0
    out = capsys.readouterr().out
    assert "every record checked against its CRC-32C" in out, out
    shutil.rmtree(store)
