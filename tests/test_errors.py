"""The exceptions the documentation promises (docs/guides/errors.md): damage is CorruptStoreError naming the
file, OSErrors carry their errno, an index past int64 is an IndexError."""

from __future__ import annotations

import errno
import os
import struct

import numpy as np
import pytest

from loaderx.converter import from_numpy
from loaderx.dataset import DenseDataset
from loaderx.errors import CorruptStoreError
from loaderx.store import _native
from loaderx.zrecord import Zrecord


def _similar_records() -> np.ndarray:
    """Many small, similar records, so that a zstd_dict store trains."""
    base = np.tile(np.arange(64, dtype=np.uint8), 4)
    rng = np.random.default_rng(1)
    src = np.stack([np.roll(base, int(k)) ^ (rng.random(256) > 0.97) for k in range(600)])
    return src.astype(np.uint8).view(np.float32)  # 600 records of 64 float32


ARRAY = _similar_records()


def make(tmp_path, codec: str = "zstd") -> str:
    path = str(tmp_path / codec)
    from_numpy(path, ARRAY, codec=codec, dict_tier="fast") if codec == "zstd_dict" else from_numpy(path, ARRAY, codec=codec)
    return path


def open_both(path: str) -> None:
    """Open the store both ways and read every record."""
    with DenseDataset(path) as ds:
        ds[np.arange(len(ds))]
    with Zrecord(path, readonly=True) as zr:
        zr.gather(slice(None))


@pytest.mark.parametrize(
    ("codec", "name"),
    [("raw", "0.chunk"), ("zstd", "0.tab"), ("zstd_dict", "dict.zr"), ("zstd", "0.chunk")],
)
def test_missing_store_file_is_corruption(tmp_path, codec, name):
    path = make(tmp_path, codec)
    os.remove(os.path.join(path, name))
    with pytest.raises(CorruptStoreError, match=name.replace(".", r"\.")):
        open_both(path)


@pytest.mark.parametrize(("offset", "value"), [(5, 2), (6, 7)])  # codec byte -> zstd_dict; tail chunk -> 7
def test_flipped_header_byte_is_corruption(tmp_path, offset, value):
    path = make(tmp_path, "zstd")
    with open(os.path.join(path, "meta.zr"), "r+b") as f:
        f.seek(offset)
        f.write(bytes([value]))
    with pytest.raises(CorruptStoreError) as info:
        open_both(path)
    assert path in str(info.value)


def test_missing_store_directory_is_still_not_found(tmp_path):
    with pytest.raises(FileNotFoundError):
        DenseDataset(str(tmp_path / "nothing"))
    with pytest.raises(FileNotFoundError) as info:
        Zrecord(str(tmp_path / "nothing"))
    assert info.value.errno == errno.ENOENT


def test_damaged_schema_is_corruption_naming_record_and_schema(tmp_path):
    path = make(tmp_path, "raw")
    _native.schema_write(path, "dense", "<f4", (5,))  # the records hold 64 floats
    ds = DenseDataset(path)
    for key in (3, [1, 3], slice(0, 4)):
        with pytest.raises(CorruptStoreError, match=r"record \d+ is 256 bytes.*schema\.msgpack"):
            ds[key]
    # and so through gather(int64 array, out=), whose native call sees only a size mismatch
    with pytest.raises(CorruptStoreError, match=r"record 2 is 256 bytes.*schema\.msgpack"):
        ds.gather(np.array([2, 1], dtype=np.int64), out=np.empty((2, 5), np.float32))


def test_damaged_table_entry_is_corruption(tmp_path):
    path = make(tmp_path, "raw")
    # entry 9 of format 4: offset, phys_length, logic_length, chunk id, data and
    # entry checksums (u32 each); shorten record 9 without mending the checksum
    with open(os.path.join(path, "0.tab"), "r+b") as f:
        f.seek(9 * 24 + 4)
        f.write(struct.pack("<II", 20, 20))
    with pytest.raises(CorruptStoreError, match=r"0\.tab") as info:
        DenseDataset(path)[[8, 9]]
    assert "9" in str(info.value)


def test_os_errors_carry_errno(tmp_path):
    afile = tmp_path / "file"
    afile.write_bytes(b"x")
    with pytest.raises(NotADirectoryError) as info:
        Zrecord(str(afile / "store"))
    assert info.value.errno == errno.ENOTDIR
    with pytest.raises(OSError) as info:
        Zrecord(str(afile / "store"), create=True)
    assert info.value.errno == errno.ENOTDIR
    with pytest.raises(OSError) as info:
        Zrecord(str(tmp_path / ("n" * 300)), create=True)
    assert info.value.errno == errno.ENAMETOOLONG


@pytest.mark.skipif(os.geteuid() == 0, reason="root bypasses file permissions")
def test_permission_error_carries_eacces(tmp_path):
    path = make(tmp_path, "raw")
    os.chmod(os.path.join(path, "meta.zr"), 0)
    try:
        with pytest.raises(PermissionError) as info:
            Zrecord(path)
        assert info.value.errno == errno.EACCES
    finally:
        os.chmod(os.path.join(path, "meta.zr"), 0o644)


def test_index_past_int64_is_index_error(tmp_path):
    ds = DenseDataset(make(tmp_path, "raw"))
    for key in ([1, 2**64], [2**63], [-(2**64)], np.array([1, 2**70], dtype=object)):
        with pytest.raises(IndexError, match=str(max(key, key=abs))):
            ds[key]
    with pytest.raises(TypeError):
        ds[np.array([1, "a"], dtype=object)]
    assert np.array_equal(ds[np.array([1, -1], dtype=object)], ARRAY[[1, -1]])
