"""Object storage: ``s3://bucket/prefix`` URLs, the S3 client, and ``push``.

A store, a multi-stream directory or a sharded dataset keeps the same layout
on S3 as on disk: each file becomes the object ``prefix/<path inside the
directory>``. :func:`push` uploads one; :func:`verify` checks that the
objects under a URL are the local files, byte for byte.

The client and its settings (explicit options, the ``AWS_*`` environment,
the AWS shared files) are ``remote._s3``'s.

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

import contextlib
import fcntl
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from loaderx.errors import CorruptStoreError, StoreExistsError
from loaderx.remote._s3 import client, import_obstore, parse_url, remote_error
from loaderx.store import shards

if TYPE_CHECKING:
    from loaderx._args import PathLike

__all__ = ["parse_url", "client", "push", "verify", "publish", "PushedFile", "PART_SIZE"]

#: Files above this size are uploaded in parts of this size (S3 wants at
#: least 5 MiB per part; 8 MiB matches the range reads of the cache).
PART_SIZE = 8 << 20
#: Parts of one file in flight at once.
PART_CONCURRENCY = 4
_META = "meta.zr"
_SCHEMA = "schema.msgpack"


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
    obstore = import_obstore()
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
                    raise remote_error(e, url, key, f"uploading {path!r} to") from None
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
    obstore = import_obstore()
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
                raise remote_error(e, url, f.key, "reading back") from None
            raise CorruptStoreError(f"{where} is missing (the local {f.local!r} has {f.size} bytes)") from None
        except OSError as e:
            if e.filename == f.local:  # the local file, not the request
                raise
            raise remote_error(e, url, f.key, "reading back") from None
        except Exception as e:
            raise remote_error(e, url, f.key, "reading back") from None


def _holds_objects(url: str, options: dict[str, Any]) -> bool:
    import obstore

    _, prefix = parse_url(url)
    store = client(url, **options)
    try:
        for batch in obstore.list(store, prefix=f"{prefix}/" if prefix else None, chunk_size=1):
            return bool(batch)
    except Exception as e:
        raise remote_error(e, url, "", "list") from None
    return False


def publish(url: str, write: Callable[[str], Any], *, overwrite: bool = False,
            storage_options: dict[str, Any] | None = None, staging: PathLike | None = None) -> list[PushedFile]:
    """Write a dataset into a local staging directory with ``write(path)``
    (a converter), push it to ``url`` (verified), and remove the staging
    directory, whether or not that worked. Nothing reaches the bucket unless
    the whole conversion succeeded.

    ``staging`` is where the staging directory is made (default
    ``$LOADERX_STAGING_DIR``, else the system's temporary directory); it
    needs room for the whole dataset. Without ``overwrite``, a URL that
    already holds objects is refused (StoreExistsError) before anything is
    written; with it, the objects are overwritten one by one (see
    :func:`push`), and objects of the previous version that the new one
    does not have stay where they are.
    """
    opts = dict(storage_options or {})
    parse_url(url)
    if not overwrite and _holds_objects(url, opts):
        raise StoreExistsError(f"{url!r} already holds objects: pass overwrite=True to replace them")
    base = os.fspath(staging) if staging is not None else os.environ.get("LOADERX_STAGING_DIR") or None
    tmp = tempfile.mkdtemp(prefix="loaderx-staging-", dir=base)
    try:
        local = os.path.join(tmp, "dataset")
        write(local)
        return push(local, url, **opts)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
