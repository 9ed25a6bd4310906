"""Datasets in object storage under network faults, through the suite's own
fault proxy (tests/faultproxy.py) in front of its real S3 server
(tests/s3server.py).

Every check here runs in child processes, so that a crash is seen as what
it is (a negative exit status) rather than taking the suite down, and a
fresh process proves what a cache left on disk is worth. Run as a script,
this file is such a child: ``python3 tests/test_remote_faults.py '<json>'``.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import re
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))

import loaderx  # noqa: E402
from loaderx.errors import CorruptStoreError, RemoteError  # noqa: E402

#: bytes of a chunk page here: 64 records of 1 KiB
PAGE = 64 << 10
#: records of the dense dataset; int32[256] each, every value encodes its place
N = 2048
WIDTH = 256
#: seconds a child may take before it counts as a hang
BOUND = 120


def dense(n: int = N) -> np.ndarray:
    """Records whose every value encodes (record, position): a wrong byte
    anywhere shows, and incompressible enough that each page holds 64."""
    i = np.arange(n, dtype=np.int64)[:, None]
    j = np.arange(WIDTH, dtype=np.int64)[None, :]
    return ((i * 7919 + j * 104729) % (1 << 31)).astype(np.int32) ^ (i * WIDTH + j).astype(np.int32)


# -- the child process -------------------------------------------------------


def _child_main(job: dict[str, Any]) -> dict[str, Any]:
    cache = loaderx.CacheOptions(dir=job["dir"], page_size=job.get("page_size", PAGE),
                                 limit=job.get("limit"), table_page_size=16 << 10)
    mode = job["mode"]
    if mode == "corrupt":
        # every read of a chunk page is flipped in transit: each read must be
        # CorruptStoreError naming the object, and the process must live on
        ds = loaderx.DenseDataset(job["url"], cache=cache, storage_options=job["storage"])
        errors = []
        for a in range(0, 3 * 64, 64):
            try:
                ds.gather(np.arange(a, a + 8))
                errors.append(None)
            except CorruptStoreError as e:
                errors.append(str(e))
            gc.collect()
        ds.close()
        gc.collect()
        return {"errors": errors}
    if mode == "race":
        return _race(job)
    if mode == "read":
        return _read(job, cache)
    if mode == "lane":
        return _lane(job)
    raise SystemExit(f"unknown mode {mode!r}")


def _read(job: dict[str, Any], cache: loaderx.CacheOptions) -> dict[str, Any]:
    """Open the dataset, read the batches ``job["batches"]`` (each checked
    against what was pushed), close it; then again if ``job["again"]``, and
    with ``job["clear"]`` clear the URL from the cache. What happened: per
    pass the first error (None: every batch right), and what clear did."""
    from loaderx.remote import _cache

    want = dense()
    out: dict[str, Any] = {"passes": []}
    for k in range(2 if job.get("again") else 1):
        if k and job.get("damage"):  # the mirror's file damaged between two opens of this process
            b = bytearray(Path(job["damage"]).read_bytes())
            b[len(b) // 2] ^= 0x40
            Path(job["damage"]).write_bytes(bytes(b))
        err = None
        try:
            ds = loaderx.DenseDataset(job["url"], cache=cache, storage_options=job["storage"])
            try:
                for idx in job["batches"]:
                    got = ds.gather(np.asarray(idx, dtype=np.int64))
                    if not np.array_equal(got, want[idx]):
                        raise SystemExit(f"WRONG DATA for records {idx}")
                out["stats"] = ds.cache_stats()
            finally:
                ds.close()
        except (CorruptStoreError, RemoteError, OSError, TimeoutError) as e:
            err = f"{type(e).__name__}: {e}"
        out["passes"].append(err)
    if job.get("clear"):
        removed, busy = _cache.clear(cache.root, job["url"])
        out["cleared"], out["busy"] = removed, busy
    return out


def _trial_read(job: dict[str, Any], k: int, out: str, recover: bool) -> None:
    """A fork of the lane worker: open the dataset with trial ``k``'s cache
    and read its batches under the fault, writing ``out.a`` (what
    happened); with ``recover``, wait for the fault to be lifted
    (``out.cleared``) and read again in this process, writing ``out.b``."""
    cache = loaderx.CacheOptions(dir=os.path.join(job["dir"], str(k)), page_size=PAGE, table_page_size=16 << 10,
                                 limit=job["limit"], prefetch=0)
    want = dense()
    batches = [np.asarray(b, dtype=np.int64) for b in job["batches"][k]]

    def attempt() -> dict[str, Any]:
        got: dict[str, Any] = {"error": None, "wrong": None, "over": []}
        try:
            ds = loaderx.DenseDataset(job["url"], cache=cache, storage_options=job["storage"])
            try:
                for idx in batches:
                    if not np.array_equal(ds.gather(idx), want[idx]):
                        got["wrong"] = idx.tolist()
                        break
                    st = ds.cache_stats()
                    if st["cache_used_bytes"] > st["cache_limit_bytes"] + job["batch_bytes"]:
                        got["over"].append(st["cache_used_bytes"])
            finally:
                ds.close()
        except (CorruptStoreError, RemoteError, OSError, TimeoutError, ValueError) as e:
            got["error"] = f"{type(e).__name__}: {e}"
        return got

    Path(out + ".a.tmp").write_text(json.dumps(attempt()))
    os.rename(out + ".a.tmp", out + ".a")
    if recover:
        deadline = time.monotonic() + BOUND
        while not os.path.exists(out + ".cleared"):
            if time.monotonic() > deadline:
                os._exit(3)
            time.sleep(0.005)
        Path(out + ".b.tmp").write_text(json.dumps(attempt()))
        os.rename(out + ".b.tmp", out + ".b")


def _lane(job: dict[str, Any]) -> dict[str, Any]:
    """A lane of the fault suite: for each command on stdin (``under K`` or
    ``fresh K``) fork a reader of trial K (under the fault, then recovering
    in the same process; or a fresh process on K's cache) and answer its
    exit status. The lane itself loads no native code and makes no client,
    so each fork starts as a fresh process would."""
    from loaderx.store import _native

    assert not _native.loaded()
    print("ready", flush=True)
    for line in sys.stdin:
        what, k = line.split()
        out = os.path.join(job["dir"], f"{what}-{k}")
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                _trial_read(job, int(k), out, recover=what == "under")
            except BaseException as e:  # reported, never lost
                Path(out + ".x").write_text(f"{type(e).__name__}: {e}")
                code = 4
            os._exit(code)
        print(f"pid {pid}", flush=True)
        _, status = os.waitpid(pid, 0)
        print(f"exit {os.waitstatus_to_exitcode(status)}", flush=True)
    return {}


def _race_one(job: dict[str, Any], k: int) -> str | None:
    """In a fresh process (a fork of one that has loaded no native code and
    made no S3 client): open the dataset with an empty cache, then read it
    from several threads at once as the very first use; the first error."""
    import threading

    cache = loaderx.CacheOptions(dir=os.path.join(job["dir"], str(k)), page_size=PAGE, table_page_size=16 << 10)
    ds = loaderx.DenseDataset(job["url"], cache=cache, storage_options=job["storage"])
    want = dense()
    errors: list[str] = []
    go = threading.Barrier(job["threads"])

    def read(t: int) -> None:
        rng = np.random.default_rng(k * 100 + t)
        try:
            go.wait(10)
            if t % 2:
                # aim at the moment the first read publishes the handle: a
                # reader arriving then takes the path that needs no lock
                deadline = time.monotonic() + 10
                while ds._handle is None and time.monotonic() < deadline:
                    pass
            idx = np.sort(rng.choice(N, 16, replace=False))
            if not np.array_equal(ds.gather(idx), want[idx]):
                errors.append(f"wrong data for {idx.tolist()}")
        except Exception as e:
            errors.append(f"{type(e).__name__}: {e}")

    threads = [threading.Thread(target=read, args=(t,)) for t in range(job["threads"])]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return errors[0] if errors else None


def _race(job: dict[str, Any]) -> dict[str, Any]:
    """Fork ``job["processes"]`` fresh readers, ``job["concurrent"]`` at a
    time, each one's first use of loaderx a multi-threaded read (see
    _race_one); how many failed, and how."""
    from loaderx.store import _native

    assert not _native.loaded(), "the forking process must not have loaded the native library"
    running: dict[int, int] = {}
    failures: list[str] = []
    crashed = 0
    started = 0
    out_dir = os.path.join(job["dir"], "results")
    os.makedirs(out_dir, exist_ok=True)

    def reap() -> None:
        nonlocal crashed
        pid, status = os.wait()
        k = running.pop(pid)
        code = os.waitstatus_to_exitcode(status)
        if code < 0:
            crashed += 1
            failures.append(f"process {k} died of signal {-code}")
        elif code:
            failures.append(Path(out_dir, str(k)).read_text() if Path(out_dir, str(k)).exists() else f"exit {code}")

    while started < job["processes"] or running:
        if started < job["processes"] and len(running) < job["concurrent"]:
            pid = os.fork()
            if pid == 0:
                code = 0
                try:
                    err = _race_one(job, started)
                    if err is not None:
                        Path(out_dir, str(started)).write_text(err)
                        code = 1
                except BaseException as e:
                    Path(out_dir, str(started)).write_text(f"{type(e).__name__}: {e}")
                    code = 1
                os._exit(code)
            running[pid] = started
            started += 1
        else:
            reap()
    return {"processes": started, "failures": failures, "crashed": crashed}


def _run_child(job: dict[str, Any], timeout: float = BOUND) -> dict[str, Any]:
    """Run ``job`` in a child process; its JSON result, or an assertion that
    tells a crash (negative status) from a failure and a hang."""
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    try:
        done = subprocess.run([sys.executable, __file__, json.dumps(job)], env=env, capture_output=True, text=True,
                              timeout=timeout, cwd=ROOT)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"child {job['mode']} did not finish in {timeout} s (a hang)") from None
    assert done.returncode >= 0, f"child {job['mode']} crashed (signal {-done.returncode}):\n{done.stderr[-3000:]}"
    assert done.returncode == 0, f"child {job['mode']} failed ({done.returncode}):\n{done.stderr[-3000:]}"
    return json.loads(done.stdout.strip().splitlines()[-1])


# -- fixtures ------------------------------------------------------------------


def _opts(endpoint: str, srv: Any, **over: Any) -> dict[str, Any]:
    o = {"endpoint_url": endpoint, "access_key_id": srv.access_key, "secret_access_key": srv.secret_key}
    o.update(over)
    return o


@pytest.fixture(scope="module")
def pushed(s3server, tmp_path_factory) -> tuple[str, Path]:
    pytest.importorskip("obstore")
    from loaderx.io import remote

    local = tmp_path_factory.mktemp("faults-data") / "dense"
    loaderx.from_numpy(str(local), dense(), codec="raw")
    url = f"s3://{s3server.bucket}/faults-{uuid.uuid4().hex[:10]}/dense"
    remote.push(local, url, **_opts(s3server.endpoint, s3server))
    return url, local


@pytest.fixture()
def proxy(s3server):
    from faultproxy import FaultProxy

    with FaultProxy(s3server.endpoint) as px:
        yield px


# -- tests ---------------------------------------------------------------------


def test_a_page_flipped_in_transit_is_an_error_and_the_process_lives(s3server, pushed, proxy, tmp_path):
    """A chunk page whose bytes fail their check (a byte flipped on every
    fetch) is CorruptStoreError naming the object, and a garbage collection
    afterwards does not crash the process (a memoryview over the response,
    still exported to the native check when the exception's frames were
    collected, crashed CPython 3.11 and 3.12 here)."""
    url, _ = pushed
    proxy.add("flip", path=r"\.chunk$", ranged=True, times=10**6, offset=0)
    got = _run_child({"mode": "corrupt", "url": url, "dir": str(tmp_path / "cache"),
                      "storage": _opts(proxy.endpoint, s3server, timeout=4, retries=2)})
    assert len(got["errors"]) == 3
    for e in got["errors"]:
        assert e is not None and f"{url}/0.chunk" in e, got
    assert proxy.applied.get("flip", 0) >= 3


def test_the_first_read_from_many_threads_of_a_fresh_process_sees_no_false_error(s3server, pushed, tmp_path):
    """A dataset whose native handle opens with its first use (the library
    not loaded when it was made) is never readable before its guard
    exists: 200 fresh processes, each of whose first loaderx call is a read
    from 8 threads at once of a dataset not in its cache, all read right
    (a handle published before its guard let a second thread read the
    mirror's holes: false CorruptStoreErrors)."""
    url, _ = pushed
    got = _run_child({"mode": "race", "url": url, "dir": str(tmp_path / "caches"), "processes": 200,
                      "concurrent": 8, "threads": 8, "storage": _opts(s3server.endpoint, s3server)}, timeout=240)
    assert got["processes"] == 200
    assert got["failures"] == [], f"{len(got['failures'])} of 200 processes failed: {got['failures'][:5]}"


@pytest.mark.parametrize("name", ["meta.zr", "schema.msgpack"])
def test_a_small_file_flipped_in_transit_is_fetched_again_not_cached(s3server, pushed, proxy, tmp_path, name):
    """A byte flipped in a small file downloaded at open is caught by its
    own checksum and the file downloaded again: the open succeeds, and a
    fresh process on the same cache reads right (the mirror was never
    poisoned)."""
    url, _ = pushed
    proxy.add("flip", path=re.escape(name) + "$", ranged=False, times=1, offset=16 if name == "meta.zr" else 5)
    job = {"mode": "read", "url": url, "dir": str(tmp_path / "cache"), "batches": [[0, 1, 700, 2047]],
           "storage": _opts(proxy.endpoint, s3server, timeout=4, retries=2)}
    assert _run_child(job)["passes"] == [None]
    assert proxy.applied == {"flip": 1}
    assert _run_child(job)["passes"] == [None]


def test_a_small_file_damaged_in_every_download_names_the_object(s3server, pushed, proxy, tmp_path):
    url, _ = pushed
    proxy.add("flip", path=r"meta\.zr$", ranged=False, times=10**6, offset=16)
    job = {"mode": "read", "url": url, "dir": str(tmp_path / "cache"), "batches": [[0]],
           "storage": _opts(proxy.endpoint, s3server, timeout=4, retries=2)}
    (err,) = _run_child(job)["passes"]
    assert err is not None and err.startswith("CorruptStoreError") and f"{url}/meta.zr" in err, err
    assert "in each of 3 downloads" in err and "/trees/" not in err
    proxy.clear()
    assert _run_child(job)["passes"] == [None]  # nothing of the damaged downloads was cached


@pytest.mark.parametrize("name", ["meta.zr", "schema.msgpack"])
def test_a_mirror_damaged_on_disk_is_repaired_in_place(s3server, pushed, tmp_path, name):
    """A small file of a mirror damaged on disk after it was cached is
    found at the next open and downloaded again over it, in a fresh process
    and in the same one once its datasets closed: no ``cache clear``."""
    url, _ = pushed
    cache = tmp_path / "cache"
    job = {"mode": "read", "url": url, "dir": str(cache), "batches": [[3, 4]],
           "storage": _opts(s3server.endpoint, s3server)}
    assert _run_child(job)["passes"] == [None]
    (path,) = [p for p in cache.rglob(name) if "/data/" in str(p)]

    def damage() -> None:
        b = bytearray(path.read_bytes())
        b[len(b) // 2] ^= 0x40
        path.write_bytes(bytes(b))

    damage()
    got = _run_child(job)
    assert got["passes"] == [None] and got["stats"]["repaired_files"] == 1, got
    damage()
    assert _run_child({**job, "again": True, "damage": str(path)})["passes"] == [None, None]


def test_cache_clear_works_once_the_datasets_are_closed(s3server, pushed, tmp_path):
    url, _ = pushed
    job = {"mode": "read", "url": url, "dir": str(tmp_path / "cache"), "batches": [[5]], "clear": True,
           "storage": _opts(s3server.endpoint, s3server)}
    got = _run_child(job)
    assert got["passes"] == [None] and got["busy"] == [] and len(got["cleared"]) == 1, got


def test_a_working_set_under_the_limit_is_never_fetched_again(s3server, pushed, proxy, tmp_path):
    """Warm reads refresh their pages' recency: 12 hot pages read every
    round in a cache of 16 chunk pages, beside a cold page a round, are
    fetched once; and with the server gone they keep reading."""
    url, _ = pushed
    table = 3 * (16 << 10)  # the dataset's record table, three pages
    cache = loaderx.CacheOptions(dir=str(tmp_path / "cache"), page_size=PAGE, table_page_size=16 << 10,
                                 limit=16 * PAGE + table, prefetch=0)
    ds = loaderx.DenseDataset(url, cache=cache, storage_options=_opts(proxy.endpoint, s3server, timeout=2, retries=0))
    want = dense()
    hot = [np.arange(64 * k, 64 * k + 64, 8) for k in range(12)]
    fetches, expected = [], []
    tables = {int(i) * 24 // (16 << 10) for idx in hot for i in idx}  # the table pages the hot records need
    for r in range(20):
        before = ds.cache_stats()["fetches"]
        for idx in hot:
            assert np.array_equal(ds.gather(idx), want[idx])
        cold = np.arange(64 * (12 + r), 64 * (12 + r) + 4)  # a page never read before
        assert np.array_equal(ds.gather(cold), want[cold])
        fetches.append(ds.cache_stats()["fetches"] - before)
        # the cold page, and the table page its entries start when they are the first in it
        new = {int(i) * 24 // (16 << 10) for i in cold} - tables
        tables |= new
        expected.append(1 + len(new))
    assert fetches[0] >= 13 and fetches[1:] == expected[1:], (fetches, expected)
    proxy.add("reset", method=None, path=None, times=10**6)  # the server is gone
    for idx in hot:
        assert np.array_equal(ds.gather(idx), want[idx])
    ds.close()


def test_a_page_written_but_not_marked_is_freed_at_the_next_open(s3server, pushed, tmp_path):
    """A reader killed between a page's write and its mark leaves bytes the
    page state does not count; the next open frees them."""
    url, _ = pushed
    cache = tmp_path / "cache"
    job = {"mode": "read", "url": url, "dir": str(cache), "batches": [[0]],
           "storage": _opts(s3server.endpoint, s3server)}
    assert _run_child(job)["passes"] == [None]
    (chunk,) = [p for p in cache.rglob("0.chunk") if "/data/" in str(p)]
    fd = os.open(chunk, os.O_RDWR)
    try:
        os.pwrite(fd, b"\x5a" * PAGE, 7 * PAGE)  # page 7: written, never marked
        os.fsync(fd)
        assert os.lseek(fd, 7 * PAGE, os.SEEK_DATA) == 7 * PAGE
    finally:
        os.close(fd)
    assert _run_child(job)["passes"] == [None]
    fd = os.open(chunk, os.O_RDONLY)
    try:
        try:
            at = os.lseek(fd, 7 * PAGE, os.SEEK_DATA)
        except OSError:
            at = None  # no data past it
        assert at is None or at >= 8 * PAGE, at
    finally:
        os.close(fd)


# -- the fault suite -------------------------------------------------------------

#: the faults of the suite: (kind, proxy rule arguments); each trial picks
#: one, for one request (transient: the read must succeed) or for every
#: matching request (persistent: a clear error naming the object)
FAULTS = [
    ("reset", {"path": r"\.chunk$"}),
    ("stall", {"path": r"\.chunk$", "seconds": 5.0}),
    ("truncate", {"path": r"\.chunk$"}),
    ("short", {"path": r"\.chunk$"}),
    ("status", {"path": r"\.chunk$", "code": 503}),
    ("status", {"path": r"\.(chunk|tab)$", "code": 500}),
    ("latency", {"path": None, "seconds": 0.1}),
    ("flip", {"path": r"\.chunk$", "ranged": True}),
    ("flip", {"path": r"\.tab$", "ranged": True}),
    ("flip", {"path": r"meta\.zr$", "ranged": False, "offset": 16}),
    ("flip", {"path": r"schema\.msgpack$", "ranged": False, "offset": 5}),
    ("reset", {"path": None, "method": None}),  # the endpoint gone: every request reset
    ("truncate", {"path": r"meta\.zr$|schema\.msgpack$", "ranged": False}),
]
TRIALS = 208
LANES = 4
#: the client's limits in the suite: a stall costs a second an attempt
STORAGE = {"timeout": 1.0, "retries": 2}


class _Lane:
    """A worker process of the fault suite with a fault proxy of its own."""

    def __init__(self, srv: Any, job: dict[str, Any], n: int) -> None:
        from faultproxy import FaultProxy

        self.proxy = FaultProxy(srv.endpoint)
        self.job = {**job, "dir": os.path.join(job["dir"], f"lane{n}"),
                    "storage": _opts(self.proxy.endpoint, srv, **STORAGE)}
        os.makedirs(self.job["dir"])
        env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
        self.proc = subprocess.Popen([sys.executable, __file__, json.dumps({**self.job, "mode": "lane"})],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env, cwd=ROOT)
        assert self._line(60) == "ready"

    def _line(self, timeout: float) -> str:
        import select

        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not ready:
            raise AssertionError(f"lane {self.job['dir']}: no answer in {timeout} s (a hang)")
        return self.proc.stdout.readline().strip()

    def _wait_file(self, path: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not os.path.exists(path):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"{path} did not appear in {timeout} s (a hang)")
            time.sleep(0.005)

    def trial(self, k: int, kind: str, rule: dict[str, Any], times: int) -> dict[str, Any]:
        """Trial ``k``: ``kind`` for ``times`` matching requests while a
        fresh process reads; lifted; the same process reads again; then a
        fresh process on the same cache. What each saw."""
        base = os.path.join(self.job["dir"], f"under-{k}")
        self.proxy.clear()
        self.proxy.add(kind, **{"method": "GET", "times": times, **rule})
        self.proc.stdin.write(f"under {k}\n")
        self.proc.stdin.flush()
        assert self._line(30).startswith("pid")
        self._wait_file(base + ".a", BOUND)
        self.proxy.clear()
        Path(base + ".cleared").touch()
        code = int(self._line(BOUND).split()[1])
        res = {"code": code, "under": _load(base + ".a"), "same": _load(base + ".b"), "crash": _text(base + ".x")}
        self.proc.stdin.write(f"fresh {k}\n")
        self.proc.stdin.flush()
        assert self._line(30).startswith("pid")
        base2 = os.path.join(self.job["dir"], f"fresh-{k}")
        res["fresh_code"] = int(self._line(BOUND).split()[1])
        res["fresh"] = _load(base2 + ".a")
        res["fresh_crash"] = _text(base2 + ".x")
        return res

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.proc.stdin.close()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proxy.close()


def _load(path: str) -> Any:
    return json.loads(Path(path).read_text()) if os.path.exists(path) else None


def _text(path: str) -> str | None:
    return Path(path).read_text() if os.path.exists(path) else None


def _judge(url: str, kind: str, rule: dict[str, Any], times: int, res: dict[str, Any]) -> list[str]:
    """What is wrong with a trial's outcome (empty: nothing)."""
    bad = []
    if res["code"] < 0 or res["fresh_code"] < 0:
        bad.append(f"crash (exit {res['code']}, fresh {res['fresh_code']})")
    if res["code"] or res["fresh_code"] or res["crash"] or res["fresh_crash"]:
        bad.append(f"failed: {res['crash'] or res['fresh_crash'] or (res['code'], res['fresh_code'])}")
    for name in ("under", "same", "fresh"):
        got = res.get(name)
        if got is None:
            bad.append(f"no result {name}")
            continue
        if got["wrong"] is not None:
            bad.append(f"WRONG DATA ({name}) for records {got['wrong']}")
        if got["over"]:
            bad.append(f"cache over its limit plus one batch ({name}): {got['over']}")
        err = got["error"]
        if name != "under" and err is not None:
            bad.append(f"no recovery ({name}): {err}")
        if name == "under" and err is not None:
            if times == 1:
                bad.append(f"a transient {kind} was an error: {err}")
            if url not in err or "/trees/" in err:
                bad.append(f"an error that does not name the object: {err}")
    return bad


def test_the_fault_suite(s3server, pushed, tmp_path):
    """208 trials of 13 faults through the fault proxy, 4 lanes at once,
    each: a fresh process reads under the fault (one request, or every
    matching one), then in the same process once it is lifted, then a fresh
    process on the same cache. Asserted per trial: the right records or a
    clear error naming the object (and a transient fault no error at all),
    never wrong data, no crash, no hang, recovery in the same process and
    a fresh one, and the cache within its limit plus one batch."""
    import concurrent.futures

    url, _ = pushed
    rng = np.random.default_rng(30)
    limit = 16 * PAGE
    batches = [[np.sort(rng.choice(N, 8, replace=False)).tolist() for _ in range(3)] for _ in range(TRIALS)]
    job = {"url": url, "dir": str(tmp_path), "limit": limit, "batches": batches,
           "batch_bytes": 2 * 8 * PAGE + 3 * (16 << 10)}  # a record may span two pages
    plan = [(k, *FAULTS[k % len(FAULTS)], 1 if (k // len(FAULTS)) % 2 == 0 else 10**6) for k in range(TRIALS)]
    lanes = [_Lane(s3server, job, n) for n in range(LANES)]
    results: dict[int, list[str]] = {}
    took: dict[int, float] = {}
    try:
        def run(n: int) -> None:
            for k, kind, rule, times in plan[n::LANES]:
                t0 = time.monotonic()
                res = lanes[n].trial(k, kind, rule, times)
                results[k] = _judge(url, kind, rule, times, res)
                took[k] = time.monotonic() - t0

        with concurrent.futures.ThreadPoolExecutor(LANES) as pool:
            for f in [pool.submit(run, n) for n in range(LANES)]:
                f.result()
    finally:
        for lane in lanes:
            lane.close()
    if os.environ.get("LOADERX_FAULT_TIMES"):
        by: dict[str, list[float]] = {}
        for k, t in took.items():
            by.setdefault(f"{plan[k][1]} {plan[k][2].get('path')} x{plan[k][3]}", []).append(t)
        for name, ts in sorted(by.items(), key=lambda kv: -sum(kv[1])):
            print(f"{sum(ts):7.1f} s  {len(ts):3d}  {name}")
    assert len(results) == TRIALS
    failed = {k: v for k, v in results.items() if v}
    assert not failed, "\n".join(f"trial {k} ({plan[k][1]} {plan[k][2]} x{plan[k][3]}): {v}"
                                  for k, v in sorted(failed.items())[:12])


def _serving(srv: Any, url: str, timeout: float = 60) -> None:
    """Wait until the restarted server serves the dataset's objects again
    (its gateway answers before its volume server does, with HTTP 500)."""
    import boto3

    s3 = boto3.client("s3", endpoint_url=srv.endpoint, aws_access_key_id=srv.access_key,
                      aws_secret_access_key=srv.secret_key, region_name=srv.region)
    key = url.split("/", 3)[3] + "/0.chunk"
    deadline = time.monotonic() + timeout
    while True:
        try:
            s3.get_object(Bucket=srv.bucket, Key=key, Range="bytes=0-15")["Body"].read()
            return
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def test_the_server_killed_and_restarted(s3server, pushed, tmp_path):
    """The real server killed in the middle of reads and started again:
    pages cached keep reading, the others are a RemoteError naming the
    object, and everything reads once it is back, in the same process and
    a fresh one."""
    url, _ = pushed
    want = dense()
    cache = loaderx.CacheOptions(dir=str(tmp_path / "cache"), page_size=PAGE, table_page_size=16 << 10)
    storage = _opts(s3server.endpoint, s3server, **STORAGE)
    ds = loaderx.DenseDataset(url, cache=cache, storage_options=storage)
    for trial in range(2):
        warm = np.arange(64 * trial * 4, 64 * trial * 4 + 64)
        assert np.array_equal(ds.gather(warm), want[warm])
        s3server.stop()
        try:
            assert np.array_equal(ds.gather(warm), want[warm])  # cached
            cold = np.arange(64 * (trial * 4 + 2), 64 * (trial * 4 + 2) + 8)
            t0 = time.monotonic()
            with pytest.raises(RemoteError) as e:
                ds.gather(cold)
            assert time.monotonic() - t0 < 20
            assert f"{url}/0.chunk" in str(e.value) and "refused" in str(e.value), e.value
        finally:
            s3server.start()
            _serving(s3server, url)
        assert np.array_equal(ds.gather(cold), want[cold])
        got = _run_child({"mode": "read", "url": url, "dir": str(tmp_path / "cache"), "storage": storage,
                          "batches": [cold.tolist(), warm.tolist()], "page_size": PAGE})
        assert got["passes"] == [None]
    ds.close()


if __name__ == "__main__":
    t0 = time.monotonic()
    out = _child_main(json.loads(sys.argv[1]))
    out["seconds"] = time.monotonic() - t0
    print(json.dumps(out))
