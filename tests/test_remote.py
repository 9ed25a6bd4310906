"""loaderx.io.remote against a real S3 server (SeaweedFS, tests/s3server.py).

Every push is checked from the outside: the objects are listed and
downloaded with boto3 and compared with the local files byte for byte,
and the order of the uploads (each store's header last, the manifest after
every shard) is checked on the returned plan. The failures a user meets
(a wrong secret, a missing bucket, a server that went away, an object
changed after the push) must come back as clear errors, quickly.
"""

from __future__ import annotations

import os
import sys
import time
import uuid
from pathlib import Path

import numpy as np
import pytest

import loaderx
from loaderx.errors import CorruptStoreError, RemoteError
from loaderx.io import remote
from loaderx.store import shards

pytest.importorskip("obstore")
boto3 = pytest.importorskip("boto3")


# -- parse_url ---------------------------------------------------------------


@pytest.mark.parametrize(
    "url, want",
    [
        ("s3://bucket/prefix/ds", ("bucket", "prefix/ds")),
        ("s3://bucket/prefix/ds/", ("bucket", "prefix/ds")),
        ("s3://bucket", ("bucket", "")),
        ("s3://bucket/", ("bucket", "")),
        ("S3://my.bucket-1/a", ("my.bucket-1", "a")),
    ],
)
def test_parse_url(url: str, want: tuple[str, str]) -> None:
    assert remote.parse_url(url) == want


@pytest.mark.parametrize(
    "url, words",
    [
        ("gs://bucket/x", "not an s3:// URL"),
        ("/local/path", "not an s3:// URL"),
        ("bucket/x", "not an s3:// URL"),
        ("s3://", "names no bucket"),
        ("s3:///prefix", "names no bucket"),
        ("s3://bucket/a//b", "empty, '.' or '..'"),
        ("s3://bucket/a/../b", "empty, '.' or '..'"),
    ],
)
def test_parse_url_refuses(url: str, words: str) -> None:
    with pytest.raises(ValueError) as e:
        remote.parse_url(url)
    assert repr(url) in str(e.value) and words in str(e.value)


def test_client_refuses_unknown_option() -> None:
    with pytest.raises(ValueError, match="endpoint"):
        remote.client("s3://bucket/x", endpoint="http://127.0.0.1:1")
    with pytest.raises(ValueError, match="retries"):
        remote.client("s3://bucket/x", retries=-1)
    with pytest.raises(ValueError, match="timeout and deadline must be > 0.*timeout=0.0"):
        remote.client("s3://bucket/x", timeout=0)
    with pytest.raises(ValueError, match="deadline=-1.0"):
        remote.client("s3://bucket/x", deadline=-1)


def test_client_without_obstore(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "obstore", None)
    with pytest.raises(ImportError, match=r"pip install 'loaderx\[s3\]'"):
        remote.client("s3://bucket/x")


# -- helpers -----------------------------------------------------------------


def _opts(srv, **over):
    o = {"endpoint_url": srv.endpoint, "access_key_id": srv.access_key, "secret_access_key": srv.secret_key}
    o.update(over)
    return o


def _s3(srv):
    return boto3.client(
        "s3", endpoint_url=srv.endpoint, aws_access_key_id=srv.access_key,
        aws_secret_access_key=srv.secret_key, region_name=srv.region,
    )


def _prefix() -> str:
    return f"t/{uuid.uuid4().hex[:12]}"


def _local_files(root: Path) -> dict[str, bytes]:
    """Every file push must upload: all but hidden ones (locks, temporaries)."""
    out = {}
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root).as_posix()
        if p.is_file() and not any(part.startswith(".") for part in rel.split("/")):
            out[rel] = p.read_bytes()
    return out


def _remote_files(srv, prefix: str) -> dict[str, bytes]:
    s3 = _s3(srv)
    out = {}
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=srv.bucket, Prefix=prefix + "/"):
        for o in page.get("Contents", []):
            rel = o["Key"][len(prefix) + 1 :]
            out[rel] = s3.get_object(Bucket=srv.bucket, Key=o["Key"])["Body"].read()
    return out


def _check_pushed(srv, root: Path, prefix: str, pushed) -> None:
    want = _local_files(root)
    got = _remote_files(srv, prefix)
    assert sorted(got) == sorted(want)
    for rel, data in want.items():
        assert got[rel] == data, rel
    assert sorted(f.key for f in pushed) == sorted(f"{prefix}/{r}" for r in want)
    # inside each store directory the header is the last file uploaded
    order = [f.key for f in pushed]
    for i, key in enumerate(order):
        if key.endswith("/meta.zr"):
            d = key.rsplit("/", 1)[0]
            assert all(k.rsplit("/", 1)[0] != d for k in order[i + 1 :]), key


@pytest.fixture
def dense(tmp_path: Path) -> Path:
    path = tmp_path / "dense"
    # 9 MiB of int32: the chunk file is larger than a part, so it goes multipart
    loaderx.from_numpy(path, np.arange(24_000 * 100, dtype=np.int32).reshape(24_000, 100), "raw", progress=False)
    return path


@pytest.fixture
def ragged(tmp_path: Path) -> Path:
    path = tmp_path / "ragged"
    rng = np.random.default_rng(3)
    rows = [rng.integers(0, 1000, size=int(n), dtype=np.int64) for n in rng.integers(1, 300, size=500)]
    loaderx.from_iterator(path, rows, "zstd", progress=False)
    return path


@pytest.fixture
def streams(tmp_path: Path) -> Path:
    path = tmp_path / "streams"
    path.mkdir()
    loaderx.from_numpy(path / "image", np.ones((64, 8, 8), dtype=np.uint8), "raw", progress=False)
    loaderx.from_numpy(path / "label", np.arange(64, dtype=np.int64), "raw", progress=False)
    return path


@pytest.fixture
def sharded(tmp_path: Path) -> Path:
    path = tmp_path / "sharded"
    names = []
    for i in range(3):
        with shards.ShardWriter(path) as w:
            loaderx.from_numpy(w.path, np.full((50 + i, 4), i, dtype=np.float32), "raw", progress=False)
            names.append(w.name)
    shards.commit(path, names)
    return path


# -- push --------------------------------------------------------------------


@pytest.mark.parametrize("layout", ["dense", "ragged", "streams"])
def test_push_uploads_every_file(s3server, request, layout: str) -> None:
    root = request.getfixturevalue(layout)
    prefix = _prefix()
    pushed = remote.push(root, f"s3://{s3server.bucket}/{prefix}", **_opts(s3server))
    _check_pushed(s3server, root, prefix, pushed)
    assert all(Path(f.local).stat().st_size == f.size for f in pushed)


def test_push_sharded_manifest_last(s3server, sharded: Path) -> None:
    prefix = _prefix()
    pushed = remote.push(sharded, f"s3://{s3server.bucket}/{prefix}", **_opts(s3server))
    _check_pushed(s3server, sharded, prefix, pushed)
    assert pushed[-1].key == f"{prefix}/manifest.json"
    named = {s.name for s in shards.read_manifest(sharded).shards}
    assert {f.key.split("/")[2] for f in pushed[:-1]} == named


def test_push_sharded_leaves_out_unnamed_shards(s3server, sharded: Path) -> None:
    # a writer that died before the commit left a shard the manifest does not name
    with shards.ShardWriter(sharded) as w:
        loaderx.from_numpy(w.path, np.zeros((7, 4), dtype=np.float32), "raw", progress=False)
        dead = w.name
    prefix = _prefix()
    remote.push(sharded, f"s3://{s3server.bucket}/{prefix}", **_opts(s3server))
    got = _remote_files(s3server, prefix)
    want = {k: v for k, v in _local_files(sharded).items() if not k.startswith(dead + "/")}
    assert got == want and len(want) < len(_local_files(sharded))


def test_push_from_environment(s3server, dense: Path, monkeypatch) -> None:
    for k, v in s3server.env().items():
        monkeypatch.setenv(k, v)
    prefix = _prefix()
    remote.push(dense, f"s3://{s3server.bucket}/{prefix}")
    assert _remote_files(s3server, prefix) == _local_files(dense)


def test_push_profile(s3server, dense: Path, tmp_path: Path, monkeypatch) -> None:
    for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):
        monkeypatch.delenv(k, raising=False)
    creds = tmp_path / "credentials"
    creds.write_text(
        f"[other]\naws_access_key_id = nobody\naws_secret_access_key = wrong\n"
        f"[lx]\naws_access_key_id = {s3server.access_key}\naws_secret_access_key = {s3server.secret_key}\n"
    )
    conf = tmp_path / "config"
    conf.write_text(f"[profile lx]\nregion = us-east-1\nendpoint_url = {s3server.endpoint}\n")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(creds))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(conf))
    prefix = _prefix()
    remote.push(dense, f"s3://{s3server.bucket}/{prefix}", profile="lx")
    assert _remote_files(s3server, prefix) == _local_files(dense)
    with pytest.raises(RemoteError, match="refused the credentials"):
        remote.push(dense, f"s3://{s3server.bucket}/{prefix}", profile="other", endpoint_url=s3server.endpoint)
    with pytest.raises(ValueError, match="'missing'"):
        remote.client(f"s3://{s3server.bucket}/x", profile="missing")


def test_push_refuses_what_is_not_a_store(s3server, tmp_path: Path) -> None:
    url = f"s3://{s3server.bucket}/{_prefix()}"
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "notes.txt").write_text("hello")
    with pytest.raises(ValueError, match="not a loaderx store") as e:
        remote.push(empty, url, **_opts(s3server))
    assert str(empty) in str(e.value)
    with pytest.raises(ValueError, match="not a directory"):
        remote.push(empty / "notes.txt", url, **_opts(s3server))


def test_push_refuses_store_open_for_writing(s3server, dense: Path) -> None:
    with loaderx.DenseDataset(dense, writable=True), pytest.raises(ValueError, match="open for writing"):
        remote.push(dense, f"s3://{s3server.bucket}/{_prefix()}", **_opts(s3server))


def test_push_missing_shard_names_it(s3server, sharded: Path) -> None:
    gone = shards.read_manifest(sharded).shards[1].name
    os.rename(sharded / gone, sharded / ".moved")
    with pytest.raises(CorruptStoreError, match=gone):
        remote.push(sharded, f"s3://{s3server.bucket}/{_prefix()}", **_opts(s3server))


def test_wrong_credentials(s3server, dense: Path) -> None:
    url = f"s3://{s3server.bucket}/{_prefix()}"
    with pytest.raises(RemoteError) as e:
        remote.push(dense, url, **_opts(s3server, secret_access_key="not-the-secret"))
    assert "refused the credentials" in str(e.value) and s3server.bucket in str(e.value)
    assert e.value.url == url
    with pytest.raises(RemoteError, match="refused the credentials"):
        remote.push(dense, url, **_opts(s3server, access_key_id="nobody"))


def test_missing_bucket(s3server, dense: Path) -> None:
    with pytest.raises(RemoteError, match="bucket 'no-such-bucket-lx' does not exist"):
        remote.push(dense, "s3://no-such-bucket-lx/x", **_opts(s3server))


def test_server_down_then_back(s3server, dense: Path) -> None:
    url = f"s3://{s3server.bucket}/{_prefix()}"
    s3server.stop()
    try:
        t0 = time.monotonic()
        with pytest.raises(RemoteError, match="connection was refused"):
            remote.push(dense, url, **_opts(s3server))
        assert time.monotonic() - t0 < 30
    finally:
        s3server.start()
    pushed = remote.push(dense, url, **_opts(s3server))
    _check_pushed(s3server, dense, url.split("/", 3)[3], pushed)


def test_verify_names_an_altered_object(s3server, ragged: Path) -> None:
    prefix = _prefix()
    url = f"s3://{s3server.bucket}/{prefix}"
    remote.push(ragged, url, **_opts(s3server))
    assert len(remote.verify(url, ragged, **_opts(s3server))) == len(_local_files(ragged))
    s3 = _s3(s3server)
    key = f"{prefix}/0.chunk"
    data = bytearray(s3.get_object(Bucket=s3server.bucket, Key=key)["Body"].read())
    data[len(data) // 2] ^= 0xFF  # same size, other bytes
    s3.put_object(Bucket=s3server.bucket, Key=key, Body=bytes(data))
    with pytest.raises(CorruptStoreError, match=f"s3://{s3server.bucket}/{key} differs from the local .* at byte {len(data) // 2}$"):
        remote.verify(url, ragged, **_opts(s3server))
    s3.put_object(Bucket=s3server.bucket, Key=key, Body=bytes(data[:-1]))
    with pytest.raises(CorruptStoreError, match=f"{key} has {len(data) - 1} bytes"):
        remote.verify(url, ragged, **_opts(s3server))
    data[len(data) // 2] ^= 0xFF  # the pushed bytes again
    s3.put_object(Bucket=s3server.bucket, Key=key, Body=bytes(data))
    remote.verify(url, ragged, **_opts(s3server))
    s3.delete_object(Bucket=s3server.bucket, Key=f"{prefix}/schema.msgpack")
    with pytest.raises(CorruptStoreError, match=f"{prefix}/schema.msgpack is missing"):
        remote.verify(url, ragged, **_opts(s3server))


def test_cli_push(s3server, sharded: Path, monkeypatch, capsys) -> None:
    from loaderx import cli

    for k, v in s3server.env().items():
        monkeypatch.setenv(k, v)
    prefix = _prefix()
    assert cli.main(["push", str(sharded), f"s3://{s3server.bucket}/{prefix}"]) == 0
    assert "each read back and checked" in capsys.readouterr().out
    assert _remote_files(s3server, prefix) == _local_files(sharded)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wrong")
    assert cli.main(["push", str(sharded), f"s3://{s3server.bucket}/{prefix}"]) == cli.EXIT_REMOTE
    assert "refused the credentials" in capsys.readouterr().err
    assert cli.main(["push", str(sharded / "nothing"), f"s3://{s3server.bucket}/{prefix}"]) == cli.EXIT_BAD_INPUT


@pytest.mark.parametrize(
    "text, words",
    [
        ("Error performing GET http://h/k after 3 retries, max_retries: 3, retry_timeout: 60s - Server returned "
         "non-2xx status code: 500 Internal Server Error: ", "HTTP 500) on 4 attempts"),
        ("Error performing GET http://h/k after 3 retries, max_retries: 3, retry_timeout: 60s - error sending "
         "request: client error (Connect): tcp connect error: Connection refused", "connection was refused (4 attempts)"),
        ("Error performing GET http://h/k - operation timed out", "no answer in the timeout"),
        ("Error performing GET http://h/k in 2.0s - HTTP error: error sending request Debug source: RetryError( "
         "RetryErrorImpl { retries: 2, max_retries: 2, inner: Http( HttpError { kind: Timeout, source: "
         "reqwest::Error { kind: Request, source: TimedOut } } ) } )", "no answer in the timeout, 3 attempts"),
        ("Error performing GET http://h/k - request or response body error: IncompleteBody", "cut off mid-answer"),
        ("Error performing POST http://h/k?uploads= in 414ms, after 3 retries, max_retries: 3, retry_timeout: 60s - "
         "HTTP error: error sending request Debug source: Generic { store: \"S3\", source: RetryError( "
         + "x" * 500 + " ) }", "cannot be reached"),
        ("Error performing GET http://h/k, retry_timeout: 60s - Server returned non-2xx status code: 400 Bad "
         "Request: <Code>InvalidRange</Code>", "the request failed"),
    ],
)
def test_remote_error_says_what_failed(text: str, words: str) -> None:
    from loaderx.remote._s3 import remote_error

    err = remote_error(RuntimeError(text), "s3://b/p", "p/0.chunk", "read")
    assert isinstance(err, RemoteError) and words in str(err) and "s3://b/p/0.chunk" in str(err)
