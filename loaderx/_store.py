"""The one owner of a native store handle.

:class:`StoreHandle` holds the integer handle that the native library hands
out for an open store and everything tied to its lifetime: the closed check,
``len``, ``stats``, ``close``, the context manager and the finaliser. It also
holds the one packed read (records back to back into one buffer) that both
:class:`loaderx.zrecord.Zrecord` and :class:`loaderx.dataset.RaggedDataset`
turn into their own result type. The public store classes derive from it.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from loaderx import _native
from loaderx._args import as_indices
from loaderx.errors import ClosedError

if TYPE_CHECKING:
    from loaderx._args import PathLike

_S = TypeVar("_S", bound="StoreHandle")

#: Serialises the first use of handles opened on demand (see StoreHandle).
_LAZY_LOCK = threading.RLock()


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

    __slots__ = ("path", "faults")

    def __init__(self, path: str, faults: list[Fault]) -> None:
        self.path = path
        self.faults = faults

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
        if self.ok:
            return f"{self.path}: no damage found"
        lines = [f"{self.path}: {len(self.faults)} fault{'s' if len(self.faults) != 1 else ''}"]
        lines += [f"  {f}" for f in self.faults]
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
    return Fault(str(f["file"]), None if index is None else int(index), str(f["what"]))


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
        """Take ownership of an open native handle."""
        self._handle = handle
        self._codec = str(_native.store_codec(handle))

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
        """The byte size of each of the (valid, non-empty) records ``idx``."""
        return np.asarray(_native.store_sizes(self._h, idx), dtype=np.int64)

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
            needed = int(_native.store_gather_ragged(self._h, idx, sizes, buf))
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
        """The codec the store was created with: "raw", "zstd" or "zstd_dict"."""
        return self._codec

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` has been called."""
        return self._handle is None and not self._deferred_open

    def __len__(self) -> int:
        return int(_native.store_len(self._h))

    def stats(self) -> dict[str, Any]:
        """Storage figures: ``length``, ``live_bytes`` (stored bytes of live
        records), ``chunk_bytes`` (bytes in chunk files, garbage included),
        ``logical_bytes`` (uncompressed size), ``codec``, ``dict_bytes`` and
        ``chunks``. ``chunk_bytes - live_bytes`` bounds what compaction can
        reclaim."""
        return dict(_native.store_stats(self._h))

    def verify(self) -> VerifyReport:
        """Read the whole store and check every checksum (header, dictionary,
        record table, every record), carrying on past a fault, and return a
        :class:`VerifyReport` of every fault found. It reads every byte, so
        it takes about as long as reading the store once."""
        faults = [_fault(f) for f in _native.store_verify(self._h)]
        faults += self._verify_more(faults)
        return VerifyReport(self._path, faults)

    def _verify_more(self, faults: list[Fault]) -> list[Fault]:
        """Faults a subclass finds beyond the store's own (given its faults)."""
        return []

    def close(self) -> None:
        """Close the store, syncing pending writes. Safe to call twice; any
        later use raises :class:`loaderx.errors.ClosedError`."""
        h, self._handle = self._handle, None
        self._deferred_open = False
        if h is not None:
            _native.store_close(h)

    def __enter__(self: _S) -> _S:
        _ = self._h  # raises if closed
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()
