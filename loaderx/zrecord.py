"""Raw byte records: the store engine underneath every dataset.

A :class:`Zrecord` is a directory holding N records, each an opaque byte
string, addressed by a dense index space ``0..N``. Every operation is a batch:
``append`` takes a list, ``gather`` takes a list of indices, and one record is
just a batch of one. Type interpretation is the caller's job; the dataset
classes in :mod:`loaderx.dataset` add a dtype and shape on top.

Deleting swaps the last record into the hole, so an index is stable only until
something is deleted. ``gather`` and ``append`` may run concurrently from any
number of threads; ``delete`` and ``compact`` need the store to themselves.
"""

from __future__ import annotations

import io
import operator
import os
from typing import Any, Iterable, List, Optional, Sequence, Tuple, Union

import numpy as np

from loaderx import _native
from loaderx.errors import ClosedError

__all__ = ["Zrecord", "CODECS"]

#: The codecs a store can be created with.
CODECS = ("raw", "zstd", "zstd_dict")

PathLike = Union[str, "os.PathLike[str]"]
IndexLike = Union[int, Sequence[int], np.ndarray, slice]


# ---------------------------------------------------------------------------
# index handling shared by the record and dataset classes


def _index_error(index: Any, n: int, what: str) -> IndexError:
    return IndexError(f"index {index} is out of range for {what} of length {n}")


def _as_int(value: Any, name: str) -> int:
    """``operator.index(value)`` with a TypeError that quotes the value."""
    if isinstance(value, bool):
        raise TypeError(f"{name} must be an integer, got {value!r}")
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an integer, got {value!r}") from None


def _normalize_index(index: int, n: int, what: str) -> int:
    """One Python-style index (negatives count from the end) into ``[0, n)``."""
    i = index + n if index < 0 else index
    if not 0 <= i < n:
        raise _index_error(index, n, what)
    return i


def _as_indices(key: Any, n: int, what: str) -> Tuple[np.ndarray, Tuple[int, ...]]:
    """Turn a batch key into a C-contiguous int64 array of indices in ``[0, n)``.

    Accepts a slice, a sequence or array of integers (negative ones count from
    the end) or a boolean mask of length ``n``. Returns the flat indices and
    the shape of the key, so a 2-D index array gives a 2-D batch.
    """
    if isinstance(key, slice):
        return np.arange(*key.indices(n), dtype=np.int64), (len(range(*key.indices(n))),)
    if isinstance(key, (str, bytes)):
        raise TypeError(f"indices must be integers, got {key!r}")
    arr = key if isinstance(key, np.ndarray) else np.asarray(key)
    kind = arr.dtype.kind
    if kind == "b":
        if arr.shape != (n,):
            raise IndexError(
                f"boolean mask of shape {arr.shape} does not match {what} of length {n}"
            )
        flat = np.flatnonzero(arr).astype(np.int64, copy=False)
        return flat, flat.shape
    if kind not in "iu":
        if arr.size == 0:  # [] and np.array([]) are float64 by default
            return np.empty(0, dtype=np.int64), arr.shape
        raise TypeError(f"indices must be integers, got an array of dtype {arr.dtype}")
    shape = arr.shape
    if arr.ndim != 1:
        arr = arr.reshape(-1)
    if arr.size == 0:
        return np.empty(0, dtype=np.int64), shape
    lo = arr.min()
    hi = arr.max()
    if kind == "u":
        if hi >= n:
            raise _index_error(arr[np.argmax(arr >= n)], n, what)
        return np.ascontiguousarray(arr, dtype=np.int64), shape
    if lo < 0:
        if lo < -n:
            raise _index_error(arr[np.argmax(arr < -n)], n, what)
        if hi >= n:
            raise _index_error(arr[np.argmax(arr >= n)], n, what)
        fixed = arr.astype(np.int64)  # a copy: the caller's array is left alone
        fixed[fixed < 0] += n
        return fixed, shape
    if hi >= n:
        raise _index_error(arr[np.argmax(arr >= n)], n, what)
    return np.ascontiguousarray(arr, dtype=np.int64), shape


def _check_codec(codec: Any) -> str:
    if codec not in CODECS:
        raise ValueError(f"codec must be one of {', '.join(map(repr, CODECS))}; got {codec!r}")
    return codec


def _packed_offsets(sizes: np.ndarray) -> np.ndarray:
    offsets = np.empty(len(sizes) + 1, dtype=np.int64)
    offsets[0] = 0
    np.cumsum(sizes, out=offsets[1:])
    return offsets


# ---------------------------------------------------------------------------


class Zrecord:
    """A store of raw byte records.

    Args:
        path: the store directory.
        create: create a new store at ``path`` (which must not exist, or be an
            empty directory) instead of opening an existing one.
        codec: with ``create=True``, how each record is compressed: ``"raw"``,
            ``"zstd"`` or ``"zstd_dict"`` (then ``samples`` trains the shared
            dictionary). An existing store keeps the codec it was created
            with; see :attr:`codec`.
        readonly: open without write access; ``append``, ``delete`` and
            ``compact`` then raise :class:`io.UnsupportedOperation`.
        samples: with ``codec="zstd_dict"``, a list of byte strings
            representative of the records, to train the dictionary on.
        dict_size: with ``codec="zstd_dict"``, an upper bound on the dictionary
            size in bytes; by default the size adapts to the samples.

    Raises:
        FileNotFoundError: opening a store that does not exist.
        loaderx.errors.StoreExistsError: creating over a non-empty path.
        loaderx.errors.CorruptStoreError: the directory is not a valid store.
        loaderx.errors.StoreLockedError: a writer already holds the store.

    Example::

        with Zrecord("blobs", create=True, codec="zstd") as zr:
            first = zr.append([b"abc", b"", b"hello"])
            zr.gather([2, 0])          # [b'hello', b'abc']
    """

    def __init__(
        self,
        path: PathLike,
        *,
        create: bool = False,
        codec: str = "raw",
        readonly: bool = False,
        samples: Optional[Sequence[Any]] = None,
        dict_size: Optional[int] = None,
    ) -> None:
        self._handle: Optional[int] = None
        self._path = os.fspath(path)
        self._readonly = bool(readonly)
        if create:
            if readonly:
                raise ValueError("create=True and readonly=True contradict each other")
            _check_codec(codec)
            if codec == "zstd_dict":
                if not samples:
                    raise ValueError(
                        "codec 'zstd_dict' needs samples= (a list of byte strings) "
                        "to train the dictionary on"
                    )
            elif samples is not None or dict_size is not None:
                raise ValueError(
                    f"samples= and dict_size= apply to codec 'zstd_dict' only, not {codec!r}"
                )
            size = 0 if dict_size is None else _as_int(dict_size, "dict_size")
            if size < 0:
                raise ValueError(f"dict_size must not be negative, got {dict_size!r}")
            kwargs = {"samples": list(samples), "dict_size": size} if codec == "zstd_dict" else {}
            self._handle = _native.store_create(self._path, codec, **kwargs)
        else:
            if samples is not None or dict_size is not None:
                raise ValueError("samples= and dict_size= apply only with create=True")
            self._handle = _native.store_open(self._path, readonly=self._readonly)
        self._codec = _native.store_codec(self._handle)

    # -- plumbing ----------------------------------------------------------

    @property
    def _h(self) -> int:
        h = self._handle
        if h is None:
            raise ClosedError(f"Zrecord({self._path!r}) is closed")
        return h

    def _writable(self, op: str) -> int:
        h = self._h
        if self._readonly:
            raise io.UnsupportedOperation(f"{op}: Zrecord({self._path!r}) is open read-only")
        return h

    def _indices(self, indices: Any) -> Tuple[np.ndarray, Tuple[int, ...]]:
        return _as_indices(indices, _native.store_len(self._h), "Zrecord")

    # -- properties --------------------------------------------------------

    @property
    def path(self) -> str:
        """The store directory."""
        return self._path

    @property
    def codec(self) -> str:
        """The codec the store was created with."""
        return self._codec

    @property
    def readonly(self) -> bool:
        """Whether the store was opened read-only."""
        return self._readonly

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` has been called."""
        return self._handle is None

    def __len__(self) -> int:
        return int(_native.store_len(self._h))

    def __repr__(self) -> str:
        if self._handle is None:
            return f"Zrecord({self._path!r}, closed)"
        ro = ", readonly" if self._readonly else ""
        return f"Zrecord({self._path!r}, len={len(self)}, codec={self._codec!r}{ro})"

    # -- writing -----------------------------------------------------------

    def append(self, records: Iterable[Any]) -> int:
        """Append records in one batch and return the index of the first.

        Args:
            records: a list (or any iterable) of ``bytes`` or objects exposing
                a contiguous buffer (``bytearray``, ``memoryview``, NumPy
                arrays). Each becomes one record, an empty one included.

        Returns:
            The index of the first appended record; the batch occupies
            ``first .. first + len(records)``.
        """
        h = self._writable("append")
        if isinstance(records, (bytes, bytearray, memoryview, np.ndarray, str)):
            raise TypeError(
                f"append takes a list of records, not a single {type(records).__name__}; "
                "wrap one record as [record]"
            )
        batch = list(records)
        if not batch:
            return int(_native.store_len(h))
        return int(_native.store_append(h, batch))

    def delete(self, indices: IndexLike) -> None:
        """Delete records. Each hole is filled by moving the current last record
        into it, so indices of other records may change. Duplicates are
        ignored. Needs exclusive access to the store."""
        h = self._writable("delete")
        idx, _ = self._indices(indices)
        if idx.size:
            _native.store_delete(h, np.unique(idx))

    def compact(self) -> None:
        """Reclaim the space of deleted records. Needs exclusive access."""
        _native.store_compact(self._writable("compact"))

    def sync(self) -> None:
        """Make every append so far durable (data, table, then header)."""
        _native.store_sync(self._h)

    # -- reading -----------------------------------------------------------

    def sizes(self, indices: IndexLike) -> np.ndarray:
        """The byte size of each record, as an int64 array of the key's shape."""
        idx, shape = self._indices(indices)
        if not idx.size:
            return np.zeros(shape, dtype=np.int64)
        return np.asarray(_native.store_sizes(self._h, idx), dtype=np.int64).reshape(shape)

    def gather(self, indices: IndexLike) -> List[bytes]:
        """Read records into a list of ``bytes`` with one native call."""
        h = self._h
        idx, _ = self._indices(indices)
        if not idx.size:
            return []
        offsets = _packed_offsets(_native.store_sizes(h, idx))
        buf = np.empty(int(offsets[-1]), dtype=np.uint8)
        if buf.size:
            _native.store_gather_packed(h, idx, buf, offsets)
        mv = memoryview(buf)
        bounds = offsets.tolist()
        return [bytes(mv[bounds[k] : bounds[k + 1]]) for k in range(len(idx))]

    def gather_into(self, indices: IndexLike, out: Any, offsets: Any) -> None:
        """Read records back to back into a caller buffer.

        Args:
            indices: the records to read.
            out: a writable, C-contiguous buffer of at least ``offsets[-1]``
                bytes.
            offsets: ``len(indices) + 1`` int64 byte offsets; record ``k`` is
                written to ``out[offsets[k]:offsets[k+1]]``, whose length must
                equal its size (see :meth:`sizes`).
        """
        h = self._h
        idx, _ = self._indices(indices)
        offs = np.ascontiguousarray(offsets, dtype=np.int64)
        if offs.shape != (idx.size + 1,):
            raise ValueError(
                f"offsets must have len(indices) + 1 = {idx.size + 1} entries, "
                f"got shape {offs.shape}"
            )
        if np.any(offs[1:] < offs[:-1]) or offs[0] < 0:
            raise ValueError("offsets must be non-negative and non-decreasing")
        try:
            view = memoryview(out)
        except TypeError:
            raise TypeError(f"out must support the buffer protocol, got {type(out).__name__}") from None
        if view.readonly:
            raise ValueError("out is read-only")
        if not view.c_contiguous:
            raise ValueError("out must be C-contiguous")
        if view.nbytes < offs[-1]:
            raise ValueError(f"out holds {view.nbytes} bytes but offsets need {int(offs[-1])}")
        if idx.size:
            _native.store_gather_packed(h, idx, out, offs)

    def __getitem__(self, key: IndexLike) -> Union[bytes, List[bytes]]:
        """``zr[i]`` is one record as ``bytes``; any other key gives a list."""
        if isinstance(key, (int, np.integer)) and not isinstance(key, bool):
            n = len(self)
            return self.gather([_normalize_index(int(key), n, "Zrecord")])[0]
        return self.gather(key)

    def stats(self) -> dict:
        """Storage figures: ``length``, ``live_bytes`` (stored bytes of live
        records), ``chunk_bytes`` (bytes in chunk files, garbage included),
        ``logical_bytes`` (uncompressed size), ``codec``, ``dict_bytes`` and
        ``chunks``. ``chunk_bytes - live_bytes`` bounds what :meth:`compact`
        can reclaim."""
        return dict(_native.store_stats(self._h))

    # -- lifetime ----------------------------------------------------------

    def close(self) -> None:
        """Close the store (syncing pending writes). Safe to call twice."""
        h, self._handle = self._handle, None
        if h is not None:
            _native.store_close(h)

    def __enter__(self) -> "Zrecord":
        self._h  # raises if closed
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass
