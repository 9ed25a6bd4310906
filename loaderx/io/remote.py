"""Object storage: ``s3://bucket/prefix`` URLs, the S3 client, and ``push``.

A store, a multi-stream directory or a sharded dataset keeps the same layout
on S3 as on disk: each file becomes the object ``prefix/<path inside the
directory>``. :func:`push` uploads one; :func:`verify` checks that the
objects under a URL are the local files, byte for byte.

The client is obstore's ``S3Store`` (``pip install 'loaderx[s3]'``): one
dependency-free wheel whose requests run in Rust with the GIL released.
Against a local SeaweedFS (scripts/bench/s3client.py) it read 64 KiB ranges
1.7-3x faster than boto3 and s3fs from one thread and 2-4x from four, the
pattern of a chunk cache, matched them within 0.75-1.0x on 8 MiB ranges and
whole objects, imports in milliseconds instead of 150-500 ms, and retries
with backoff under bounded timeouts by itself. Settings come, in this order, from explicit options, the AWS_*
environment variables, and the AWS shared files (``~/.aws/credentials``,
``~/.aws/config``; ``AWS_PROFILE`` or ``profile=`` picks the profile). A
profile whose credentials are not static keys (SSO, an assumed role, a
credential process) is resolved through boto3 when it is installed.

Upload order is what keeps a reader safe while a push runs: inside each
store the header ``meta.zr`` goes last, after the data, tables, dictionary
and schema it describes, and in a sharded dataset every shard goes before
``manifest.json``, so a reader never finds a manifest naming shards that
are not there yet. A store held open by a writer is refused, because its
files change under the upload. Pushing again to the same URL overwrites the
objects one by one and deletes none: a single store is briefly a mix of two
versions, while a sharded dataset stays whole, since new shards have new
names and the old manifest names only old ones until the new one lands.

The check after the upload reads each object back and compares it with the
local file byte for byte, naming the first byte that differs. That is
stronger than a checksum and costs one download; the CRC-32C in Python here
is a table loop, far slower than the comparison, and an ETag is no checksum
to rely on (multipart uploads and server-side encryption change its meaning).

Every failure of the client becomes :class:`~loaderx.errors.RemoteError`
naming the URL (or object) and saying what went wrong: the bucket does not
exist, the credentials were refused, the endpoint cannot be reached. A
request gives up after ``retries`` retries or ``timeout`` seconds, so
nothing waits forever on a server that is gone.
"""

from __future__ import annotations

import configparser
import contextlib
import datetime
import fcntl
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from loaderx.errors import CorruptStoreError, RemoteError
from loaderx.store import shards

if TYPE_CHECKING:
    from loaderx._args import PathLike

__all__ = ["parse_url", "client", "push", "verify", "PushedFile", "PART_SIZE"]

#: Files above this size are uploaded in parts of this size (S3 wants at
#: least 5 MiB per part; 8 MiB matches the range reads of the cache).
PART_SIZE = 8 << 20
#: Parts of one file in flight at once.
PART_CONCURRENCY = 4
#: Seconds one request may take (connect, send, receive) before it fails.
DEFAULT_TIMEOUT = 60.0
#: Retries of a failed request (connection refused, 5xx, timeouts) with
#: exponential backoff from 100 ms; 3 keep a dead endpoint's error near 1 s.
DEFAULT_RETRIES = 3
_META = "meta.zr"
_SCHEMA = "schema.msgpack"
_INSTALL = "pip install 'loaderx[s3]'"
#: the options client() takes, besides the URL
_OPTIONS = frozenset(
    {"endpoint_url", "access_key_id", "secret_access_key", "session_token", "region", "profile", "allow_http",
     "timeout", "retries"}
)


def parse_url(url: str) -> tuple[str, str]:
    """``"s3://bucket/some/prefix"`` -> ``("bucket", "some/prefix")``.

    The prefix has no leading or trailing ``/`` (``""`` for the bucket's
    root). Raises ValueError quoting the URL for another scheme, an empty
    bucket, or a prefix with empty, ``.`` or ``..`` parts.
    """
    if not isinstance(url, str):
        raise TypeError(f"an S3 URL must be a str, got {url!r}")
    scheme, sep, rest = url.partition("://")
    if not sep or scheme.lower() != "s3":
        raise ValueError(f"{url!r} is not an s3:// URL (expected s3://bucket/prefix)")
    bucket, _, prefix = rest.partition("/")
    if not bucket:
        raise ValueError(f"{url!r} names no bucket (expected s3://bucket/prefix)")
    if any(c in bucket for c in "?#") or bucket != bucket.strip():
        raise ValueError(f"{url!r}: bucket name {bucket!r} is not valid")
    prefix = prefix.rstrip("/")
    if prefix and any(part in ("", ".", "..") for part in prefix.split("/")):
        raise ValueError(f"{url!r}: the key prefix {prefix!r} has an empty, '.' or '..' part")
    return bucket, prefix


def _import_obstore() -> Any:
    try:
        import obstore
        import obstore.store  # the S3Store class
    except ImportError as e:
        raise ImportError(f"s3:// URLs need obstore: {_INSTALL} ({e})") from e
    return obstore


def _aws_file(env: str, default: str) -> configparser.ConfigParser:
    cp = configparser.RawConfigParser()
    path = os.environ.get(env) or os.path.join(os.path.expanduser("~"), ".aws", default)
    with contextlib.suppress(OSError, configparser.Error):
        cp.read(path)
    return cp


def _profile(name: str | None) -> dict[str, str]:
    """The settings of an AWS profile from the shared files (credentials
    first, then config); ``{}`` when there are none. A named profile that
    neither file has is a ValueError."""
    explicit = name is not None or "AWS_PROFILE" in os.environ
    name = name or os.environ.get("AWS_PROFILE") or "default"
    creds = _aws_file("AWS_SHARED_CREDENTIALS_FILE", "credentials")
    conf = _aws_file("AWS_CONFIG_FILE", "config")
    section = name if name == "default" else f"profile {name}"
    found: dict[str, str] = {}
    if conf.has_section(section):
        found.update(conf.items(section))
    elif conf.has_section(name):
        found.update(conf.items(name))
    if creds.has_section(name):
        found.update(creds.items(name))
    if not found and explicit and name != "default":
        raise ValueError(f"AWS profile {name!r} is in neither the AWS credentials nor the config file")
    if found:
        found["__name__"] = name
    return found


def client(url: str, **options: Any) -> Any:
    """An obstore ``S3Store`` for the bucket of ``url`` (keys are given in
    full, the URL's prefix included).

    Options (each overrides the environment and the AWS profile):
    ``endpoint_url``, ``access_key_id``, ``secret_access_key``,
    ``session_token``, ``region``, ``profile`` (a profile of the AWS shared
    files), ``allow_http`` (default: true when the endpoint is ``http://``),
    ``timeout`` (seconds per request, default 60) and ``retries``
    (default 3).

    Raises:
        ImportError: obstore is missing (naming ``pip install 'loaderx[s3]'``).
        ValueError: an unknown option, or a profile that does not exist.
    """
    unknown = sorted(set(options) - _OPTIONS)
    if unknown:
        raise ValueError(f"unknown S3 option(s) {unknown} for {url!r}; known: {sorted(_OPTIONS)}")
    bucket, _ = parse_url(url)
    obstore = _import_obstore()
    env = os.environ
    config: dict[str, Any] = {}
    provider = None
    have_keys = options.get("access_key_id") is not None or ("AWS_ACCESS_KEY_ID" in env and "profile" not in options)
    prof = {} if have_keys else _profile(options.get("profile"))
    if prof:
        if "aws_access_key_id" in prof and "aws_secret_access_key" in prof:
            config["access_key_id"] = prof["aws_access_key_id"]
            config["secret_access_key"] = prof["aws_secret_access_key"]
            if "aws_session_token" in prof:
                config["token"] = prof["aws_session_token"]
        elif any(k in prof for k in ("role_arn", "sso_session", "sso_start_url", "credential_process")):
            provider = _boto3_provider(prof["__name__"], url)
        if "region" in prof:
            config["region"] = prof["region"]
        if "endpoint_url" in prof:
            config["endpoint"] = prof["endpoint_url"]
    for opt, key in (("access_key_id", "access_key_id"), ("secret_access_key", "secret_access_key"),
                     ("session_token", "token"), ("region", "region"), ("endpoint_url", "endpoint")):
        if options.get(opt) is not None:
            config[key] = options[opt]
    endpoint = config.get("endpoint") or env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL") \
        or env.get("AWS_ENDPOINT")
    if endpoint and "endpoint" not in config:
        config["endpoint"] = endpoint
    if "region" not in config and not (env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION")):
        config["region"] = "us-east-1"  # what S3-compatible servers accept; AWS redirects otherwise
    allow_http = options.get("allow_http")
    if allow_http is None:
        flag = env.get("AWS_ALLOW_HTTP")
        allow_http = flag.lower() in ("1", "true", "yes") if flag else str(endpoint or "").startswith("http://")
    timeout = options.get("timeout")
    timeout = DEFAULT_TIMEOUT if timeout is None else float(timeout)
    retries = options.get("retries")
    retries = DEFAULT_RETRIES if retries is None else int(retries)
    if timeout <= 0 or retries < 0:
        raise ValueError(f"timeout must be > 0 and retries >= 0, got {timeout!r} and {retries!r}")
    client_options = {
        "allow_http": bool(allow_http),
        "connect_timeout": datetime.timedelta(seconds=min(timeout, 5.0)),
        "timeout": datetime.timedelta(seconds=timeout),
    }
    retry_config = {
        "max_retries": retries,
        "retry_timeout": datetime.timedelta(seconds=timeout),
        "backoff": {
            "init_backoff": datetime.timedelta(milliseconds=100),
            "max_backoff": datetime.timedelta(seconds=5),
            "base": 2,
        },
    }
    try:
        return obstore.store.S3Store(
            bucket, config=config, client_options=client_options, retry_config=retry_config,
            credential_provider=provider,
        )
    except Exception as e:  # obstore's configuration errors
        raise ValueError(f"cannot configure an S3 client for {url!r}: {_short(e)}") from None


def _boto3_provider(profile: str, url: str) -> Any:
    try:
        import boto3
        from obstore.auth.boto3 import Boto3CredentialProvider
    except ImportError as e:
        raise ImportError(
            f"AWS profile {profile!r} (for {url!r}) takes its credentials from SSO, a role or a process, "
            f"which needs boto3: pip install boto3 ({e})"
        ) from e
    return Boto3CredentialProvider(boto3.Session(profile_name=profile))


# -- what a local directory uploads ------------------------------------------


@dataclass(frozen=True)
class PushedFile:
    """One local file and the key it has under the URL's prefix."""

    local: str
    key: str
    size: int


def _is_store(path: str) -> bool:
    return os.path.isfile(os.path.join(path, _META))


def _store_files(path: str) -> list[str]:
    """A store's files, header last (hidden temporaries and locks left out)."""
    names = sorted(
        e for e in os.listdir(path) if not e.startswith(".") and os.path.isfile(os.path.join(path, e))
    )
    # data and tables, then dict.zr and the schema, then the header naming them
    rank = {"dict.zr": 1, _SCHEMA: 2, _META: 3}
    return sorted(names, key=lambda n: (rank.get(n, 0), n))


def _stream_dirs(path: str) -> list[str]:
    return sorted(
        e for e in os.listdir(path)
        if not e.startswith(".") and os.path.isdir(os.path.join(path, e)) and _is_store(os.path.join(path, e))
    )


def _plan(local: str) -> tuple[str, list[tuple[str, list[str]]]]:
    """``(what, groups)``: what ``local`` is (``"store"``, ``"streams"``,
    ``"sharded"``) and its files in upload order, grouped by the store
    directory they belong to (relative paths; ``manifest.json`` is a group of
    its own, last). Raises ValueError when ``local`` is none of these."""
    if not os.path.isdir(local):
        raise ValueError(f"{local!r} is not a directory: push takes a store, a multi-stream directory or a "
                         "sharded dataset")
    if shards.is_sharded(local):
        manifest = shards.read_manifest(local)  # CorruptStoreError when damaged
        groups: list[tuple[str, list[str]]] = []
        for shard in manifest.shards:
            base = os.path.join(local, shard.name)
            stores = [""] if manifest.layout == "store" else sorted(manifest.streams)
            for stream in stores:
                d = os.path.join(base, stream) if stream else base
                rel = f"{shard.name}/{stream}" if stream else shard.name
                if not _is_store(d):
                    raise CorruptStoreError(f"{os.path.join(local, shards.MANIFEST_FILE)} names {rel!r}, "
                                            f"but {d!r} is not a store")
                groups.append((rel, [f"{rel}/{f}" for f in _store_files(d)]))
        groups.append(("", [shards.MANIFEST_FILE]))
        return "sharded", groups
    if _is_store(local):
        return "store", [("", _store_files(local))]
    streams = _stream_dirs(local)
    if streams:
        return "streams", [(s, [f"{s}/{f}" for f in _store_files(os.path.join(local, s))]) for s in streams]
    raise ValueError(f"{local!r} is not a loaderx store, multi-stream directory or sharded dataset "
                     f"(no {_META}, no stores inside, no {shards.MANIFEST_FILE})")


@contextlib.contextmanager
def _no_writer(store_dir: str) -> Iterator[None]:
    """Hold a shared flock on a store's header while its files upload, which
    a writer (holding it exclusively) refuses, and which keeps one from
    opening meanwhile. ValueError when a writer holds the store."""
    fd = os.open(os.path.join(store_dir, _META), os.O_RDONLY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ValueError(f"{store_dir!r} is open for writing: close its writer before pushing it") from None
        yield
    finally:
        os.close(fd)


def _key(prefix: str, rel: str) -> str:
    return f"{prefix}/{rel}" if prefix else rel


def _short(e: BaseException) -> str:
    text = " ".join(str(e).split())
    return text if len(text) <= 400 else text[:400] + " ..."


def _remote_error(e: Exception, url: str, key: str, action: str) -> RemoteError:
    """The client's exception ``e`` as a RemoteError that says what failed."""
    from obstore import exceptions as ox

    where = f"s3://{parse_url(url)[0]}/{key}" if key else url
    text = _short(e)
    low = text.lower()
    if isinstance(e, (ox.PermissionDeniedError, ox.UnauthenticatedError, PermissionError)) or any(
        s in low for s in ("accessdenied", "signaturedoesnotmatch", "invalidaccesskeyid", "403 forbidden")
    ):
        why = "the server refused the credentials (wrong access key or secret, or no permission)"
    elif "nosuchbucket" in low:
        why = f"bucket {parse_url(url)[0]!r} does not exist"
    elif isinstance(e, (ox.NotFoundError, FileNotFoundError)):
        why = "no such object"
    elif any(s in low for s in ("connect", "connection", "timed out", "timeout", "dns", "refused")):
        why = "the endpoint cannot be reached (server down, wrong endpoint_url, or a network problem)"
    else:
        why = "the request failed"
    return RemoteError(f"{action} {where}: {why}: {text}", url=url)


def push(local: PathLike, url: str, *, verify: bool = True, **options: Any) -> list[PushedFile]:
    """Upload the store, multi-stream directory or sharded dataset at
    ``local`` to ``url`` (``s3://bucket/prefix``), every file as the object
    ``prefix/<its path inside local>``; return the files in upload order.

    Inside each store the header goes last; a sharded dataset's shards go
    before its ``manifest.json``. Files over :data:`PART_SIZE` go up in
    parts. With ``verify`` (the default), :func:`verify` then reads every
    object back and compares it with the local file. ``options`` are those
    of :func:`client`.

    Raises:
        ValueError: ``local`` is not a store, multi-stream directory or
            sharded dataset, or a store of it is open for writing; or a bad URL.
        CorruptStoreError: a sharded dataset's manifest is damaged or names a
            missing shard; or ``verify`` found an object that differs,
            naming it.
        RemoteError: the client failed (no bucket, refused credentials, the
            server cannot be reached), naming the URL and object.
        ImportError: obstore is missing.
    """
    root = os.fspath(local)
    _, prefix = parse_url(url)
    _, groups = _plan(root)
    store = client(url, **options)
    obstore = _import_obstore()
    done: list[PushedFile] = []
    for group, files in groups:
        is_store = bool(files) and files[-1].endswith(_META)
        with _no_writer(os.path.join(root, group)) if is_store else contextlib.nullcontext():
            for rel in files:
                path = os.path.join(root, rel)
                size = os.path.getsize(path)
                key = _key(prefix, rel)
                try:
                    obstore.put(
                        store, key, Path(path), use_multipart=size > PART_SIZE, chunk_size=PART_SIZE,
                        max_concurrency=PART_CONCURRENCY,
                    )
                except Exception as e:
                    raise _remote_error(e, url, key, f"uploading {path!r} to") from None
                done.append(PushedFile(path, key, size))
    if verify:
        _verify_files(store, url, done)
    return done


def verify(url: str, local: PathLike, **options: Any) -> list[PushedFile]:
    """Check that every file :func:`push` would upload from ``local`` is
    under ``url`` with the same size and bytes (each object is read back in
    8 MiB ranges and compared with the file); return the files checked.

    Raises:
        CorruptStoreError: an object is missing, of another size or other
            bytes; the message names the object and the local file.
        RemoteError, ValueError, ImportError: as for :func:`push`.
    """
    root = os.fspath(local)
    _, prefix = parse_url(url)
    _, groups = _plan(root)
    files = []
    for _, rels in groups:
        for rel in rels:
            path = os.path.join(root, rel)
            files.append(PushedFile(path, _key(prefix, rel), os.path.getsize(path)))
    _verify_files(client(url, **options), url, files)
    return files


def _first_difference(a: memoryview, b: bytes) -> int:
    """The offset of the first byte where ``a`` and ``b`` (same length) differ."""
    step = 4096
    for off in range(0, len(b), step):
        if a[off : off + step] != b[off : off + step]:
            return off + next(i for i, (x, y) in enumerate(zip(a[off : off + step], b[off : off + step])) if x != y)
    return len(b)


def _verify_files(store: Any, url: str, files: list[PushedFile]) -> None:
    """Read every object back in :data:`PART_SIZE` ranges (each request stays
    short, so the per-request timeout holds for any file size) and compare
    it with the local file, byte for byte."""
    obstore = _import_obstore()
    from obstore import exceptions as ox

    bucket = parse_url(url)[0]
    for f in files:
        where = f"s3://{bucket}/{f.key}"
        try:
            size = obstore.head(store, f.key)["size"]
            if size != f.size:
                raise CorruptStoreError(f"{where} has {size} bytes, the local {f.local!r} {f.size}")
            with open(f.local, "rb") as local:
                for off in range(0, size, PART_SIZE):
                    want = local.read(min(PART_SIZE, size - off))
                    got = memoryview(obstore.get_range(store, f.key, start=off, length=len(want)))
                    if got != want:
                        at = off + (_first_difference(got, want) if len(got) == len(want) else min(len(got), len(want)))
                        raise CorruptStoreError(f"{where} differs from the local {f.local!r} at byte {at}")
        except CorruptStoreError:
            raise
        except (ox.NotFoundError, FileNotFoundError) as e:
            if "nosuchbucket" in str(e).lower():
                raise _remote_error(e, url, f.key, "reading back") from None
            raise CorruptStoreError(f"{where} is missing (the local {f.local!r} has {f.size} bytes)") from None
        except OSError as e:
            if e.filename == f.local:  # the local file, not the request
                raise
            raise _remote_error(e, url, f.key, "reading back") from None
        except Exception as e:
            raise _remote_error(e, url, f.key, "reading back") from None
