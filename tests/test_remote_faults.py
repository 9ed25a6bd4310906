"""Datasets in object storage under network faults, through the suite's own
fault proxy (tests/faultproxy.py) in front of its real S3 server
(tests/s3server.py).

Every check here runs in child processes, so that a crash is seen as what
it is (a negative exit status) rather than taking the suite down, and a
fresh process proves what a cache left on disk is worth. Run as a script,
this file is such a child: ``python3 tests/test_remote_faults.py '<json>'``.
"""

from __future__ import annotations

import gc
import json
import os
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
from loaderx.errors import CorruptStoreError  # noqa: E402

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
    raise SystemExit(f"unknown mode {mode!r}")


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


if __name__ == "__main__":
    t0 = time.monotonic()
    out = _child_main(json.loads(sys.argv[1]))
    out["seconds"] = time.monotonic() - t0
    print(json.dumps(out))
