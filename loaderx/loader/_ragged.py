"""Ragged streams of the loader: one packed native gather per batch.

A :class:`RaggedStream` wraps a :class:`loaderx.dataset.RaggedDataset`; its
:class:`RaggedPool` recycles the buffers of a batch (the packed bytes, the
offsets, the lengths and, when padding, the dense array) the way
:class:`loaderx.loader._pipeline.BufferPool` recycles a dense stream's batch array.
A batch comes out as a :class:`PackedBatch` (``values``, ``offsets``,
``lengths``) or, with padding, a :class:`PaddedBatch` (``values``,
``lengths``).
"""

from __future__ import annotations

import collections
import sys
import threading
from typing import Any, NamedTuple

import numpy as np

from loaderx.store import _native

#: records whose lengths are read to estimate a batch's bytes
_SAMPLE = 1024
#: headroom when a buffer grows, so a slightly larger batch does not grow it again
_GROWTH = 1.25

PAD_HELP = (
    "'max' (the batch's longest record), a positive int (a fixed length) or "
    "('multiple', m) (the batch's longest record rounded up to a multiple of m)"
)


class PackedBatch(NamedTuple):
    """One ragged stream's batch, packed back to back.

    Attributes:
        values: the records one after another: shape ``(total_rows,
            *item_shape)`` in the store's dtype (1-D for a store of scalars).
        offsets: ``batch + 1`` row offsets (``cu_seqlens``): record ``k`` is
            ``values[offsets[k]:offsets[k + 1]]``.
        lengths: the int64 row count of each record.
    """

    values: np.ndarray
    offsets: np.ndarray
    lengths: np.ndarray


class PaddedBatch(NamedTuple):
    """One ragged stream's batch, padded with zeros into a dense array.

    Attributes:
        values: shape ``(batch, L, *item_shape)``; row ``j >= lengths[k]`` of
            record ``k`` is zero.
        lengths: the int64 row count of each record.
    """

    values: np.ndarray
    lengths: np.ndarray


def check_pad(spec: Any, name: str) -> tuple[str, int]:
    """A stream's ``pad=`` value as ``("max", 1)``, ``("fixed", L)`` or
    ``("multiple", m)``."""
    where = f"pad={{{name!r}: {spec!r}}}"
    if isinstance(spec, str):
        if spec == "max":
            return "max", 1
    elif isinstance(spec, (int, np.integer)) and not isinstance(spec, bool):
        if spec >= 1:
            return "fixed", int(spec)
    elif isinstance(spec, tuple) and len(spec) == 2 and spec[0] == "multiple":
        m = spec[1]
        if isinstance(m, (int, np.integer)) and not isinstance(m, bool) and m >= 1:
            return "multiple", int(m)
    raise ValueError(f"{where}: a pad length must be {PAD_HELP}")


def check_offsets_dtype(value: Any) -> np.dtype:
    """``offsets_dtype=``: int32 or int64."""
    try:
        dt = np.dtype(value)
    except TypeError:
        dt = None
    if dt not in (np.dtype(np.int32), np.dtype(np.int64)):
        raise ValueError(f"offsets_dtype must be np.int32 or np.int64, got {value!r}")
    return dt


class RaggedStream:
    """A ragged store as a loader stream.

    Args:
        name: the stream's name (for messages).
        dataset: the store (a RaggedDataset), or a mixture's ragged stream, which reads the
            same way.
        pad: None to pack, else a :func:`check_pad` result.
        offsets_dtype: the dtype of a packed batch's offsets.
    """

    def __init__(
        self,
        name: str,
        dataset: Any,
        pad: tuple[str, int] | None,
        offsets_dtype: np.dtype,
    ) -> None:
        self.name = name
        self.dataset = dataset
        self.pad = pad
        self.offsets_dtype = offsets_dtype
        self.dtype = dataset.dtype
        self.item_shape: tuple[int, ...] = tuple(dataset.item_shape)
        self.row_items = int(np.prod(self.item_shape, dtype=np.int64))
        self.row_bytes = self.row_items * self.dtype.itemsize
        n = len(dataset)
        sample = np.unique(np.linspace(0, n - 1, min(n, _SAMPLE)).astype(np.int64)) if n else None
        mean_rows = float(dataset.lengths(sample).mean()) if sample is not None else 0.0
        #: an estimate of one record's bytes, for sizing buffers and prefetch
        self.nbytes_per_item = int(mean_rows * self.row_bytes) + 1

    def __len__(self) -> int:
        return len(self.dataset)

    def gather_into(self, idx: np.ndarray, slot: list[np.ndarray], step: int = 0) -> PackedBatch | PaddedBatch:
        """Gather the records ``idx`` with one native call into the arrays
        of ``slot`` (``[bytes, sizes, offsets, lengths, padded]``), growing
        the byte buffer (and the padded one) when this batch needs more.
        ``step`` is the loader's step; the rows of a packing stream
        (:class:`loaderx.loader._packing.PackStream`) depend on it, a record batch
        does not."""
        ds = self.dataset
        k = idx.shape[0]
        sizes = slot[1][:k]
        h = ds._h
        while True:
            if ds._guard is None:
                needed = int(_native.store_gather_ragged(h, idx, sizes, slot[0]))
            else:  # a dataset in object storage: its pages held in the cache meanwhile
                needed = int(ds._guarded(idx, lambda b=slot[0]: _native.store_gather_ragged(h, idx, sizes, b)))
            if needed <= slot[0].size:
                break
            slot[0] = np.empty(int(needed * _GROWTH), dtype=np.uint8)
        return self.finish(idx, slot, ds._rows(sizes, idx), needed)

    def finish(
        self, idx: np.ndarray, slot: list[np.ndarray], rows: np.ndarray, needed: int
    ) -> PackedBatch | PaddedBatch:
        """The batch of ``slot`` once its first ``needed`` bytes hold the
        records ``idx`` back to back, record ``k`` being ``rows[k]`` rows
        (a mixture's ragged stream fills the slot its own way, then ends here)."""
        k = idx.shape[0]
        lengths = slot[3][:k]
        lengths[:] = rows
        total = needed // self.row_bytes if self.row_bytes else 0
        values = slot[0][:needed].view(self.dtype).reshape((total, *self.item_shape))
        if self.pad is None:
            offsets = slot[2][: k + 1]
            offsets[0] = 0
            if self.offsets_dtype == np.int32 and total > np.iinfo(np.int32).max:
                raise OverflowError(
                    f"stream {self.name!r}: the batch holds {total} rows, more than "
                    "offsets_dtype=np.int32 can count; use np.int64"
                )
            np.cumsum(rows, out=offsets[1:])
            return PackedBatch(values, offsets, lengths)
        return self._padded(values, rows, idx, slot)

    def _padded(
        self, values: np.ndarray, rows: np.ndarray, idx: np.ndarray, slot: list[np.ndarray]
    ) -> PaddedBatch:
        mode, n = self.pad  # type: ignore[misc]
        k = rows.shape[0]
        longest = int(rows.max()) if k else 0
        if mode == "fixed":
            if longest > n:
                j = int(np.argmax(rows))
                raise ValueError(
                    f"stream {self.name!r}: record {int(idx[j])} has {longest} rows, more than "
                    f"pad={{{self.name!r}: {n}}} allows"
                )
            width = n
        else:  # "max" (n == 1) or "multiple"
            width = -(-longest // n) * n
        want = k * width * self.row_items
        if slot[4].size < want:
            slot[4] = np.empty(int(want * _GROWTH), dtype=self.dtype)
        dense = slot[4][:want].reshape((k * width, *self.item_shape))
        dense.fill(0)
        total = values.shape[0]
        if total:
            starts = np.arange(k, dtype=np.int64) * width
            starts -= np.cumsum(rows) - rows  # minus each record's packed start
            dest = np.repeat(starts, rows)
            dest += np.arange(total, dtype=np.int64)
            dense[dest] = values
        return PaddedBatch(dense.reshape((k, width, *self.item_shape)), slot[3][:k])


class RaggedPool:
    """The buffers of a ragged stream's batches, recycled between steps.

    A slot is ``[bytes, sizes, offsets, lengths, padded]``; it is taken
    again only when no array of it is referenced outside the pool (a batch,
    or a view of one, still held keeps its slot out), as in
    :class:`loaderx.loader._pipeline.BufferPool`.
    """

    ragged = True

    def __init__(self, stream: RaggedStream, batch_size: int, capacity: int) -> None:
        self.stream = stream
        self.batch_size = batch_size
        self.capacity = capacity
        self.nbytes = batch_size * stream.nbytes_per_item
        self._free: collections.deque[list[np.ndarray]] = collections.deque()
        self._lock = threading.Lock()
        self._baseline = 0
        self._baseline = self._refs([np.empty(0, dtype=np.uint8)])[0]

    @staticmethod
    def _refs(slot: list[np.ndarray]) -> list[int]:
        return [sys.getrefcount(a) for a in slot]

    def _idle(self, slot: list[np.ndarray]) -> bool:
        base = self._baseline
        return all(r == base for r in self._refs(slot))

    def take(self) -> list[np.ndarray]:
        """A slot no one else can reach: a recycled one, or a new one."""
        with self._lock:
            free = self._free
            for i in range(len(free) - 1, -1, -1):
                if self._idle(free[i]):
                    slot = free[i]
                    del free[i]
                    return slot
        return self._new()

    def _new(self) -> list[np.ndarray]:
        """A new slot."""
        b = self.batch_size
        s = self.stream
        return [
            np.empty(int(self.nbytes * _GROWTH), dtype=np.uint8),
            np.empty(b, dtype=np.int64),
            np.empty(b + 1, dtype=s.offsets_dtype),
            np.empty(b, dtype=np.int64),
            np.empty(0, dtype=s.dtype),
        ]

    def give(self, slot: list[np.ndarray]) -> None:
        """Offer a slot handed to the caller for reuse once the caller lets
        go of its arrays."""
        with self._lock:
            self._free.append(slot)
            while len(self._free) > self.capacity:
                self._free.popleft()

    def __len__(self) -> int:
        return len(self._free)
