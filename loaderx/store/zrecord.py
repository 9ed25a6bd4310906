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
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from loaderx._args import CODECS, as_int, check_codec, is_scalar_index, normalize_index
from loaderx.store import _native
from loaderx.store._dtypes import check_narrow
from loaderx.store._store import Fault, StoreHandle, VerifyReport, compact_handle, open_logged

if TYPE_CHECKING:
    from numpy.typing import NDArray

    from loaderx._args import IndexLike, PathLike

__all__ = ["CODECS", "Fault", "VerifyReport", "Zrecord"]


class Zrecord(StoreHandle):
    """A store of raw byte records.

    Args:
        path: the store directory.
        create: create a new store at ``path`` (which must not exist, or be an
            empty directory) instead of opening an existing one.
        codec: with ``create=True``, how each record is compressed: ``"raw"``,
            ``"zstd"``, ``"zstd_dict"`` (then ``samples`` trains the shared
            dictionary) or ``"narrow"`` (then ``element`` is required). An
            existing store keeps the codec it was created with; see
            :attr:`codec`.
        element: with ``codec="narrow"``, the integer type every record is
            an array of: a NumPy integer dtype or its name (``"int32"``,
            ``np.uint16``). Records are bytes to this class, so it cannot
            guess the type, and there is no default; a record whose length
            is not a multiple of the type's size is stored as it is.
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
        samples: Sequence[Any] | None = None,
        dict_size: int | None = None,
        element: Any = None,
    ) -> None:
        super().__init__(path)
        self._readonly = bool(readonly)
        if create:
            if readonly:
                raise ValueError("create=True and readonly=True contradict each other")
            check_codec(codec)
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
            size = 0 if dict_size is None else as_int(dict_size, "dict_size")
            if size < 0:
                raise ValueError(f"dict_size must not be negative, got {dict_size!r}")
            kwargs: dict[str, Any] = (
                {"samples": list(cast(Sequence[Any], samples)), "dict_size": size} if codec == "zstd_dict" else {}
            )
            if codec == "narrow":
                if element is None:
                    raise ValueError(
                        "codec 'narrow' needs element= (the integer dtype every record is an "
                        "array of, such as 'int32')"
                    )
                kwargs["element"] = _element_name(element)
            elif element is not None:
                raise ValueError(f"element= applies to codec 'narrow' only, not {codec!r}")
            self._adopt(_native.store_create(self._path, codec, **kwargs))
        else:
            if samples is not None or dict_size is not None or element is not None:
                raise ValueError("samples=, dict_size= and element= apply only with create=True")
            self._adopt(open_logged(self._path, readonly=self._readonly))

    # -- plumbing ----------------------------------------------------------

    def _writable(self, op: str) -> int:
        h = self._h
        if self._readonly:
            raise io.UnsupportedOperation(f"{op}: Zrecord({self._path!r}) is open read-only")
        return h

    # -- properties --------------------------------------------------------

    @property
    def readonly(self) -> bool:
        """Whether the store was opened read-only."""
        return self._readonly

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

    def compact(self, *, progress: bool | None = None) -> int:
        """Reclaim the space of deleted records and return the bytes
        reclaimed (also logged). Needs exclusive access."""
        return compact_handle(self._writable("compact"), self._path, progress)

    def sync(self) -> None:
        """Make every append, delete and compaction so far durable (data,
        table, then header); a compaction's old copies are freed here."""
        _native.store_sync(self._h)

    def upgrade(self) -> None:
        """Rewrite a store of an earlier format version (this project's 1, or
        3 as the original loaderx 1.5.2 wrote it) to the current one, whose
        checksums cover every byte; a current store is left alone. Crash-safe:
        an interruption leaves the old or the new version, with the same
        records. Needs exclusive access; any write upgrades first anyway."""
        _native.store_upgrade(self._writable("upgrade"))

    # -- reading -----------------------------------------------------------

    def sizes(self, indices: IndexLike) -> NDArray[np.int64]:
        """The byte size of each record, as an int64 array of the key's shape."""
        idx, shape = self._indices(indices)
        if not idx.size:
            return np.zeros(shape, dtype=np.int64)
        return self._sizes(idx).reshape(shape)

    def gather(self, indices: IndexLike) -> list[bytes]:
        """Read records into a list of ``bytes`` with one native call (two
        when the records are much larger than the previous call's), all from
        one consistent view: a concurrent :meth:`delete` lands wholly before
        or wholly after it."""
        idx, _ = self._indices(indices)
        if not idx.size:
            return []
        buf, offsets, _ = self._read_packed(idx)
        mv = memoryview(buf)  # type: ignore[arg-type]  # numpy's stubs give ndarray the buffer protocol from 3.12 on
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

    def __getitem__(self, key: IndexLike) -> bytes | list[bytes]:
        """``zr[i]`` is one record as ``bytes``; any other key gives a list."""
        if is_scalar_index(key):
            n = len(self)
            return self.gather([normalize_index(int(key), n, "Zrecord")])[0]
        return self.gather(key)


def _element_name(element: Any) -> str:
    """The element type name of a narrow store for ``element``, a NumPy
    integer dtype or anything ``np.dtype`` takes for one."""
    try:
        dtype = np.dtype(element)
    except TypeError as e:
        raise ValueError(f"element={element!r} is not a NumPy dtype: {e}") from None
    return check_narrow(dtype, f"element={element!r}")
