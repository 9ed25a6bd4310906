"""Every way of opening and writing a dataset at an s3:// URL, against the
real S3 test server (tests/s3server.py): sharded and multi-stream datasets,
one stream of a sharded multi-stream one, the converters writing to a URL
through a staging directory, pickling, and the command line (info, verify,
head, cache warm / info / clear). The cache's own behaviour (pages, limits,
sharing, faults) is tests/test_remote_cache.py's."""

from __future__ import annotations

import json
import os
import pickle
import uuid
from pathlib import Path

import numpy as np
import pytest

import loaderx
from loaderx import cli
from loaderx.errors import StoreExistsError
from loaderx.io import remote

pytest.importorskip("obstore")
pytest.importorskip("boto3")
pa = pytest.importorskip("pyarrow")


def _opts(srv) -> dict[str, object]:
    return {"endpoint_url": srv.endpoint, "access_key_id": srv.access_key, "secret_access_key": srv.secret_key,
            "region": srv.region, "allow_http": True}


def _url(srv, name: str) -> str:
    return f"s3://{srv.bucket}/open/{uuid.uuid4().hex[:10]}/{name}"


@pytest.fixture
def cache(tmp_path: Path) -> loaderx.CacheOptions:
    return loaderx.CacheOptions(dir=str(tmp_path / "cache"), page_size=64 << 10)


def _tokens(n: int = 3000, width: int = 96) -> np.ndarray:
    return np.random.default_rng(7).integers(0, 40_000, (n, width)).astype(np.int32)


def test_sharded_dense_dataset_reads_as_local(s3server, tmp_path: Path, cache) -> None:
    arr = _tokens()
    local = tmp_path / "sh"
    loaderx.from_numpy(local, arr, num_shards=3)
    url = _url(s3server, "sh")
    remote.push(local, url, **_opts(s3server))
    ds = loaderx.DenseDataset(url, cache=cache, storage_options=_opts(s3server))
    assert ds.url == url and len(ds.shards) == 3 and repr(ds).startswith(f"DenseDataset({url!r}")
    idx = np.random.default_rng(0).integers(0, len(arr), 500)
    np.testing.assert_array_equal(ds[idx], arr[idx])
    # a batch across all three shards through the loader, same steps as the local dataset
    here = loaderx.DataLoader({"x": loaderx.DenseDataset(local)}, batch_size=128, seed=5, epoch=True)
    there = loaderx.DataLoader({"x": ds}, batch_size=128, seed=5, epoch=True)
    steps = 0
    for a, b in zip(here, there, strict=True):
        np.testing.assert_array_equal(a["x"], b["x"])
        steps += 1
    assert steps == len(here)
    assert ds.cache_stats()["cached_bytes"] > 0


def test_multistream_and_one_stream_of_a_sharded_one(s3server, tmp_path: Path, cache) -> None:
    n = 2500
    table = pa.table({"id": np.arange(n, dtype=np.int64), "toks": [list(range(i % 11)) for i in range(n)]})
    for shards in (None, 2):
        local = tmp_path / f"ms{shards}"
        loaderx.from_arrow(local, table, num_shards=shards)
        url = _url(s3server, "ms")
        remote.push(local, url, **_opts(s3server))
        ms = loaderx.MSDataset(url, cache=cache, storage_options=_opts(s3server))
        assert ms.url == url and set(ms) == {"id", "toks"} and ms.num_records == n
        np.testing.assert_array_equal(ms["id"][:], np.arange(n))
        row = ms.row(1234)
        assert int(row["id"]) == 1234 and row["toks"].tolist() == list(range(1234 % 11))
        back = pickle.loads(pickle.dumps(ms))
        assert back.url == url and int(back["id"][n - 1]) == n - 1
        if shards:
            one = loaderx.DenseDataset(f"{url}/id", cache=cache, storage_options=_opts(s3server))
            assert one.url == f"{url}/id"
            np.testing.assert_array_equal(one[[0, n - 1]], [0, n - 1])
            rag = loaderx.RaggedDataset(f"{url}/toks", cache=cache, storage_options=_opts(s3server))
            assert rag[7].tolist() == list(range(7))


def test_converters_write_to_a_url(s3server, tmp_path: Path, cache, monkeypatch) -> None:
    staging = tmp_path / "staging"
    staging.mkdir()
    arr = _tokens(800)
    url = _url(s3server, "conv")
    loaderx.from_numpy(url, arr, storage_options=_opts(s3server), staging=staging)
    assert list(staging.iterdir()) == []  # the staging directory is removed
    ds = loaderx.DenseDataset(url, cache=cache, storage_options=_opts(s3server))
    np.testing.assert_array_equal(ds[:], arr)
    with pytest.raises(StoreExistsError, match="already holds objects"):
        loaderx.from_numpy(url, arr, storage_options=_opts(s3server))
    loaderx.from_numpy(url + "2", arr[:10] + 1, storage_options=_opts(s3server), overwrite=True)
    np.testing.assert_array_equal(
        loaderx.DenseDataset(url + "2", cache=cache, storage_options=_opts(s3server))[:], arr[:10] + 1)
    recs = [np.arange(i % 13, dtype=np.int16) for i in range(300)]
    loaderx.from_iterator(url + "r", iter(recs), storage_options=_opts(s3server))
    rs = loaderx.RaggedDataset(url + "r", cache=cache, storage_options=_opts(s3server))
    assert all(np.array_equal(rs[i], recs[i]) for i in (0, 12, 299))
    ms = loaderx.from_arrow(url + "m", pa.table({"v": np.arange(50)}), storage_options=_opts(s3server))
    assert ms.url == url + "m" and int(ms["v"][49]) == 49
    # a conversion that fails pushes nothing
    with pytest.raises(TypeError):
        loaderx.from_numpy(url + "bad", np.array(["a", "b"], dtype=object), storage_options=_opts(s3server))
    with pytest.raises(FileNotFoundError):
        loaderx.DenseDataset(url + "bad", cache=cache, storage_options=_opts(s3server))
    with pytest.raises(ValueError, match="s3:// URLs"):
        loaderx.from_numpy(tmp_path / "local", arr, storage_options=_opts(s3server))


def _run(capsys, *argv: str) -> tuple[int, dict]:
    code = cli.main(["--json", *argv])
    out = capsys.readouterr().out
    return code, json.loads(out)


def test_cli_on_a_url(s3server, tmp_path: Path, capsys, monkeypatch) -> None:
    for k, v in s3server.env().items():
        monkeypatch.setenv(k, v)
    arr = _tokens(1500)
    local = tmp_path / "d"
    loaderx.from_numpy(local, arr)
    url = _url(s3server, "cli")
    remote.push(local, url)
    cdir = str(tmp_path / "clicache")
    table = (local / "0.tab").stat().st_size
    code, info = _run(capsys, "info", url, "--cache-dir", cdir)
    assert code == 0 and info["path"] == url and info["shape"] == [1500, 96] and info["length"] == 1500
    assert info["live_bytes"] == arr.nbytes or info["codec"] != "raw"
    # info's byte sums cover every table entry: it fetched the table pages, and warm the rest
    code, warm = _run(capsys, "cache", "warm", url, "--cache-dir", cdir)
    assert code == 0 and warm["fetched_bytes"] > 0
    assert warm["cache"]["cached_bytes"] == warm["fetched_bytes"] + table
    code, again = _run(capsys, "cache", "warm", url, "--cache-dir", cdir)
    assert code == 0 and again["fetched_bytes"] == 0  # every page was cached by the first warm
    code, ver = _run(capsys, "verify", url, "--cache-dir", cdir)
    assert code == 0 and ver["ok"] and ver["stores"][url]["records"] == 1500
    code, head = _run(capsys, "head", url, "-n", "2", "--cache-dir", cdir)
    assert code == 0 and head == arr[:2].tolist()
    code, listing = _run(capsys, "cache", "info", "--cache-dir", cdir)
    assert code == 0 and [d["url"] for d in listing["datasets"]] == [url]
    assert listing["datasets"][0]["bytes"] == warm["fetched_bytes"] + table
    code, cleared = _run(capsys, "cache", "clear", "--cache-dir", cdir)
    assert code == 0 and len(cleared["removed"]) + len(cleared["in_use"]) == 1
    # wrong credentials: exit 5, the refusal named
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wrong-secret")
    code = cli.main(["info", url, "--cache-dir", cdir + "2"])  # a new cache: not the tree opened above
    err = capsys.readouterr().err
    assert code == cli.EXIT_REMOTE and "credentials" in err


def test_bad_arguments(s3server, tmp_path: Path, cache) -> None:
    url = _url(s3server, "none")
    with pytest.raises(FileNotFoundError, match="no objects"):
        loaderx.DenseDataset(url, cache=cache, storage_options=_opts(s3server))
    with pytest.raises(ValueError, match="read-only|does not write"):
        loaderx.DenseDataset(url, writable=True, storage_options=_opts(s3server))
    with pytest.raises(ValueError, match="s3:// URLs"):
        loaderx.DenseDataset(tmp_path, cache=cache)
    with pytest.raises(TypeError, match="CacheOptions"):
        loaderx.DenseDataset(url, cache={"dir": "x"}, storage_options=_opts(s3server))
    with pytest.raises(ValueError, match="not an s3:// URL|no bucket"):
        loaderx.DenseDataset("s3://", storage_options=_opts(s3server))
    for bad, word in ((dict(page_size=0), "page_size"), (dict(limit=-1), "limit"), (dict(threads=0), "threads"),
                      (dict(prefetch=-5), "prefetch"), (dict(limit=True), "limit")):
        with pytest.raises(ValueError, match=word):
            loaderx.CacheOptions(**bad)
    with pytest.raises(ValueError, match="LOADERX_CACHE_LIMIT='lots'"):
        os.environ["LOADERX_CACHE_LIMIT"] = "lots"
        try:
            from loaderx.remote import _cache
            _cache._env_limit()
        finally:
            del os.environ["LOADERX_CACHE_LIMIT"]


_FORK_CHILD = """
import sys, numpy as np, torch, loaderx
url, cdir, ctx, so = sys.argv[1], sys.argv[2], sys.argv[3], eval(sys.argv[4])
ds = loaderx.DenseDataset(url, storage_options=so, cache=loaderx.CacheOptions(dir=cdir))
dl = torch.utils.data.DataLoader(ds, batch_size=100, num_workers=2, timeout=60,
                                 multiprocessing_context=None if ctx == "fork" else ctx)
try:
    total = sum(int(b.sum()) for b in dl)
    print("sum", total)
except Exception as e:
    print("error", type(e).__name__, " ".join(str(e).split())[:2000])
"""


def test_torch_workers_fork_and_spawn(s3server, tmp_path: Path) -> None:
    """torch's fork workers: a fetch in a forked child is a clear ForkError,
    never a hang; once the cache holds the pages they read; spawn always works."""
    import subprocess
    import sys

    pytest.importorskip("torch")
    arr = np.arange(2000 * 16, dtype=np.int64).reshape(2000, 16)
    local = tmp_path / "fk"
    loaderx.from_numpy(local, arr)
    url = _url(s3server, "fk")
    remote.push(local, url, **_opts(s3server))
    env = dict(os.environ, PYTHONPATH=str(Path(loaderx.__file__).resolve().parent.parent))

    def run(cdir: str, ctx: str) -> str:
        res = subprocess.run([sys.executable, "-c", _FORK_CHILD, url, cdir, ctx, repr(_opts(s3server))],
                             capture_output=True, text=True, timeout=240, env=env)
        return res.stdout.strip().splitlines()[-1] if res.stdout.strip() else res.stderr[-800:]

    want = f"sum {int(arr.sum())}"
    cold = run(str(tmp_path / "c1"), "fork")
    assert cold.startswith("error ForkError") and "spawn" in cold, cold
    assert run(str(tmp_path / "c2"), "spawn") == want
    # the pages fetched by the spawn run are cached: fork workers read them
    assert run(str(tmp_path / "c2"), "fork") == want


def test_loader_fetches_the_next_steps_ahead(s3server, tmp_path: Path) -> None:
    """After the first step, the loader's lookahead fetches the pages of the
    next steps from its sampler: reading them then fetches nothing more.
    With prefetch=0 it does not, and the same steps fetch as they go."""
    import time

    arr = np.arange(4000 * 16, dtype=np.int32).reshape(4000, 16) * 3  # 64-byte records, 256 KB
    local = tmp_path / "la"
    loaderx.from_numpy(local, arr, codec="raw")
    url = _url(s3server, "la")
    remote.push(local, url, **_opts(s3server))
    fetched_during = {}
    for prefetch in (256 << 20, 0):
        opts = loaderx.CacheOptions(dir=str(tmp_path / f"c{prefetch}"), page_size=4096, prefetch=prefetch)
        ds = loaderx.DenseDataset(url, cache=opts, storage_options=_opts(s3server))
        loader = loaderx.DataLoader({"x": ds}, batch_size=8, seed=3, steps=40, num_workers=0)
        it = iter(loader)
        first = next(it)
        np.testing.assert_array_equal(first["x"], arr[loader.indices(0)])
        ahead = loader._ahead
        if prefetch:
            deadline = time.monotonic() + 60
            while not (ahead.idle and ahead.next >= 40) and time.monotonic() < deadline:  # every step fetched
                time.sleep(0.02)
            assert ahead.idle and ahead.prefetched_bytes > 0
        else:
            assert ahead is None
        before = ds.cache_stats()["fetched_bytes"]
        for step, batch in enumerate(it, start=1):
            np.testing.assert_array_equal(batch["x"], arr[loader.indices(step)])
        fetched_during[prefetch] = ds.cache_stats()["fetched_bytes"] - before
        loader.close()
    assert fetched_during[256 << 20] == 0, fetched_during
    assert fetched_during[0] > 0, fetched_during
