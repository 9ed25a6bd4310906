"""Object storage at the same scale as local stores: a remote dataset reads
its record tables in pages, as it reads its chunks, against a real S3
server (SeaweedFS, tests/s3server.py).

The tests count work, not time: the bytes and range requests a first
batch costs (RemoteTree.fetched_bytes and fetches, through cache_stats),
what opening fetches (no table byte, no shard), which shards a batch
mirrors, the descriptors a sharded dataset holds, what a damaged cached
page costs to repair (one page, or the two an entry or a record spans), and
that many threads in several fresh processes reading one fresh dataset at
once see no error and only the store's bytes.

Run as a script, this file is the child process of the test that needs
several processes: ``python3 tests/test_remote_scale.py '<json job>'``.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import loaderx
from loaderx.errors import CorruptStoreError
from loaderx.io import remote
from loaderx.store import _native, shards

pytest.importorskip("obstore")
pytest.importorskip("boto3")

from test_remote import _opts

ROOT = Path(__file__).resolve().parent.parent
BOUND = 240  # seconds a child process may take before it counts as a hang


def _publish(srv, local: Path, name: str) -> tuple[str, str]:
    prefix = f"sc-{uuid.uuid4().hex[:12]}/{name}"
    url = f"s3://{srv.bucket}/{prefix}"
    remote.push(local, url, **_opts(srv))
    return url, prefix


def _open(url: str, srv, cache_dir: Path, **cache: Any) -> loaderx.DenseDataset:
    opts = loaderx.CacheOptions(dir=str(cache_dir), **cache)
    return loaderx.DenseDataset(url, cache=opts, storage_options=_opts(srv))


def _sizes(local: Path) -> tuple[int, int, int, int]:
    """Bytes of the chunk files, the table segments and every other file of
    the store (or dataset) at ``local``, and the number of those others."""
    chunk = table = other = count = 0
    for p in local.rglob("*"):
        if p.is_file() and not any(part.startswith(".") for part in p.relative_to(local).parts):
            size = p.stat().st_size
            if p.suffix == ".chunk":
                chunk += size
            elif p.suffix == ".tab":
                table += size
            else:
                other += size
                count += 1
    return chunk, table, other, count


# -- a million records: what opening and a first batch cost ------------------------


@pytest.fixture(scope="module")
def million(s3server, tmp_path_factory) -> tuple[str, Path, np.ndarray]:
    """10^6 records of int32[4] (16 bytes: a 16 MB chunk file and a 24 MB
    table), record i holding (i, 3i, 5i, 7i), pushed once."""
    n = 1_000_000
    arr = np.arange(n, dtype=np.int32)[:, None] * np.array([1, 3, 5, 7], dtype=np.int32)
    local = tmp_path_factory.mktemp("million") / "ds"
    loaderx.from_numpy(local, arr, "raw", progress=False)
    url, _ = _publish(s3server, local, "million")
    return url, local, arr


def test_first_batch_of_a_million_records_needs_pages_not_tables(s3server, tmp_path: Path, million) -> None:
    url, local, arr = million
    chunk, table, small, files = _sizes(local)
    assert table == 24 * len(arr) and chunk == 16 * len(arr)
    page, tpage = 64 << 10, 16 << 10
    ds = _open(url, s3server, tmp_path / "c", page_size=page, table_page_size=tpage)
    at_open = ds.cache_stats()
    # opening: the listing, the header and the schema, and no table or chunk byte
    assert at_open["fetched_bytes"] == small and at_open["fetches"] == files, at_open
    assert at_open["cached_bytes"] == 0
    idx = np.random.default_rng(0).integers(0, len(arr), 256)
    np.testing.assert_array_equal(ds[idx], arr[idx])
    first = ds.cache_stats()
    got = first["fetched_bytes"] - at_open["fetched_bytes"]
    requests = first["fetches"] - at_open["fetches"]
    # one table page per record (two where an entry straddles a boundary) and
    # the chunk pages the records overlap, each fetched once
    table_pages = np.unique(np.concatenate([idx * 24 // tpage, (idx * 24 + 23) // tpage])).size
    chunk_pages = np.unique(np.concatenate([idx * 16 // page, (idx * 16 + 15) // page])).size
    assert got == table_pages * tpage + chunk_pages * page, first
    assert requests == table_pages + chunk_pages, first
    assert got <= 256 * (tpage + page) and table_pages * tpage * 5 < table, (got, table)
    assert first["cached_bytes"] == got and first["repairs"] == 0
    # the same records again: nothing more; a second batch: only its new pages
    np.testing.assert_array_equal(ds[idx[::-1].copy()], arr[idx[::-1]])
    assert ds.cache_stats()["fetches"] == first["fetches"]
    idx2 = np.random.default_rng(1).integers(0, len(arr), 256)
    np.testing.assert_array_equal(ds[idx2], arr[idx2])
    assert ds.cache_stats()["fetches"] - first["fetches"] <= 2 * 256
    # sizes (lengths, the size check) need table pages only
    before = ds.cache_stats()
    idx3 = np.random.default_rng(2).integers(0, len(arr), 64)
    assert (ds._sizes(idx3) == 16).all()
    after = ds.cache_stats()
    assert after["fetched_bytes"] - before["fetched_bytes"] <= 2 * 64 * tpage  # no chunk page
    assert len(ds) == len(arr) and ds.shape == arr.shape


# -- many shards: nothing per shard until a shard is read ---------------------------


def _write_shards(root: Path, n: int, per: int) -> np.ndarray:
    """A sharded dataset of ``n`` raw shards of ``per`` records of int32[4],
    record i holding i; the records."""
    root.mkdir(parents=True)
    names = []
    offsets = np.arange(per + 1, dtype=np.int64) * 16
    for k in range(n):
        name = f"s{k:04d}"
        data = np.repeat(np.arange(k * per, (k + 1) * per, dtype=np.int32)[:, None], 4, axis=1)
        h = _native.store_create(str(root / name), "raw", schema=("dense", "<i4", (4,)))
        try:
            _native.store_append_packed(h, data.reshape(-1).view(np.uint8), offsets)
        finally:
            _native.store_close(h)
        names.append(name)
    shards.commit(str(root), names, sync=False)
    return np.repeat(np.arange(n * per, dtype=np.int32)[:, None], 4, axis=1)


def _fds() -> int:
    """This process's descriptors of files (not its sockets, pipes and
    event descriptors, which the S3 client's connections hold)."""
    n = 0
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # closed meanwhile (the listing's own descriptor)
            n += os.readlink(f"/proc/self/fd/{fd}").startswith("/")
    return n


def test_sharded_dataset_mirrors_only_the_shards_a_batch_touches(s3server, tmp_path: Path) -> None:
    n, per = 240, 5
    local = tmp_path / "sh"
    want = _write_shards(local, n, per)
    url, _ = _publish(s3server, local, "sh")
    before = _fds()
    ds = _open(url, s3server, tmp_path / "c", page_size=4096, table_page_size=4096)
    at_open = ds.cache_stats()
    tree, guard = ds._tree, ds._guard
    # opening: the listing and the manifest; no shard is mirrored or mapped
    assert at_open["fetches"] == 1 and at_open["fetched_bytes"] == (local / "manifest.json").stat().st_size
    assert sorted(os.listdir(tree.local)) == ["manifest.json"]
    assert guard.files == {} and len(ds) == n * per
    assert _fds() - before <= 8, "descriptors held per shard at open"
    # a batch across three shards mirrors and maps those three only
    picked = [7, 100, 233]
    idx = np.array([k * per + 2 for k in picked] + [picked[0] * per], dtype=np.int64)
    np.testing.assert_array_equal(ds[idx], want[idx])
    assert sorted(guard.files) == picked
    assert sorted(os.listdir(tree.local)) == sorted(["manifest.json", *(f"s{k:04d}" for k in picked)])
    one = ds.cache_stats()
    # per shard: its header and schema whole, one table page, one chunk page
    assert one["fetches"] - at_open["fetches"] == 4 * len(picked), one
    # every shard read, the descriptors stay those of one handle
    most = _fds()
    rng = np.random.default_rng(3)
    for _ in range(12):
        idx = rng.integers(0, n * per, 256)
        np.testing.assert_array_equal(ds[idx], want[idx])
        most = max(most, _fds())
    np.testing.assert_array_equal(ds[:], want)
    assert len(guard.files) == n
    assert most - before <= 8, f"{most - before} descriptors for {n} shards"
    assert ds.stats()["length"] == n * per  # reads every shard's table
    report = ds.verify()
    assert report.ok and report.records == n * per, list(report)


# -- damage in the cache is fetched again, one page (or the two it spans) ------------


def _flip(path: Path, at: int) -> None:
    fd = os.open(path, os.O_RDWR)
    try:
        old = os.pread(fd, 1, at)
        os.pwrite(fd, bytes([old[0] ^ 0xFF]), at)
    finally:
        os.close(fd)


@pytest.fixture(scope="module")
def kilo(s3server, tmp_path_factory) -> tuple[str, Path, np.ndarray]:
    """3000 raw records of 1000 bytes (uint8): the 4 KiB pages of its chunk
    hold parts of records, and of its 72,000-byte table parts of entries."""
    arr = np.random.default_rng(9).integers(0, 255, (3000, 1000), dtype=np.uint8)
    local = tmp_path_factory.mktemp("kilo") / "ds"
    loaderx.from_numpy(local, arr, "raw", progress=False)
    url, _ = _publish(s3server, local, "kilo")
    return url, local, arr


@pytest.mark.parametrize("where, records, at, pages", [
    ("table", slice(0, 160), 5 * 24 + 3, 1),       # entry 5, in table page 0
    ("table", slice(160, 180), 4100, 2),           # entry 170, bytes [4080, 4104): over pages 0 and 1
    ("chunk", slice(0, 4), 1000 + 7, 1),           # record 1, in chunk page 0
    ("chunk", slice(4, 5), 4500, 2),               # record 4, bytes [4000, 5000): over pages 0 and 1
])
def test_damaged_cached_page_is_fetched_again(s3server, tmp_path: Path, kilo, where: str, records: slice,
                                              at: int, pages: int) -> None:
    url, _, arr = kilo
    ds = _open(url, s3server, tmp_path / "c", page_size=4096, table_page_size=4096)
    np.testing.assert_array_equal(ds[records], arr[records])
    before = ds.cache_stats()
    mirror = Path(ds._tree.local) / ("0.tab" if where == "table" else "0.chunk")
    _flip(mirror, at)
    np.testing.assert_array_equal(ds[records], arr[records])
    after = ds.cache_stats()
    assert after["fetches"] - before["fetches"] == pages, (before, after)
    assert after["repairs"] == before["repairs"] + 1
    assert after["fetched_bytes"] - before["fetched_bytes"] == pages * 4096
    source = Path(kilo[1]) / mirror.name
    assert mirror.read_bytes()[at - at % 4096 : at - at % 4096 + 4096] == \
        source.read_bytes()[at - at % 4096 : at - at % 4096 + 4096]
    # verify() checks every page the cache holds and fetches the rest
    _flip(mirror, at)
    report = ds.verify()
    assert report.ok, list(report)
    assert mirror.read_bytes() == source.read_bytes()


@pytest.mark.parametrize("kind", ["tab", "chunk"])
def test_bytes_from_the_server_that_fail_are_never_used(s3server, tmp_path: Path, kilo, kind: str) -> None:
    """A server that returns bytes that are not the store's (one byte off in
    every range of one object): the page is not written, the read fails
    naming the object, verify() lists it, and the other object's pages are
    unharmed."""
    url, _, arr = kilo
    ds = _open(url, s3server, tmp_path / "c", page_size=4096, table_page_size=4096)
    tree = ds._tree
    real = tree._get

    def altered(rel: str, start: int | None = None, end: int | None = None) -> Any:
        data = real(rel, start, end)
        if start is None or not rel.endswith("." + kind):
            return data
        b = bytearray(data)
        b[len(b) // 2] ^= 0x01
        return bytes(b)

    tree._get = altered
    with pytest.raises(CorruptStoreError) as e:
        ds[1234]
    assert f"{url}/0.{kind}" in str(e.value), e.value
    assert ds.cache_stats()["cached_bytes"] == (4096 if kind == "chunk" else 0)  # the table page that passed
    faults = list(ds.verify())
    assert faults and all(f"{url}/0.{kind}" in f.file for f in faults), faults
    tree._get = real
    np.testing.assert_array_equal(ds[[1234, 7]], arr[[1234, 7]])
    # a cached page found damaged, whose fresh bytes fail too: the read fails
    # naming the object, after one repair, and never returns the damage
    _flip(Path(tree.local) / f"0.{kind}", 1234 * 24 + 3 if kind == "tab" else 1234 * 1000 + 3)
    tree._get = altered
    repairs = ds.cache_stats()["repairs"]
    with pytest.raises(CorruptStoreError) as e:
        ds[1234]
    assert f"{url}/0.{kind}" in str(e.value) and str(tree.local) not in str(e.value), e.value
    assert ds.cache_stats()["repairs"] == repairs + 1
    tree._get = real
    np.testing.assert_array_equal(ds[1234], arr[1234])


# -- many threads in several fresh processes ------------------------------------------


def _child_main(job: dict[str, Any]) -> None:
    """Open the job's dataset, then read random batches on 8 threads at once,
    each compared with the local copy; print the errors and mismatches seen
    and the cache's stats as JSON."""
    cache = loaderx.CacheOptions(dir=job["dir"], limit=job["limit"], page_size=4096, table_page_size=4096)
    ds = loaderx.DenseDataset(job["url"], cache=cache, storage_options=job["storage"])
    want = np.load(job["npy"], mmap_mode="r")
    errors: list[str] = []

    def read(seed: int) -> None:
        rng = np.random.default_rng(seed)
        for _ in range(job["batches"]):
            idx = rng.integers(0, len(want), job["batch"])
            try:
                got = ds.gather(idx)
            except Exception as e:  # counted: the test wants none
                errors.append(f"{type(e).__name__}: {e}")
                continue
            if not np.array_equal(got, want[idx]):
                errors.append(f"wrong data for records {idx.tolist()[:8]}...")

    threads = [threading.Thread(target=read, args=(job["seed"] * 100 + t,)) for t in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(json.dumps({"errors": errors, "stats": ds.cache_stats()}))


@pytest.mark.parametrize("limit", [None, 192 << 10])
def test_threads_in_fresh_processes_see_no_error(s3server, tmp_path: Path, limit: int | None) -> None:
    """3 fresh processes of 8 threads each read one fresh dataset at once,
    through one cold cache directory (and with a limit far below the
    dataset, under eviction): 4 KiB pages, so entries and records straddle
    page boundaries and most pages are wanted by several threads at once."""
    arr = np.random.default_rng(11).integers(0, 1 << 30, (20_000, 25), dtype=np.int32)  # 100-byte records
    local = tmp_path / "ds"
    loaderx.from_numpy(local, arr, "raw", progress=False)
    npy = tmp_path / "want.npy"
    np.save(npy, arr)
    url, _ = _publish(s3server, local, "threads")
    job = {"url": url, "dir": str(tmp_path / "cache"), "limit": limit, "storage": _opts(s3server),
           "npy": str(npy), "batches": 6, "batch": 48}
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    procs = [subprocess.Popen([sys.executable, __file__, json.dumps({**job, "seed": s})], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for s in range(3)]
    results = []
    for p in procs:
        try:
            out, err = p.communicate(timeout=BOUND)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise AssertionError(f"a reading process did not finish in {BOUND} s (a hang)") from None
        assert p.returncode == 0, err[-4000:]
        results.append(json.loads(out.strip().splitlines()[-1]))
    errors = [e for r in results for e in r["errors"]]
    assert errors == [], errors[:5]
    # nor one hidden by a repair: no read met bytes that failed their checks
    assert [r["stats"]["repairs"] for r in results] == [0, 0, 0]
    assert sum(r["stats"]["fetched_bytes"] for r in results) > 0  # a late process may find every page cached
    if limit is not None:
        assert any(r["stats"]["evicted_bytes"] > 0 for r in results)


if __name__ == "__main__":
    _child_main(json.loads(sys.argv[1]))
