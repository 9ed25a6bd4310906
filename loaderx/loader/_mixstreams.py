"""The loader streams of a :class:`loaderx.loader.mixture.Mixture`: each of
its streams over the sources' joint index space, and the ``source`` stream.

A dense stream gathers one native call per source into that source's batch
rows. A ragged stream over local, read-only single-store sources gathers a
batch in one native call over a set of fresh read-only handles on their
stores, whose global indices are the mixture's (:func:`_join`), as one store
does; over other sources (sharded, in object storage, writable) it gathers
one source at a time into a per-thread staging area and copies the records
into place a run of consecutive batch rows at a time (:func:`_scatter`).
"""

from __future__ import annotations

import contextlib
import os
import threading
import weakref
from typing import Any

import numpy as np

from loaderx.loader._ragged import _GROWTH, RaggedStream
from loaderx.store import _native
from loaderx.store.dataset import RaggedDataset, whole_rows

#: the last per-source plan of a batch's indices, per thread (see _Parts._groups)
_PLANS = threading.local()


def _locate(starts: np.ndarray, idx: np.ndarray) -> np.ndarray:
    return np.searchsorted(starts, idx, side="right") - 1


class _Parts:
    """What the dense and ragged mixture streams share: the per-source
    streams and the global index space."""

    parts: list[tuple[str, Any]]
    starts: np.ndarray
    offsets: tuple[int, ...]
    total: int

    @property
    def mixture_parts(self) -> list[tuple[str, Any]]:
        """``(source name, stream)`` per source: what a worker process reopens."""
        return list(self.parts)

    def with_parts(self, parts: list[tuple[str, Any]]) -> Any:
        """A copy over other per-source streams (reopened ones)."""
        new = object.__new__(type(self))
        new.__dict__.update(self.__dict__)
        new.parts = list(parts)
        return new

    def _groups(self, idx: np.ndarray) -> list[tuple[int, np.ndarray, np.ndarray]]:
        """``(source, batch rows, local indices)`` per source in ``idx``; the
        streams of one step get the same indices, so the last answer is kept
        (per thread) and reused when the indices are equal."""
        last = getattr(_PLANS, "last", None)
        if last is not None and last[0] == self.offsets and np.array_equal(last[1], idx):
            return last[2]
        got = self._plan(idx)
        _PLANS.last = (self.offsets, idx.copy(), got)
        return got

    def _plan(self, idx: np.ndarray) -> list[tuple[int, np.ndarray, np.ndarray]]:
        src = _locate(self.starts, idx)
        if src.size and src[0] == src[-1] and (src == src[0]).all():
            i = int(src[0])
            return [(i, np.arange(idx.size), idx - self.starts[i])]
        out = []
        for i in np.unique(src).tolist():
            rows = np.flatnonzero(src == i)
            out.append((i, rows, idx[rows] - self.starts[i]))
        return out

    def __len__(self) -> int:
        return self.total


class MixtureStream(_Parts):
    """One dense stream of a mixture: one native gather per source."""

    def __init__(self, name: str, parts: list[tuple[str, Any]], offsets: tuple[int, ...]) -> None:
        self.name = name
        self.parts = parts
        self.offsets = tuple(offsets)
        self.starts = np.asarray(offsets[:-1], dtype=np.int64)
        self.total = offsets[-1]
        first = parts[0][1]
        self.dtype = first.dtype
        self.item_shape = tuple(first.item_shape)
        self.nbytes_per_item = int(first.nbytes_per_item)

    def _gather_unchecked(self, idx: np.ndarray, out: np.ndarray) -> None:
        for i, rows, local in self._groups(idx):
            part = self.parts[i][1]
            if rows[-1] - rows[0] + 1 == rows.size:  # consecutive rows: straight into the batch
                part._gather_unchecked(local, out[rows[0] : rows[-1] + 1])
            else:
                scratch = np.empty((rows.size, *self.item_shape), dtype=self.dtype)
                part._gather_unchecked(local, scratch)
                out[rows] = scratch


class MixtureRaggedStream(_Parts, RaggedStream):
    """One ragged stream of a mixture: one packed native gather per source,
    the records then laid out in batch order."""

    def __init__(
        self, name: str, parts: list[tuple[str, RaggedDataset]], offsets: tuple[int, ...],
        pad: tuple[str, int] | None, offsets_dtype: np.dtype, by: str = "records",
    ) -> None:
        self.name = name
        #: what the mixture's weights count ("records" or "tokens")
        self.by = by
        self.parts = parts
        self.offsets = tuple(offsets)
        self.starts = np.asarray(offsets[:-1], dtype=np.int64)
        self.total = offsets[-1]
        self.pad = pad
        self.offsets_dtype = offsets_dtype
        first = parts[0][1]
        self.dtype = first.dtype
        self.item_shape = tuple(first.item_shape)
        self.row_items = int(np.prod(self.item_shape, dtype=np.int64))
        self.row_bytes = self.row_items * self.dtype.itemsize
        per = [RaggedStream(name, ds, None, offsets_dtype).nbytes_per_item for _, ds in parts]
        self.nbytes_per_item = max(per)

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k not in _JOINED_FIELDS}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    def with_parts(self, parts: list[tuple[str, Any]]) -> Any:
        new = super().with_parts(parts)
        for k in _JOINED_FIELDS:
            new.__dict__.pop(k, None)
        return new

    def _joined(self) -> int | None:
        """One native read handle over all the sources, in order (a set of
        fresh read-only handles on their stores, whose global indices are the
        mixture's), opened on first use in each process; None when a source
        is not one local read-only store (a sharded dataset, one in object
        storage, a writable one), which then read through :func:`_read`."""
        pid = os.getpid()
        if self.__dict__.get("_joined_pid") == pid:
            h = self.__dict__["_joined_h"]
            if h is not None:
                for _, ds in self.parts:  # a source closed meanwhile is closed here too
                    if ds._handle is None:
                        ds._h  # noqa: B018 -- raises ClosedError, naming the dataset
            return h
        with _JOIN_LOCK:
            if self.__dict__.get("_joined_pid") != pid:
                h = _join([ds for _, ds in self.parts], self.offsets)
                if h is not None:
                    weakref.finalize(self, _close_quietly, h, pid)
                self.__dict__["_joined_h"] = h
                self.__dict__["_joined_pid"] = pid
        return self.__dict__["_joined_h"]

    def lengths(self, idx: np.ndarray) -> np.ndarray:
        """The first-axis length of each record ``idx`` (global indices), as
        int64, from the sources' tables: what packing plans a step with."""
        h = self._joined()
        if h is not None:
            sizes = np.asarray(_native.store_sizes(h, np.ascontiguousarray(idx, dtype=np.int64)), dtype=np.int64)
            return self._rows_of(sizes, idx)
        out = np.empty(idx.shape[0], dtype=np.int64)
        for i, rows, local in self._plan(np.asarray(idx, dtype=np.int64)):
            out[rows] = self.parts[i][1].lengths(local)
        return out

    def gather_into(self, idx: np.ndarray, slot: list[np.ndarray], step: int = 0) -> Any:
        """The records ``idx`` back to back in batch order in ``slot[0]``
        (see :meth:`RaggedStream.gather_into`). A batch of one source is
        one native gather straight into the slot; otherwise each source's
        records are one native gather into this thread's staging area,
        sources one after another, then copied to their places in the
        batch, a run of consecutive batch rows of one source at a time."""
        k = idx.shape[0]
        sizes = slot[1][:k]
        h = self._joined()
        if h is not None:  # one native gather over all the sources, as over one store
            while True:
                needed = int(_native.store_gather_ragged(h, idx, sizes, slot[0]))
                if needed <= slot[0].size:
                    break
                slot[0] = np.empty(int(needed * _GROWTH), dtype=np.uint8)
            return self.finish(idx, slot, self._rows_of(sizes, idx), needed)
        groups = self._groups(idx)
        if len(groups) == 1:
            i, _, local = groups[0]
            slot[0], needed = _read(self.parts[i][1], local, sizes, slot[0], 0)
        else:
            stage = getattr(_STAGE, "buf", None)
            if stage is None:
                stage = np.empty(max(1 << 16, k * self.nbytes_per_item), dtype=np.uint8)
            at = 0
            placed = []
            for i, rows, local in groups:
                part = np.empty(rows.size, dtype=np.int64)
                stage, got = _read(self.parts[i][1], local, part, stage, at)
                sizes[rows] = part
                placed.append((rows, part, at))
                at += got
            _STAGE.buf = stage
            starts = np.empty(k + 1, dtype=np.int64)
            starts[0] = 0
            np.cumsum(sizes, out=starts[1:])
            needed = int(starts[-1])
            if needed > slot[0].size:
                slot[0] = np.empty(int(needed * _GROWTH), dtype=np.uint8)
            _scatter(placed, starts, stage, slot[0], self.dtype.itemsize)
        return self.finish(idx, slot, self._rows_of(sizes, idx), needed)

    def _rows_of(self, sizes: np.ndarray, idx: np.ndarray) -> np.ndarray:
        """The rows of records of ``sizes`` bytes (``idx``: their global
        indices, for the message of a size that is not whole rows)."""
        return whole_rows(sizes, idx, self.row_bytes, f"stream {self.name!r}")


#: the attributes of a mixture's ragged stream that hold its joined handle
#: (per process: never pickled nor copied to a stream over other parts)
_JOINED_FIELDS = ("_joined_h", "_joined_pid")
_JOIN_LOCK = threading.Lock()


def _join(parts: list[Any], offsets: tuple[int, ...]) -> int | None:
    """A native set of fresh read-only handles on the stores of ``parts``
    (every one a local, read-only, single-store RaggedDataset of the length
    ``offsets`` gives it, reading verified as the part does), or None."""
    for ds in parts:
        if not isinstance(ds, RaggedDataset):
            return None
        ds._h  # noqa: B018 -- opens a deferred (unpickled) dataset, so that what it is is known
        if ds._guard is not None or getattr(ds, "_sharded", None) is not None or getattr(ds, "_writable", True):
            return None
    handles: list[int] = []
    try:
        for k, ds in enumerate(parts):
            h = _native.store_open(ds.path, readonly=True)
            handles.append(h)
            if _native.store_len(h) != offsets[k + 1] - offsets[k]:
                raise ValueError("changed since it was opened")
            if not _native.store_stats(ds._h)["verified"]:
                _native.store_set_verify(h, False)
        joined = int(_native.set_open(handles))
    except Exception:  # any trouble: the sources read one by one, as they are
        for h in handles:
            _close_quietly(h, os.getpid())
        return None
    return joined


def _close_quietly(h: int, pid: int) -> None:
    """Close a native handle opened in process ``pid`` (nothing in another:
    a forked child has no use of it)."""
    if os.getpid() == pid:
        with contextlib.suppress(Exception):  # at exit or after a failure: nothing to report it to
            _native.store_close(h)


#: each thread's staging bytes of a mixture's ragged gather (grown as needed)
_STAGE = threading.local()
#: below this many bytes per run, the runs of a scatter are copied by one
#: index per item instead of one slice copy each
_SLICE_BYTES = 512


def _read(ds: RaggedDataset, local: np.ndarray, sizes: np.ndarray, buf: np.ndarray, at: int) -> tuple[np.ndarray, int]:
    """One packed native gather of the records ``local`` of ``ds`` into
    ``buf`` from byte ``at`` on, their sizes into ``sizes``; ``buf`` is
    replaced by a larger one (its first ``at`` bytes kept) when they do not
    fit. Returns ``(buf, bytes gathered)``."""
    h = ds._h
    while True:
        view = buf[at:]
        if ds._guard is None:
            needed = int(_native.store_gather_ragged(h, local, sizes, view))
        else:  # a dataset in object storage: its pages held in the cache meanwhile
            needed = int(ds._guarded(local, lambda v=view: _native.store_gather_ragged(h, local, sizes, v)))  # type: ignore[misc]  # mypy infers no lambda with a default argument
        if needed <= view.size:
            return buf, needed
        bigger = np.empty(int((at + needed) * _GROWTH) + 1, dtype=np.uint8)
        bigger[:at] = buf[:at]
        buf = bigger


def _scatter(
    placed: list[tuple[np.ndarray, np.ndarray, int]], starts: np.ndarray, stage: np.ndarray, out: np.ndarray,
    item: int,
) -> None:
    """Copy each source's staged records to their places in the batch:
    ``(batch rows, sizes, first staged byte)`` per source, the records'
    batch starts in ``starts``. Consecutive batch rows of one source are
    consecutive in its staging too, so each such run is one copy."""
    src, dst, size = [], [], []
    for rows, part, at in placed:
        if not rows.size:
            continue
        brk = np.flatnonzero(np.diff(rows) != 1) + 1
        first = np.concatenate(([0], brk))
        last = np.concatenate((brk, [rows.size])) - 1
        here = np.cumsum(part) - part + at  # each record's first staged byte
        src.append(here[first])
        dst.append(starts[rows[first]])
        size.append(here[last] + part[last] - here[first])
    s, d, n = (np.concatenate(x) for x in (src, dst, size))
    keep = n > 0
    s, d, n = s[keep], d[keep], n[keep]
    total = int(n.sum())
    if not total:
        return
    if total >= _SLICE_BYTES * n.size:  # long runs: a slice copy each
        to, fro = memoryview(out), memoryview(stage)  # type: ignore[arg-type]  # numpy's stubs give ndarray the buffer protocol from 3.12 on
        for a, b, m in zip(s.tolist(), d.tolist(), n.tolist()):
            to[b : b + m] = fro[a : a + m]
        return
    # short runs: the runs tile the batch's bytes, so in batch order they are
    # one gather by index, in items of the dtype when every run aligns
    order = np.argsort(d, kind="stable")
    s, n = s[order], n[order]
    unit = item if item > 1 and not ((s | n) % item).any() else 1
    if unit > 1:
        s, n, total = s // unit, n // unit, total // unit
    kind = np.dtype(f"V{unit}") if unit > 1 else np.dtype(np.uint8)
    pos = np.repeat(s - (np.cumsum(n) - n), n)
    pos += np.arange(total, dtype=np.int64)
    src_items = stage[: stage.size - stage.size % unit].view(kind)
    np.take(src_items, pos, out=out[: total * unit].view(kind))


class SourceStream:
    """The ``source`` stream of a mixture's batches: each row's source, int32."""

    dtype = np.dtype(np.int32)
    item_shape: tuple[int, ...] = ()
    nbytes_per_item = 4

    def __init__(self, offsets: tuple[int, ...]) -> None:
        self.starts = np.asarray(offsets[:-1], dtype=np.int64)
        self.total = offsets[-1]

    def __len__(self) -> int:
        return self.total

    def _gather_unchecked(self, idx: np.ndarray, out: np.ndarray) -> None:
        out[:] = _locate(self.starts, idx)
