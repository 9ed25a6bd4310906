"""The one owner of a native store handle.

:class:`StoreHandle` holds the integer handle that the native library hands
out for an open store and everything tied to its lifetime: the closed check,
``len``, ``stats``, ``close``, the context manager and the finaliser. It also
holds the one packed read (records back to back into one buffer) that both
:class:`loaderx.zrecord.Zrecord` and :class:`loaderx.dataset.RaggedDataset`
turn into their own result type. The public store classes derive from it.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from loaderx._args import as_indices
from loaderx._progress import Progress
from loaderx.errors import ClosedError, CorruptStoreError
from loaderx.store import _native

if TYPE_CHECKING:
    from loaderx._args import PathLike

_S = TypeVar("_S", bound="StoreHandle")
_T = TypeVar("_T")

#: Serialises the first use of handles opened on demand (see StoreHandle).
_LAZY_LOCK = threading.RLock()


# -- the header, read without the native library ------------------------------
#
# A read-only dataset made before the library is loaded answers len() from
# meta.zr (zrecord/format.go lays it out): magic "ZREC", the format version
# at byte 4, the record count at bytes 14-21 (little-endian) and, in
# versions 4 and 5 (5: a narrow store), the CRC-32C of the other 28 bytes at
# 22-25.

_HEADER_SIZE = 32
_CHECKSUMMED_VERSION = 4
_KNOWN_VERSIONS = (1, 3, 4, 5)


def _crc32c_table() -> tuple[int, ...]:
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return tuple(table)


_CRC32C = _crc32c_table()


def crc32c(data: bytes, crc: int = 0) -> int:
    """The CRC-32C (Castagnoli) of ``data``, continuing from ``crc``.

    Small inputs go through the table a byte at a time. A large one (a
    sharded dataset's manifest: about 46 bytes a shard, 4.6 MB at 100,000
    shards, where the byte loop takes half a second) is cut into blocks
    whose CRCs NumPy computes side by side, one byte of every block per
    step, and which are then chained: the register's update is linear, so
    the CRC of a block appended to a prefix is the prefix's register
    carried across the block's length in zero bytes (an operator of four
    lookup tables, _crc32c_shift) combined with the block's own CRC from a
    zero register. About 20 times faster at that size."""
    view = memoryview(data).cast("B")
    c = crc ^ 0xFFFFFFFF
    n = len(view)
    if n >= _CRC_VECTOR_MIN:
        block = _CRC_BLOCK
        whole = n // block * block
        lanes = np.frombuffer(view[:whole], dtype=np.uint8).reshape(-1, block)
        table = _crc32c_np()
        reg = np.zeros(lanes.shape[0], dtype=np.uint32)
        for j in range(block):
            reg = table[(reg ^ lanes[:, j]) & 0xFF] ^ (reg >> 8)
        t0, t1, t2, t3 = _crc32c_shift(block)
        for r in reg.tolist():
            c = t0[c & 0xFF] ^ t1[(c >> 8) & 0xFF] ^ t2[(c >> 16) & 0xFF] ^ t3[c >> 24] ^ r
        view = view[whole:]
    for b in view:
        c = _CRC32C[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


#: Inputs of at least this many bytes take crc32c's vectorised path, in
#: blocks of _CRC_BLOCK bytes.
_CRC_VECTOR_MIN = 1 << 16
_CRC_BLOCK = 1024

_CRC_NP: Any = None
_CRC_SHIFT: dict[int, tuple[tuple[int, ...], ...]] = {}


def _crc32c_np() -> np.ndarray:
    global _CRC_NP
    if _CRC_NP is None:
        _CRC_NP = np.array(_CRC32C, dtype=np.uint32)
    return _CRC_NP


def _crc32c_shift(length: int) -> tuple[tuple[int, ...], ...]:
    """Four tables that carry a CRC-32C register across ``length`` zero
    bytes: the register r becomes t0[r & 255] ^ t1[r >> 8 & 255] ^
    t2[r >> 16 & 255] ^ t3[r >> 24]. The operator is the one-byte step
    (linear in r: a 32-by-32 matrix over GF(2), kept as its columns) raised
    to the length by repeated squaring."""
    got = _CRC_SHIFT.get(length)
    if got is not None:
        return got

    def apply(cols: list[int], r: int) -> int:
        out = 0
        for i in range(32):
            if r >> i & 1:
                out ^= cols[i]
        return out

    step = [_CRC32C[(1 << i) & 0xFF] ^ ((1 << i) >> 8) for i in range(32)]  # one zero byte
    power = [1 << i for i in range(32)]  # the identity
    e = length
    while e:
        if e & 1:
            power = [apply(step, col) for col in power]
        step = [apply(step, col) for col in step]
        e >>= 1
    tables = tuple(tuple(apply(power, v << (8 * k)) for v in range(256)) for k in range(4))
    _CRC_SHIFT[length] = tables
    return tables


def header_length(path: str) -> int:
    """The record count in ``path/meta.zr``, read in Python (the checksum of
    a version-4 or -5 header verified). Raises FileNotFoundError when there is no
    meta.zr, CorruptStoreError naming the file when its header is damaged."""
    meta = os.path.join(path, "meta.zr")
    try:
        with open(meta, "rb") as f:
            b = f.read(_HEADER_SIZE)
    except FileNotFoundError:
        raise FileNotFoundError(2, f"{path!r} is not a loaderx store (no meta.zr)", path) from None
    if b[:4] != b"ZREC":
        raise CorruptStoreError(f"{meta}: bad magic {b[:4]!r}, not a loaderx store header")
    if len(b) < _HEADER_SIZE:
        raise CorruptStoreError(f"{meta}: header is {len(b)} bytes, want {_HEADER_SIZE}")
    version = b[4]
    if version not in _KNOWN_VERSIONS:
        known = ", ".join(map(str, _KNOWN_VERSIONS))
        if version > _KNOWN_VERSIONS[-1]:
            raise CorruptStoreError(
                f"{meta}: format version {version}: the store was written by a newer loaderx; this one "
                f"reads format versions {known}, so upgrade loaderx to open it"
            )
        raise CorruptStoreError(f"{meta}: format version {version} (this build reads {known})")
    if version >= _CHECKSUMMED_VERSION:
        stored = int.from_bytes(b[22:26], "little")
        computed = crc32c(b[26:], crc32c(b[:22]))
        if stored != computed:
            raise CorruptStoreError(f"{meta}: header checksum {stored:#010x}, its bytes give {computed:#010x}")
    length = int.from_bytes(b[14:22], "little")
    if length > 1 << 62:
        raise CorruptStoreError(f"{meta}: length {length}")
    return length


class Fault:
    """One fault :meth:`StoreHandle.verify` found: the ``file`` it is in, the
    record ``index`` it concerns (None for a fault of the header, the
    dictionary or the schema as a whole) and ``what`` failed."""

    __slots__ = ("file", "index", "what")

    def __init__(self, file: str, index: int | None, what: str) -> None:
        self.file = file
        self.index = index
        self.what = what

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Fault):
            return NotImplemented
        return (self.file, self.index, self.what) == (other.file, other.index, other.what)

    def __hash__(self) -> int:
        return hash((self.file, self.index, self.what))

    def __repr__(self) -> str:
        return f"Fault(file={self.file!r}, index={self.index!r}, what={self.what!r})"

    def __str__(self) -> str:
        where = self.file if self.index is None else f"{self.file}, record {self.index}"
        return f"{where}: {self.what}"


class VerifyReport:
    """What a full verification of the store at :attr:`path` found.

    True (and :attr:`ok`) when nothing is damaged; otherwise :attr:`faults`
    lists every fault found, in the order found, and iterating the report
    yields them. ``str(report)`` is a readable summary.
    """

    __slots__ = ("checked", "checksummed", "faults", "more_faults", "path", "pending", "records", "version")

    def __init__(
        self,
        path: str,
        faults: list[Fault],
        *,
        version: int = 0,
        checksummed: bool = True,
        records: int = 0,
        checked: int = 0,
        more_faults: int = 0,
        pending: list[str] | None = None,
    ) -> None:
        self.path = path
        self.faults = faults
        #: the store's format version (4 and 5 have checksums; 1 and 3 are older)
        self.version = version
        #: whether the format carries checksums: without them damage to raw
        #: records cannot be seen
        self.checksummed = checksummed
        #: how many records the header claims, and how many were examined
        self.records = records
        self.checked = checked
        #: faults found beyond those listed (the scan lists at most 1000)
        self.more_faults = more_faults
        #: journals of an interrupted delete or compact, which the next
        #: writable open completes or discards (not damage)
        self.pending = list(pending or ())

    @property
    def ok(self) -> bool:
        """Whether no fault was found."""
        return not self.faults

    def __bool__(self) -> bool:
        return self.ok

    def __iter__(self) -> Iterator[Fault]:
        return iter(self.faults)

    def __repr__(self) -> str:
        return f"VerifyReport({self.path!r}, faults={self.faults!r})"

    def __str__(self) -> str:
        notes = []
        if not self.checksummed:
            notes.append(f"format {self.version} has no checksums: raw records cannot be checked")
        if self.pending:
            notes.append("an interrupted operation is pending: " + ", ".join(self.pending))
        if self.ok:
            return "\n".join([f"{self.path}: no damage found", *(f"  note: {n}" for n in notes)])
        n = len(self.faults) + self.more_faults
        lines = [f"{self.path}: {n} fault{'s' if n != 1 else ''}"]
        lines += [f"  {f}" for f in self.faults]
        if self.more_faults:
            lines.append(f"  ... and {self.more_faults} more")
        lines += [f"  note: {n}" for n in notes]
        return "\n".join(lines)


def packed_offsets(sizes: np.ndarray) -> np.ndarray:
    """``len(sizes) + 1`` int64 offsets of records packed back to back."""
    offsets = np.empty(len(sizes) + 1, dtype=np.int64)
    offsets[0] = 0
    np.cumsum(sizes, out=offsets[1:])
    return offsets


def _fault(f: dict[str, Any]) -> Fault:
    """A fault as the binding reports it, as a :class:`Fault`."""
    index = f.get("index")
    return Fault(str(f["file"]), None if index is None or index < 0 else int(index), str(f["what"]))


class StoreHandle:
    """A store at ``path``, closed until a subclass opens it and hands the
    handle to :meth:`_adopt`. Messages name the store by its class name and
    path.

    An instance made by :meth:`_deferred` (what unpickling makes) has no
    handle yet: the first use opens it through the subclass's :meth:`_load`,
    in whichever process uses it, so a pickle carries only the path and
    unpickling never calls the native library. In a child of ``os.fork()``
    that first use raises :class:`loaderx.errors.ForkError`, at the use,
    where a worker pool reports it as the task's failure.
    """

    _handle: int | None = None  # also what a half-built instance's finaliser sees
    _deferred_open = False  # True until a deferred instance is first used
    _bytes_per_record = 0.0  # _read_packed's guess, from the previous read
    _header_length: int | None = None  # len() of a deferred instance made from its header
    #: for a dataset in object storage, the remote._guard.Guard that keeps the
    #: pages of each read in the local cache (None for a local store)
    _guard: Any = None

    def __init__(self, path: PathLike) -> None:
        self._handle = None
        self._path = os.fspath(path)

    @classmethod
    def _deferred(cls: type[_S], path: str) -> _S:
        """An instance for ``path`` that opens the store on first use."""
        obj = cls.__new__(cls)
        StoreHandle.__init__(obj, path)
        obj._deferred_open = True
        return obj

    def _load(self) -> None:
        """Open the store and :meth:`_adopt` its handle (subclasses)."""
        raise NotImplementedError

    def _open_deferred(self) -> None:
        """Open a deferred instance now (once, whichever thread gets here
        first); a failure leaves it deferred, so every use raises it."""
        with _LAZY_LOCK:
            if self._deferred_open:
                self._load()
                self._deferred_open = False

    def _adopt(self, handle: int) -> None:
        """Take ownership of an open native handle (published last: another
        thread that finds it without the lock finds the rest set)."""
        self._codec = str(_native.store_codec(handle))
        self._handle = handle

    @property
    def _h(self) -> int:
        """The open handle; raises :class:`ClosedError` once closed."""
        h = self._handle
        if h is None:
            if self._deferred_open:
                self._open_deferred()
                h = self._handle
            if h is None:
                raise ClosedError(f"{type(self).__name__}({self._path!r}) is closed")
        return h

    def _indices(self, key: Any) -> tuple[np.ndarray, tuple[int, ...]]:
        """A batch key as int64 indices into the store, and the key's shape."""
        return as_indices(key, int(_native.store_len(self._h)), type(self).__name__)

    def _sizes(self, idx: np.ndarray) -> np.ndarray:
        """The byte size of each of the (valid, non-empty) records ``idx``
        (of a dataset in object storage, with their table pages held)."""
        h = self._h
        g = self._guard
        if g is None:
            return np.asarray(_native.store_sizes(h, idx), dtype=np.int64)
        return np.asarray(g.read(idx, lambda: _native.store_sizes(h, idx), chunks=False), dtype=np.int64)

    def _guarded(self, idx: np.ndarray, read: Callable[[], _T]) -> _T:
        """``read()``, which reads the records at ``idx``, with their pages
        held in the local cache of a dataset in object storage (see
        ``remote._guard.Guard.read``)."""
        _ = self._h  # opens a deferred instance, which sets its guard first
        g = self._guard
        if g is None:
            return read()
        return g.read(idx, read)

    def _read_packed(self, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Read the records ``idx`` back to back from one consistent view of
        the store (a concurrent delete lands wholly before or after): a uint8
        buffer, the ``len(idx) + 1`` offsets of each record in it and their
        sizes. One native call when the buffer, sized from the previous
        read's bytes per record, is large enough; else one more with the
        size the first call reported."""
        n = len(idx)
        sizes = np.empty(n, dtype=np.int64)
        buf = np.empty(max(0, int(n * self._bytes_per_record)), dtype=np.uint8)
        while True:
            needed = int(self._guarded(idx, lambda b=buf: _native.store_gather_ragged(self._h, idx, sizes, b)))  # type: ignore[misc]  # mypy infers no lambda with a default argument
            if needed <= buf.size:
                break
            buf = np.empty(needed, dtype=np.uint8)
        if n:
            self._bytes_per_record = needed / n * 1.125 + 1  # a little headroom for the next read
        return buf[:needed], packed_offsets(sizes), sizes

    # -- what every store shares -------------------------------------------

    @property
    def path(self) -> str:
        """The store directory."""
        return self._path

    @property
    def codec(self) -> str:
        """The codec the store was created with: "raw", "zstd", "zstd_dict" or "narrow"."""
        return self._codec

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` has been called."""
        return self._handle is None and not self._deferred_open

    def __len__(self) -> int:
        if self._deferred_open and self._header_length is not None:
            return self._header_length
        return int(_native.store_len(self._h))

    def stats(self) -> dict[str, Any]:
        """Storage figures: ``length``, ``live_bytes`` (stored bytes of live
        records), ``chunk_bytes`` (bytes in chunk files, garbage included),
        ``logical_bytes`` (uncompressed size), ``codec``, ``dict_bytes``,
        ``chunks``, ``version`` (the format version), ``checksummed`` (the
        format carries checksums: false for stores of an earlier version,
        which read unverified until :meth:`upgrade`) and ``verified``
        (every record is checked on every gather: true for a checksummed
        store unless :meth:`set_verify` turned the raw check off).
        ``chunk_bytes - live_bytes`` bounds what compaction can reclaim.
        The byte sums cover every table entry: of a dataset in object
        storage the first call fetches (and checks) every table page."""
        h = self._h
        if self._guard is not None:
            return dict(self._guard.whole(lambda: _native.store_stats(h)))
        return dict(_native.store_stats(h))

    def set_verify(self, on: bool = True) -> None:
        """Check raw records against their checksums on every gather through
        this handle, or with ``False`` stop checking them. On by default: the
        checksum is computed as the bytes are copied, so the check costs
        little (see ``defaultVerifyRaw`` in ``zrecord/options.go``), and a
        damaged record is an error instead of wrong data. The header, the
        dictionary, every table entry a gather touches and every compressed
        record are checked always; :meth:`verify` checks everything once."""
        if not isinstance(on, bool):
            raise TypeError(f"set_verify takes True or False, got {on!r}")
        if not on and self._guard is not None:
            raise ValueError(
                f"{type(self).__name__}({self._path!r}) reads from object storage through a local cache, "
                "whose reads are always checked (a cached page lost in a crash must fail its check)"
            )
        _native.store_set_verify(self._h, on)

    def verify(self) -> VerifyReport:
        """Read the whole store and check every checksum (header, dictionary,
        record table, every record), carrying on past a fault, and return a
        :class:`VerifyReport` of every fault found. It reads every byte, so
        it takes about as long as reading the store once."""
        report = _native.store_verify(self._h)
        faults = [_fault(f) for f in report["faults"]]
        faults += self._verify_more(faults)
        return VerifyReport(
            self._path,
            faults,
            version=int(report["version"]),
            checksummed=bool(report["checksummed"]),
            records=int(report["records"]),
            checked=int(report["checked"]),
            more_faults=int(report.get("more_faults") or 0),
            pending=[str(p) for p in report.get("pending") or ()],
        )

    def _verify_more(self, faults: list[Fault]) -> list[Fault]:
        """Faults a subclass finds beyond the store's own (given its faults)."""
        return []

    def close(self) -> None:
        """Close the store, syncing pending writes. Safe to call twice; any
        later use raises :class:`loaderx.errors.ClosedError`."""
        h, self._handle = self._handle, None
        self._deferred_open = False
        g, self._guard = self._guard, None
        if g is not None:
            g.close()
        if h is not None:
            _native.store_close(h)

    def __enter__(self: _S) -> _S:
        _ = self._h  # raises if closed
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:  # noqa: SIM105 - contextlib may be gone at interpreter exit
            self.close()
        except Exception:
            pass


# -- logged operations ------------------------------------------------------
#
# What a long-running job should find in its logs goes to the "loaderx"
# logger (silent unless the application configures logging).

log = logging.getLogger("loaderx")


def _dir_sizes(path: str) -> dict[str, int]:
    try:
        with os.scandir(path) as it:
            return {e.name: e.stat().st_size for e in it if e.is_file()}
    except OSError:
        return {}


def open_logged(path: str, readonly: bool) -> int:
    """Open the store at ``path`` and log it. A writable open settles what an
    interrupted writer left (a journal replayed, a torn tail cut off); when
    it changed the directory, that is logged as a recovery, naming the files."""
    before = None if readonly else _dir_sizes(path)
    h = _native.store_open(path, readonly=readonly)
    if before is not None:
        after = _dir_sizes(path)
        changed = sorted(n for n in set(before) | set(after) if before.get(n) != after.get(n))
        if changed:
            log.warning(
                "recovered store %r after an interrupted write (%d records now); changed: %s",
                path, int(_native.store_len(h)), ", ".join(changed),
            )
    log.info("opened store %r (%s)", path, "read-only" if readonly else "writable")
    return h


def compact_handle(h: int, path: str, progress: bool | None = None) -> int:
    """Compact the open, writable store ``h`` (at ``path``), show a progress
    line while it runs (on a terminal), log and return the bytes reclaimed."""
    before = int(_native.store_stats(h)["chunk_bytes"])
    bar = Progress(f"compact {path}", None, None, enabled=progress)
    try:
        _native.store_compact(h)
    finally:
        bar.close()
    reclaimed = max(0, before - int(_native.store_stats(h)["chunk_bytes"]))
    log.info("compacted store %r: reclaimed %d bytes", path, reclaimed)
    return reclaimed
