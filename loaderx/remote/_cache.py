"""Datasets in object storage, read through a bounded local cache.

The module stays one file past 700 lines: the cache's page states, the
locks that guard them across processes and the eviction that reads both
are one protocol, and kept together it is read in one place.

Opening ``s3://bucket/prefix`` lists the objects under the prefix and builds
a *mirror* of the dataset in the cache directory: the small files (headers,
dictionaries, schemas, manifests) are downloaded whole, and every chunk file
and record-table segment (``*.chunk``, ``*.tab``) is made a sparse file of
its object's size. The shards of a sharded dataset (the store directories
below a directory that holds a ``manifest.json``) are mirrored only when a
read first needs them. Opening a dataset therefore costs its listing and a
few small files: no table byte, nothing per record and nothing per shard.
The store layer opens the mirror as it opens any local store, so a remote
dataset is read by the same mapped, checksummed calls. What this module adds
is the rule that no call reads a table entry or a record byte that is not
there:

* **Pages.** Every chunk file and table segment is cut into fixed byte
  ranges: page ``p`` of a file is bytes ``[p * P, (p+1) * P)``, ``P`` being
  ``CacheOptions.page_size`` for chunk files and ``table_page_size`` for
  table segments, so the pages come from the listing's object sizes alone.
  The pages of every such file of a dataset version are numbered into one
  space, file after file in the order of (directory, kind, number), so a
  store's files are adjacent (``_Layout``). A record
  needs the table pages its 24-byte entry overlaps (entry ``i`` is bytes
  ``[24 * (i mod 2^27), +24)`` of segment ``i >> 27``: one page, two at a
  page boundary), found from its index by arithmetic, and then every chunk
  page its stored bytes overlap, found from the entry (``lx_store_spans``).
  A page is the unit of fetching, pinning and eviction, fetched in one range
  request under the object's ETag.
* **Checked before use, and at every use.** A fetched table page's whole
  entries are checked against their own CRC-32C (``lx_store_check_table``),
  and a fetched chunk page against the table's CRC-32C of each record of the
  batch that made the fetch and lies wholly in it (``lx_store_check_bytes``),
  before the page is written into the mirror and marked present: bytes from
  the server that are not the store's are CorruptStoreError naming the
  object, and are not written (an entry or a record that a page boundary
  cuts is checked whole by the read that uses it). Then every call checks
  what it uses:
  each table entry against its CRC whenever it is read, and every record
  against its CRC, raw ones included, whatever ``set_verify`` says (a store
  with a residency map always verifies). A read that meets bytes that fail
  (a page lost in a crash or damaged on disk, or an entry or record cut by a
  page boundary) has the pages it needs checked again from the mirror; those
  that fail are fetched again over the cache's copy (never punched out, so a
  reader elsewhere meets the old bytes or the new, both checked) and the
  read runs once more. A second failure, or fresh bytes that fail, is
  CorruptStoreError naming the ``s3://`` object; a page that was simply not
  fetched yet is never an error.
* **State in files, locks in the kernel.** Per dataset version and pair of
  page sizes the cache keeps a directory of page state: ``objects.json``
  (the paged files and their sizes, in page order), ``present`` (one byte
  per page, 1 once its bytes are in the mirror, then one byte per page that
  serialises its fetch across processes), ``stamps`` (each page's last use,
  in nanoseconds) and ``used`` (the bytes present, a counter kept by every fetch
  and eviction and recounted by every eviction pass). Byte ``p`` of
  ``present`` is also the page's *pin*: a process that reads page ``p``
  holds a shared open-file-description lock (``F_OFD_SETLK``) on it, and
  eviction takes an exclusive one without waiting, so a pinned page is
  never evicted, and a process that dies drops its pins with its file
  descriptors: nothing in shared memory can go stale. Every process and
  rank of a node that opens the same dataset with the same cache directory
  shares its pages. A handle holds one descriptor for its pins, whatever
  its number of stores or shards.
* **The warm path is one native call.** Each store of a guarded handle
  carries a residency map (``lx_store_set_residency``): this process's
  array of held pages and where each of the store's files starts in it.
  Every call refuses, with ``NotResidentError`` and before it reads a byte,
  a table entry whose page is not held, and a gather a record any of whose
  chunk pages is not held. A read first runs as it is; only a refused one
  pins and fetches (table pages, then the chunk pages the entries name),
  then runs again. The stores of a sharded dataset get their maps lazily:
  its set refuses a shard that has none before opening it
  (``lx_set_require_residency``), and the first read that touches the shard
  mirrors it, gives its map, and goes on.
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
  (written but not on disk) reads back as bytes that fail their checks, and
  costs a fetch, never a wrong record.

The page sizes: chunk pages of 8 MiB by default (``page_size``), table pages
of 16 KiB (``table_page_size``). A random batch of ``n`` records of a large
table touches about ``n`` table pages whatever their size, so each costs a
range request, whose latency, not its bytes, is what a small page costs. A
first random batch of 256 records of a 10^6-record dataset (a 23 MiB table)
measured 252 table pages and 1.0 MiB at 4 KiB, 235 pages and 3.7 MiB at 16
KiB, 186 pages and 11.6 MiB at 64 KiB; fetching the whole table, which an
epoch of random reads ends up doing, takes 5,860, 1,465 and 367 requests.
16 KiB keeps a first batch at a few MiB of table (a sixth of this table,
and nothing next to a 10^9-record one's 24 GB) with a quarter of the
requests 4 KiB pages need over an epoch (tests/test_remote_scale.py counts
a first batch's bytes and requests).

The limit counts every page present, table pages included; the headers,
schemas, dictionaries and manifests (a few small files per store) come on
top.

Faults: one attempt of a request is bounded by ``timeout`` and the request
by a ``deadline``; a refused, reset or stalled attempt, a 5xx answer and an
answer cut off or short are retried with backoff within ``retries``
(``remote._s3``, ``remote._tree``), then :class:`~loaderx.errors.RemoteError`
names the object and says which it was; a page whose fetched bytes fail
their checks is fetched again before it is reported (a byte flipped in
transit), and only a mismatch on every fetch, under an unchanged ETag, is
CorruptStoreError saying the object was altered; an object overwritten
since the dataset was opened fails its ETag precondition. The small files
downloaded whole are checked against their own checksums before they are
cached (``remote._check``), and checked again at each open, where a damaged
one is downloaded again in place. A full disk is an OSError naming the cache
directory after one more eviction pass. Nothing is marked present that was
not written and checked.

Eviction is least recently used: each page's stamp (nanoseconds) is set when
it is fetched or pinned, and a warm read, which makes no system call, notes
its records in its guard's touch table, whose pages get fresh stamps, in the
order of the reads, before an eviction pass looks. A page a killed reader
wrote but never marked present is freed at the next open.

This module holds the options, the cache directory (its limit, eviction,
listing and clearing), the page layout of a dataset version and its page
state; ``remote._tree`` the mirror of one dataset root and its fetches;
``remote._guard`` what keeps a handle's reads inside the pages its process
holds. It stays one file past 700 lines because this docstring is the one
description of the cache's design, and the layout, the page state files and
eviction it describes are read and written together.
"""

from __future__ import annotations

import bisect
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
import time
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["CacheOptions", "is_url", "default_dir", "describe", "clear", "parse_size"]

_META = "meta.zr"
#: the files a mirror keeps in pages: chunk files and table segments
_PAGED = re.compile(r"^(0|[1-9][0-9]*)\.(chunk|tab)$")
#: the kinds of paged file, in the order a store's files are numbered
CHUNK, TABLE = 0, 1
#: entries of a table segment (zrecord: 2^27) and bytes of one entry
SEG_SHIFT, ENTRY = 27, 24
#: seconds a pin waits for an evictor's momentary exclusive lock
_PIN_DEADLINE = 60.0
#: the version of the page state's files, part of a generation's key: a
#: mirror made by a build that kept other state is made again
_STATE_VERSION = "pages-2"


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
        limit: bytes of pages (record bytes and record tables) the cache
            keeps. None: ``$LOADERX_CACHE_LIMIT`` (such as ``50GiB``), else
            half of the free space of the cache's file system when the
            dataset is opened plus what the cache holds already.
        page_size: bytes of one page of a chunk file, what one range
            request brings: page ``p`` is bytes ``[p * page_size, (p+1) *
            page_size)`` of its file, and a record needs every page its
            bytes overlap. A multiple of 4096; default 8 MiB.
        table_page_size: bytes of one page of a record-table segment (24
            bytes per record), fetched when a read first needs an entry in
            it. A multiple of 4096; default 16 KiB (see ``remote._cache``
            for the choice).
        prefetch: bytes a :class:`~loaderx.DataLoader` may fetch ahead of
            the step it serves, from the sampler's next steps. 0 turns
            prefetching off. Default 256 MiB.
        threads: range requests in flight at once. Default 8.
    """

    dir: str | None = None
    limit: int | None = None
    page_size: int = 8 << 20
    table_page_size: int = 16 << 10
    prefetch: int = 256 << 20
    threads: int = 8

    def __post_init__(self) -> None:
        if self.dir is not None and not isinstance(self.dir, (str, os.PathLike)):
            raise TypeError(f"CacheOptions.dir must be a path or None, got {self.dir!r}")
        if self.dir is not None:
            object.__setattr__(self, "dir", os.fspath(self.dir))
        v: object = self.threads
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"CacheOptions.threads must be an int >= 1, got {v!r}")
        for name in ("page_size", "table_page_size"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 4096 or v % 4096:
                # whole file-system blocks: evicting a page frees its blocks
                # and zeroes nothing of its neighbours'
                raise ValueError(f"CacheOptions.{name} must be a multiple of 4096 (>= 4096), got {v!r}")
            if v > 1 << 30:
                raise ValueError(f"CacheOptions.{name} must be at most 1 GiB, got {v!r}")
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


def _tmp_name(path: str) -> str:
    return f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"


def _write_atomic(path: str, data: bytes) -> None:
    tmp = _tmp_name(path)
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def _place_new(path: str, data: bytes | None, size: int = 0) -> None:
    """Put a file at ``path`` unless one is there already, whole at once:
    ``data``, or with ``data`` None a sparse file of ``size`` zero bytes. A
    file in place is never replaced, so a store another process opened
    keeps its files (a lazy set checks meta.zr's identity when it opens a
    store again) and a sparse file keeps the pages written into it."""
    if os.path.exists(path):
        return
    tmp = _tmp_name(path)
    with open(tmp, "wb") as f:
        if data is None:
            f.truncate(size)
        else:
            f.write(data)
    try:
        os.link(tmp, path)
    except FileExistsError:
        pass
    finally:
        os.unlink(tmp)


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text)[-80:] or "_"


# -- the layout of a dataset version's pages ----------------------------------------


class _Layout:
    """Every paged file of a dataset version (chunk files and table
    segments) and where its pages start in the version's page space: files
    in the order of (directory, kind, number), so that the files of one
    store are adjacent, page ``p`` of file ``j`` at ``first[j] + p``. Made
    from the listing alone, the same in every process."""

    def __init__(self, objects: list[tuple[str, int]], page_size: int, table_page_size: int) -> None:
        keyed = []
        for rel, size in objects:
            d, name = os.path.split(rel)
            m = _PAGED.match(name)
            if m:
                keyed.append((d, CHUNK if m.group(2) == "chunk" else TABLE, int(m.group(1)), rel, int(size)))
        keyed.sort()
        self.page_size, self.table_page_size = page_size, table_page_size
        self.dirs = [k[0] for k in keyed]
        self.rels = [k[3] for k in keyed]
        self.kind = np.array([k[1] for k in keyed], dtype=np.int8)
        self.num = np.array([k[2] for k in keyed], dtype=np.int64)
        self.size = np.array([k[4] for k in keyed], dtype=np.int64)
        self.psize = np.where(self.kind == CHUNK, page_size, table_page_size).astype(np.int64)
        npages = -(-self.size // self.psize)
        self.first = np.zeros(len(keyed) + 1, dtype=np.int64)
        np.cumsum(npages, out=self.first[1:])
        self.npages = int(self.first[-1])
        self._sizes: np.ndarray | None = None

    def save(self, path: str) -> None:
        _write_atomic(path, json.dumps({
            "page_size": self.page_size, "table_page_size": self.table_page_size,
            "objects": [[r, int(n)] for r, n in zip(self.rels, self.size.tolist(), strict=True)],
        }).encode())

    @classmethod
    def load(cls, path: str) -> _Layout:
        with open(path) as f:
            doc = json.load(f)
        return cls([(r, n) for r, n in doc["objects"]], int(doc["page_size"]), int(doc["table_page_size"]))

    def page_sizes(self) -> np.ndarray:
        """The bytes of every page (the last page of a file may be short)."""
        if self._sizes is None:
            npages = np.diff(self.first)
            sizes = np.repeat(self.psize, npages)
            last = self.first[1:][npages > 0] - 1
            sizes[last] = (self.size - (npages - 1) * self.psize)[npages > 0]
            self._sizes = sizes
        return self._sizes

    def file_of(self, page: int) -> int:
        """The file that holds page ``page``."""
        return int(np.searchsorted(self.first, page, side="right")) - 1

    def span(self, page: int) -> tuple[int, int, int]:
        """``(file, first byte, end)`` of page ``page`` in its file."""
        j = self.file_of(page)
        lo = (page - int(self.first[j])) * int(self.psize[j])
        return j, lo, min(lo + int(self.psize[j]), int(self.size[j]))

    def store(self, rel: str) -> tuple[int, int]:
        """The files ``[a, b)`` of the store directory ``rel``."""
        return bisect.bisect_left(self.dirs, rel), bisect.bisect_right(self.dirs, rel)


@dataclass(frozen=True)
class StoreFiles:
    """Where the paged files of one store directory of a mirror lie in its
    page space: ``chunk_base[c]`` is the first page of chunk file ``c``,
    ``table_base[s]`` that of table segment ``s`` (None for a store without
    ``.tab`` segments, of a format before version 4), ``pages`` the store's
    page range ``[lo, hi)``, and ``chunk_rel`` / ``table_rel`` each file's
    path in the tree (by number)."""

    rel: str
    chunk_base: np.ndarray
    table_base: np.ndarray | None
    pages: tuple[int, int]
    chunk_rel: dict[int, str]
    table_rel: dict[int, str]


# -- the page state of a dataset version --------------------------------------------


class _Pages:
    """The page state of one dataset version for one pair of page sizes, as
    files in ``state_dir`` (see the module's docstring), shared by every
    process: this process's view of it, one per directory (``_Cache.pages``)."""

    def __init__(self, state_dir: str, layout: _Layout | None = None) -> None:
        self.dir = state_dir
        self.data_dir = os.path.join(os.path.dirname(state_dir), "data")
        self._layout = layout
        with open(os.path.join(state_dir, "info.json")) as f:
            info = json.load(f)
        self.npages = int(info["npages"])
        self.present_path = os.path.join(state_dir, "present")
        mm = np.memmap(self.present_path, dtype=np.uint8, mode="r+")
        self.present = mm[: self.npages]
        #: each page's last use: nanoseconds (a state made before kept
        #: seconds in 32 bits, which tie within a second)
        fine = info.get("stamps") == "ns"
        self.stamp_scale = 1 if fine else 10**9
        self.stamps = np.memmap(os.path.join(state_dir, "stamps"), dtype=np.int64 if fine else np.uint32, mode="r+")
        self._used_fd = os.open(os.path.join(state_dir, "used"), os.O_RDWR)
        # a descriptor of its own for eviction: a lock asked for through the
        # descriptor this process pins with would be granted over its own pins
        self._evict_fd = os.open(self.present_path, os.O_RDWR)
        self._ino = os.fstat(self._evict_fd).st_ino
        self.mu = threading.Lock()

    def now(self) -> int:
        """A stamp of this moment, in the unit of this state's stamps."""
        return time.time_ns() // self.stamp_scale

    def current(self) -> bool:
        """Whether the files this view maps are still the state directory's."""
        try:
            return os.stat(self.present_path).st_ino == self._ino
        except OSError:
            return False

    @staticmethod
    def make(state_dir: str, layout: _Layout) -> None:
        """Write a fresh page state (nothing present) for ``layout`` into
        ``state_dir``, whole or not at all; leave one that is there."""
        if os.path.isdir(state_dir):
            return
        tmp = _tmp_name(state_dir)
        shutil.rmtree(tmp, ignore_errors=True)
        os.makedirs(tmp)
        n = max(1, layout.npages)
        with open(os.path.join(tmp, "present"), "wb") as f:
            f.truncate(2 * n)  # present bytes, then fetch-lock bytes
        with open(os.path.join(tmp, "stamps"), "wb") as f:
            f.truncate(8 * n)
        with open(os.path.join(tmp, "used"), "wb") as f:
            f.write(bytes(8))
        layout.save(os.path.join(tmp, "objects.json"))
        with open(os.path.join(tmp, "info.json"), "w") as f:
            json.dump({"npages": layout.npages, "page_size": layout.page_size,
                       "table_page_size": layout.table_page_size, "stamps": "ns"}, f)
        try:
            os.rename(tmp, state_dir)
        except OSError:
            shutil.rmtree(tmp, ignore_errors=True)
            if not os.path.isdir(state_dir):
                raise

    @property
    def layout(self) -> _Layout:
        if self._layout is None:
            self._layout = _Layout.load(os.path.join(self.dir, "objects.json"))
        return self._layout

    def path(self, j: int) -> str:
        """The mirror file of paged file ``j``."""
        return os.path.join(self.data_dir, self.layout.rels[j])

    # the bytes present, a counter

    def used(self) -> int:
        try:
            return max(0, int.from_bytes(os.pread(self._used_fd, 8, 0), "little", signed=True))
        except OSError:
            return 0

    def add_used(self, delta: int) -> None:
        """Add ``delta`` to the counter, atomically across threads and processes."""
        with self.mu:
            _ofd(self._used_fd, fcntl.F_WRLCK, 0, 8, wait=True)
            try:
                now = int.from_bytes(os.pread(self._used_fd, 8, 0), "little", signed=True)
                os.pwrite(self._used_fd, (now + delta).to_bytes(8, "little", signed=True), 0)
            finally:
                _ofd(self._used_fd, fcntl.F_UNLCK, 0, 8)

    def recount(self) -> int:
        """The bytes present, counted page by page, written into the counter
        (which a process that died between a fetch's count and its mark
        leaves too high)."""
        exact = self.bytes_present(0, self.npages)
        with self.mu:
            _ofd(self._used_fd, fcntl.F_WRLCK, 0, 8, wait=True)
            try:
                os.pwrite(self._used_fd, exact.to_bytes(8, "little", signed=True), 0)
            finally:
                _ofd(self._used_fd, fcntl.F_UNLCK, 0, 8)
        return exact

    def bytes_present(self, lo: int, hi: int) -> int:
        """Bytes of the pages ``[lo, hi)`` present."""
        if hi <= lo:
            return 0
        return int(np.dot((self.present[lo:hi] == 1).astype(np.int64), self.layout.page_sizes()[lo:hi]))

    def try_evict(self, p: int) -> int:
        """Evict page ``p`` unless it is pinned; the bytes freed."""
        if not _ofd(self._evict_fd, fcntl.F_WRLCK, p, 1):
            return 0
        try:
            if self.present[p] != 1:
                return 0
            self.present[p] = 0
            j, lo, hi = self.layout.span(p)
            try:
                fd = os.open(self.path(j), os.O_RDWR)
            except FileNotFoundError:
                fd = -1
            if fd >= 0:
                try:
                    _punch(fd, lo, hi - lo)
                finally:
                    os.close(fd)
            self.add_used(-(hi - lo))
            return hi - lo
        finally:
            _ofd(self._evict_fd, fcntl.F_UNLCK, p, 1)

    def close(self) -> None:
        for fd in (self._evict_fd, self._used_fd):
            with contextlib.suppress(OSError):
                os.close(fd)


# -- the cache directory ----------------------------------------------------------


class _Cache:
    """One cache directory as this process sees it: its limit, the page
    states of every dataset in it (for eviction) and this process's trees."""

    #: seconds a listing of the cache directory's page states is reused
    RESCAN = 1.0

    def __init__(self, root: str, limit: int | None) -> None:
        self.root = root
        os.makedirs(os.path.join(root, "trees"), exist_ok=True)
        self._limit = limit
        self.mu = threading.Lock()
        self.trees: weakref.WeakSet[Any] = weakref.WeakSet()  # remote._tree.RemoteTree of this process
        self._states: dict[str, _Pages] = {}  # state dir -> its page state
        self._scanned = 0.0
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

    def pages(self, state_dir: str, layout: _Layout | None = None) -> _Pages:
        """This process's one view of the page state in ``state_dir``."""
        with self.mu:
            st = self._states.get(state_dir)
            if st is not None and not st.current():
                self._states.pop(state_dir).close()  # removed (cache clear) and made again since
                st = None
            if st is None:
                st = self._states[state_dir] = _Pages(state_dir, layout)
            elif layout is not None and st._layout is None:
                st._layout = layout
            return st

    def _scan(self, force: bool = False) -> list[_Pages]:
        """The page states of every dataset in the cache directory (the
        caller holds mu); the directory is listed again at most every
        RESCAN seconds unless ``force``."""
        now = time.monotonic()
        if not force and now - self._scanned < self.RESCAN:
            return list(self._states.values())
        found = set()
        trees = os.path.join(self.root, "trees")
        with contextlib.suppress(OSError):
            for t in os.scandir(trees):
                for g in os.scandir(t.path) if t.is_dir() else ():
                    for s in os.scandir(g.path) if g.is_dir() else ():
                        if not s.name.startswith("pages-") or not os.path.isfile(os.path.join(s.path, "info.json")):
                            continue
                        found.add(s.path)
                        if s.path not in self._states:
                            try:
                                self._states[s.path] = _Pages(s.path)
                            except (OSError, ValueError, KeyError):
                                found.discard(s.path)  # removed meanwhile
        for gone in set(self._states) - found:
            self._states.pop(gone).close()
        self._scanned = now
        return list(self._states.values())

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
            if sum(s.used() for s in self._scan()) + need <= limit:
                return
        # this process's warm reads since the last eviction refresh their
        # pages' stamps first, so the pages it reads most stay
        for tree in list(self.trees):
            tree.flush_touches()
        with _flock(os.path.join(self.root, ".evict.lock")):
            for attempt in range(2):
                with self.mu:
                    states = self._scan(force=True)
                    used = sum(s.recount() for s in states)
                    if used + need <= limit:
                        return
                    used = self._evict(states, used + need - limit, limit)
                    if used + need <= limit:
                        return
                if attempt == 0:
                    for tree in list(self.trees):
                        tree.release_idle()

    def _evict(self, states: list[_Pages], excess: int, limit: int) -> int:
        # a pass frees a little more than it must, so that a full cache
        # is not walked for every page fetched
        target = excess + limit // 64
        stamps, owners, pages = [], [], []
        for k, s in enumerate(states):
            p = np.flatnonzero(s.present == 1)
            if p.size:
                stamps.append(s.stamps[p].astype(np.int64) * s.stamp_scale)
                owners.append(np.full(p.size, k, dtype=np.int32))
                pages.append(p)
        freed = 0
        if stamps:
            st, ow, pg = np.concatenate(stamps), np.concatenate(owners), np.concatenate(pages)
            for j in np.lexsort((pg, st)):
                if freed >= target:
                    break
                freed += states[int(ow[j])].try_evict(int(pg[j]))
        self.evicted_bytes += freed
        return sum(s.used() for s in states)


_CACHES: dict[str, _Cache] = {}
_CACHES_LOCK = threading.Lock()


def _after_fork_in_child() -> None:
    global _CACHES_LOCK
    _CACHES_LOCK = threading.Lock()  # another thread may have held it at the fork
    for c in _CACHES.values():
        c.mu = threading.Lock()
        for st in c._states.values():
            st.mu = threading.Lock()


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
    its URL, generation, bytes of pages held (record bytes and record
    tables), and whether a process has it open."""
    out = []
    for url, gen in _generations(root):
        held = 0
        for s in os.scandir(gen):
            if s.name.startswith("pages-") and os.path.isfile(os.path.join(s.path, "info.json")):
                with contextlib.suppress(OSError, ValueError, KeyError):
                    st = _Pages(s.path)
                    held += st.bytes_present(0, st.npages)
                    st.close()
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
