"""Datasets in object storage, read through a bounded local cache.

Opening ``s3://bucket/prefix`` lists the objects under the prefix and builds
a *mirror* of the dataset in the cache directory: every file but the chunk
files is downloaded whole (headers, record tables, dictionaries, schemas,
the manifest), and each chunk file is made a sparse file of its object's
size. The store layer then opens the mirror as it opens any local store, so
a remote dataset is read by the same mapped, checksummed gathers. What this
module adds is the rule that no gather touches a chunk byte that is not
there:

* **Pages.** Each chunk file is cut into pages of about ``page_size`` bytes
  that begin and end on record boundaries: page ``p`` of a chunk holds the
  records whose stored bytes start in ``[p * page_size, (p+1) * page_size)``.
  A page is the unit of fetching, verifying, pinning and eviction; a page's
  bytes come in one range request and are checked, record by record,
  against the table's CRC-32C (``lx_store_check_bytes``) before they are
  written into the mirror, so bytes from the server that are not the
  store's never become readable.
* **State in files, locks in the kernel.** Per store the cache keeps a page
  table and, in the file ``present``, one byte per page (1 once its bytes
  are in the mirror). Byte ``p`` of ``present`` is also the page's *pin*:
  a process that reads page ``p`` holds a shared open-file-description lock
  (``F_OFD_SETLK``) on it, and eviction takes an exclusive one without
  waiting, so a pinned page is never evicted, and a process that dies drops
  its pins with its file descriptors: nothing in shared memory can go
  stale. Byte ``npages + p`` serialises fetches of the page across
  processes. Every process and rank of a node that opens the same dataset
  with the same cache directory shares its pages.
* **Pins outlive batches.** A process keeps the pins it took until the
  cache needs room: then, before it fetches, it evicts the least recently
  used unpinned pages of every dataset in the cache directory, and if that
  is not enough it lets go of its own pins other than those of the batches
  in flight, and evicts again. It never waits for room: a cache too small
  for one batch passes its limit by what the batches in flight pin, rather
  than deadlock. A warm dataset that fits therefore reads with no system
  call beyond the gather's.
* **Restarts.** The mirror and its page state stay on disk, keyed by the
  URL and by the listing (every object's name, size and ETag); a process
  that opens the same objects again reuses every page fetched before, and a
  dataset whose objects changed gets a new generation (the old one is
  removed once no process has it open). A page lost in a machine crash
  (written but not on disk) reads back as bytes that fail the gather's
  check; the page is then dropped, fetched again and the gather retried
  once, so it costs a fetch, never a wrong record.

Faults: a server that stops answering fails a fetch after the client's
bounded retries (``io._s3``) with :class:`~loaderx.errors.RemoteError`
naming the object; an object overwritten since the dataset was opened fails
its ETag precondition, and one truncated or altered fails its length or its
checksums, each :class:`~loaderx.errors.CorruptStoreError` naming the
object; a full disk is an OSError naming the cache directory after one more
eviction pass. Nothing is marked present that was not written and checked.

The limit counts the chunk pages held; the headers, tables and dictionaries
(24 bytes per record and a few files per store) come on top, as they must
stay whole while a dataset is open.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import fcntl
import hashlib
import json
import os
import re
import shutil
import struct
import threading
import time
import weakref
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from loaderx.errors import CorruptStoreError
from loaderx.io import _s3
from loaderx.store import _native

__all__ = ["CacheOptions", "RemoteTree", "Guard", "open_tree", "tree_of", "is_url", "default_dir"]

_META = "meta.zr"
_CHUNK = re.compile(r"^(0|[1-9][0-9]*)\.chunk$")
#: seconds a pin waits for an evictor's momentary exclusive lock
_PIN_DEADLINE = 60.0


def is_url(path: Any) -> bool:
    """Whether ``path`` is an ``s3://`` URL (any other path is local)."""
    return isinstance(path, str) and path[:5].lower() == "s3://"


def default_dir() -> str:
    """``$LOADERX_CACHE_DIR``, else ``$XDG_CACHE_HOME/loaderx``, else
    ``~/.cache/loaderx``."""
    d = os.environ.get("LOADERX_CACHE_DIR")
    if d:
        return d
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "loaderx")


def _env_limit() -> int | None:
    text = os.environ.get("LOADERX_CACHE_LIMIT")
    if not text:
        return None
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([KMGT]i?B?|B)?\s*", text, re.IGNORECASE)
    if not m:
        raise ValueError(f"LOADERX_CACHE_LIMIT={text!r} is not a size (such as 50GiB or 2000000000)")
    unit = (m.group(2) or "B").upper().rstrip("B").rstrip("I")
    return int(float(m.group(1)) * {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}[unit])


@dataclass(frozen=True)
class CacheOptions:
    """How a dataset in object storage is cached on local disk.

    Attributes:
        dir: the cache directory, shared by every dataset, process and rank
            that names it. None: ``$LOADERX_CACHE_DIR``, else
            ``$XDG_CACHE_HOME/loaderx``, else ``~/.cache/loaderx``.
        limit: bytes of chunk data the cache keeps. None:
            ``$LOADERX_CACHE_LIMIT`` (such as ``50GiB``), else half of the
            free space of the cache's file system when the dataset is opened
            plus what the cache holds already.
        page_size: bytes one range request brings (pages end on record
            boundaries, so a page holds at least one record). Default 8 MiB.
        prefetch: bytes a :class:`~loaderx.DataLoader` may fetch ahead of
            the step it serves, from the sampler's next steps. 0 turns
            prefetching off. Default 256 MiB.
        threads: range requests in flight at once. Default 8.
    """

    dir: str | None = None
    limit: int | None = None
    page_size: int = 8 << 20
    prefetch: int = 256 << 20
    threads: int = 8

    def __post_init__(self) -> None:
        if self.dir is not None and not isinstance(self.dir, (str, os.PathLike)):
            raise TypeError(f"CacheOptions.dir must be a path or None, got {self.dir!r}")
        if self.dir is not None:
            object.__setattr__(self, "dir", os.fspath(self.dir))
        for name, low in (("page_size", 4096), ("threads", 1)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < low:
                raise ValueError(f"CacheOptions.{name} must be an int >= {low}, got {v!r}")
        if self.page_size > 1 << 30:
            raise ValueError(f"CacheOptions.page_size must be at most 1 GiB, got {self.page_size!r}")
        v = self.prefetch
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise ValueError(f"CacheOptions.prefetch must be an int >= 0, got {v!r}")
        v = self.limit
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v <= 0):
            raise ValueError(f"CacheOptions.limit must be a positive int (bytes) or None, got {v!r}")

    @property
    def root(self) -> str:
        """The cache directory these options name."""
        return os.path.abspath(self.dir or default_dir())


# -- kernel primitives ----------------------------------------------------------

_FLOCK = struct.Struct("hhqqi4x")  # struct flock on Linux (x86-64, arm64)
_libc: Any = None


def _ofd(fd: int, kind: int, start: int, length: int, wait: bool = False) -> bool:
    """Take (``fcntl.F_RDLCK``/``F_WRLCK``) or drop (``F_UNLCK``) an
    open-file-description lock on ``length`` bytes at ``start`` of ``fd``.
    Without ``wait``, False when another holder conflicts."""
    arg = _FLOCK.pack(kind, os.SEEK_SET, start, length, 0)
    try:
        fcntl.fcntl(fd, fcntl.F_OFD_SETLKW if wait else fcntl.F_OFD_SETLK, arg)
    except OSError as e:
        if e.errno in (errno.EAGAIN, errno.EACCES) and not wait:
            return False
        raise
    return True


def _punch(fd: int, start: int, length: int) -> None:
    """Free the blocks of ``length`` bytes at ``start`` (they read as zeros)."""
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        _libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
    # FALLOC_FL_KEEP_SIZE | FALLOC_FL_PUNCH_HOLE
    if _libc.fallocate(fd, 0x01 | 0x02, start, length) != 0:
        e = ctypes.get_errno()
        raise OSError(e, f"cannot free cached bytes: {os.strerror(e)}")


@contextlib.contextmanager
def _flock(path: str, shared: bool = False) -> Iterator[int]:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
        yield fd
    finally:
        os.close(fd)


def _write_atomic(path: str, data: bytes) -> None:
    tmp = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text)[-80:] or "_"


# -- the cache directory ----------------------------------------------------------


class _Cache:
    """One cache directory as this process sees it: its limit, the page
    states of every dataset in it (for eviction) and this process's trees."""

    def __init__(self, root: str, limit: int | None) -> None:
        self.root = root
        os.makedirs(os.path.join(root, "trees"), exist_ok=True)
        self._limit = limit
        self.mu = threading.Lock()
        self.trees: weakref.WeakSet[RemoteTree] = weakref.WeakSet()
        self._states: dict[str, _PageFiles] = {}  # state dir -> its files, for eviction
        self.evicted_bytes = 0

    def limit(self) -> int:
        if self._limit is None:
            env = _env_limit()
            if env is not None:
                self._limit = env
            else:
                st = os.statvfs(self.root)
                self._limit = max(1 << 30, (st.f_bavail * st.f_frsize + self.used()) // 2)
        return self._limit

    def set_limit(self, limit: int | None) -> None:
        if limit is not None:
            self._limit = limit

    def _scan(self) -> list[_PageFiles]:
        """The page states of every dataset in the cache directory."""
        found = []
        trees = os.path.join(self.root, "trees")
        with contextlib.suppress(OSError):
            for t in os.scandir(trees):
                for g in os.scandir(t.path) if t.is_dir() else ():
                    pages = os.path.join(g.path, "pages")
                    for s in os.scandir(pages) if g.is_dir() and os.path.isdir(pages) else ():
                        if os.path.isfile(os.path.join(s.path, "info.json")):
                            st = self._states.get(s.path)
                            if st is None:
                                try:
                                    st = _PageFiles(s.path)
                                except (OSError, ValueError, KeyError):
                                    continue  # a state being built, or removed meanwhile
                                self._states[s.path] = st
                            found.append(st)
        for gone in set(self._states) - {s.dir for s in found}:
            self._states.pop(gone).close()
        return found

    def used(self) -> int:
        with self.mu:
            return sum(s.used() for s in self._scan())

    def make_room(self, need: int, keep: Guard | None = None) -> None:
        """Evict least recently used unpinned pages until ``need`` more
        bytes fit under the limit; then let go of this process's idle pins
        and try once more; then give up (the cache passes its limit by what
        is pinned, rather than wait)."""
        limit = self.limit()
        with self.mu:
            states = self._scan()
            used = sum(s.used() for s in states)
            if used + need <= limit:
                return
        with _flock(os.path.join(self.root, ".evict.lock")):
            for attempt in range(2):
                with self.mu:
                    states = self._scan()
                    used = sum(s.used() for s in states)
                    if used + need <= limit:
                        return
                    used = self._evict(states, used + need - limit)
                    if used + need <= limit:
                        return
                if attempt == 0:
                    for tree in list(self.trees):
                        tree.release_idle()

    def _evict(self, states: list[_PageFiles], excess: int) -> int:
        stamps, owners, pages = [], [], []
        for k, s in enumerate(states):
            p = np.flatnonzero(s.present[: s.npages] == 1)
            if p.size:
                stamps.append(s.stamps[p])
                owners.append(np.full(p.size, k, dtype=np.int32))
                pages.append(p)
        freed = 0
        if stamps:
            st, ow, pg = np.concatenate(stamps), np.concatenate(owners), np.concatenate(pages)
            for j in np.lexsort((pg, st)):
                if freed >= excess:
                    break
                freed += states[int(ow[j])].try_evict(int(pg[j]))
        self.evicted_bytes += freed
        return sum(s.used() for s in states)


_CACHES: dict[str, _Cache] = {}
_CACHES_LOCK = threading.Lock()


def _cache(opts: CacheOptions) -> _Cache:
    root = opts.root
    with _CACHES_LOCK:
        c = _CACHES.get(root)
        if c is None:
            c = _CACHES[root] = _Cache(root, opts.limit)
        else:
            c.set_limit(opts.limit)
    return c


# -- one store's pages ----------------------------------------------------------


class _PageFiles:
    """The page state of one cached store, as files: ``info.json`` (the
    mirror store it belongs to, the page size, chunk sizes), ``pages.npy``
    (chunk, first byte, end per page), ``present`` (a byte per page, and the
    lock bytes) and ``stamps`` (the last use of each page, in seconds)."""

    def __init__(self, state_dir: str) -> None:
        self.dir = state_dir
        with open(os.path.join(state_dir, "info.json")) as f:
            info = json.load(f)
        self.store_dir: str = info["store"]
        self.page_size = int(info["page_size"])
        self.npages = int(info["npages"])
        self.pages = np.load(os.path.join(state_dir, "pages.npy"), mmap_mode="r")
        self.sizes = (self.pages[:, 2] - self.pages[:, 1]).astype(np.int64) if self.npages else np.zeros(0, np.int64)
        self.present = np.memmap(os.path.join(state_dir, "present"), dtype=np.uint8, mode="r+")
        self.stamps = np.memmap(os.path.join(state_dir, "stamps"), dtype=np.uint32, mode="r+")
        # a descriptor of its own for eviction: a lock asked for through the
        # descriptor this process pins with would be granted over its own pins
        self._evict_fd = os.open(os.path.join(state_dir, "present"), os.O_RDWR)
        self._chunk_fds: dict[int, int] = {}

    def used(self) -> int:
        if not self.npages:
            return 0
        return int(np.dot(self.present[: self.npages].astype(np.int64), self.sizes))

    def chunk_fd(self, chunk: int) -> int:
        fd = self._chunk_fds.get(chunk)
        if fd is None:
            fd = self._chunk_fds[chunk] = os.open(os.path.join(self.store_dir, f"{chunk}.chunk"), os.O_RDWR)
        return fd

    def try_evict(self, p: int) -> int:
        """Evict page ``p`` unless it is pinned; the bytes freed."""
        if not _ofd(self._evict_fd, fcntl.F_WRLCK, p, 1):
            return 0
        try:
            if self.present[p] != 1:
                return 0
            self.present[p] = 0
            chunk, lo, hi = (int(x) for x in self.pages[p])
            with contextlib.suppress(FileNotFoundError):
                _punch(self.chunk_fd(chunk), lo, hi - lo)
            return hi - lo
        finally:
            _ofd(self._evict_fd, fcntl.F_UNLCK, p, 1)

    def close(self) -> None:
        for fd in [self._evict_fd, *self._chunk_fds.values()]:
            with contextlib.suppress(OSError):
                os.close(fd)
        self._chunk_fds.clear()


def _build_pages(state_dir: str, store_dir: str, h: int, store: int, start: int, n: int, chunk_sizes: dict[int, int],
                 page_size: int) -> None:
    """Write the page state of the store at position ``store`` of handle
    ``h`` (records ``[start, start + n)`` of the handle) into ``state_dir``."""
    tmp = f"{state_dir}.{os.getpid()}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    top = max(chunk_sizes) if chunk_sizes else 0
    base = np.zeros(top + 2, dtype=np.int64)
    for c in range(top + 1):
        base[c + 1] = base[c] + max(1, -(-chunk_sizes.get(c, 0) // page_size))
    npages = int(base[top + 1])
    lo = np.full(npages, np.iinfo(np.int64).max, dtype=np.int64)
    hi = np.zeros(npages, dtype=np.int64)
    slots = np.empty(n, dtype=np.int64)
    step = 1 << 20
    for a in range(0, n, step):
        idx = np.arange(start + a, start + min(n, a + step), dtype=np.int64)
        _, c, o, ln = _native.store_spans(h, idx)
        s = base[c.astype(np.int64)] + o.astype(np.int64) // page_size
        slots[a : a + idx.size] = s
        np.minimum.at(lo, s, o.astype(np.int64))
        np.maximum.at(hi, s, o.astype(np.int64) + ln.astype(np.int64))
    empty = hi == 0
    lo[empty] = 0
    chunk_of = np.searchsorted(base, np.arange(npages), side="right") - 1
    order = np.argsort(slots, kind="stable")
    first = np.searchsorted(slots[order], np.arange(npages + 1))
    np.save(os.path.join(tmp, "pages.npy"), np.stack([chunk_of, lo, hi], axis=1).astype(np.int64))
    np.save(os.path.join(tmp, "base.npy"), base)
    np.save(os.path.join(tmp, "first.npy"), first.astype(np.int64))
    np.save(os.path.join(tmp, "records.npy"), order.astype(np.int64))
    with open(os.path.join(tmp, "present"), "wb") as f:
        f.truncate(max(1, npages))
    with open(os.path.join(tmp, "stamps"), "wb") as f:
        f.truncate(max(1, npages) * 4)
    with open(os.path.join(tmp, "info.json"), "w") as f:
        json.dump({"store": store_dir, "page_size": page_size, "npages": npages,
                   "chunks": {str(k): v for k, v in chunk_sizes.items()}}, f)
    os.rename(tmp, state_dir)


class _Part:
    """One store of a guarded handle: its page files, and this process's
    pins on them (``held``, a view of the guard's array)."""

    def __init__(self, files: _PageFiles, state_dir: str, store: int, key_of: dict[int, str]) -> None:
        self.files = files
        self.store = store
        self.base = np.load(os.path.join(state_dir, "base.npy"))
        self.first = np.load(os.path.join(state_dir, "first.npy"), mmap_mode="r")
        self.records = np.load(os.path.join(state_dir, "records.npy"), mmap_mode="r")
        self.fd = os.open(os.path.join(state_dir, "present"), os.O_RDWR)  # pins and fetch locks
        self.key_of = key_of  # chunk id -> object key
        self.held: np.ndarray = np.zeros(0, dtype=bool)
        self.fetch_locks = [threading.Lock() for _ in range(64)]

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.fd)


# -- a dataset root -------------------------------------------------------------


class RemoteTree:
    """A dataset root in object storage and its mirror in the cache."""

    def __init__(self, url: str, opts: CacheOptions, storage: dict[str, Any]) -> None:
        self.url = url.rstrip("/")
        self.opts = opts
        self.storage = dict(storage)
        self.bucket, self.prefix = _s3.parse_url(self.url)
        self.client = _s3.client(self.url, **self.storage)
        self.cache = _cache(opts)
        self.fetched_bytes = 0
        self.fetches = 0
        self._mu = threading.Lock()
        self._guards: weakref.WeakSet[Guard] = weakref.WeakSet()
        self._pool: ThreadPoolExecutor | None = None
        self._objects = self._list()
        digest = hashlib.sha256(json.dumps(sorted(self._objects.items())).encode()).hexdigest()[:20]
        key = f"{_safe(self.bucket + '_' + self.prefix)}-{hashlib.sha256(self.url.encode()).hexdigest()[:8]}"
        self.tree_dir = os.path.join(self.cache.root, "trees", key)
        self.gen_dir = os.path.join(self.tree_dir, digest)
        self.local = os.path.join(self.gen_dir, "data")
        os.makedirs(self.gen_dir, exist_ok=True)
        with contextlib.suppress(OSError), open(os.path.join(self.tree_dir, "url"), "w") as f:
            f.write(self.url + "\n")
        self._open_fd = os.open(os.path.join(self.gen_dir, ".open"), os.O_RDWR | os.O_CREAT, 0o644)
        fcntl.flock(self._open_fd, fcntl.LOCK_SH)
        self._mirror()
        self._drop_old_generations()
        self.cache.trees.add(self)

    # listing and mirroring

    def object_url(self, rel: str) -> str:
        return f"s3://{self.bucket}/{self._key(rel)}"

    def _key(self, rel: str) -> str:
        return f"{self.prefix}/{rel}" if self.prefix else rel

    def _list(self) -> dict[str, tuple[int, str]]:
        """``{relative path: (size, etag)}`` of every object under the URL."""
        import obstore

        want = f"{self.prefix}/" if self.prefix else ""
        try:
            found: dict[str, tuple[int, str]] = {}
            for batch in obstore.list(self.client, prefix=self.prefix or None):
                for meta in batch:
                    path = meta["path"]
                    if want and not path.startswith(want):
                        continue  # "prefix2/..." beside "prefix/..."
                    found[path[len(want):]] = (int(meta["size"]), meta.get("e_tag") or "")
        except Exception as e:
            raise _s3.remote_error(e, self.url, "", "list") from None
        if not found:
            raise FileNotFoundError(f"{self.url!r}: no objects under this URL (nothing was pushed there?)")
        if not any(r == _META or r.endswith("/" + _META) for r in found):
            raise ValueError(f"{self.url!r} holds no loaderx store (no {_META} under it)")
        return found

    def _mirror(self) -> None:
        ready = os.path.join(self.gen_dir, ".ready")
        if os.path.exists(ready):
            return
        with _flock(os.path.join(self.gen_dir, ".build.lock")):
            if os.path.exists(ready):
                return
            small = sorted(r for r in self._objects if not _CHUNK.match(os.path.basename(r)))
            for rel in small:
                path = os.path.join(self.local, rel)
                os.makedirs(os.path.dirname(path), exist_ok=True)
                _write_atomic(path, self._get(rel))
            for rel, (size, _) in self._objects.items():
                if _CHUNK.match(os.path.basename(rel)):
                    path = os.path.join(self.local, rel)
                    os.makedirs(os.path.dirname(path), exist_ok=True)
                    if not os.path.exists(path):
                        with open(path, "wb") as f:
                            f.truncate(size)
            _write_atomic(ready, b"")

    def _get(self, rel: str, start: int | None = None, end: int | None = None) -> bytes:
        import obstore

        size, etag = self._objects[rel]
        options: dict[str, Any] = {"if_match": etag} if etag else {}
        if start is not None:
            options["range"] = (start, end)
        try:
            got = obstore.get(self.client, self._key(rel), options=options).bytes()
        except Exception as e:
            from obstore import exceptions as ox

            if isinstance(e, ox.PreconditionError) or "precondition" in str(e).lower():
                raise CorruptStoreError(
                    f"{self.object_url(rel)} changed after {self.url!r} was opened (its ETag is no longer "
                    f"{etag}): open the dataset again to read the new version"
                ) from None
            raise _s3.remote_error(e, self.url, self._key(rel), "read") from None
        data = bytes(got) if start is None else memoryview(got)
        want = size if start is None else end - start
        if len(data) != want:
            raise CorruptStoreError(
                f"{self.object_url(rel)}: got {len(data)} bytes where {want} were asked for "
                f"({'the whole object' if start is None else f'bytes [{start}, {end})'}); the object is "
                f"{size} bytes in the listing taken at open: it was truncated or replaced"
            )
        with self._mu:
            self.fetched_bytes += len(data)
            self.fetches += 1
        return data  # type: ignore[return-value]

    def _drop_old_generations(self) -> None:
        """Remove earlier generations of this URL that no process has open."""
        with contextlib.suppress(OSError):
            for g in os.scandir(self.tree_dir):
                if not g.is_dir() or g.path == self.gen_dir:
                    continue
                try:
                    fd = os.open(os.path.join(g.path, ".open"), os.O_RDWR | os.O_CREAT, 0o644)
                except OSError:
                    continue
                try:
                    try:
                        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    except BlockingIOError:
                        continue
                    shutil.rmtree(g.path, ignore_errors=True)
                finally:
                    os.close(fd)

    def pool(self) -> ThreadPoolExecutor:
        with self._mu:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.opts.threads, thread_name_prefix="loaderx-fetch")
            return self._pool

    # guards

    def guard(self, h: int, stores: list[tuple[str, int, int]]) -> Guard:
        """The guard of handle ``h`` over the mirror stores ``(path, first
        index, length)``, in the handle's store order."""
        parts = []
        for k, (path, start, n) in enumerate(stores):
            rel = os.path.relpath(path, self.local)
            rel = "" if rel == "." else rel
            state_dir = os.path.join(self.gen_dir, "pages", _safe(rel or "_root") + f"-{self.opts.page_size}")
            chunk_sizes = {}
            key_of = {}
            for obj, (size, _) in self._objects.items():
                d, name = os.path.split(obj)
                m = _CHUNK.match(name)
                if m and d == rel:
                    chunk_sizes[int(m.group(1))] = size
                    key_of[int(m.group(1))] = obj
            if not os.path.isdir(state_dir):
                with _flock(os.path.join(self.gen_dir, ".build.lock")):
                    if not os.path.isdir(state_dir):
                        os.makedirs(os.path.dirname(state_dir), exist_ok=True)
                        _build_pages(state_dir, os.path.abspath(path), h, k, start, n, chunk_sizes,
                                     self.opts.page_size)
            parts.append(_Part(_PageFiles(state_dir), state_dir, k, key_of))
        g = Guard(self, h, parts)
        self._guards.add(g)
        return g

    def release_idle(self) -> None:
        for g in list(self._guards):
            g.release_idle()

    def fetch_page(self, part: _Part, p: int, keep: Guard) -> int:
        """Bring page ``p`` of ``part`` into the mirror (the caller pins
        it); the bytes fetched, 0 when it was there already."""
        f = part.files
        with part.fetch_locks[p % len(part.fetch_locks)]:
            if f.present[p] == 1:
                return 0
            _ofd(part.fd, fcntl.F_WRLCK, f.npages + p, 1, wait=True)
            try:
                if f.present[p] == 1:
                    return 0
                chunk, lo, hi = (int(x) for x in f.pages[p])
                rel = part.key_of[chunk]
                self.cache.make_room(hi - lo, keep)
                data = self._get(rel, lo, hi)
                recs = np.ascontiguousarray(part.records[part.first[p] : part.first[p + 1]])
                try:
                    _native.store_check_bytes(keep.h, part.store, recs, chunk, lo, data)
                except CorruptStoreError as e:
                    raise CorruptStoreError(
                        f"{self.object_url(rel)}: bytes [{lo}, {hi}) do not match the store's record table "
                        f"({e}); the object was altered after the dataset was written"
                    ) from None
                self._write(f, chunk, lo, data, keep)
                f.stamps[p] = int(time.time())
                f.present[p] = 1
                return hi - lo
            finally:
                _ofd(part.fd, fcntl.F_UNLCK, f.npages + p, 1)

    def _write(self, f: _PageFiles, chunk: int, lo: int, data: Any, keep: Guard) -> None:
        fd = f.chunk_fd(chunk)
        view = memoryview(data)
        for attempt in range(2):
            try:
                done = 0
                while done < len(view):
                    done += os.pwrite(fd, view[done:], lo + done)
                return
            except OSError as e:
                if e.errno not in (errno.ENOSPC, errno.EDQUOT) or attempt:
                    if e.errno in (errno.ENOSPC, errno.EDQUOT):
                        with contextlib.suppress(OSError):
                            _punch(fd, lo, len(view))
                        raise OSError(
                            e.errno, f"the cache directory {self.cache.root!r} is out of disk space "
                            f"(cache limit {self.cache.limit()} bytes, {self.cache.used()} held): lower "
                            "CacheOptions.limit or LOADERX_CACHE_LIMIT, or free space"
                        ) from None
                    raise
                # the disk filled before the limit did: shrink the cache to
                # what it holds less this page, and try once more
                self.cache.set_limit(max(len(view), self.cache.used() - len(view)))
                self.cache.make_room(len(view), keep)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False)
        for g in list(self._guards):
            g.close()
        with contextlib.suppress(OSError):
            os.close(self._open_fd)

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()


_TREES: dict[tuple[str, str, str], RemoteTree] = {}
_TREES_LOCK = threading.Lock()


def open_tree(url: str, cache: CacheOptions | None, storage: dict[str, Any] | None) -> tuple[RemoteTree, str]:
    """The mirror of the dataset at ``url`` and the local path that stands
    for ``url`` in it. A URL naming one stream of a sharded multi-stream
    dataset (``root/stream``, with no objects of its own) mirrors the root.
    One process opens each (root, options) once and shares it."""
    opts = cache if cache is not None else CacheOptions()
    if not isinstance(opts, CacheOptions):
        raise TypeError(f"cache must be a loaderx.CacheOptions or None, got {opts!r}")
    storage = dict(storage or {})
    url = url.rstrip("/")
    _s3.parse_url(url)
    key = (url, repr(opts), json.dumps(storage, sort_keys=True, default=str))
    with _TREES_LOCK:
        tree = _TREES.get(key)
    if tree is not None:
        return tree, tree.local
    try:
        tree, sub = RemoteTree(url, opts, storage), ""
    except FileNotFoundError:
        root, _, stream = url.rpartition("/")
        if not stream or root.endswith(":/"):
            raise
        try:
            tree, sub = RemoteTree(root, opts, storage), stream
        except (FileNotFoundError, ValueError):
            raise FileNotFoundError(f"{url!r}: no objects under this URL (nothing was pushed there?)") from None
        if "manifest.json" not in tree._objects:
            raise FileNotFoundError(f"{url!r}: no objects under this URL (nothing was pushed there?)") from None
        key = (root, *key[1:])
    with _TREES_LOCK:
        tree = _TREES.setdefault(key, tree)
    return tree, os.path.join(tree.local, sub) if sub else tree.local


def tree_of(path: str) -> RemoteTree | None:
    """The open tree whose mirror holds ``path``, if any."""
    p = os.path.abspath(path)
    with _TREES_LOCK:
        for tree in _TREES.values():
            if p == tree.local or p.startswith(tree.local + os.sep):
                return tree
    return None


# -- guarding a handle's gathers ----------------------------------------------------


class Guard:
    """Keeps the pages of every batch of a handle in the mirror, and pinned,
    while the batch is read."""

    def __init__(self, tree: RemoteTree, h: int, parts: list[_Part]) -> None:
        self.tree = tree
        self.h = h
        self.parts = parts
        sizes = [p.files.npages for p in parts]
        self.offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        self.held = np.zeros(int(self.offsets[-1]), dtype=bool)
        for k, p in enumerate(parts):
            p.held = self.held[self.offsets[k] : self.offsets[k + 1]]
        width = max(len(p.base) for p in parts)
        self.base2 = np.zeros((len(parts), width), dtype=np.int64)
        for k, p in enumerate(parts):
            self.base2[k, : len(p.base)] = p.base + self.offsets[k]
        self.page_size = tree.opts.page_size
        self.mu = threading.Lock()
        #: the pages of each batch (and prefetch) in flight in this process,
        #: which release_idle keeps pinned
        self.inflight: dict[object, np.ndarray] = {}
        self.closed = False

    def slots(self, idx: np.ndarray) -> np.ndarray:
        """The global page of each record at ``idx`` (of this handle)."""
        s, c, o, _ = _native.store_spans(self.h, idx)
        if len(self.parts) == 1:
            return self.base2[0][c] + o // self.page_size
        return self.base2[s, c] + o // self.page_size

    @contextlib.contextmanager
    def reading(self, idx: np.ndarray) -> Iterator[None]:
        """Hold every page the records at ``idx`` need while the block runs."""
        if idx.size == 0:
            yield
            return
        slots = self.slots(idx)
        token = object()
        with self.mu:
            self.inflight[token] = slots
            ok = bool(self.held[slots].all())
        try:
            if not ok:
                self._pin(np.unique(slots))
            yield
        finally:
            with self.mu:
                del self.inflight[token]

    def _split(self, slots: np.ndarray) -> Iterator[tuple[_Part, np.ndarray]]:
        if len(self.parts) == 1:
            yield self.parts[0], slots
            return
        k = np.searchsorted(self.offsets, slots, side="right") - 1
        for part in np.unique(k):
            yield self.parts[int(part)], slots[k == part] - self.offsets[int(part)]

    def _pin(self, slots: np.ndarray) -> int:
        """Pin the pages ``slots`` (unique global pages), fetching those not
        in the mirror; the bytes fetched."""
        missing: list[tuple[_Part, int]] = []
        now = int(time.time())
        for part, local in self._split(slots):
            f = part.files
            for p in local[~part.held[local]].tolist():
                deadline = time.monotonic() + _PIN_DEADLINE
                while not _ofd(part.fd, fcntl.F_RDLCK, p, 1):
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"page {p} of {f.store_dir!r} stayed locked for {_PIN_DEADLINE} s")
                    time.sleep(0.0005)
                part.held[p] = True
                if f.present[p] == 1:
                    f.stamps[p] = now
                else:
                    missing.append((part, p))
        if not missing:
            return 0
        if len(missing) == 1:
            return self.tree.fetch_page(missing[0][0], missing[0][1], self)
        futures = [self.tree.pool().submit(self.tree.fetch_page, part, p, self) for part, p in missing]
        total, first_error = 0, None
        for fu in futures:
            try:
                total += fu.result()
            except BaseException as e:  # every fetch ends before the error is raised
                first_error = first_error or e
        if first_error is not None:
            raise first_error
        return total

    def prefetch(self, idx: np.ndarray) -> int:
        """Fetch and pin the pages the records at ``idx`` need; the bytes
        fetched."""
        if idx.size == 0 or self.closed:
            return 0
        slots = np.unique(self.slots(idx))
        token = object()
        with self.mu:
            slots = slots[~self.held[slots]]
            self.inflight[token] = slots
        try:
            return self._pin(slots) if slots.size else 0
        finally:
            with self.mu:
                del self.inflight[token]

    def drop(self, idx: np.ndarray) -> None:
        """Let go of the pages of ``idx`` and evict them (after their bytes
        failed a check), so the next read fetches them again."""
        slots = np.unique(self.slots(idx))
        with self.mu:
            for part, local in self._split(slots):
                for p in local.tolist():
                    if part.held[p]:
                        _ofd(part.fd, fcntl.F_UNLCK, p, 1)
                        part.held[p] = False
                    part.files.try_evict(p)

    def release_idle(self) -> None:
        """Drop this process's pins on every page no batch in flight needs."""
        with self.mu:
            keep = np.zeros(self.held.size, dtype=bool)
            for slots in self.inflight.values():
                keep[slots] = True
            for k, part in enumerate(self.parts):
                lo = int(self.offsets[k])
                free = np.flatnonzero(part.held & ~keep[lo : lo + part.held.size])
                if not free.size:
                    continue
                for run in np.split(free, np.flatnonzero(np.diff(free) != 1) + 1):
                    _ofd(part.fd, fcntl.F_UNLCK, int(run[0]), int(run.size))
                part.held[free] = False

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        for part in self.parts:
            part.close()  # closing the descriptor drops its pins

    def stats(self) -> dict[str, int]:
        held = int(sum(int(np.dot(p.held.astype(np.int64), p.files.sizes)) for p in self.parts))
        present = sum(p.files.used() for p in self.parts)
        return {"fetched_bytes": self.tree.fetched_bytes, "fetches": self.tree.fetches, "cached_bytes": present,
                "pinned_bytes": held, "cache_used_bytes": self.tree.cache.used(),
                "cache_limit_bytes": self.tree.cache.limit()}
