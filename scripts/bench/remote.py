"""The remote layer: one dataset on an S3 server, read by loaderx, MosaicML
Streaming and LitData, against loaderx reading the same store from local
disk.

One SeaweedFS server (tests/s3server.py) on this machine serves every
reader. The records are LLM token rows (int32[2048], Zipf ids below 50,000,
data.make_token_rows), ``--remote-mib`` MiB of them (256 by default), written
once per library with its defaults and uploaded under ``s3://BUCKET/bench/``:

* loaderx: ``from_numpy(dir, rows)`` (codec ``auto``), uploaded with
  ``loaderx.io.remote.push``;
* MosaicML Streaming: ``MDSWriter`` into a local directory (no compression,
  its default 64 MB shards; contenders/streaming.py), uploaded with boto3;
* LitData: ``optimize()`` into a local directory (one worker, 64 MB chunks,
  in a process of its own; contenders/litdata.py), uploaded with boto3.

Every reader then runs one epoch in a fresh interpreter (``_remote-child``),
one after the other: random batches of ``--batch`` (256) records in the
reader's own shuffle, every record exactly once. loaderx reads through a
default ``DataLoader(epoch=True)``, from the local store (``loaderx local``,
the reference) and from the URL with a chunk cache in a fresh directory
(``cold``), then again in a new process over the same cache directory
(``warm``). The peers iterate their own ``StreamingDataset(shuffle=True)``
in the main process, ``batch`` rows stacked into one array per batch; cold
and warm as for loaderx. The clock starts at the dataset's constructor (the
library already imported) and stops after the last batch, so a cold figure
includes fetching the index. The child checks that the epoch read every
record once: the fingerprints of the rows it got (32 tokens each, enough to
tell which record a row is) must be, as a multiset, those of the rows
written.

Bytes fetched per epoch are divided by the dataset's stored size (the sum of
its objects on the server, per library). loaderx counts its own
(``cache_stats()["fetched_bytes"]``); for a peer it is the size of the files
its epoch wrote into its cache directory (after a cold epoch, the whole
directory), which is what it downloaded: both keep what they fetch on disk.

How each peer finds the server: Streaming reads the endpoint from
``S3_ENDPOINT_URL`` and the keys from ``AWS_*``; LitData takes
``storage_options`` (endpoint_url, aws_access_key_id, aws_secret_access_key,
region_name), which it hands to boto3's client. LitData 0.2.76 fetches
chunks through obstore when it is installed, with an obstore store built
from that client's endpoint and client options of its own that leave out
``allow_http``, so an ``http://`` endpoint fails ("builder error"); the child
adds ``allow_http=True`` to those options (``_LITDATA_HTTP``), which keeps
its default download path. Against an ``https://`` endpoint nothing is
changed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np
from data import TOKEN_LEN, make_token_rows
from report import MiB, fmt_ratio, human_bytes, log, median, out, table

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(BENCH_DIR))

#: the key prefix of every dataset of this layer, under the server's bucket
PREFIX = "bench"
#: the libraries, in table order; the peers are every one but loaderx
LIBRARIES = ("loaderx", "streaming", "litdata")
PEERS = ("streaming", "litdata")
#: the rows of the table, in order: (name, library, pass)
ROWS = (
    ("loaderx local", "loaderx", "local"),
    ("loaderx s3 cold", "loaderx", "cold"),
    ("loaderx s3 warm", "loaderx", "warm"),
    ("streaming cold", "streaming", "cold"),
    ("streaming warm", "streaming", "warm"),
    ("litdata cold", "litdata", "cold"),
    ("litdata warm", "litdata", "warm"),
)
#: one round's results: row name -> its child's result (or {"error"})
Round = dict[str, dict[str, Any]]

# ---------------------------------------------------------------------------
# what the child checks: a fingerprint per row

#: the tokens of a row its fingerprint reads, and their odd 64-bit weights
_FP_COLS = np.linspace(0, TOKEN_LEN - 1, 32).astype(np.intp)
_FP_WEIGHTS = np.random.default_rng(97).integers(1, 1 << 62, 32, dtype=np.uint64) | np.uint64(1)


def fingerprints(rows: np.ndarray) -> np.ndarray:
    """One uint64 per row: a weighted sum, modulo 2**64, of 32 of its tokens.

    It tells which of the rows written a row is, not whether each of its
    bytes is right (that is each library's own check): two random Zipf rows
    agree on one token with probability about 1/20, so on all 32 with about
    1e-40. A duplicated, missing or foreign row shows, at a cost (a 32-column
    take per batch) that does not weigh on the epoch, where hashing whole
    rows would cost a fast reader a few percent.
    """
    return np.asarray(rows)[:, _FP_COLS].astype(np.uint64) @ _FP_WEIGHTS


def _compare(got: np.ndarray, expected: np.ndarray) -> dict[str, int]:
    """How far the multiset ``got`` is from ``expected``: the rows of
    ``expected`` never read, and the rows read that are not (or not that
    often) in it."""
    ue, ce = np.unique(expected, return_counts=True)
    ug, cg = np.unique(got, return_counts=True)
    _, ie, ig = np.intersect1d(ue, ug, assume_unique=True, return_indices=True)
    matched = int(np.minimum(ce[ie], cg[ig]).sum())
    return {"missing": len(expected) - matched, "wrong": len(got) - matched}


# ---------------------------------------------------------------------------
# the child: one epoch of one reader


def _batched(rows: Iterable[np.ndarray], batch: int) -> Iterator[np.ndarray]:
    """Rows stacked into arrays of ``batch`` (the last one shorter)."""
    buf: list[np.ndarray] = []
    for r in rows:
        buf.append(r)
        if len(buf) == batch:
            yield np.stack(buf)
            buf = []
    if buf:
        yield np.stack(buf)


class _Reader:
    """One library's epoch: the constructor imports the library (outside the
    clock), ``batches()`` opens the dataset and yields its batches (inside
    the clock), ``finish()`` closes it and returns what it counted."""

    def __init__(self, cfg: dict[str, Any]) -> None:
        self.cfg = cfg

    def batches(self) -> Iterator[np.ndarray]:
        raise NotImplementedError

    def finish(self) -> dict[str, Any]:
        return {}


class _LoaderxReader(_Reader):
    def __init__(self, cfg: dict[str, Any]) -> None:
        super().__init__(cfg)
        import loaderx

        self.lx: Any = loaderx
        if cfg["pass"] != "local" and not hasattr(loaderx, "CacheOptions"):
            raise RuntimeError(f"the loaderx at {os.path.dirname(loaderx.__file__)} cannot read s3:// URLs "
                               "(it has no loaderx.CacheOptions)")
        self.ds: Any = None
        self.loader: Any = None

    def batches(self) -> Iterator[np.ndarray]:
        lx, cfg = self.lx, self.cfg
        if cfg["pass"] == "local":
            self.ds = lx.DenseDataset(cfg["path"])
        else:
            self.ds = lx.DenseDataset(cfg["url"], cache=lx.CacheOptions(dir=cfg["cache"]),
                                      storage_options=_loaderx_options(cfg["endpoint"]))
        self.loader = lx.DataLoader({"tokens": self.ds}, batch_size=cfg["batch"], seed=0, epoch=True)
        for b in self.loader:
            yield b["tokens"]

    def finish(self) -> dict[str, Any]:
        got: dict[str, Any] = {}
        if self.loader is not None:
            self.loader.close()
        if self.ds is not None:
            if self.cfg["pass"] != "local":
                stats = self.ds.cache_stats()
                got = {"fetched_bytes": int(stats["fetched_bytes"]), "cached_bytes": int(stats["cached_bytes"])}
            self.ds.close()
        return got


class _StreamingReader(_Reader):
    def __init__(self, cfg: dict[str, Any]) -> None:
        super().__init__(cfg)
        from streaming import StreamingDataset
        from streaming.base.util import clean_stale_shared_memory

        clean_stale_shared_memory()  # what a killed earlier child may have left
        self.cls: Any = StreamingDataset

    def batches(self) -> Iterator[np.ndarray]:
        cfg = self.cfg
        ds = self.cls(remote=cfg["url"], local=cfg["cache"], shuffle=True, batch_size=cfg["batch"])
        yield from _batched((s["x"] for s in ds), cfg["batch"])


#: the obstore client option LitData 0.2.76 leaves out, without which its
#: chunk downloads refuse an http:// endpoint
_LITDATA_HTTP = {"allow_http": True}


class _LitDataReader(_Reader):
    def __init__(self, cfg: dict[str, Any]) -> None:
        super().__init__(cfg)
        from litdata import StreamingDataset

        self.cls: Any = StreamingDataset
        if cfg["endpoint"].startswith("http://"):
            from litdata.streaming import downloader

            opts = getattr(downloader, "_OBSTORE_CLIENT_OPTIONS", None)
            if isinstance(opts, dict):  # other versions may build their client otherwise
                opts.update(_LITDATA_HTTP)

    def batches(self) -> Iterator[np.ndarray]:
        cfg, env = self.cfg, os.environ
        options = {"endpoint_url": cfg["endpoint"], "aws_access_key_id": env["AWS_ACCESS_KEY_ID"],
                   "aws_secret_access_key": env["AWS_SECRET_ACCESS_KEY"], "region_name": env["AWS_REGION"]}
        ds = self.cls(input_dir=cfg["url"], cache_dir=cfg["cache"], shuffle=True, storage_options=options)
        yield from _batched((s["x"] for s in ds), cfg["batch"])


_READERS: dict[str, Callable[[dict[str, Any]], _Reader]] = {
    "loaderx": _LoaderxReader, "streaming": _StreamingReader, "litdata": _LitDataReader,
}


def _loaderx_options(endpoint: str) -> dict[str, Any]:
    """loaderx's S3 options for the server of this run (keys from the environment)."""
    env = os.environ
    return {"endpoint_url": endpoint, "access_key_id": env["AWS_ACCESS_KEY_ID"],
            "secret_access_key": env["AWS_SECRET_ACCESS_KEY"], "region": env["AWS_REGION"],
            "allow_http": endpoint.startswith("http://")}


def remote_child(cfg: dict[str, Any]) -> None:
    """In the child: one epoch of ``cfg["library"]``; prints ``RESULT {json}``."""
    import warnings

    warnings.filterwarnings("ignore")
    try:
        res = _child_epoch(cfg)
    except Exception as e:  # the row says what failed; the layer goes on
        res = {"error": f"{type(e).__name__}: {' '.join(str(e).split())[:400]}"}
    print("RESULT " + json.dumps(res), flush=True)


def _child_epoch(cfg: dict[str, Any]) -> dict[str, Any]:
    expected = np.load(cfg["fingerprints"])
    reader = _READERS[cfg["library"]](cfg)
    got: list[np.ndarray] = []
    first = None
    t0 = time.perf_counter()
    for b in reader.batches():
        if first is None:
            first = time.perf_counter() - t0
        if len(b) > cfg["batch"] or b.shape[1:] != (TOKEN_LEN,) or b.dtype != np.int32:
            raise AssertionError(f"a batch of {b.dtype}{list(b.shape)}, expected at most {cfg['batch']} rows of "
                                 f"int32[{TOKEN_LEN}]")
        got.append(fingerprints(b))
    seconds = time.perf_counter() - t0
    counted = reader.finish()
    rows = np.concatenate(got) if got else np.empty(0, np.uint64)
    return {"records": len(rows), "batches": len(got), "seconds": seconds, "first_batch_s": first,
            **_compare(rows, expected), **counted}


# ---------------------------------------------------------------------------
# the parent: the server, the datasets, the children


def _server_args(server: Any) -> argparse.Namespace:
    """What s3client.boto3_client takes."""
    return argparse.Namespace(endpoint=server.endpoint, access_key=server.access_key,
                              secret_key=server.secret_key, region=server.region)


def _stored_bytes(s3: Any, bucket: str, prefix: str) -> tuple[int, int]:
    """(bytes, objects) under ``prefix/`` on the server."""
    total = count = 0
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix + "/"):
        for obj in page.get("Contents", []):
            total += int(obj["Size"])
            count += 1
    return total, count


def _upload_dir(s3: Any, bucket: str, local: str, prefix: str) -> None:
    """Every file under ``local`` as ``prefix/<its relative path>``, index files last."""
    files = [os.path.join(r, f) for r, _d, fs in os.walk(local) for f in fs]
    for p in sorted(files, key=lambda p: (os.path.basename(p) == "index.json", p)):
        s3.upload_file(p, bucket, f"{prefix}/{os.path.relpath(p, local)}")


def _put_loaderx(arr: np.ndarray, local: str, url: str, server: Any) -> str:
    import loaderx
    from loaderx.io import remote

    loaderx.from_numpy(local, arr)
    remote.push(local, url, endpoint_url=server.endpoint, access_key_id=server.access_key,
                secret_access_key=server.secret_key, region=server.region, allow_http=True)
    ds = loaderx.DenseDataset(local)
    try:
        return f"codec `auto` chose {ds.stats()['codec']}"
    finally:
        ds.close()


class _Unavailable(RuntimeError):
    """A peer's library does not import."""


def _put_peer(store_cls: Any, arr: np.ndarray, local: str, url: str, server: Any) -> str:
    from contenders.base import stdout_to_stderr
    from s3client import boto3_client

    ok, why = store_cls.available()
    if not ok:
        raise _Unavailable(f"{why} (install: pip install {store_cls.pip})")
    with stdout_to_stderr():  # its progress output is not the report
        store_cls(local, arr.shape[1:], arr.dtype, 0).write(arr)
    _upload_dir(boto3_client(_server_args(server)), server.bucket, local, url.split("/", 3)[3])
    return "no compression (its default)"


def _put(name: str, arr: np.ndarray, root: str, server: Any) -> dict[str, Any]:
    """Write ``arr`` with library ``name`` and upload it; {"url", "local",
    "stored_bytes", "objects", "note"}, or {"error"} when that failed."""
    from s3client import boto3_client

    os.makedirs(os.path.join(root, "src"), exist_ok=True)
    local = os.path.join(root, "src", name)
    url = f"s3://{server.bucket}/{PREFIX}/{name}"
    log(f"[remote] writing and uploading {name} ...")
    try:
        if name == "loaderx":
            note = _put_loaderx(arr, local, url, server)
        elif name == "streaming":
            from contenders.streaming import MosaicStreaming

            note = _put_peer(MosaicStreaming, arr, local, url, server)
        else:
            from contenders.litdata import LitData

            note = _put_peer(LitData, arr, local, url, server)
        stored, objects = _stored_bytes(boto3_client(_server_args(server)), server.bucket, f"{PREFIX}/{name}")
    except _Unavailable as e:
        return {"error": f"not importable: {e}"}
    except Exception as e:
        return {"error": f"writing or uploading failed: {type(e).__name__}: {' '.join(str(e).split())[:300]}"}
    return {"url": url, "local": local, "stored_bytes": stored, "objects": objects, "note": note}


def _child_env(server: Any) -> dict[str, str]:
    env = dict(os.environ)
    if env.get("PYTHONPATH"):  # the child starts in REPO: keep relative entries pointing where they did
        env["PYTHONPATH"] = os.pathsep.join(os.path.abspath(p) for p in env["PYTHONPATH"].split(os.pathsep) if p)
    env.update(server.env())
    env["S3_ENDPOINT_URL"] = server.endpoint  # MosaicML Streaming's name for it
    return env


def _end_session(proc: subprocess.Popen[str]) -> None:
    """Whatever is left of the child's session (it was started in a new one)."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            return
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=3)


def run_child(cfg: dict[str, Any], env: dict[str, str], timeout: float) -> dict[str, Any]:
    """One reader's epoch in a fresh interpreter: its RESULT, or {"error"}."""
    cmd = [sys.executable, BENCH_DIR, "_remote-child", json.dumps(cfg)]
    timed_out = False
    with tempfile.TemporaryFile(mode="w+") as errf:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=errf, text=True,
                                start_new_session=True, cwd=REPO, env=env)
        try:
            stdout, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            _end_session(proc)
            stdout, _ = proc.communicate()
        finally:
            _end_session(proc)  # threads or processes it left behind
        errf.seek(0)
        err_tail = " | ".join(errf.read().strip().splitlines()[-4:])
    for line in reversed(stdout.splitlines()):
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    if timed_out:
        return {"error": f"no result in {timeout:.0f} s (killed)" + (f": {err_tail[-300:]}" if err_tail else "")}
    return {"error": f"exit code {proc.returncode}" + (f": {err_tail[-400:]}" if err_tail else "")}


def _written_since(path: str, since: float) -> tuple[int, int]:
    """(bytes of the files under ``path`` last written at or after ``since``,
    bytes of all of them)."""
    new = total = 0
    for r, _d, fs in os.walk(path):
        for f in fs:
            try:
                st = os.stat(os.path.join(r, f))
            except OSError:
                continue
            total += st.st_size
            if st.st_mtime >= since:
                new += st.st_size
    return new, total


def _epoch(lib: str, pass_: str, made: dict[str, Any], cache: str, base: dict[str, Any],
           env: dict[str, str], timeout: float) -> dict[str, Any]:
    """One row's epoch in its child, with what its cache directory gained."""
    cfg = {**base, "library": lib, "pass": pass_, "url": made["url"], "path": made["local"], "cache": cache}
    since = time.time()
    res = run_child(cfg, env, timeout)
    if "error" in res:
        return res
    if res["missing"] or res["wrong"]:
        return {"error": f"read {res['records']:,} records: {res['missing']:,} of the {base['records']:,} written "
                         f"missing, {res['wrong']:,} not among them or repeated"}
    if lib != "loaderx":  # what it downloaded: what its epoch wrote into its cache
        res["fetched_bytes"], res["cached_bytes"] = _written_since(cache, since)
    res["samples_per_s"] = res["records"] / res["seconds"]
    return res


def _round(r: int, made: dict[str, Any], root: str, base: dict[str, Any], env: dict[str, str],
           timeout: float) -> Round:
    """Every row once, the libraries in an order rotated by round ``r``; a
    fresh cache directory for each cold epoch, kept for its warm one."""
    got: Round = {}
    groups = ["loaderx local", *LIBRARIES]
    for g in groups[r % len(groups):] + groups[: r % len(groups)]:
        lib = "loaderx" if g == "loaderx local" else g
        if "error" in made[lib]:
            names = [n for n, lb, p in ROWS if lb == lib and (p == "local") == (g == "loaderx local")]
            got.update({n: {"error": made[lib]["error"]} for n in names})
            continue
        if g == "loaderx local":
            got[g] = _epoch(lib, "local", made[lib], "", base, env, timeout)
            log(f"[remote] round {r + 1}: {g} done")
            continue
        cache = os.path.join(root, "cache", f"{lib}-{r}")
        cold = ""
        for name, lb, pass_ in ROWS:
            if lb != lib or pass_ == "local":
                continue
            if pass_ == "warm" and "error" in got[cold]:  # nothing to be warm from
                got[name] = {"error": f"not run: {cold} failed"}
                continue
            got[name] = _epoch(lib, pass_, made[lib], cache, base, env, timeout)
            cold = cold or name
            log(f"[remote] round {r + 1}: {name} done")
        shutil.rmtree(cache, ignore_errors=True)
    return got


def _summarize(per: list[Round], made: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The table's rows and the ratios the checks read, each ratio the
    median of the per-round ratios."""

    def sps(rnd: Round, name: str) -> float | None:
        return rnd.get(name, {}).get("samples_per_s")

    def ratio(a: float | None, b: float | None) -> float | None:
        return a / b if a and b else None

    rows = []
    for name, lib, pass_ in ROWS:
        mine = [rnd[name] for rnd in per if name in rnd]
        ok = [x for x in mine if "error" not in x]
        stored = made[lib].get("stored_bytes")
        row: dict[str, Any] = {"row": name, "library": lib, "pass": pass_,
                               "runs": [x.get("samples_per_s") for x in mine]}
        if not ok:
            row["error"] = next((x["error"] for x in mine), "not run")
            rows.append(row)
            continue
        fetched = median(x.get("fetched_bytes") for x in ok) if pass_ != "local" else None
        loaderx_row = "loaderx s3 " + pass_
        row.update({
            "samples_per_s": median(x["samples_per_s"] for x in ok),
            "first_batch_s": median(x["first_batch_s"] for x in ok),
            "vs_local": median(ratio(sps(rnd, name), sps(rnd, "loaderx local")) for rnd in per),
            "loaderx_vs": None if lib == "loaderx" else median(ratio(sps(rnd, loaderx_row), sps(rnd, name))
                                                               for rnd in per),
            "fetched_bytes": fetched,
            "fetched_x": fetched / stored if fetched is not None and stored else None,
            "cached_bytes": median(x.get("cached_bytes") for x in ok) if pass_ != "local" else None,
            "errors": len(mine) - len(ok),
        })
        rows.append(row)
    by = {r["row"]: r for r in rows}
    best: list[tuple[str, float | None]] = []  # per round: the fastest peer cold, and loaderx cold / it
    for rnd in per:
        peers = [(v, p) for p in PEERS if (v := sps(rnd, f"{p} cold"))]
        if peers:
            top, lead = max(peers)
            best.append((lead, ratio(sps(rnd, "loaderx s3 cold"), top)))
    leads = [p for p, _ in best]
    metrics = {
        "warm_vs_local": by["loaderx s3 warm"].get("vs_local"),
        "cold_vs_peer": median(v for _, v in best),
        "fetched": by["loaderx s3 cold"].get("fetched_x"),
        "best_peer_cold": max(set(leads), key=leads.count) if leads else None,
    }
    return rows, metrics


def bench_remote(args: argparse.Namespace, results: dict[str, Any], tmp: str) -> None:
    """Fills results["remote"]."""
    out("## Object storage")
    out()
    sys.path.insert(0, os.path.join(REPO, "tests"))
    from s3server import S3Server, ServerUnavailable

    root = os.path.join(tmp, "remote")
    os.makedirs(root, exist_ok=True)
    try:
        server = S3Server(os.path.join(root, "s3"))
        took = server.start()
    except (ServerUnavailable, ImportError) as e:  # no weed binary, or no boto3 to make the bucket
        out(f"- skipped: no S3 server ({e})")
        out()
        results["remote"] = {"error": str(e)}
        return
    log(f"[remote] SeaweedFS up in {took:.1f} s at {server.endpoint}")
    try:
        _bench(args, results, root, server)
    finally:
        server.stop()


def _bench(args: argparse.Namespace, results: dict[str, Any], root: str, server: Any) -> None:
    b = args.batch
    n = max(2 * b, args.remote_mib * MiB // (TOKEN_LEN * 4))
    runs = args.remote_runs or args.runs or 1
    arr = make_token_rows(n, seed=41)
    fp_path = os.path.join(root, "fingerprints.npy")
    np.save(fp_path, fingerprints(arr))
    made = {name: _put(name, arr, root, server) for name in LIBRARIES}
    del arr
    out(f"{n:,} token rows of int32[{TOKEN_LEN}] ({human_bytes(n * TOKEN_LEN * 4)}) on one local SeaweedFS "
        "server, written with each library's defaults and uploaded; one epoch per row in a fresh process, "
        f"random batches of {b} in each reader's own shuffle, every record once (checked), {runs} round(s). "
        "loaderx: a default `DataLoader(epoch=True)` over `DenseDataset(path)` (local) or "
        "`DenseDataset(url, cache=CacheOptions(dir=...), storage_options=...)`; the peers: their "
        "`StreamingDataset(shuffle=True)` iterated, rows stacked into batches. Cold: a fresh cache directory; "
        "warm: a new process on the same one. The clock runs from the dataset's constructor to the last batch. "
        "Fetched: loaderx's `cache_stats()[\"fetched_bytes\"]`, a peer's bytes written into its cache "
        "directory during the epoch, over the dataset's stored size on the server. Streaming finds the server "
        "through `S3_ENDPOINT_URL`, LitData through `storage_options` (boto3's endpoint_url and keys), with "
        "`allow_http` added to the options of its obstore downloads, which refuse an http:// endpoint "
        "without it.")
    out()
    for name in LIBRARIES:
        m = made[name]
        if "error" in m:
            out(f"- {name}: {m['error']}")
        else:
            out(f"- {name}: {human_bytes(m['stored_bytes'])} stored in {m['objects']} objects; {m['note']}")
    out()
    base = {"batch": b, "records": n, "fingerprints": fp_path, "endpoint": server.endpoint}
    env = _child_env(server)
    per = [_round(r, made, root, base, env, args.remote_timeout) for r in range(runs)]
    rows, metrics = _summarize(per, made)

    failed = any("error" in r for r in rows)

    def cells(r: dict[str, Any]) -> list[str]:
        if "error" in r:
            return [r["row"], "error", "", "", "", "", r["error"][:200]]
        fetched = "" if r["fetched_bytes"] is None else (
            f"{fmt_ratio(r['fetched_x'])} ({human_bytes(r['fetched_bytes'])})")
        return [r["row"], f"{r['samples_per_s']:,.0f}", fmt_ratio(r["vs_local"]),
                "" if r["loaderx_vs"] is None else fmt_ratio(r["loaderx_vs"]), fetched,
                f"{r['first_batch_s']:.2f}"] + ([""] if failed else [])

    headers = ["row", "samples/s", "vs loaderx local", "loaderx s3 / this", "fetched / stored", "first batch, s"]
    out(table(headers + (["error"] if failed else []), [cells(r)[:len(headers) + failed] for r in rows],
              right=range(1, 6)))
    out()
    if metrics["cold_vs_peer"] is not None:
        out(f"loaderx s3 cold / the best peer cold ({metrics['best_peer_cold']}): "
            f"{fmt_ratio(metrics['cold_vs_peer'])}.")
        out()
    results["remote"] = {"records": n, "row": TOKEN_LEN, "batch": b, "runs": runs, "endpoint": server.endpoint,
                         "datasets": made, "rows": rows, "per_round": per, "metrics": metrics}
