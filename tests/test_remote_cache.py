"""Datasets in object storage read through the local cache (remote._cache),
against a real S3 server (SeaweedFS, tests/s3server.py), without mocks.

Every read is compared with the local copy the objects were pushed from.
Beyond equal bytes, the tests hold the cache to what its docstring promises:
a record costs about one page of fetching, not the store; a second pass and
a new process on the same cache directory fetch nothing; a limit holds up to
the pages of the batch in flight and never deadlocks, even below one batch;
processes sharing a directory read correctly at once, and one process's
eviction leaves another's pinned pages alone; and every fault (a server gone,
an object replaced or truncated, a cached page damaged on disk, refused
credentials, a full disk) is a clear error or a refetch, in bounded time,
never wrong data.

Run as a script, this file is the child process of the tests that need more
than one process: ``python3 tests/test_remote_cache.py '<json job>'``.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import loaderx
from loaderx.errors import CorruptStoreError, RemoteError
from loaderx.io import remote

pytest.importorskip("obstore")
boto3 = pytest.importorskip("boto3")

from test_remote import _opts, _s3  # noqa: E402 - after the skips, as those helpers need boto3

ROOT = Path(__file__).resolve().parent.parent
#: bytes of a page in most tests: a 1 KiB record store has 64 records a page
PAGE = 64 << 10
#: bytes of a table page (24 bytes a record): 682 records' entries a page
TPAGE = 16 << 10
#: a dense record here: 256 int32, 1 KiB raw
WIDTH = 256
#: seconds a child process or a guarded block may take before it counts as a hang
BOUND = 120


# -- helpers -------------------------------------------------------------------


@contextlib.contextmanager
def _within(seconds: int) -> Iterator[None]:
    """Fail with TimeoutError instead of hanging (SIGALRM also interrupts a
    blocking lock wait, which Python then resumes into the handler)."""

    def expired(signum: int, frame: Any) -> None:
        raise TimeoutError(f"not done within {seconds} s: a hang")

    old = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def _dense_array(n: int, seed: int = 0) -> np.ndarray:
    # values below 1000: zstd shrinks them and "narrow" stores them as int16
    return np.random.default_rng(seed).integers(0, 1000, size=(n, WIDTH), dtype=np.int32)


def _ragged_rows(n: int, seed: int = 1) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 5000, size=(int(k), 3), dtype=np.int64) for k in rng.integers(1, 120, size=n)]


def _publish(srv, local: Path, name: str = "ds") -> tuple[str, str]:
    """Push ``local`` under a new prefix; ``(url, key prefix)``."""
    prefix = f"rc-{uuid.uuid4().hex[:12]}/{name}"
    url = f"s3://{srv.bucket}/{prefix}"
    remote.push(local, url, **_opts(srv))
    return url, prefix


def _objects(srv, prefix: str) -> dict[str, int]:
    """``{relative path: size}`` of every object under ``prefix``."""
    out = {}
    for page in _s3(srv).get_paginator("list_objects_v2").paginate(Bucket=srv.bucket, Prefix=prefix + "/"):
        for o in page.get("Contents", []):
            out[o["Key"][len(prefix) + 1 :]] = int(o["Size"])
    return out


def _chunk_and_small(srv, prefix: str) -> tuple[int, int, int]:
    """Bytes in chunk objects, in table segments and in every other object
    under ``prefix`` (the cache keeps the first two in pages)."""
    objs = _objects(srv, prefix)
    chunk = sum(v for k, v in objs.items() if k.endswith(".chunk"))
    table = sum(v for k, v in objs.items() if k.endswith(".tab"))
    return chunk, table, sum(objs.values()) - chunk - table


def _cache(tmp_path: Path, name: str = "cache", **over: Any) -> loaderx.CacheOptions:
    return loaderx.CacheOptions(dir=str(tmp_path / name), **{"page_size": PAGE, "table_page_size": TPAGE, **over})


def _open(url: str, cache: loaderx.CacheOptions, srv, kind: type = loaderx.DenseDataset, **storage: Any):
    return kind(url, cache=cache, storage_options=_opts(srv, **storage))


def _same_ragged(got: list[np.ndarray], want: list[np.ndarray]) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype and g.shape == w.shape and np.array_equal(g, w)


def _flat(batch: Any) -> dict[str, np.ndarray]:
    """A loader batch's stream as plain arrays (a packed ragged batch as its parts)."""
    if isinstance(batch, np.ndarray):
        return {"x": batch}
    return {"values": np.asarray(batch.values), "offsets": np.asarray(batch.offsets)}


def _child(job: dict[str, Any]) -> subprocess.Popen[str]:
    """Start this file as a child process running ``job`` (see _child_main)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.Popen(
        [sys.executable, __file__, json.dumps(job)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True,
    )


def _result(proc: subprocess.Popen[str], timeout: float = BOUND) -> dict[str, Any]:
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise AssertionError(f"child process did not finish in {timeout} s (a hang)") from None
    assert proc.returncode == 0, f"child failed ({proc.returncode}):\n{err[-4000:]}"
    return json.loads(out.strip().splitlines()[-1])


def _job(srv, url: str, local: Path, cache: loaderx.CacheOptions, mode: str, **more: Any) -> dict[str, Any]:
    return {"url": url, "local": str(local), "dir": cache.dir, "limit": cache.limit, "page_size": cache.page_size,
            "table_page_size": cache.table_page_size, "storage": _opts(srv), "mode": mode, **more}


def _child_main(job: dict[str, Any]) -> None:
    """What a child process does: open ``url`` with the job's cache (and
    with a ``barrier`` wait until that many processes have), then ``warm`` it, or ``read`` every record in random batches comparing each
    with the local copy; print the cache's stats (and the stats right after
    opening) as the last line of JSON."""
    cache = loaderx.CacheOptions(dir=job["dir"], limit=job["limit"], page_size=job["page_size"],
                                 table_page_size=job["table_page_size"])
    ds = loaderx.DenseDataset(job["url"], cache=cache, storage_options=job["storage"])
    at_open = ds.cache_stats()
    if job.get("barrier"):  # start reading when every process of the test has opened
        where, count = job["barrier"]
        Path(where, f"{os.getpid()}.open").touch()
        deadline = time.monotonic() + 60
        while len(list(Path(where).glob("*.open"))) < count:
            if time.monotonic() > deadline:
                raise SystemExit(f"the other processes did not open within 60 s ({where})")
            time.sleep(0.01)
    if job["mode"] == "warm":
        ds.warm()
    else:
        want = loaderx.DenseDataset(job["local"])
        order = np.random.default_rng(job.get("seed", 0)).permutation(len(want))
        batch = job.get("batch", 16)
        for a in range(0, len(order), batch):
            idx = order[a : a + batch]
            if not np.array_equal(ds.gather(idx), want[idx]):
                raise SystemExit(f"wrong data for records {idx.tolist()}")
        if not np.array_equal(ds[:], want[:]):
            raise SystemExit("wrong data in a full read")
    print(json.dumps({"at_open": at_open, "stats": ds.cache_stats()}))


# -- data ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("remote-cache-data")


@pytest.fixture(scope="module")
def small(s3server, data_dir: Path) -> tuple[str, str, Path, np.ndarray]:
    """A 1 MiB raw dense store (1024 records of 1 KiB: 16 pages of 64 KiB),
    pushed once for the tests that only read: ``(url, prefix, local, array)``."""
    arr = _dense_array(1024, seed=5)
    local = data_dir / "small"
    loaderx.from_numpy(local, arr, "raw", progress=False)
    url, prefix = _publish(s3server, local, "small")
    return url, prefix, local, arr


def _fresh_small(srv, tmp_path: Path, seed: int = 6) -> tuple[str, str, Path, np.ndarray]:
    """Like ``small``, pushed for one test that alters its objects."""
    arr = _dense_array(1024, seed=seed)
    local = tmp_path / "local"
    loaderx.from_numpy(local, arr, "raw", progress=False)
    url, prefix = _publish(srv, local)
    return url, prefix, local, arr


# -- 1. round trips ------------------------------------------------------------------


def _same_loader(remote_ds: Any, local_ds: Any, steps: int, **kw: Any) -> None:
    """Every step's batch of a loader over ``remote_ds`` equals that of a
    loader with the same settings over the local copy (threads, same seed)."""
    ref_kw = {**kw, "workers": "thread", "num_workers": min(2, kw.get("num_workers", 2))}
    with loaderx.DataLoader({"x": local_ds}, **ref_kw) as ref:
        expected = [_flat(b["x"]) for _, b in zip(range(steps), ref)]
    with _within(BOUND), loaderx.DataLoader({"x": remote_ds}, **kw) as dl:
        got = [_flat(b["x"]) for _, b in zip(range(steps), dl)]
    assert len(got) == steps
    for step, (g, w) in enumerate(zip(got, expected, strict=True)):
        assert g.keys() == w.keys() and all(np.array_equal(g[k], w[k]) for k in g), step


@pytest.mark.parametrize("codec", ["raw", "zstd", "auto", "narrow"])
def test_dense_round_trip(s3server, tmp_path: Path, codec: str) -> None:
    arr = _dense_array(3000)
    local = tmp_path / "local"
    loaderx.from_numpy(local, arr, codec, progress=False)
    url, _ = _publish(s3server, local)
    ds = _open(url, _cache(tmp_path), s3server)
    want = loaderx.DenseDataset(local)
    assert ds.url == url and ds.codec == want.codec and len(ds) == len(arr)
    assert ds.dtype == arr.dtype and ds.item_shape == (WIDTH,)
    if codec == "narrow":
        assert ds.codec == "narrow"
    rng = np.random.default_rng(1)
    idx = rng.integers(0, len(arr), size=300)
    assert np.array_equal(ds[int(idx[0])], arr[idx[0]])
    assert np.array_equal(ds[-1], arr[-1])
    assert np.array_equal(ds[idx], arr[idx])
    out = np.empty((idx.size, WIDTH), dtype=np.int32)
    assert ds.gather(idx, out=out) is out and np.array_equal(out, arr[idx])
    assert np.array_equal(ds.gather(idx[::-1].copy()), arr[idx[::-1]])
    assert np.array_equal(ds[:], arr)
    assert np.array_equal(ds[100:200:3], arr[100:200:3])
    _same_loader(ds, want, 6, batch_size=64, seed=11, workers="thread", num_workers=2)


@pytest.mark.parametrize("codec", ["raw", "zstd"])
def test_ragged_round_trip(s3server, tmp_path: Path, codec: str) -> None:
    rows = _ragged_rows(800)
    local = tmp_path / "local"
    loaderx.from_iterator(local, rows, codec, progress=False)
    url, _ = _publish(s3server, local)
    ds = _open(url, _cache(tmp_path, page_size=16 << 10), s3server, loaderx.RaggedDataset)
    assert ds.url == url and len(ds) == len(rows)
    idx = np.random.default_rng(2).integers(0, len(rows), size=200)
    assert np.array_equal(ds[int(idx[0])], rows[idx[0]])
    _same_ragged(ds[idx], [rows[i] for i in idx])
    _same_ragged(ds[:], rows)
    _same_ragged(list(ds), rows)
    _same_loader(ds, loaderx.RaggedDataset(local), 5, batch_size=32, seed=4, workers="thread", num_workers=2)


@pytest.mark.parametrize("kind", ["dense", "ragged"])
@pytest.mark.parametrize("num_workers", [0, 2])
def test_loader_on_a_cold_cache(s3server, tmp_path: Path, kind: str, num_workers: int) -> None:
    """The loader is the first reader: its gathers must fetch the pages
    they need (no earlier direct read brought them)."""
    local = tmp_path / "local"
    if kind == "dense":
        loaderx.from_numpy(local, _dense_array(3000, seed=13), "raw", progress=False)
        cls = loaderx.DenseDataset
    else:
        loaderx.from_iterator(local, _ragged_rows(800, seed=14), "zstd", progress=False)
        cls = loaderx.RaggedDataset
    url, _ = _publish(s3server, local)
    ds = _open(url, _cache(tmp_path, page_size=16 << 10), s3server, cls)
    assert ds.cache_stats()["cached_bytes"] == 0
    _same_loader(ds, cls(local), 6, batch_size=48, seed=10, workers="thread", num_workers=num_workers)
    assert ds.cache_stats()["cached_bytes"] > 0


def test_threads_read_one_dataset_at_once(s3server, tmp_path: Path, small) -> None:
    """Threads of one process gathering from one cold dataset at the same
    time, their batches sharing pages: each gets the store's records."""
    url, _, _, arr = small
    for trial in range(10):
        # small pages: 64 of them, most shared by the four batches
        ds = _open(url, _cache(tmp_path, f"cache{trial}", page_size=16 << 10), s3server)
        errors: list[BaseException] = []

        def read(seed: int, ds: Any = ds, errors: list[BaseException] = errors) -> None:
            try:
                idx = np.random.default_rng(seed).integers(0, len(arr), size=64)
                got = ds.gather(idx)
                assert np.array_equal(got, arr[idx]), f"wrong data for records {idx.tolist()}"
            except BaseException as e:  # re-raised below, in the test's thread
                errors.append(e)

        threads = [threading.Thread(target=read, args=(trial * 10 + k,)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(BOUND)
        assert not any(t.is_alive() for t in threads), "a reading thread hangs"
        if errors:
            raise errors[0]
        assert np.array_equal(ds[:], arr)


@pytest.mark.parametrize("kind", ["dense", "ragged"])
def test_process_workers_match_local(s3server, tmp_path: Path, kind: str) -> None:
    """Worker processes reopen the dataset from its URL (pickling) and read
    the same batches as a loader over the local copy."""
    local = tmp_path / "local"
    if kind == "dense":
        loaderx.from_numpy(local, _dense_array(2000, seed=8), "zstd", progress=False)
        cls = loaderx.DenseDataset
    else:
        loaderx.from_iterator(local, _ragged_rows(600, seed=9), "zstd", progress=False)
        cls = loaderx.RaggedDataset
    url, _ = _publish(s3server, local)
    ds = _open(url, _cache(tmp_path), s3server, cls)
    with loaderx.DataLoader({"x": cls(local)}, batch_size=48, seed=3, workers="thread", num_workers=2) as ref:
        expected = [_flat(b["x"]) for _, b in zip(range(8), ref)]
    with _within(BOUND), loaderx.DataLoader({"x": ds}, batch_size=48, seed=3, workers="process",
                                            num_workers=2) as dl:
        got = [_flat(b["x"]) for _, b in zip(range(8), dl)]
    assert len(got) == 8
    for g, w in zip(got, expected, strict=True):
        assert g.keys() == w.keys() and all(np.array_equal(g[k], w[k]) for k in g)


# -- 2. pages ------------------------------------------------------------------------


@pytest.mark.parametrize("codec", ["raw", "zstd"])
def test_pages_fetch_what_is_read(s3server, tmp_path: Path, codec: str) -> None:
    arr = _dense_array(3000, seed=2)
    local = tmp_path / "local"
    loaderx.from_numpy(local, arr, codec, progress=False)
    url, prefix = _publish(s3server, local)
    chunk, table, small_bytes = _chunk_and_small(s3server, prefix)
    assert chunk > 16 * PAGE and table > 2 * TPAGE  # many pages, or the checks below prove nothing
    ds = _open(url, _cache(tmp_path), s3server)
    at_open = ds.cache_stats()
    # opening downloads the small files whole, and no table or chunk byte
    assert at_open["fetched_bytes"] == small_bytes and at_open["cached_bytes"] == 0
    assert np.array_equal(ds[1234], arr[1234])
    one = ds.cache_stats()
    got = one["fetched_bytes"] - at_open["fetched_bytes"]
    # the table page of its entry, and the chunk pages its bytes overlap (one, or two at a boundary)
    assert 0 < got <= TPAGE + 2 * PAGE, one
    assert 2 <= one["fetches"] - at_open["fetches"] <= 3
    assert got * 10 < chunk and one["cached_bytes"] == got
    assert np.array_equal(ds[:], arr)
    full = ds.cache_stats()
    # pages are fixed byte ranges of their files: a full read fetches each file once, exactly
    assert full["fetched_bytes"] - small_bytes == chunk + table, full
    assert full["cached_bytes"] == chunk + table and full["cache_used_bytes"] == chunk + table
    assert np.array_equal(ds[::-1], arr[::-1])
    assert np.array_equal(ds[np.random.default_rng(0).permutation(len(arr))[:500]],
                          arr[np.random.default_rng(0).permutation(len(arr))[:500]])
    again = ds.cache_stats()
    assert again["fetched_bytes"] == full["fetched_bytes"] and again["fetches"] == full["fetches"]
    assert ds.warm() == 0


# -- 3. restart ------------------------------------------------------------------------


def test_new_process_reuses_the_cache(s3server, tmp_path: Path, small) -> None:
    url, prefix, local, _ = small
    chunk, table, small_bytes = _chunk_and_small(s3server, prefix)
    cache = _cache(tmp_path)
    first = _result(_child(_job(s3server, url, local, cache, "warm")))
    assert first["at_open"]["fetched_bytes"] == small_bytes
    assert first["stats"]["fetched_bytes"] == small_bytes + chunk + table
    assert first["stats"]["cached_bytes"] == chunk + table
    # the first process has exited: a new one finds every page and file on disk
    second = _result(_child(_job(s3server, url, local, cache, "read", seed=3)))
    assert second["stats"]["fetched_bytes"] == 0 and second["stats"]["fetches"] == 0, second
    assert second["stats"]["cached_bytes"] == chunk + table


# -- 4. limit and eviction ---------------------------------------------------------


def _pages_of(idx: np.ndarray, chunk_only: bool = False) -> int:
    """Bytes of the pages records ``idx`` of a 1 KiB raw store need: its
    chunk pages and the table pages of its entries."""
    chunk = int(np.unique(idx * WIDTH * 4 // PAGE).size) * PAGE
    ends = np.concatenate([idx * 24, idx * 24 + 23]) // TPAGE
    return chunk if chunk_only else chunk + int(np.unique(ends).size) * TPAGE


def test_limit_holds_with_random_batches(s3server, tmp_path: Path, small) -> None:
    url, prefix, _, arr = small
    chunk, _, _ = _chunk_and_small(s3server, prefix)
    limit = 4 * PAGE
    ds = _open(url, _cache(tmp_path, limit=limit), s3server)
    assert ds.cache_stats()["cache_limit_bytes"] == limit
    order = np.random.default_rng(7).permutation(len(arr))
    worst = 0
    with _within(BOUND):
        for a in range(0, len(order), 16):
            idx = order[a : a + 16]
            assert np.array_equal(ds.gather(idx), arr[idx])
            used = ds.cache_stats()["cache_used_bytes"]
            assert used <= limit + _pages_of(idx), (a, used)
            worst = max(worst, used)
    st = ds.cache_stats()
    # pages were evicted and fetched again: the limit was in force
    assert st["fetched_bytes"] > 2 * chunk and worst < chunk
    assert st["cache_used_bytes"] <= limit + _pages_of(order[-16:])


def test_limit_below_one_batch_completes(s3server, tmp_path: Path, small) -> None:
    url, _, _, arr = small
    ds = _open(url, _cache(tmp_path, limit=PAGE // 2), s3server)
    rng = np.random.default_rng(8)
    with _within(BOUND):
        for _ in range(6):
            idx = rng.permutation(len(arr))[:200]  # every one of the 16 pages
            assert _pages_of(idx, chunk_only=True) == 16 * PAGE
            assert np.array_equal(ds.gather(idx), arr[idx])
        assert np.array_equal(ds[:], arr)
    assert ds.cache_stats()["cache_used_bytes"] <= PAGE // 2 + _pages_of(np.arange(len(arr)))


# -- 5. sharing between processes ----------------------------------------------------


def test_two_processes_share_a_small_cache(s3server, tmp_path: Path, small) -> None:
    url, _, local, _ = small
    cache = _cache(tmp_path, limit=3 * PAGE)
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    procs = [_child(_job(s3server, url, local, cache, "read", seed=s, batch=24, barrier=[str(barrier), 2]))
             for s in (1, 2)]
    results = [_result(p) for p in procs]
    for r in results:
        assert r["stats"]["cache_used_bytes"] <= 3 * PAGE + 2 * 16 * PAGE
        assert r["stats"]["fetched_bytes"] > 0


def test_pinned_pages_survive_another_process(s3server, tmp_path: Path, small) -> None:
    url, prefix, _, arr = small
    chunk, table, _ = _chunk_and_small(s3server, prefix)
    other = tmp_path / "other"
    loaderx.from_numpy(other, _dense_array(512, seed=12), "raw", progress=False)
    other_url, _ = _publish(s3server, other, "other")
    cache = _cache(tmp_path, limit=1 << 30)
    a = _open(url, cache, s3server)
    assert np.array_equal(a[:], arr)
    before = a.cache_stats()
    assert before["cached_bytes"] == chunk + table and before["pinned_bytes"] == chunk + table
    # B, with a tiny limit, reads another dataset through the same directory:
    # to make room it evicts whatever is not pinned
    tiny = loaderx.CacheOptions(dir=cache.dir, limit=PAGE, page_size=PAGE, table_page_size=TPAGE)
    b = _result(_child(_job(s3server, other_url, other, tiny, "read")))
    assert b["stats"]["cache_used_bytes"] <= chunk + table + 2 * PAGE + 16 * PAGE + 2 * TPAGE
    st = a.cache_stats()
    assert st["cached_bytes"] == chunk + table, st
    assert np.array_equal(a[:], arr)
    assert a.cache_stats()["fetched_bytes"] == before["fetched_bytes"]
    # the control: once A lets go of its pins, B's next run (over a third
    # dataset, as B's first one is all in the cache now) evicts A's pages
    a.close()
    third = tmp_path / "third"
    loaderx.from_numpy(third, _dense_array(512, seed=13), "raw", progress=False)
    third_url, _ = _publish(s3server, third, "third")
    _result(_child(_job(s3server, third_url, third, tiny, "read", seed=1)))
    again = _open(url, cache, s3server)
    assert again.cache_stats()["cached_bytes"] < chunk + table
    assert np.array_equal(again[:], arr)


# -- 6. faults ------------------------------------------------------------------------


def test_server_stopped_mid_epoch(s3server, tmp_path: Path) -> None:
    url, prefix, _, arr = _fresh_small(s3server, tmp_path)
    ds = _open(url, _cache(tmp_path), s3server, timeout=2, retries=1)
    batches = [np.arange(a, a + 64) for a in range(0, len(arr), 64)]  # one page each
    for idx in batches[:4]:
        assert np.array_equal(ds.gather(idx), arr[idx])
    fetched = ds.cache_stats()["fetched_bytes"]
    s3server.stop()
    try:
        # what is cached reads on without the server
        assert np.array_equal(ds.gather(batches[2]), arr[batches[2]])
        out = np.zeros((64, WIDTH), dtype=np.int32)
        t0 = time.monotonic()
        with _within(60), pytest.raises(RemoteError) as e:
            ds.gather(batches[5], out=out)
        assert time.monotonic() - t0 < 30
        assert f"s3://{s3server.bucket}/{prefix}/0.chunk" in str(e.value), e.value
        assert "connection was refused" in str(e.value)
        assert ds.cache_stats()["fetched_bytes"] == fetched
        with pytest.raises(RemoteError):
            ds[len(arr) - 1]
    finally:
        s3server.start()
        _wait_serving(s3server, f"{prefix}/0.chunk")
    # the same dataset object reads on once the server is back
    for idx in batches[4:]:
        assert np.array_equal(ds.gather(idx), arr[idx])
    assert np.array_equal(ds[:], arr)


def _wait_serving(srv, key: str, seconds: float = 60) -> None:
    """Wait until the restarted server serves ``key`` again: its S3 gateway
    answers before the volume server is back, and a read in between gets a
    500 (which, with retries=1, a dataset would rightly report)."""
    s3 = _s3(srv)
    deadline = time.monotonic() + seconds
    while True:
        try:
            s3.get_object(Bucket=srv.bucket, Key=key, Range="bytes=0-0")["Body"].read()
            return
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


@pytest.mark.parametrize("how", ["push", "put"])
def test_object_replaced_after_open(s3server, tmp_path: Path, how: str) -> None:
    url, prefix, _, arr = _fresh_small(s3server, tmp_path)
    ds = _open(url, _cache(tmp_path), s3server)
    assert np.array_equal(ds[:128], arr[:128])  # pages 0 and 1
    key = f"{prefix}/0.chunk"
    if how == "push":
        other = tmp_path / "other"
        loaderx.from_numpy(other, _dense_array(1024, seed=99), "raw", progress=False)
        remote.push(other, url, **_opts(s3server))
    else:
        s3 = _s3(s3server)
        data = np.frombuffer(s3.get_object(Bucket=s3server.bucket, Key=key)["Body"].read(), dtype=np.uint8)
        s3.put_object(Bucket=s3server.bucket, Key=key, Body=(data ^ 0x5A).tobytes())  # same size, every byte new
    with pytest.raises(CorruptStoreError) as e:
        ds[700]
    # the first object record 700 needs that changed: its table page (a push
    # rewrote every object) or, when only the chunk was put, its chunk page
    named = [f"s3://{s3server.bucket}/{prefix}/0.tab"] if how == "push" else []
    assert any(u in str(e.value) for u in [f"s3://{s3server.bucket}/{key}", *named]), e.value
    assert "changed after" in str(e.value) or "altered" in str(e.value), e.value
    with pytest.raises(CorruptStoreError):
        ds[300:310]
    # what was cached before is the store's data still
    assert np.array_equal(ds[:128], arr[:128])
    assert np.array_equal(ds[np.arange(0, 128, 5)], arr[0:128:5])


def test_object_truncated_after_open(s3server, tmp_path: Path) -> None:
    url, prefix, _, arr = _fresh_small(s3server, tmp_path)
    ds = _open(url, _cache(tmp_path), s3server)
    assert np.array_equal(ds[:64], arr[:64])
    key = f"{prefix}/0.chunk"
    s3 = _s3(s3server)
    data = s3.get_object(Bucket=s3server.bucket, Key=key)["Body"].read()
    s3.put_object(Bucket=s3server.bucket, Key=key, Body=data[: len(data) // 2])
    for i in (1000, 300):  # a page past the new end, and one inside it
        with pytest.raises(CorruptStoreError) as e:
            ds[i]
        assert f"s3://{s3server.bucket}/{key}" in str(e.value), e.value
    assert np.array_equal(ds[:64], arr[:64])


def test_damaged_cached_page_is_fetched_again(s3server, tmp_path: Path, small) -> None:
    url, _, _, arr = small
    ds = _open(url, _cache(tmp_path), s3server)
    assert np.array_equal(ds[128:192], arr[128:192])  # page 2
    before = ds.cache_stats()
    mirror = Path(ds._tree.local) / "0.chunk"
    at = 2 * PAGE + 1000
    fd = os.open(mirror, os.O_RDWR)
    try:
        old = os.pread(fd, 1, at)
        os.pwrite(fd, bytes([old[0] ^ 0xFF]), at)
        assert os.pread(fd, 1, at) != old
    finally:
        os.close(fd)
    assert np.array_equal(ds[128:192], arr[128:192])
    after = ds.cache_stats()
    assert after["fetched_bytes"] - before["fetched_bytes"] == PAGE
    assert after["fetches"] == before["fetches"] + 1
    # the page on disk is the store's bytes again
    assert mirror.read_bytes()[2 * PAGE : 3 * PAGE] == arr[128:192].tobytes()


def test_wrong_credentials(s3server, tmp_path: Path, small) -> None:
    url = small[0]
    for bad in ({"secret_access_key": "not-the-secret"}, {"access_key_id": "nobody"}):
        with pytest.raises(RemoteError) as e:
            _open(url, _cache(tmp_path), s3server, **bad)
        assert "refused the credentials" in str(e.value) and s3server.bucket in str(e.value)


def test_missing_and_foreign_prefixes(s3server, tmp_path: Path) -> None:
    base = f"rc-{uuid.uuid4().hex[:12]}"
    with pytest.raises(FileNotFoundError) as e:
        _open(f"s3://{s3server.bucket}/{base}/nothing", _cache(tmp_path), s3server)
    assert f"{base}/nothing" in str(e.value)
    _s3(s3server).put_object(Bucket=s3server.bucket, Key=f"{base}/notes/readme.txt", Body=b"hello")
    with pytest.raises(ValueError, match="holds no loaderx store") as e2:
        _open(f"s3://{s3server.bucket}/{base}/notes", _cache(tmp_path), s3server)
    assert f"{base}/notes" in str(e2.value)


@contextlib.contextmanager
def _tmpfs(where: Path, size: str) -> Iterator[Path]:
    where.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
                          capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip() or done.returncode}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], capture_output=True, timeout=30)


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="mounting a tmpfs needs root")
@pytest.mark.parametrize("limit", [None, 64 << 20])
def test_cache_on_a_full_disk(s3server, tmp_path: Path, limit: int | None) -> None:
    """A 4 MiB file system under a 6 MiB dataset: with no limit (derived from
    free space) or one larger than the disk, reads evict to make room or fail
    with an OSError naming the cache directory: never wrong data, never a hang."""
    arr = _dense_array(6144, seed=21)
    local = tmp_path / "local"
    loaderx.from_numpy(local, arr, "raw", progress=False)
    url, _ = _publish(s3server, local)
    with _tmpfs(tmp_path / "mnt", "4m") as mnt:
        cache = loaderx.CacheOptions(dir=str(mnt / "cache"), limit=limit, page_size=256 << 10)
        ds = _open(url, cache, s3server)
        ok = failed = 0
        with _within(BOUND):
            for rnd in range(2):
                for a in range(0, len(arr), 512):
                    idx = np.arange(a, a + 512) if rnd == 0 else np.arange(len(arr) - a - 512, len(arr) - a)
                    out = np.zeros((idx.size, WIDTH), dtype=np.int32)
                    try:
                        ds.gather(idx, out=out)
                    except OSError as e:
                        assert not isinstance(e, RemoteError)
                        assert str(mnt / "cache") in str(e), e
                        failed += 1
                        continue
                    assert np.array_equal(out, arr[idx])
                    ok += 1
        assert ok > 0, f"no read succeeded ({failed} failed)"
        st = ds.cache_stats()
        assert st["cache_used_bytes"] <= 4 << 20
        ds.close()


# -- 7. errors --------------------------------------------------------------------------


def test_bad_arguments(s3server, tmp_path: Path, small) -> None:
    url, _, local, _ = small
    with pytest.raises(ValueError, match="does not write in place"):
        loaderx.DenseDataset(url, writable=True)
    with pytest.raises(ValueError, match="does not write in place"):
        loaderx.RaggedDataset(url, writable=True, cache=_cache(tmp_path), storage_options=_opts(s3server))
    with pytest.raises(ValueError, match="object storage") as e:
        loaderx.DenseDataset(local, cache=_cache(tmp_path))
    assert str(local) in str(e.value)
    with pytest.raises(ValueError, match="object storage"):
        loaderx.DenseDataset(local, storage_options=_opts(s3server))
    for kw, text in (({"page_size": 0}, "got 0"), ({"limit": -1}, "got -1"), ({"threads": 0}, "got 0"),
                     ({"limit": 0}, "got 0"), ({"prefetch": -5}, "got -5"), ({"page_size": 4095}, "got 4095")):
        with pytest.raises(ValueError, match=text) as e:
            loaderx.CacheOptions(**kw)
        assert next(iter(kw)) in str(e.value)
    with pytest.raises(ValueError, match="always checked"):
        _open(url, _cache(tmp_path), s3server).set_verify(False)
    local_ds = loaderx.DenseDataset(local)
    assert local_ds.url is None
    with pytest.raises(ValueError, match="local dataset"):
        local_ds.cache_stats()
    with pytest.raises(ValueError, match="local dataset"):
        local_ds.warm()


if __name__ == "__main__":
    _child_main(json.loads(sys.argv[1]))
