"""Opening a dataset costs the same at any record count.

These count work, not time: the pages of a store's record table that this
process has mapped in (the resident size of its mapping of ``0.tab``, read
from ``/proc/self/smaps``) after opening a dataset and reading a few
records. The table is dropped from the page cache first, so a fault maps in
only the pages read for it (a cached file's large folios would map in
wholesale). A walk of the table at open, as earlier releases did, maps in
all of it.
"""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

import loaderx

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/smaps")

N = 1 << 18  # a table of 6 MiB
TABLE_KIB = N * 24 // 1024
#: what one read may map in of the table: the kernel's read-ahead around it
PER_READ_KIB = 256


def mapped_kib(path: str) -> int:
    """Resident KiB of this process's mappings of ``path``."""
    total, inside = 0, False
    with open("/proc/self/smaps", encoding="utf-8") as f:
        for line in f:
            fields = line.split()
            if fields and "-" in fields[0] and not fields[0].endswith(":"):
                inside = len(fields) >= 6 and fields[-1] == path
            elif inside and fields[:1] == ["Rss:"]:
                total += int(fields[1])
    return total


def drop_cache(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


@pytest.fixture(scope="module")
def dense(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = str(tmp_path_factory.mktemp("open") / "dense")
    rows = np.arange(N * 4, dtype=np.int64).reshape(N, 4)
    loaderx.from_numpy(path, rows, codec="raw")
    return path


@pytest.fixture(scope="module")
def ragged(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = str(tmp_path_factory.mktemp("open") / "ragged")
    records = [np.full(1 + i % 5, i, dtype=np.int32) for i in range(N)]
    loaderx.from_iterator(path, iter(records), codec="raw")
    return path


def test_dense_open_reads_no_table(dense: str) -> None:
    table = os.path.join(dense, "0.tab")
    drop_cache(table)
    ds = loaderx.DenseDataset(dense)
    try:
        assert len(ds) == N
        assert mapped_kib(table) == 0
        idx = np.array([3, N // 2, N - 1])
        got = ds[idx]
        np.testing.assert_array_equal(got[:, 0], idx * 4)
        assert mapped_kib(table) <= len(idx) * PER_READ_KIB
        # the measure sees a read of the whole table
        assert ds.stats()["logical_bytes"] == N * 32
        assert mapped_kib(table) >= TABLE_KIB * 9 // 10
    finally:
        ds.close()


def test_ragged_open_reads_no_table(ragged: str) -> None:
    table = os.path.join(ragged, "0.tab")
    drop_cache(table)
    ds = loaderx.RaggedDataset(ragged)
    try:
        assert len(ds) == N
        assert mapped_kib(table) == 0
        got = ds[N - 2]
        np.testing.assert_array_equal(got, np.full(1 + (N - 2) % 5, N - 2, dtype=np.int32))
        assert mapped_kib(table) <= PER_READ_KIB
    finally:
        ds.close()


def test_loader_first_batch_reads_little_table(dense: str) -> None:
    """A loader's first batch maps in the table pages of its records, not
    the table."""
    table = os.path.join(dense, "0.tab")
    drop_cache(table)
    ds = loaderx.DenseDataset(dense)
    try:
        with loaderx.DataLoader({"x": ds}, batch_size=8, seed=3, num_workers=0) as loader:
            batch = next(iter(loader))["x"]
        assert batch.shape == (8, 4)
        np.testing.assert_array_equal(batch[:, 1] - batch[:, 0], np.ones(8))
        assert mapped_kib(table) <= 8 * PER_READ_KIB
    finally:
        ds.close()


def test_damaged_entry_is_found_by_the_read(tmp_path: os.PathLike[str]) -> None:
    """The table is not checked at open, so a damaged entry is found by the
    read that uses it: the same CorruptStoreError naming the file and the
    record, and the other records still read."""
    path = os.path.join(tmp_path, "d")
    loaderx.from_numpy(path, np.arange(400, dtype=np.int32).reshape(100, 4), codec="raw")
    with open(os.path.join(path, "0.tab"), "r+b") as f:
        f.seek(24 * 7 + 2)
        b = f.read(1)
        f.seek(24 * 7 + 2)
        f.write(bytes([b[0] ^ 0x10]))
    ds = loaderx.DenseDataset(path)
    try:
        np.testing.assert_array_equal(ds[6], [24, 25, 26, 27])
        with pytest.raises(loaderx.errors.CorruptStoreError, match=r"record 7 in .*0\.tab"):
            ds[7]
        with pytest.raises(loaderx.errors.CorruptStoreError, match="record 7"):
            ds[np.array([1, 7, 9])]
        assert [f.index for f in ds.verify().faults] == [7]
    finally:
        ds.close()
