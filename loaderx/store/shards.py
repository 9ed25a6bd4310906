"""Sharded datasets: many stores, written by many writers, read as one.

A sharded dataset is a directory holding shards and ``manifest.json``. A
shard is an ordinary store (layout ``"store"``: a dense or ragged store
directory) or an ordinary multi-stream directory (layout ``"streams"``: one
store per column, as :func:`loaderx.arrow.from_arrow` writes). Writers
(processes, Ray tasks, machines sharing the file system) each write one
shard under a unique name straight into the dataset directory; a shard is
invisible until a commit names it. The manifest names the shards in global
order with their lengths, and the kind, dtype and item shape of every
stream, and it carries the CRC-32C of its own content.

Two phases, as a distributed write needs them:

1. each writer holds a :class:`ShardWriter` while it writes ``writer.path``
   (an flock on ``.writing-<name>.lock``, so a commit elsewhere never
   deletes a shard being written);
2. one :func:`commit` checks every named shard against the others, writes
   the new manifest beside the old one, syncs it and renames it into place:
   a reader sees the previous dataset or the new one, never a mix. Then it
   deletes the shards it no longer needs: those of reservations that ended
   (writers that died, failed, or closed without being committed) and,
   unless ``append``, the previous generation's. It deletes nothing it did
   not make: other files in the directory stay.

One job writes a dataset at a time: a shard whose writer has closed must
be named by the next commit, whoever makes it, or that commit deletes it.

A reader reads the manifest (a manifest that is truncated, edited by hand
or malformed is :class:`~loaderx.errors.CorruptStoreError` naming it) and
opens no shard: the native library opens each at the first read that needs
it and checks it against the manifest then (a shard that is missing, of
another length, kind, dtype or shape is CorruptStoreError naming it, as
:func:`check_shard` words it for ``verify``), keeping a capped number open
(``max_open_shards``). The files are plain JSON, so a dataset written on one
machine reads on another.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import secrets
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from loaderx.errors import CorruptStoreError
from loaderx.store import _native
from loaderx.store._store import crc32c

if TYPE_CHECKING:
    from loaderx._args import PathLike

__all__ = [
    "MANIFEST_FILE",
    "Manifest",
    "ShardInfo",
    "ShardWriter",
    "StreamInfo",
    "abandon",
    "check_shard",
    "commit",
    "describe",
    "is_sharded",
    "read_manifest",
    "remove_if_empty",
    "resolve",
]

MANIFEST_FILE = "manifest.json"
_FORMAT = "loaderx-shards"
_VERSION = 1
_LOCK_PREFIX = ".writing-"
_LOCK_SUFFIX = ".lock"
_COMMIT_LOCK = ".commit.lock"
_TEMP_PREFIX = "." + MANIFEST_FILE + ".tmp-"
#: what a store directory holds; a directory with both is a store
_STORE_FILES = ("meta.zr", "schema.msgpack")
_LAYOUTS = ("store", "streams")
#: what follows NAME in the hidden directory beside the path NAME that holds
#: the staging directories of the store's Creates (zrecord/doc.go, Durability)
_STAGING_DIR = ".zrecord-stage"
#: a staging or trash directory that Creates of earlier releases kept straight
#: beside the path NAME: ".NAME.zrecord-create-" or "-trash-" and 16 hex digits
_OLD_STAGING = re.compile(r"\.(.+)\.zrecord-(?:create|trash)-[0-9a-f]{16}", re.DOTALL)
#: the longest shard name (bytes) a store keeps whole in its staging
#: directory's name; past it Create shortens and hashes the name, which a
#: commit could no longer tie to its writer
_MAX_NAME_BYTES = 200
#: what ShardWriter appends to the prefix: "-" and 16 hex digits
_NAME_SUFFIX_BYTES = 17
_KINDS = ("dense", "ragged")


@dataclass(frozen=True)
class StreamInfo:
    """One stream of a sharded dataset: what every shard's store agrees on.
    ``item_shape`` is a dense record's shape, or a ragged record's shape
    after its first axis."""

    kind: str
    dtype: str
    item_shape: tuple[int, ...]


@dataclass(frozen=True)
class ShardInfo:
    """One shard: its directory's name inside the dataset, and its records."""

    name: str
    length: int


@dataclass(frozen=True)
class Manifest:
    """A sharded dataset's manifest. ``streams`` has the one key ``""`` for
    layout ``"store"``; ``length`` is the sum of the shards' lengths."""

    layout: str
    streams: dict[str, StreamInfo]
    shards: tuple[ShardInfo, ...]

    @property
    def length(self) -> int:
        return sum(s.length for s in self.shards)

    def shard_paths(self, root: str, stream: str = "") -> list[str]:
        """The store directory of ``stream`` in every shard, in order."""
        return [os.path.join(root, s.name, stream) if stream else os.path.join(root, s.name) for s in self.shards]

    def __repr__(self) -> str:
        return (
            f"Manifest(layout={self.layout!r}, streams={sorted(self.streams)!r}, "
            f"shards={len(self.shards)}, length={self.length})"
        )


def is_sharded(path: PathLike) -> bool:
    """Whether ``path`` is a sharded dataset (holds a manifest)."""
    return os.path.isfile(os.path.join(os.fspath(path), MANIFEST_FILE))


def resolve(path: PathLike) -> tuple[str, str, Manifest] | None:
    """``(root, stream, manifest)`` when ``path`` is a sharded dataset
    (``stream`` ``""``) or one stream of a sharded multi-stream dataset
    (``root/stream``, a path that need not exist on disk); else None."""
    p = os.fspath(path).rstrip(os.sep) or os.sep
    if is_sharded(p):
        return p, "", read_manifest(p)
    root, stream = os.path.split(p)
    if stream and is_sharded(root) and not os.path.isdir(p):
        m = read_manifest(root)
        if m.layout == "streams" and stream in m.streams:
            return root, stream, m
    return None


# -- the manifest file --------------------------------------------------------


def _body(m: Manifest) -> dict[str, Any]:
    return {
        "format": _FORMAT,
        "version": _VERSION,
        "layout": m.layout,
        "streams": {
            k: {"kind": v.kind, "dtype": v.dtype, "item_shape": list(v.item_shape)}
            for k, v in sorted(m.streams.items())
        },
        "shards": [{"name": s.name, "length": s.length} for s in m.shards],
        "length": m.length,
    }


def _canonical(body: dict[str, Any]) -> bytes:
    return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()


def _encode(m: Manifest) -> bytes:
    body = _body(m)
    body["crc32c"] = crc32c(_canonical(body))
    return (json.dumps(body, indent=1, sort_keys=True) + "\n").encode()


def _bad(file: str, what: str) -> CorruptStoreError:
    return CorruptStoreError(f"sharded dataset manifest {file}: {what}")


def _parse(raw: bytes, file: str) -> Manifest:
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as e:
        raise _bad(file, f"not valid JSON ({e}); truncated or edited?") from None
    if not isinstance(body, dict):
        raise _bad(file, f"holds a {type(body).__name__}, not an object")
    if body.get("format") != _FORMAT:
        raise _bad(file, f"format is {body.get('format')!r}, want {_FORMAT!r}")
    if body.get("version") != _VERSION:
        raise _bad(file, f"version {body.get('version')!r}; this loaderx reads version {_VERSION}")
    want = body.pop("crc32c", None)
    got = crc32c(_canonical(body))
    if want != got:
        raise _bad(file, f"checksum {want!r} does not match its content ({got}); edited by hand or damaged")
    try:
        layout = body["layout"]
        if layout not in _LAYOUTS:
            raise ValueError(f"layout {layout!r}")
        streams = {}
        for k, v in body["streams"].items():
            if v["kind"] not in _KINDS:
                raise ValueError(f"stream {k!r} kind {v['kind']!r}")
            streams[str(k)] = StreamInfo(str(v["kind"]), str(v["dtype"]), tuple(int(d) for d in v["item_shape"]))
        if (layout == "store") != (list(streams) == [""]):
            raise ValueError(f"layout {layout!r} with streams {sorted(streams)!r}")
        shards = tuple(ShardInfo(str(s["name"]), int(s["length"])) for s in body["shards"])
        for s in shards:
            _check_name(s.name)
            if s.length < 0:
                raise ValueError(f"shard {s.name!r} length {s.length}")
        if len({s.name for s in shards}) != len(shards):
            raise ValueError("a shard is named twice")
        m = Manifest(layout, streams, shards)
        if body["length"] != m.length:
            raise ValueError(f"length {body['length']!r} is not the sum of the shards' lengths {m.length}")
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise _bad(file, f"malformed ({type(e).__name__}: {e})") from None
    return m


def read_manifest(dataset_dir: PathLike) -> Manifest:
    """The manifest of a sharded dataset. Raises CorruptStoreError naming
    the file when it is truncated, edited or malformed, FileNotFoundError
    when there is none."""
    file = os.path.join(os.fspath(dataset_dir), MANIFEST_FILE)
    with open(file, "rb") as f:
        raw = f.read()
    return _parse(raw, file)


def parse_manifest(raw: bytes, file: str) -> Manifest:
    """The manifest in the bytes ``raw`` (what ``file`` holds or will
    hold). Raises CorruptStoreError naming ``file`` when they are
    truncated, edited or malformed (its checksum included)."""
    return _parse(raw, file)


def _check_name(name: str) -> None:
    if not name or name.startswith(".") or os.sep in name or name == MANIFEST_FILE or (os.altsep and os.altsep in name):
        raise ValueError(f"shard name {name!r} is not a plain directory name")


# -- shards ------------------------------------------------------------------


def _is_store(path: str) -> bool:
    return all(os.path.isfile(os.path.join(path, f)) for f in _STORE_FILES)


def _store_info(path: str, what: str) -> tuple[StreamInfo, int]:
    try:
        kind, dtype, shape = _native.schema_read(path)
        length = int(_store_len(path))
    except (OSError, CorruptStoreError, ValueError) as e:
        raise CorruptStoreError(f"{what} at {path!r} cannot be read: {e}") from None
    return StreamInfo(str(kind), str(dtype), tuple(int(d) for d in shape)), length


def _store_len(path: str) -> int:
    h = _native.store_open(path, readonly=True)
    try:
        return int(_native.store_len(h))
    finally:
        _native.store_close(h)


def describe(path: PathLike, what: str = "shard") -> tuple[str, dict[str, StreamInfo], int]:
    """``(layout, streams, length)`` of a shard directory: a store, or a
    directory of stores of equal length. Raises ValueError when it is
    neither or its streams differ in length, CorruptStoreError when a store
    cannot be read."""
    p = os.fspath(path)
    if not os.path.isdir(p):
        raise CorruptStoreError(f"{what} {p!r} is missing")
    if _is_store(p):
        info, length = _store_info(p, what)
        return "store", {"": info}, length
    subs = sorted(e for e in os.listdir(p) if not e.startswith(".") and _is_store(os.path.join(p, e)))
    if not subs:
        raise CorruptStoreError(f"{what} {p!r} is neither a store nor a directory of stores")
    streams: dict[str, StreamInfo] = {}
    lengths: dict[str, int] = {}
    for s in subs:
        streams[s], lengths[s] = _store_info(os.path.join(p, s), f"{what} stream {s!r}")
    if len(set(lengths.values())) != 1:
        raise CorruptStoreError(f"{what} {p!r}: its streams differ in length: {lengths}")
    return "streams", streams, next(iter(lengths.values()))


def _agree(name: str, want: StreamInfo, got: StreamInfo, stream: str) -> str | None:
    label = f"stream {stream!r} " if stream else ""
    for field in ("kind", "dtype", "item_shape"):
        a, b = getattr(want, field), getattr(got, field)
        if a != b:
            return f"shard {name!r} {label}has {field} {b!r}, the others {a!r}"
    return None


def check_shard(root: str, manifest: Manifest, shard: ShardInfo, stream: str, kind: str, dtype: str,
                item_shape: tuple[int, ...], length: int) -> None:
    """Raise CorruptStoreError naming the shard when what its store says
    (read by the caller from the open store) disagrees with the manifest."""
    want = manifest.streams[stream]
    got = StreamInfo(kind, dtype, tuple(item_shape))
    problem = _agree(shard.name, want, got, stream)
    if problem is None and length != shard.length:
        problem = f"shard {shard.name!r} holds {length} records, the manifest says {shard.length}"
    if problem:
        raise CorruptStoreError(f"sharded dataset {root!r}: {problem}")


class ShardWriter:
    """A new shard of the dataset at ``dataset_dir``, reserved for one
    writer: write it at :attr:`path` (which does not exist yet), for example
    ``loaderx.from_numpy(w.path, array)``, then hand :attr:`name` to
    :func:`commit`. Until :meth:`close` the writer holds an flock that keeps
    every commit from deleting the shard; a writer that dies releases it,
    and the next commit removes what it left."""

    def __init__(self, dataset_dir: PathLike, *, prefix: str = "shard") -> None:
        _check_name(prefix)
        room = _MAX_NAME_BYTES - _NAME_SUFFIX_BYTES
        if len(prefix.encode()) > room:
            raise ValueError(
                f"prefix {prefix[:40]!r}... is {len(prefix.encode())} bytes; a shard's prefix may have at most {room}"
            )
        self.dataset_dir = os.fspath(dataset_dir)
        os.makedirs(self.dataset_dir, exist_ok=True)
        self.name = f"{prefix}-{secrets.token_hex(8)}"
        self.path = os.path.join(self.dataset_dir, self.name)
        lock = os.path.join(self.dataset_dir, f"{_LOCK_PREFIX}{self.name}{_LOCK_SUFFIX}")
        self._fd: int | None = _take_lock(lock)
        self._lock = lock

    def close(self) -> None:
        """Release the reservation. A shard a commit has published loses its
        lock file with it; otherwise the file stays, unlocked, so the next
        commit knows the shard as one of a writer that ended: it keeps the
        shard if it names it and deletes it otherwise."""
        fd, self._fd = self._fd, None
        if fd is not None:
            try:
                if self._published():
                    with contextlib.suppress(OSError):
                        os.unlink(self._lock)  # still under our flock
            finally:
                os.close(fd)

    def _published(self) -> bool:
        try:
            return any(s.name == self.name for s in read_manifest(self.dataset_dir).shards)
        except (OSError, CorruptStoreError):
            return False

    def __enter__(self) -> ShardWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()

    def __repr__(self) -> str:
        return f"ShardWriter({self.path!r})"


#: how long a new writer retries a lock a commit's probe holds for a moment
_TAKE_LOCK_SECONDS = 10.0


def _take_lock(lock: str) -> int:
    """Create and flock the reservation ``lock``; return its descriptor.

    A commit deletes a lock file only while it holds its flock (see
    :func:`_reap`), and this holds the flock on the file the path names
    when it returns, so no commit can take the reservation from under a
    writer. Between creating the file and locking it, a commit may probe it
    (then the flock is busy for a moment) or find it unheld and delete it
    (then the flock lands on a file no longer at the path): either way the
    lock is made again."""
    deadline = time.monotonic() + _TAKE_LOCK_SECONDS
    while True:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            if time.monotonic() > deadline:
                raise BlockingIOError(f"shard reservation {lock!r} stays locked by another process") from None
            time.sleep(0.0005)
            continue
        except OSError:
            os.close(fd)
            raise
        try:
            st = os.stat(lock)
        except FileNotFoundError:
            st = None
        mine = os.fstat(fd)
        if st is not None and (st.st_dev, st.st_ino) == (mine.st_dev, mine.st_ino):
            return fd
        os.close(fd)  # a commit deleted the file before the flock: make it again


def _reap(lock: str) -> bool:
    """Whether a live writer holds ``lock``; if none does, delete the lock
    file while holding its flock (so no writer can have taken it meanwhile:
    a writer that locks it afterwards finds it gone and makes a new one)."""
    try:
        fd = os.open(lock, os.O_RDWR | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        try:
            st = os.stat(lock)
        except FileNotFoundError:
            return False
        mine = os.fstat(fd)
        if (st.st_dev, st.st_ino) == (mine.st_dev, mine.st_ino):
            os.unlink(lock)
        return False
    finally:
        os.close(fd)  # closing drops the lock if we took it


def _held(lock: str) -> bool:
    """Whether a live writer holds ``lock``; False also when it is gone."""
    try:
        fd = os.open(lock, os.O_RDWR | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # closing drops the lock if we took it
    return False


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _sync_tree(path: str) -> None:
    """Sync every file and directory of a shard, so a manifest that names it
    never outlives its bytes in a crash."""
    for top, _dirs, files in os.walk(path):
        for f in files:
            fd = os.open(os.path.join(top, f), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        _fsync_dir(top)


def _remove(path: str) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError, IsADirectoryError):
            os.unlink(path)


_STORE_NAMES = frozenset({"meta.zr", "dict.zr", "schema.msgpack", "delete.intent", "compact.journal"})
_STORE_SUFFIXES = (".tab", ".chunk", ".loc")


def _replaced(root: str) -> set[str]:
    """What a commit that replaces the dataset at ``root`` drops besides a
    previous manifest's shards: the files of a single store written there
    (zrecord/doc.go names them), or the stream directories of a directory
    of stores."""
    out = set()
    for e in os.listdir(root):
        p = os.path.join(root, e)
        if os.path.isfile(os.path.join(root, "meta.zr")):
            stem, dot, suffix = e.partition(".")
            if e in _STORE_NAMES or (stem.isdigit() and dot and "." + suffix in _STORE_SUFFIXES):
                out.add(e)
        elif not e.startswith(".") and os.path.isdir(p) and not os.path.islink(p) and _is_store(p):
            out.add(e)
    return out


def _staging_owner(entry: str) -> str | None:
    """The shard NAME whose store's staging ``entry`` is, else None: the
    directory of its Creates' staging directories (".NAME.zrecord-stage"),
    or, as earlier releases left them, one staging directory
    (".NAME.zrecord-create-<16 hex>", or "-trash-" while it replaces one).
    NAME may hold dots itself."""
    if entry.startswith(".") and entry.endswith(_STAGING_DIR) and len(entry) > 1 + len(_STAGING_DIR):
        return entry[1 : -len(_STAGING_DIR)]
    m = _OLD_STAGING.fullmatch(entry)
    return m.group(1) if m else None


def _clean(root: str, keep: set[str], previous: set[str]) -> list[str]:
    """Delete what this module made and the manifest no longer needs, and
    return the entries deleted: the shards of reservations no live writer
    holds that ``keep`` does not name (writers that died, failed or closed
    without being committed) with their lock files and their stores'
    staging directories, the ``previous`` manifest's shards that ``keep``
    drops, and temporary manifests of commits that died (the caller holds
    the commit lock). Everything else in the directory is left alone."""
    entries = os.listdir(root)
    live: set[str] = set()
    ended: set[str] = set()
    removed = []
    for e in entries:  # every reservation's lock is reaped under its flock, unless held
        if e.startswith(_LOCK_PREFIX) and e.endswith(_LOCK_SUFFIX):
            name = e[len(_LOCK_PREFIX) : -len(_LOCK_SUFFIX)]
            if _reap(os.path.join(root, e)):
                live.add(name)
            else:
                ended.add(name)
                removed.append(e)
    drop = (ended | previous) - keep - live
    for e in entries:
        if e in drop or e.startswith(_TEMP_PREFIX) or (_staging_owner(e) in drop):
            _remove(os.path.join(root, e))
            removed.append(e)
    return removed


def commit(dataset_dir: PathLike, names: Sequence[str], *, append: bool = False, sync: bool = True) -> Manifest:
    """Publish the shards ``names`` (in global order) as the dataset at
    ``dataset_dir``, after the current manifest's shards when ``append``.

    Every shard is checked first: it must exist and be complete, and all
    shards must have the same layout, the same streams, and per stream the
    same kind, dtype and item shape; otherwise ValueError naming the shard
    and the values, and nothing changes. The new manifest is written to a
    temporary file, synced and renamed over the old one, and the directory
    synced, so a crash leaves the old dataset or the new one; the shards
    are synced first. ``sync=False`` skips every sync, as a converter's
    default does: the rename still switches readers from one dataset to the
    other at once, but a power cut may then leave a manifest whose shards
    did not reach the disk, which opening reports as CorruptStoreError
    naming the shard (never as other data). Then the
    shards of ended reservations that it does not name, and those of the
    previous manifest that it drops, are deleted (nothing a live
    :class:`ShardWriter` holds, nor anything else in the directory).
    Returns the new manifest."""
    root = os.fspath(dataset_dir)
    names = [str(n) for n in names]
    for n in names:
        _check_name(n)
    if len(set(names)) != len(names):
        raise ValueError(f"a shard is named twice in {names!r}")
    os.makedirs(root, exist_ok=True)
    lock_fd = os.open(os.path.join(root, _COMMIT_LOCK), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(lock_fd, fcntl.LOCK_EX)  # one commit at a time
        current = read_manifest(root) if is_sharded(root) else None
        old = current if append else None
        shards: list[ShardInfo] = list(old.shards) if old else []
        layout, streams = (old.layout, dict(old.streams)) if old else (None, None)
        first = shards[0].name if shards else None
        taken = {s.name for s in shards}
        for n in names:
            if n in taken:
                raise ValueError(f"shard {n!r} is already in the manifest of {root!r}")
            try:
                lay, st, length = describe(os.path.join(root, n))
            except CorruptStoreError as e:
                raise ValueError(f"cannot commit {root!r}: {e}") from None
            if layout is None:
                layout, streams, first = lay, st, n
            else:
                assert streams is not None
                if lay != layout:
                    raise ValueError(f"shard {n!r} is a {lay!r} shard, shard {first!r} a {layout!r} one")
                if set(st) != set(streams):
                    raise ValueError(f"shard {n!r} has streams {sorted(st)!r}, shard {first!r} {sorted(streams)!r}")
                for k in st:
                    problem = _agree(n, streams[k], st[k], k)
                    if problem:
                        raise ValueError(f"cannot commit {root!r}: {problem} (shard {first!r})")
            if sync:
                _sync_tree(os.path.join(root, n))
            shards.append(ShardInfo(n, length))
        if layout is None:
            raise ValueError(f"nothing to commit at {root!r}: no shards named and no manifest to append to")
        assert streams is not None
        m = Manifest(layout, streams, tuple(shards))
        tmp = os.path.join(root, _TEMP_PREFIX + secrets.token_hex(4))
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        try:
            os.write(fd, _encode(m))
            if sync:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, os.path.join(root, MANIFEST_FILE))
        if sync:
            _fsync_dir(root)
        if current is not None:
            previous = {s.name for s in current.shards}
        else:  # a single store or directory of stores written here before
            previous = set() if append else _replaced(root) - set(names)
        _clean(root, {s.name for s in m.shards}, previous)
        return m
    finally:
        os.close(lock_fd)


def abandon(dataset_dir: PathLike, names: Sequence[str]) -> list[str]:
    """Delete shards a failed job wrote and never committed, with their
    reservations, and return the names deleted. A name the current manifest
    holds is kept, and so is one a live writer still holds."""
    root = os.fspath(dataset_dir)
    keep = {s.name for s in read_manifest(root).shards} if is_sharded(root) else set()
    done = []
    staged: dict[str, list[str]] | None = None  # owner -> its staging entries, listed once
    for n in names:
        _check_name(n)
        if n in keep or _reap(os.path.join(root, f"{_LOCK_PREFIX}{n}{_LOCK_SUFFIX}")):
            continue
        _remove(os.path.join(root, n))
        if staged is None:
            staged = {}
            for e in os.listdir(root):
                owner = _staging_owner(e)
                if owner is not None:
                    staged.setdefault(owner, []).append(e)
        for e in staged.get(n, []):
            _remove(os.path.join(root, e))
        done.append(n)
    return done


def remove_if_empty(dataset_dir: PathLike) -> None:
    """Remove ``dataset_dir`` when a failed first write left nothing in it
    but lock files."""
    root = os.fspath(dataset_dir)
    try:
        entries = os.listdir(root)
    except FileNotFoundError:
        return
    if all(e == _COMMIT_LOCK or (e.startswith(_LOCK_PREFIX) and not _held(os.path.join(root, e))) for e in entries):
        with contextlib.suppress(OSError):
            shutil.rmtree(root)
