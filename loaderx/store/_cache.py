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
* **The warm path is one native call.** Each store of a guarded handle
  carries a residency map (``lx_store_set_residency``): this process's
  array of held pages, which the gather checks record by record before it
  copies a byte, failing with ``NotResidentError`` where a page is not
  held. A read first runs as it is; only a refused one pins and fetches,
  then runs again.
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

This module holds the options, the cache directory (its limit, eviction,
listing and clearing) and each store's page files; ``store._remote`` the
mirror of one dataset root and its fetches; ``store._guard`` what keeps a
handle's reads inside the pages its process holds.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import fcntl
import json
import os
import re
import shutil
import struct
import threading
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

from loaderx.store import _native

__all__ = ["CacheOptions", "is_url", "default_dir", "describe", "clear", "parse_size"]

_T = TypeVar("_T")
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


def parse_size(text: str, what: str) -> int:
    """``"50GiB"``, ``"512M"``, ``"2000000000"`` as bytes; ValueError
    quoting ``what`` and the text otherwise."""
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([KMGT]i?B?|B)?\s*", text, re.IGNORECASE)
    if not m:
        raise ValueError(f"{what}={text!r} is not a size (such as 50GiB, 512MiB or 2000000000)")
    unit = (m.group(2) or "B").upper().rstrip("B").rstrip("I")
    n = int(float(m.group(1)) * {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}[unit])
    if n <= 0:
        raise ValueError(f"{what}={text!r} must be more than 0 bytes")
    return n


def _env_limit() -> int | None:
    text = os.environ.get("LOADERX_CACHE_LIMIT")
    return parse_size(text, "LOADERX_CACHE_LIMIT") if text else None


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
def _flock(path: str) -> Iterator[int]:
    """Hold an exclusive flock on ``path`` (created if missing)."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
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
        self.trees: weakref.WeakSet[Any] = weakref.WeakSet()  # store._remote.RemoteTree of this process
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

    def make_room(self, need: int) -> None:
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


def _after_fork_in_child() -> None:
    global _CACHES_LOCK
    _CACHES_LOCK = threading.Lock()  # another thread may have held it at the fork


os.register_at_fork(after_in_child=_after_fork_in_child)


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


# -- the cache directory as a whole ---------------------------------------------


def _generations(root: str) -> Iterator[tuple[str, str]]:
    """``(url, generation directory)`` of every cached dataset version."""
    trees = os.path.join(root, "trees")
    with contextlib.suppress(OSError):
        for t in sorted(os.scandir(trees), key=lambda e: e.name):
            try:
                with open(os.path.join(t.path, "url")) as f:
                    url = f.read().strip()
            except OSError:
                url = t.name
            for g in sorted(os.scandir(t.path), key=lambda e: e.name) if t.is_dir() else ():
                if g.is_dir():
                    yield url, g.path


def _in_use(gen_dir: str) -> bool:
    try:
        fd = os.open(os.path.join(gen_dir, ".open"), os.O_RDWR | os.O_CREAT, 0o644)
    except OSError:
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)


def describe(root: str) -> list[dict[str, Any]]:
    """Every cached dataset version under the cache directory ``root``:
    its URL, generation, bytes of record pages held, and whether a process
    has it open."""
    out = []
    for url, gen in _generations(root):
        held = 0
        pages = os.path.join(gen, "pages")
        for s in os.scandir(pages) if os.path.isdir(pages) else ():
            with contextlib.suppress(OSError, ValueError, KeyError):
                f = _PageFiles(s.path)
                held += f.used()
                f.close()
        out.append({"url": url, "generation": os.path.basename(gen), "bytes": held, "open": _in_use(gen)})
    return out


def clear(root: str, url: str | None = None) -> tuple[list[str], list[str]]:
    """Remove the cached versions (of ``url``, or all) that no process has
    open; ``(removed, kept because open)`` as ``url@generation``."""
    removed, busy = [], []
    want = url.rstrip("/") if url else None
    for u, gen in _generations(root):
        if want is not None and u != want:
            continue
        name = f"{u}@{os.path.basename(gen)}"
        fd = os.open(os.path.join(gen, ".open"), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                busy.append(name)
                continue
            shutil.rmtree(gen, ignore_errors=True)
            removed.append(name)
        finally:
            os.close(fd)
    return removed, busy
