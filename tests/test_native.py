"""Tests of the raw binding, loaderx.store._native, apart from the public API layer."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

from loaderx.errors import (
    ClosedError,
    CorruptStoreError,
    ForkError,
    LoaderxError,
    StoreExistsError,
    StoreLockedError,
)

ROOT = Path(__file__).resolve().parent.parent


def records_of(values: range | list[int], size: int = 32) -> list[bytes]:
    """Fixed-size records whose first int64 is the given value."""
    out = []
    for v in values:
        rec = np.zeros(size // 8, dtype=np.int64)
        rec[:] = v
        out.append(rec.tobytes())
    return out


def compressible(i: int, size: int) -> bytes:
    """A record that zstd shrinks, different for each i."""
    line = f"record {i:08d} of the loaderx binding tests; ".encode()
    return (line * (size // len(line) + 1))[:size]


# --- library and build glue ------------------------------------------------------


def test_library_loads(native: ModuleType) -> None:
    assert native.ABI_VERSION == 9
    assert os.path.isfile(native.library_path)
    v = native.ffi.new("int64_t *")
    assert native.lib.lx_abi_version(v, native.ffi.NULL, 0) == 0
    assert v[0] == native.ABI_VERSION


def test_missing_library_is_import_error(tmp_path: Path) -> None:
    env = dict(os.environ, LOADERX_LIB=str(tmp_path / "libloaderx.so"))
    proc = subprocess.run(
        # importing loads nothing; the first native call finds the library missing
        [sys.executable, "-c", "import loaderx.store._native as n; n.get_threads()"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode != 0
    assert "ImportError" in proc.stderr
    assert "build_native.py" in proc.stderr


def test_names_agree_with_the_library(native: ModuleType, tmp_path: Path) -> None:
    for tag, name in enumerate(native.CODEC_NAMES):
        assert getattr(native.lib, f"LX_CODEC_{name.upper()}") == tag
        samples = [compressible(i, 2048) for i in range(200)]
        h = native.store_create(tmp_path / name, name, dict_tier="fast", dict_size=4096, samples=samples)
        try:
            assert native.lib.lx_store_codec(h, out := native.ffi.new("int64_t *"), native.ffi.NULL, 0) == 0
            assert out[0] == tag
        finally:
            native.store_close(h)
    out = native.ffi.new("int64_t *")
    err = native.ffi.new("char[]", 256)
    for name, number in native.SAMPLER_MODES.items():
        assert native.lib.lx_sampler_mode(name.encode(), out, err, 256) == 0
        assert out[0] == number
    with pytest.raises(ValueError, match="lz4"):
        native.store_create(tmp_path / "lz4", "lz4")


# --- store life cycle --------------------------------------------------------------


@pytest.mark.parametrize("codec", ["raw", "zstd"])
def test_create_append_gather_round_trip(native: ModuleType, store_path: Path, codec: str) -> None:
    h = native.store_create(str(store_path), codec)
    try:
        assert native.store_len(h) == 0
        assert native.store_codec(h) == codec
        recs = [compressible(i, 4096) for i in range(64)]
        assert native.store_append(h, recs[:10]) == 0
        assert native.store_append(h, recs[10:]) == 10
        assert native.store_len(h) == 64
        idx = np.array([63, 0, 5, 5, 17], dtype=np.int64)
        out = np.zeros((len(idx), 4096), dtype=np.uint8)
        native.store_gather(h, idx, out, 4096)
        for row, i in zip(out, idx):
            assert row.tobytes() == recs[i]
        native.store_sync(h)
    finally:
        native.store_close(h)
    h = native.store_open(store_path, readonly=True)
    try:
        assert native.store_len(h) == 64
        assert native.store_codec(h) == codec
        buf = bytearray(4096)
        native.store_gather(h, np.array([3], dtype=np.int64), buf, 4096)
        assert bytes(buf) == recs[3]
    finally:
        native.store_close(h)


def test_zstd_dict_store(native: ModuleType, store_path: Path) -> None:
    recs = [compressible(i, 2048) for i in range(200)]
    h = native.store_create(store_path, "zstd_dict", dict_tier="fast", dict_size=4096, samples=recs)
    try:
        assert native.store_codec(h) == "zstd_dict"
        native.store_append(h, recs)
        out = np.empty((3, 2048), dtype=np.uint8)
        native.store_gather(h, np.array([199, 0, 100], dtype=np.int64), out, 2048)
        assert [r.tobytes() for r in out] == [recs[199], recs[0], recs[100]]
        stats = native.store_stats(h)
        assert stats["codec"] == "zstd_dict"
        assert 0 < stats["dict_bytes"] <= 4096
        assert stats["live_bytes"] < stats["logical_bytes"] == 200 * 2048
    finally:
        native.store_close(h)
    with pytest.raises(ValueError, match="sample"):
        native.store_create(store_path.with_name("nodict"), "zstd_dict", samples=[])


def test_append_packed_accepts_any_buffer(native: ModuleType, raw_store: int) -> None:
    arr = np.arange(12, dtype=np.float32)  # 48 bytes: records of 8, 16 and 24 bytes
    offsets = np.array([0, 8, 24, 48], dtype=np.int64)
    assert native.store_append_packed(raw_store, arr, offsets) == 0
    assert native.store_append_packed(raw_store, arr.tobytes(), offsets) == 3
    assert native.store_append_packed(raw_store, bytearray(arr.tobytes()), offsets) == 6
    assert native.store_append_packed(raw_store, memoryview(arr.tobytes()), offsets) == 9
    assert native.store_append_packed(raw_store, b"", np.zeros(1, dtype=np.int64)) == 12  # no records
    assert native.store_len(raw_store) == 12
    sizes = native.store_sizes(raw_store, np.arange(12, dtype=np.int64))
    assert sizes.dtype == np.int64 and sizes.tolist() == [8, 16, 24] * 4
    # records need not start at offset 0, and may be empty
    assert native.store_append_packed(raw_store, b"xxabcd", np.array([2, 4, 4, 6], dtype=np.int64)) == 12
    assert native.store_sizes(raw_store, np.array([12, 13, 14], dtype=np.int64)).tolist() == [2, 0, 2]


def test_append_packed_rejects_bad_offsets(native: ModuleType, raw_store: int) -> None:
    with pytest.raises(ValueError, match="offsets"):
        native.store_append_packed(raw_store, b"abcd", np.array([0, 3, 2], dtype=np.int64))
    with pytest.raises(ValueError, match="offsets"):
        native.store_append_packed(raw_store, b"abcd", np.array([0, 5], dtype=np.int64))
    with pytest.raises(ValueError, match="offsets"):
        native.store_append_packed(raw_store, b"abcd", np.array([-1, 2], dtype=np.int64))
    with pytest.raises(ValueError, match="offsets"):
        native.store_append_packed(raw_store, b"abcd", np.array([], dtype=np.int64))
    with pytest.raises(TypeError, match="offsets"):
        native.store_append_packed(raw_store, b"abcd", np.array([0, 4], dtype=np.int32))
    with pytest.raises(TypeError, match="data"):
        native.store_append_packed(raw_store, "abcd", np.array([0, 4], dtype=np.int64))
    with pytest.raises(ValueError, match="data"):
        native.store_append_packed(raw_store, np.arange(8)[::2], np.array([0, 4], dtype=np.int64))
    assert native.store_len(raw_store) == 0


def test_append_list_checks_records(native: ModuleType, raw_store: int) -> None:
    with pytest.raises(TypeError, match=r"records\[1\]"):
        native.store_append(raw_store, [b"ok", "text"])
    with pytest.raises(ValueError, match=r"records\[0\]"):
        native.store_append(raw_store, [np.arange(8)[::2]])
    with pytest.raises(TypeError, match="list"):
        native.store_append(raw_store, b"not a list")
    mixed = [b"a", bytearray(b"bc"), memoryview(b"def"), np.arange(2, dtype=np.int16)]
    assert native.store_append(raw_store, mixed) == 0
    assert native.store_sizes(raw_store, np.arange(4, dtype=np.int64)).tolist() == [1, 2, 3, 4]
    assert native.store_append(raw_store, []) == 4


def test_gather_packed(native: ModuleType, raw_store: int) -> None:
    recs = [bytes([i]) * (i * 3) for i in range(20)]
    native.store_append(raw_store, recs)
    idx = np.array([19, 0, 7, 7, 2], dtype=np.int64)
    sizes = native.store_sizes(raw_store, idx)
    offsets = np.zeros(len(idx) + 1, dtype=np.int64)
    np.cumsum(sizes, out=offsets[1:])
    out = np.empty(offsets[-1], dtype=np.uint8)
    native.store_gather_packed(raw_store, idx, out, offsets)
    for k, i in enumerate(idx):
        assert out[offsets[k]:offsets[k + 1]].tobytes() == recs[i]
    with pytest.raises(ValueError, match="offsets"):
        native.store_gather_packed(raw_store, idx, out, offsets[:-1])
    bad = offsets.copy()
    bad[1] += 1
    with pytest.raises(ValueError):
        native.store_gather_packed(raw_store, idx, out, bad)
    with pytest.raises(IndexError, match="20"):
        native.store_gather_packed(raw_store, np.array([20], dtype=np.int64), out, offsets[:2])


def test_gather_empty_batch(native: ModuleType, raw_store: int) -> None:
    native.store_append(raw_store, records_of(range(3)))
    native.store_gather(raw_store, np.empty(0, dtype=np.int64), bytearray(), 32)
    assert native.store_sizes(raw_store, np.empty(0, dtype=np.int64)).shape == (0,)


def test_delete_compact_stats(native: ModuleType, raw_store: int) -> None:
    native.store_append(raw_store, records_of(range(10)))
    before = native.store_stats(raw_store)
    assert set(before) == {
        "length", "live_bytes", "chunk_bytes", "logical_bytes", "codec", "dict_bytes", "chunks",
        "version", "checksummed", "verified",
    }
    assert before["version"] == 4 and before["checksummed"] is True and before["verified"] is True
    assert before["length"] == 10 and before["codec"] == "raw" and before["dict_bytes"] == 0
    assert before["live_bytes"] == before["logical_bytes"] == 320
    assert all(isinstance(v, int) for k, v in before.items() if k != "codec")
    native.store_delete(raw_store, np.array([2, 5], dtype=np.int64))
    assert native.store_len(raw_store) == 8
    out = np.empty((8, 4), dtype=np.int64)
    native.store_gather(raw_store, np.arange(8, dtype=np.int64), out, 32)
    assert sorted(out[:, 0].tolist()) == [0, 1, 3, 4, 6, 7, 8, 9]
    native.store_compact(raw_store)
    after = native.store_stats(raw_store)
    assert after["length"] == 8 and after["live_bytes"] == 256
    assert after["chunk_bytes"] <= before["chunk_bytes"]
    native.store_gather(raw_store, np.arange(8, dtype=np.int64), out, 32)
    assert sorted(out[:, 0].tolist()) == [0, 1, 3, 4, 6, 7, 8, 9]
    with pytest.raises(ValueError, match="duplicate"):
        native.store_delete(raw_store, np.array([1, 1], dtype=np.int64))
    with pytest.raises(IndexError, match="8"):
        native.store_delete(raw_store, np.array([8], dtype=np.int64))
    assert native.store_len(raw_store) == 8


# --- error mapping -----------------------------------------------------------------


def test_bad_codec_and_tier(native: ModuleType, store_path: Path) -> None:
    with pytest.raises(ValueError, match="lz4"):
        native.store_create(store_path, "lz4")
    with pytest.raises(ValueError, match="extreme"):
        native.store_create(store_path, "zstd", dict_tier="extreme")
    with pytest.raises(TypeError, match="codec"):
        native.store_create(store_path, 1)
    with pytest.raises(ValueError, match="NUL"):
        native.store_create(str(store_path) + "\0x", "raw")
    assert not (store_path / "meta.zr").exists()


def test_index_out_of_range_names_the_index(native: ModuleType, raw_store: int) -> None:
    native.store_append(raw_store, records_of(range(4)))
    out = np.empty((2, 4), dtype=np.int64)
    with pytest.raises(IndexError, match="1234567"):
        native.store_gather(raw_store, np.array([0, 1234567], dtype=np.int64), out, 32)
    with pytest.raises(IndexError, match="-1"):
        native.store_gather(raw_store, np.array([-1, 0], dtype=np.int64), out, 32)
    with pytest.raises(IndexError, match="4"):
        native.store_sizes(raw_store, np.array([4], dtype=np.int64))


def test_missing_directory(native: ModuleType, tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="nowhere"):
        native.store_open(tmp_path / "nowhere")
    with pytest.raises(FileNotFoundError):
        native.store_open(tmp_path / "nowhere", readonly=True)


def test_corrupt_meta(native: ModuleType, store_path: Path) -> None:
    h = native.store_create(store_path, "raw")
    native.store_append(h, records_of(range(3)))
    native.store_close(h)
    meta = store_path / "meta.zr"
    meta.write_bytes(b"JUNK" + meta.read_bytes()[4:])
    with pytest.raises(CorruptStoreError, match="meta.zr"):
        native.store_open(store_path)
    meta.write_bytes(b"ZR")
    with pytest.raises(CorruptStoreError):
        native.store_open(store_path, readonly=True)


def test_use_after_close(native: ModuleType, store_path: Path) -> None:
    h = native.store_create(store_path, "raw")
    native.store_append(h, records_of(range(2)))
    native.store_close(h)
    native.store_close(h)  # idempotent
    idx = np.zeros(1, dtype=np.int64)
    for call in (
        lambda: native.store_len(h),
        lambda: native.store_codec(h),
        lambda: native.store_gather(h, idx, bytearray(32), 32),
        lambda: native.store_sizes(h, idx),
        lambda: native.store_append(h, [b"x"]),
        lambda: native.store_delete(h, idx),
        lambda: native.store_compact(h),
        lambda: native.store_stats(h),
        lambda: native.store_sync(h),
    ):
        with pytest.raises(ClosedError, match=f"handle {h} is closed"):
            call()
    assert issubclass(ClosedError, ValueError)
    with pytest.raises(ValueError, match="not a store handle"):
        native.store_len(10**12)
    with pytest.raises(ValueError, match="not a store handle"):
        native.store_close(-5)


def test_single_writer_lock(native: ModuleType, raw_store: int, store_path: Path) -> None:
    native.store_append(raw_store, records_of(range(5)))
    with pytest.raises(StoreLockedError):
        native.store_open(store_path)
    reader = native.store_open(store_path, readonly=True)
    try:
        assert native.store_len(reader) == 5
        with pytest.raises(ValueError, match="read-only"):
            native.store_append(reader, [b"x" * 32])
        with pytest.raises(ValueError, match="read-only"):
            native.store_delete(reader, np.array([0], dtype=np.int64))
    finally:
        native.store_close(reader)


def test_lock_released_on_close(native: ModuleType, store_path: Path) -> None:
    h = native.store_create(store_path, "raw")
    native.store_close(h)
    h = native.store_open(store_path)
    native.store_close(h)


def test_create_over_existing_store(native: ModuleType, raw_store: int, store_path: Path) -> None:
    with pytest.raises(StoreExistsError) as info:
        native.store_create(store_path, "raw")
    assert isinstance(info.value, FileExistsError)
    assert str(store_path) in str(info.value)


def test_buffer_checks(native: ModuleType, raw_store: int) -> None:
    native.store_append(raw_store, records_of(range(4)))
    idx = np.array([0, 1], dtype=np.int64)
    out = np.empty((2, 4), dtype=np.int64)
    with pytest.raises(TypeError, match="indices.*int64"):
        native.store_gather(raw_store, idx.astype(np.int32), out, 32)
    with pytest.raises(TypeError, match="indices"):
        native.store_gather(raw_store, [0, 1], out, 32)
    with pytest.raises(TypeError, match="indices"):
        native.store_gather(raw_store, idx.astype(">i8"), out, 32)
    with pytest.raises(ValueError, match="indices must be C-contiguous"):
        native.store_gather(raw_store, np.arange(4, dtype=np.int64)[::2], out, 32)
    with pytest.raises(ValueError, match="out must be C-contiguous"):
        native.store_gather(raw_store, idx, np.empty((2, 8), dtype=np.int64)[:, ::2], 32)
    ro = np.empty((2, 4), dtype=np.int64)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="out must be writable"):
        native.store_gather(raw_store, idx, ro, 32)
    with pytest.raises(ValueError, match="out must be writable"):
        native.store_gather(raw_store, idx, b"\0" * 64, 32)
    with pytest.raises(TypeError, match="out"):
        native.store_gather(raw_store, idx, [0] * 8, 32)
    with pytest.raises(ValueError, match="dst holds 63 bytes"):
        native.store_gather(raw_store, idx, bytearray(63), 32)
    with pytest.raises(ValueError, match="stride"):
        native.store_gather(raw_store, idx, out, -1)
    with pytest.raises(ValueError):  # records are 32 bytes, not 16
        native.store_gather(raw_store, idx, out, 16)
    # any C-contiguous shape of int64 is read flat
    native.store_gather(raw_store, np.array([[3, 2]], dtype=np.int64), out, 32)
    assert out[:, 0].tolist() == [3, 2]


def test_status_to_exception_table(native: ModuleType) -> None:
    expected = {
        1: ValueError, 2: IndexError, 3: FileNotFoundError, 4: CorruptStoreError, 5: ClosedError,
        6: OSError, 7: StoreLockedError, 8: LoaderxError, 9: StoreExistsError, 42: LoaderxError,
    }
    # the error buffer is struct lx_error: an int64 errno (0 here), then the message
    err = native.ffi.new("char[]", bytes(native.lib.LX_ERROR_HEAD) + b"the message")
    for status, cls in expected.items():
        with pytest.raises(cls, match="the message") as info:
            native._raise(status, err)
        if status == 8:
            assert type(info.value) is LoaderxError


def test_panic_becomes_internal_error(tmp_path: Path) -> None:
    # A bad output pointer makes Go fault inside the export; the export must
    # recover and report it instead of killing the process. Run apart so a
    # regression cannot take the test session down.
    code = (
        "from loaderx.store import _native as n\n"
        "spec = n.ffi.new('int64_t[]', [1, 100, 4, 0, 0, 0, 1, 4])\n"
        "bad = n.ffi.cast('int64_t *', 8)\n"
        "try:\n"
        "    n._check(n.lib.lx_sample(spec, bad, n._errbuf(), n.ERRLEN), n._errbuf())\n"
        "except n.LoaderxError as e:\n"
        "    print(type(e).__name__, e)\n"
        "bad = n.ffi.cast('int64_t *', 1 << 46)\n"
        "try:\n"
        "    n._check(n.lib.lx_sample(spec, bad, n._errbuf(), n.ERRLEN), n._errbuf())\n"
        "except n.LoaderxError as e:\n"
        "    print(type(e).__name__, e)\n"
        "print(n.store_len(n.store_create(r'%s', 'raw')))\n" % (tmp_path / "s")
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("LoaderxError internal error"), proc.stdout
    assert "lx_sample" in lines[0]
    assert lines[1].startswith("LoaderxError internal error"), proc.stdout
    assert lines[2] == "0"


def test_errors_are_per_thread(native: ModuleType, raw_store: int) -> None:
    native.store_append(raw_store, records_of(range(2)))
    failures: list[str] = []

    def gather_errors() -> None:
        out = np.empty((1, 4), dtype=np.int64)
        for i in range(300):
            try:
                native.store_gather(raw_store, np.array([1000 + i], dtype=np.int64), out, 32)
            except IndexError as e:
                if str(1000 + i) not in str(e):
                    failures.append(f"gather: {e}")

    def sample_errors() -> None:
        out = np.empty(4, dtype=np.int64)
        for i in range(300):
            try:
                native.sample("iid", 10, 4, 0, 0, 0, -7 - i, out)
            except ValueError as e:
                if str(-7 - i) not in str(e):
                    failures.append(f"sample: {e}")

    threads = [threading.Thread(target=f) for f in (gather_errors, sample_errors, gather_errors, sample_errors)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []


# --- schema ------------------------------------------------------------------------


def test_schema_round_trip(native: ModuleType, tmp_path: Path) -> None:
    native.schema_write(tmp_path, "dense", "<f4", (3, 32, 32))
    assert native.schema_read(tmp_path) == ("dense", "<f4", (3, 32, 32))
    native.schema_write(str(tmp_path), "ragged", np.dtype(np.int16).str, ())
    assert native.schema_read(str(tmp_path)) == ("ragged", "<i2", ())
    native.schema_write(tmp_path, "dense", "<M8[ns]", [np.int64(2)])
    assert native.schema_read(tmp_path) == ("dense", "<M8[ns]", (2,))
    assert sorted(os.listdir(tmp_path)) == ["schema.msgpack"]


def test_create_with_schema(native: ModuleType, tmp_path: Path) -> None:
    path = tmp_path / "s"
    h = native.store_create(path, "raw", schema=("dense", "<f4", (3, 4)))
    try:
        # the schema is there as soon as the store is
        assert native.schema_read(path) == ("dense", "<f4", (3, 4))
        native.store_append(h, [bytes(48)])
    finally:
        native.store_close(h)
    # an invalid schema fails the create, and no store is left behind
    with pytest.raises(ValueError, match="dtype"):
        native.store_create(tmp_path / "bad", "raw", schema=("dense", "float32", ()))
    assert not (tmp_path / "bad" / "meta.zr").exists()
    with pytest.raises(ValueError, match="dimensions"):
        native.store_create(tmp_path / "deep", "raw", schema=("dense", "<f4", (1,) * (native.MAX_DIMS + 1)))
    with pytest.raises(TypeError, match="schema"):
        native.store_create(tmp_path / "t", "raw", schema="dense")  # type: ignore[arg-type]


def test_create_overwrite(native: ModuleType, tmp_path: Path) -> None:
    path = tmp_path / "s"
    native.store_close(native.store_create(path, "zstd", schema=("ragged", "<i8", ())))
    with pytest.raises(StoreExistsError):
        native.store_create(path, "raw", schema=("dense", "|u1", (2,)))
    h = native.store_create(path, "raw", schema=("dense", "|u1", (2,)), overwrite=True)
    try:
        assert native.store_len(h) == 0 and native.store_codec(h) == "raw"
        assert native.schema_read(path) == ("dense", "|u1", (2,))
        # a writer holds the store: it is not replaced under it
        with pytest.raises(StoreLockedError):
            native.store_create(path, "raw", overwrite=True)
    finally:
        native.store_close(h)
    (path / "notes.txt").write_text("keep me")
    with pytest.raises(StoreExistsError, match="notes.txt"):
        native.store_create(path, "raw", overwrite=True)
    assert (path / "notes.txt").read_text() == "keep me" and (path / "meta.zr").exists()
    other = tmp_path / "other"
    other.mkdir()
    (other / "0.chunk").write_bytes(b"")
    with pytest.raises(StoreExistsError, match="meta.zr"):
        native.store_create(other, "raw", overwrite=True)
    assert (other / "0.chunk").exists()


def test_schema_errors(native: ModuleType, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="kind"):
        native.schema_write(tmp_path, "sparse", "<f4", ())
    with pytest.raises(ValueError, match="dtype"):
        native.schema_write(tmp_path, "dense", "float32", ())
    with pytest.raises(ValueError, match="negative"):
        native.schema_write(tmp_path, "dense", "<f4", (2, -1))
    with pytest.raises(TypeError, match="dtype"):
        native.schema_write(tmp_path, "dense", np.float32, ())
    with pytest.raises(TypeError, match="shape"):
        native.schema_write(tmp_path, "dense", "<f4", 3)
    with pytest.raises(FileNotFoundError, match="schema.msgpack"):
        native.schema_read(tmp_path)
    with pytest.raises(FileNotFoundError):
        native.schema_write(tmp_path / "missing", "dense", "<f4", ())
    (tmp_path / "schema.msgpack").write_bytes(b"\x81\xa4kind\xa5dense")
    with pytest.raises(CorruptStoreError, match=str(tmp_path / "schema.msgpack")):
        native.schema_read(tmp_path)
    (tmp_path / "schema.msgpack").write_bytes(b"garbage")
    with pytest.raises(CorruptStoreError, match="schema.msgpack"):
        native.schema_read(tmp_path)


# --- sampler and threads -----------------------------------------------------------


def test_sample_modes(native: ModuleType) -> None:
    out = np.empty(4, dtype=np.int64)
    assert native.sample("sequential", 10, 4, 0, 0, 0, 1, out) is out
    assert out.tolist() == [0, 1, 2, 3]
    native.sample("sequential", 10, 4, 0, 2, 0, 1, out)
    assert out.tolist() == [8, 9, 0, 1]
    a = native.sample("iid", 1000, 4, 123, 7, 0, 1, np.empty(4, dtype=np.int64)).copy()
    b = native.sample("iid", 1000, 4, 123, 7, 0, 1, np.empty(4, dtype=np.int64))
    assert a.tolist() == b.tolist() and all(0 <= v < 1000 for v in a)
    seen: list[int] = []
    for step in range(10):
        seen += native.sample("cyclic", 100, 10, 5, step, 0, 1, out=np.empty(10, dtype=np.int64)).tolist()
    assert sorted(seen) == list(range(100))
    # two ranks together make the single-process batch
    whole = native.sample("cyclic", 100, 8, 5, 3, 0, 1, np.empty(8, dtype=np.int64))
    r0 = native.sample("cyclic", 100, 4, 5, 3, 0, 2, np.empty(4, dtype=np.int64))
    r1 = native.sample("cyclic", 100, 4, 5, 3, 1, 2, np.empty(4, dtype=np.int64))
    assert np.concatenate([r0, r1]).tolist() == whole.tolist()
    # out must hold exactly one batch: a longer one is refused, untouched
    big = np.full(6, -1, dtype=np.int64)
    with pytest.raises(ValueError, match=r"shape \(6,\)"):
        native.sample("sequential", 10, 4, 0, 0, 0, 1, big)
    assert big.tolist() == [-1] * 6
    # the whole uint64 seed range, and numpy integers
    native.sample("iid", 10, 4, 2**64 - 1, np.int64(3), 0, 1, out)


def test_sample_errors(native: ModuleType) -> None:
    out = np.empty(4, dtype=np.int64)
    with pytest.raises(ValueError, match="bogus"):
        native.sample("bogus", 10, 4, 0, 0, 0, 1, out)
    with pytest.raises(ValueError, match="world"):
        native.sample("iid", 10, 4, 0, 0, 0, 0, out)
    with pytest.raises(ValueError, match="rank"):
        native.sample("iid", 10, 4, 0, 0, 2, 2, out)
    with pytest.raises(ValueError, match=r"out has shape \(4,\)"):
        native.sample("iid", 10, 5, 0, 0, 0, 1, out)
    with pytest.raises(TypeError, match="out.*int64"):
        native.sample("iid", 10, 4, 0, 0, 0, 1, np.empty(4, dtype=np.float64))
    with pytest.raises(TypeError, match="out"):
        native.sample("iid", 10, 4, 0, 0, 0, 1, bytearray(32))
    with pytest.raises(ValueError, match="C-contiguous"):
        native.sample("iid", 10, 4, 0, 0, 0, 1, np.empty(8, dtype=np.int64)[::2])
    ro = np.empty(4, dtype=np.int64)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="writable"):
        native.sample("iid", 10, 4, 0, 0, 0, 1, ro)
    with pytest.raises(OverflowError, match="seed"):
        native.sample("iid", 10, 4, -1, 0, 0, 1, out)
    with pytest.raises(OverflowError, match="n"):
        native.sample("iid", 2**63, 4, 0, 0, 0, 1, out)
    with pytest.raises(TypeError, match="step"):
        native.sample("iid", 10, 4, 0, 1.5, 0, 1, out)


def test_threads_setting(native: ModuleType) -> None:
    old = native.get_threads()
    assert old >= 1
    try:
        native.set_threads(3)
        assert native.get_threads() == 3
        native.set_threads(0)
        assert native.get_threads() >= 1
        with pytest.raises(ValueError, match="threads"):
            native.set_threads(-1)
    finally:
        native.set_threads(old)


def test_dict_sample_budget(native: ModuleType) -> None:
    budgets = [native.dict_sample_budget(t) for t in ("fast", "balanced", "max")]
    assert budgets == sorted(budgets) and budgets[0] > 0
    with pytest.raises(ValueError, match="huge"):
        native.dict_sample_budget("huge")


# --- fork, GIL, concurrency ----------------------------------------------------------


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # fork() of a threaded process, on purpose
def test_fork_guard(native: ModuleType, raw_store: int) -> None:
    out = np.empty(8, dtype=np.int64)
    native.sample("iid", 100, 8, 0, 0, 0, 1, out)  # the Go runtime is up in the parent
    native.store_append(raw_store, records_of(range(3)))
    pid = os.fork()
    if pid == 0:  # child: every call must fail fast with ForkError, never hang
        code = 1
        try:
            start = time.monotonic()
            caught = 0
            for call in (
                lambda: native.store_len(raw_store),
                lambda: native.sample("iid", 100, 8, 0, 0, 0, 1, out),
                lambda: native.store_gather(raw_store, np.zeros(1, dtype=np.int64), bytearray(32), 32),
                lambda: native.store_open("/nonexistent"),
                lambda: native.get_threads(),
            ):
                try:
                    call()
                except ForkError as e:
                    caught += "forked child" in str(e) and "spawn" in str(e)
            if caught == 5 and time.monotonic() - start < 10.0:  # fast: no call waits on the dead runtime
                code = 0
        finally:
            os._exit(code)
    deadline = time.monotonic() + 300
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            pytest.fail("the forked child hung")
        time.sleep(0.01)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, f"child status {status:#x}"
    assert issubclass(ForkError, RuntimeError)
    assert native.store_len(raw_store) == 3  # the parent is unaffected


def test_gil_released_during_calls(native: ModuleType, store_path: Path) -> None:
    size = 1024
    h = native.store_create(store_path, "zstd")
    old_threads, old_interval = native.get_threads(), sys.getswitchinterval()
    try:
        native.store_append(h, [compressible(i, size) for i in range(512)])
        native.set_threads(1)
        sys.setswitchinterval(0.0005)

        def arrays(n: int) -> tuple[np.ndarray, np.ndarray]:
            out = np.ones(n * size, dtype=np.uint8)  # touched, so the call does not page-fault
            return np.arange(n, dtype=np.int64) % 512, out

        n = 1 << 10
        idx, out = arrays(n)
        while True:  # find a batch whose gather takes a while
            t0 = time.perf_counter()
            native.store_gather(h, idx, out, size)
            if time.perf_counter() - t0 >= 0.1 or n >= 1 << 17:
                break
            n *= 2
            idx, out = arrays(n)
        ticks: list[float] = []
        stop = threading.Event()

        def ticker() -> None:  # a few thousand ticks a second: every one is kept
            while not stop.is_set():
                ticks.append(time.perf_counter())
                time.sleep(0.0002)

        # A tick is a time read and appended with the GIL held. A call that
        # held the GIL throughout would let the ticker run only just before it
        # starts and just after it ends (a switch interval each), never in the
        # middle half of the call, on any attempt. Released, the ticker runs
        # there as soon as the OS gives it a core: a loaded machine may miss
        # one call, not twenty.
        t = threading.Thread(target=ticker)
        t.start()
        calls = []
        try:
            for _ in range(20):
                t0 = time.perf_counter()
                native.store_gather(h, idx, out, size)
                t1 = time.perf_counter()
                lo, hi = t0 + (t1 - t0) / 4, t1 - (t1 - t0) / 4
                calls.append(sum(lo < x < hi for x in ticks[-200_000:]))
                if calls[-1]:
                    break
        finally:
            stop.set()
            t.join()
        assert calls[-1] > 0, calls
    finally:
        sys.setswitchinterval(old_interval)
        native.set_threads(old_threads)
        native.store_close(h)


def test_gather_while_appending(native: ModuleType, raw_store: int) -> None:
    native.store_append(raw_store, records_of(range(100)))
    done = threading.Event()
    errors: list[BaseException] = []
    checked = [0] * 3

    def writer() -> None:
        try:
            for b in range(1, 150):
                first = native.store_append(raw_store, records_of(range(b * 100, b * 100 + 100)))
                assert first == b * 100
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)
        finally:
            done.set()

    def reader(k: int) -> None:
        rng = np.random.default_rng(k)
        out = np.empty((64, 4), dtype=np.int64)
        try:
            while not done.is_set() or checked[k] < 20:
                n = native.store_len(raw_store)
                idx = rng.integers(0, n, 64, dtype=np.int64)
                native.store_gather(raw_store, idx, out, 32)
                assert (out[:, 0] == idx).all() and (out == out[:, :1]).all()
                checked[k] += 1
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=writer)] + [threading.Thread(target=reader, args=(k,)) for k in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads)
    assert errors == []
    assert native.store_len(raw_store) == 15000
    assert min(checked) >= 20


def test_close_unsynced(native: ModuleType, store_path: Path) -> None:
    h = native.store_create(store_path, "zstd")
    native.store_append(h, records_of(range(40)))
    native.store_close_unsynced(h)
    native.store_close_unsynced(h)  # idempotent, as store_close
    native.store_close(h)
    with pytest.raises(ClosedError, match=f"handle {h} is closed"):
        native.store_append(h, [b"x"])
    with pytest.raises(ValueError, match="-5 is not a store handle"):
        native.store_close_unsynced(-5)
    r = native.store_open(store_path, readonly=True)
    try:
        assert native.store_len(r) == 40
    finally:
        native.store_close(r)
