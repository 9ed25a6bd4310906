"""Weighted mixtures of named sources, for :class:`loaderx.dataloader.DataLoader`.

A :class:`Mixture` stands where a loader takes its streams::

    mix = Mixture({"web": {"tokens": web_tokens}, "code": {"tokens": code_tokens}},
                  {"web": 0.7, "code": 0.3})
    loader = DataLoader(mix, batch_size=256)
    batch = next(loader)   # batch["tokens"], and batch["source"]: 0 (web) or 1 (code) per row

Each source is a mapping of aligned streams with the same stream names,
dtypes and trailing shapes as the others. Step ``s`` takes from the sources
in proportion to the weights, as a pure function of ``(seed, s)``: by
default every step's count for source ``i`` is within ±1 of ``w_i x G`` and
its running sum within ±1 of ``w_i x G x (s + 1)`` (``G`` the global batch,
``batch_size x world``; :mod:`loaderx.loader._schedule` says how), or with
``counts="sampled"`` a multinomial draw per step.

Each source reads through its own endless stream of record indices: the
``j``-th record source ``i`` ever contributes is position ``j`` of that
stream, and ``j`` is the running count of the source, so a source is covered
once per cycle whatever the weights. The stream is ``sampler="cyclic"`` (a
fresh permutation of the source per pass, from the native cyclic sampler),
``"iid"`` or ``"sequential"``; its positions are drawn with a few native
calls over aligned blocks of the permutation (one, two or, near the end of a
pass, a few more per source per step).

The loader sees one index space: record ``k`` of source ``i`` has the global
index ``offsets[i] + k`` (:meth:`Mixture.locate` undoes it). A stream of the
mixture gathers a batch with one native gather per source per stream, into
the batch rows of that source (through a scratch buffer and one copy when the
rows are not consecutive: the rows of a batch interleave the sources, so
that every rank's slice of the global batch holds close to its share of
each). The batch also has a ``source`` int32 stream naming each row's source
(its position in :attr:`Mixture.names`).

Weights may change at given steps, ``{0: {...}, 10_000: {...}}``; the
schedule is part of the loader's state, and a state from another mixture
(sources, sizes, weights, counts, sampler) is refused saying what differs.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import threading
import weakref
from collections.abc import Mapping
from fractions import Fraction
from typing import Any

import numpy as np

from loaderx.errors import CorruptStoreError
from loaderx.loader._fingerprint import fingerprint
from loaderx.loader._pipeline import ArrayStream
from loaderx.loader._ragged import _GROWTH, RaggedStream
from loaderx.loader._schedule import COUNTS, Schedule, check_schedule, spread, weights_text
from loaderx.loader.sampler import sample
from loaderx.store import _native
from loaderx.store.dataset import DenseDataset, RaggedDataset

__all__ = ["Mixture"]

#: how a source's stream of record indices is drawn
SOURCE_SAMPLERS = ("cyclic", "iid", "sequential")
#: what a mixture's weights count
BY = ("records", "tokens")
#: what the keys of a weights schedule count
SCHEDULE_UNITS = ("steps", "record_batches")
#: positions per step of the native iid sampler a source's iid stream reads
_IID_STEP = 1 << 20
#: the fewest positions one native call of a source's stream draws: a loader
#: walks each stream forward, so the next steps usually find their positions
#: in the block the last call drew (kept per thread)
_MIN_BLOCK = 4096


def _source_seed(seed: int, name: str) -> int:
    """The seed of one source's index stream: keyed by the loader's seed and
    the source's name, so adding a source leaves the others' streams alone."""
    digest = hashlib.blake2b(f"{seed}\0{name}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little")


class _SourceDraw:
    """Positions ``[a, b)`` of one source's endless index stream."""

    def __init__(self, mode: str, n: int, seed: int) -> None:
        self.mode = mode
        self.n = n
        self.seed = seed
        self._last = threading.local()

    def __getstate__(self) -> dict[str, Any]:
        return {"mode": self.mode, "n": self.n, "seed": self.seed}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._last = threading.local()

    def positions(self, a: int, b: int) -> np.ndarray:
        out = np.empty(b - a, dtype=np.int64)
        if self.mode == "sequential":
            np.remainder(np.arange(a, b, dtype=np.int64), self.n, out=out)
            return out
        # a pass (cyclic) or a native step (iid) is a frame of `size` positions
        size = self.n if self.mode == "cyclic" else _IID_STEP
        x = a
        while x < b:
            frame, y0 = divmod(x, size)
            y1 = min(size, y0 + b - x)
            self._frame(frame, y0, y1, out[x - a : x - a + y1 - y0])
            x += y1 - y0
        return out

    def _frame(self, frame: int, y0: int, y1: int, out: np.ndarray) -> None:
        """Positions ``[y0, y1)`` of one frame, in aligned power-of-two blocks:
        a block of ``m`` at a multiple of ``m`` is one native batch."""
        size = self.n if self.mode == "cyclic" else _IID_STEP
        done = 0
        while y0 < y1:
            last = getattr(self._last, "block", None)
            if last is not None and last[0] == frame and last[1] <= y0 < last[1] + last[2].size:
                start, block = last[1], last[2]
            else:
                m = 1 << max(0, (max(y1 - y0, _MIN_BLOCK) - 1).bit_length())
                while True:
                    start = y0 - y0 % m
                    if start + m <= size:
                        break
                    m >>= 1
                if self.mode == "cyclic":  # batch m, P = n // m steps a pass: step frame·P + start/m
                    block = sample("cyclic", self.n, m, frame * (self.n // m) + start // m, seed=self.seed)
                else:  # iid: rank start/m of a world of _IID_STEP/m, at native step `frame`
                    block = sample("iid", self.n, m, frame, seed=self.seed, shard=(start // m, _IID_STEP // m))
                self._last.block = (frame, start, block)
            end = min(y1, start + block.size)
            out[done : done + end - y0] = block[y0 - start : end - start]
            done += end - y0
            y0 = end


class MixtureDraw:
    """The loader's sampler over a mixture: ``(step, out)`` -> this rank's
    global indices of ``step`` (``batch_size`` of them). Pure in the step;
    pickles for worker processes."""

    def __init__(
        self, mixture: Mixture, batch_size: int, seed: int, shard: tuple[int, int], schedule: Schedule | None = None
    ) -> None:
        self.batch_size = batch_size
        self.seed = seed
        self.rank, self.world = shard
        self.global_batch = batch_size * self.world
        #: the per-step counts; the draws of one global batch (each rank's and
        #: the unsharded one packing uses) may share it, and what it learns
        self.schedule = schedule or Schedule(mixture.segments, self.global_batch, mixture.counts, seed)
        if self.schedule.g != self.global_batch:
            raise ValueError(f"a schedule of global batch {self.schedule.g} for a draw of {self.global_batch}")
        self.offsets = mixture.offsets
        self.draws = [
            _SourceDraw(mixture.sampler, n, _source_seed(seed, name)) for name, n in zip(mixture.names, mixture.sizes)
        ]
        self._slices: dict[tuple[int, ...], list[tuple[int, np.ndarray, int]]] = {}

    def counts(self, step: int) -> list[int]:
        """The records each source gives the global batch of ``step``."""
        return self.schedule.window(step)[1]

    def _slice(self, counts: list[int]) -> list[tuple[int, np.ndarray, int]]:
        """``(source, rows of this rank's batch, first j)`` per source of a
        step with these counts (remembered: exact counts repeat)."""
        key = tuple(counts)
        got = self._slices.get(key)
        if got is None:
            src, j = spread(counts)
            lo = self.rank * self.batch_size
            src, j = src[lo : lo + self.batch_size], j[lo : lo + self.batch_size]
            got = []
            for i in np.unique(src).tolist():
                rows = np.flatnonzero(src == i)
                got.append((i, rows, int(j[rows[0]])))  # this rank's rows of source i: consecutive j
            if len(self._slices) > 1024:
                self._slices.clear()
            self._slices[key] = got
        return got

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "_slices"}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._slices = {}

    def __call__(self, step: int, out: np.ndarray) -> np.ndarray:
        before, counts = self.schedule.window(step)
        for i, rows, j0 in self._slice(counts):
            first = before[i] + j0
            out[rows] = self.draws[i].positions(first, first + rows.size) + self.offsets[i]
        return out


#: the last per-source plan of a batch's indices, per thread (see _Parts._groups)
_PLANS = threading.local()


def _locate(starts: np.ndarray, idx: np.ndarray) -> np.ndarray:
    return np.searchsorted(starts, idx, side="right") - 1


class _Parts:
    """What the dense and ragged mixture streams share: the per-source
    streams and the global index space."""

    parts: list[tuple[str, Any]]
    starts: np.ndarray

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
            return self.__dict__["_joined_h"]
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
        if not self.row_bytes:
            return np.zeros_like(sizes)
        rows, rem = np.divmod(sizes, self.row_bytes)
        if rem.any():
            j = int(np.argmax(rem != 0))
            raise CorruptStoreError(
                f"stream {self.name!r}: record {int(idx[j])} is {int(sizes[j])} bytes, not a multiple of "
                f"one row ({self.row_bytes} bytes)"
            )
        return rows


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
            needed = int(ds._guarded(local, lambda v=view: _native.store_gather_ragged(h, local, sizes, v)))
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
        to, fro = memoryview(out), memoryview(stage)
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


def _stream_kind(value: Any, where: str) -> tuple[str, Any]:
    """``("dense" | "ragged", stream)`` of a source's stream."""
    if isinstance(value, RaggedDataset):
        return "ragged", value
    if isinstance(value, DenseDataset):
        return "dense", value
    if isinstance(value, np.ndarray):
        return "dense", ArrayStream(where, value)
    raise TypeError(f"{where} must be a DenseDataset, a RaggedDataset or a NumPy array, got {type(value).__name__}")


class Mixture:
    """Named sources mixed by weight, for ``DataLoader(mixture, ...)``.

    Args:
        sources: ``{source name: {stream name: DenseDataset, RaggedDataset
            or NumPy array}}``; every source has the same stream names, and
            each stream the same kind (dense or ragged), dtype and trailing
            shape in every source. Within a source the streams are aligned
            (equal lengths, at least 1).
        weights: ``{source name: weight}`` (names left out weigh 0), or a
            list in source order, or a schedule ``{step: weights, ...}``
            starting at step 0 whose weights apply from that step on. Weights
            are ints, floats (read exactly from their ``str()``: 0.1 is 1/10)
            or ``fractions.Fraction``; finite, non-negative, not all 0; they
            are normalised to sum 1 (token counts do).
        counts: ``"exact"`` (every step's count within ±1 of the weight's
            share, and every running sum too) or ``"sampled"`` (a multinomial
            draw per step, keyed by ``(seed, step)``).
        sampler: how each source walks its records: ``"cyclic"`` (a fresh
            permutation each pass over the source), ``"iid"`` or
            ``"sequential"``.
        source_key: the name of the batch stream that gives each row's
            source (an int32 index into :attr:`names`).

    Raises:
        TypeError, ValueError: a bad source, stream or weight; the message
            names the source, the stream or the value.
    """

    def __init__(
        self,
        sources: Mapping[str, Mapping[str, Any]],
        weights: Any,
        *,
        counts: str = "exact",
        sampler: str = "cyclic",
        source_key: str = "source",
        by: str = "records",
        schedule_unit: str = "steps",
    ) -> None:
        if not isinstance(sources, Mapping) or not sources:
            raise TypeError(
                f"sources must be a non-empty dict of source name -> {{stream name: stream}}, got {sources!r}"
            )
        if counts not in COUNTS:
            raise ValueError(f"counts must be 'exact' or 'sampled', got {counts!r}")
        if sampler not in SOURCE_SAMPLERS:
            raise ValueError(f"sampler must be one of {', '.join(map(repr, SOURCE_SAMPLERS))}, got {sampler!r}")
        if not isinstance(source_key, str):
            raise TypeError(f"source_key must be a str, got {source_key!r}")
        if by not in BY:
            raise ValueError(f"by must be 'records' or 'tokens' (what the weights count), got {by!r}")
        if schedule_unit not in SCHEDULE_UNITS:
            raise ValueError(
                f"schedule_unit must be 'steps' (loader steps) or 'record_batches' (the global batches of "
                f"records a concat-packed stream is made of), got {schedule_unit!r}"
            )
        parsed: dict[str, dict[str, tuple[str, Any]]] = {}
        sizes = []
        first_name: str | None = None
        for name, streams in sources.items():
            if not isinstance(name, str):
                raise TypeError(f"source names must be str, got {name!r}")
            if not isinstance(streams, Mapping) or not streams:
                raise TypeError(f"source {name!r} must be a non-empty dict of stream name -> stream, got {streams!r}")
            got = {}
            for sname, value in streams.items():
                if not isinstance(sname, str):
                    raise TypeError(f"source {name!r}: stream names must be str, got {sname!r}")
                got[sname] = _stream_kind(value, f"source {name!r} stream {sname!r}")
            if first_name is None:
                first_name = name
            else:
                _check_like(name, got, first_name, parsed[first_name])
            lengths = {s: len(v) for s, (_, v) in got.items()}
            if len(set(lengths.values())) > 1:
                raise ValueError(f"source {name!r}: its streams must have equal lengths; got {lengths}")
            n = next(iter(lengths.values()))
            if n == 0:
                raise ValueError(f"source {name!r} is empty (its streams have length 0)")
            parsed[name] = got
            sizes.append(n)
        assert first_name is not None
        if source_key in parsed[first_name]:
            raise ValueError(f"source_key={source_key!r} is also a stream name; pass another source_key=")
        self._sources = parsed
        #: the source names, in order; a batch's ``source`` values index it
        self.names: tuple[str, ...] = tuple(parsed)
        #: the stream names every source has
        self.stream_names: tuple[str, ...] = tuple(parsed[first_name])
        #: records per source
        self.sizes: tuple[int, ...] = tuple(sizes)
        #: the global index of each source's first record, and the total at the end
        self.offsets: tuple[int, ...] = tuple(int(x) for x in np.cumsum([0, *sizes]))
        #: what the weights count: ``"records"`` or ``"tokens"``
        self.by = by
        #: the weights as given, normalised: ``((start step, weights summing to 1), ...)``
        self.weights = check_schedule(weights, self.names)
        #: the weights of records per step: the weights themselves, or for
        #: ``by="tokens"`` over dense sources, each divided by its tokens per record
        self.segments = self.weights
        if by == "tokens":
            self.segments = self._token_segments(parsed)
        self.counts = counts
        self.sampler = sampler
        self.source_key = source_key
        #: what a weights schedule's keys count (see the class docs)
        self.schedule_unit = schedule_unit

    def _token_segments(self, parsed: Mapping[str, Mapping[str, tuple[str, Any]]]) -> Any:
        """The record weights of ``by="tokens"``: over dense sources, each
        token weight divided by the tokens of one record (the first axis of
        the first stream); over ragged ones the token weights themselves
        (concat packing makes rows of them), after refusing a source with no
        tokens at all."""
        first = self.stream_names[0]
        kind, ref = parsed[self.names[0]][first]
        if kind == "ragged":
            for name in self.names:
                ds = parsed[name][first][1]
                n = len(ds)
                probe = np.unique(np.linspace(0, n - 1, min(n, 1024)).astype(np.int64))
                if not ds.lengths(probe).any() and not ds.lengths().any():
                    raise ValueError(
                        f"source {name!r} has no tokens (all its {n} records of stream {first!r} have length "
                        "0): by='tokens' cannot give it a share"
                    )
            return self.weights
        per = int(ref.item_shape[0]) if ref.item_shape else 1
        if per == 0:
            raise ValueError(
                f"stream {first!r} has records of shape {tuple(ref.item_shape)}, no tokens: by='tokens' cannot "
                "weigh the sources"
            )
        out = []
        for start, ws in self.weights:
            scaled = [w / per for w in ws]
            total = sum(scaled)
            out.append((start, tuple(w / total for w in scaled)))
        return tuple(out)

    def __len__(self) -> int:
        """The records of all sources together (the loader's index space)."""
        return self.offsets[-1]

    def __repr__(self) -> str:
        w = {n: str(x) for n, x in zip(self.names, self.weights[0][1])}
        more = f", {len(self.weights) - 1} weight changes" if len(self.weights) > 1 else ""
        return (
            f"Mixture(sources={dict(zip(self.names, self.sizes))}, weights={w}{more}, "
            f"streams={list(self.stream_names)}, counts={self.counts!r}, sampler={self.sampler!r})"
        )

    def weights_at(self, step: int) -> dict[str, Fraction]:
        """The normalised weights in force at ``step``."""
        current = self.weights[0][1]
        for start, w in self.weights:
            if start <= step:
                current = w
        return dict(zip(self.names, current))

    def locate(self, indices: Any) -> tuple[np.ndarray, np.ndarray]:
        """``(source, record)`` of global indices (as ``DataLoader.indices`` returns)."""
        idx = np.asarray(indices, dtype=np.int64)
        src = _locate(np.asarray(self.offsets[:-1], dtype=np.int64), idx)
        return src, idx - np.asarray(self.offsets, dtype=np.int64)[src]

    def identity(self) -> dict[str, Any]:
        """What a loader's state records of the mixture (JSON-serialisable)."""
        return {
            "sources": dict(zip(self.names, self.sizes)),
            "weights": weights_text(self.weights, self.names),
            "counts": self.counts,
            "sampler": self.sampler,
            "source_key": self.source_key,
            "by": self.by,
            # read only where the native library is loaded already: a process
            # that forks workers (torch's) must not load it to save a state
            **({"data": self.fingerprint()} if _native.loaded() or "_fingerprint" in self.__dict__ else {}),
        }

    def fingerprint(self) -> dict[str, str]:
        """``{source name: digest}`` of each source's records (see
        :mod:`loaderx.loader._fingerprint`), what a state checks its data by;
        computed once."""
        got = self.__dict__.get("_fingerprint")
        if got is None:
            got = {}
            for name in self.names:
                h = hashlib.blake2b(digest_size=8)
                for s in self.stream_names:
                    h.update(f"{s}\0{fingerprint(self._sources[name][s][1])}\0".encode())
                got[name] = h.hexdigest()
            self.__dict__["_fingerprint"] = got
        return dict(got)

    def template(self) -> dict[str, Any]:
        """The first source's streams: what the loader checks ``pad=`` against."""
        return {s: v for s, (_, v) in self._sources[self.names[0]].items()}

    def loader_streams(self, pads: Mapping[str, Any], offsets_dtype: np.dtype) -> dict[str, Any]:
        """The loader's streams over the global index space, the source stream last."""
        out: dict[str, Any] = {}
        for s in self.stream_names:
            parts = [(n, self._sources[n][s][1]) for n in self.names]
            if self._sources[self.names[0]][s][0] == "ragged":
                out[s] = MixtureRaggedStream(s, parts, self.offsets, pads.get(s), offsets_dtype, self.by)
                out[s].schedule = (len(self.weights) - 1, self.schedule_unit)
            else:
                out[s] = MixtureStream(s, parts, self.offsets)
        out[self.source_key] = SourceStream(self.offsets)
        return out

    def draw(
        self, batch_size: int, seed: int, shard: tuple[int, int], schedule: Schedule | None = None
    ) -> MixtureDraw:
        """The sampler of a loader over this mixture (``schedule``: that of
        another draw of the same global batch and seed, to share)."""
        return MixtureDraw(self, batch_size, seed, shard, schedule)


def _check_like(name: str, got: Mapping[str, tuple[str, Any]], first: str, ref: Mapping[str, tuple[str, Any]]) -> None:
    """Refuse a source whose streams differ from the first source's."""
    missing = [s for s in ref if s not in got]
    extra = [s for s in got if s not in ref]
    if missing or extra:
        raise ValueError(
            f"source {name!r} has streams {list(got)}, source {first!r} has {list(ref)} "
            f"(missing in {name!r}: {missing}, not in {first!r}: {extra})"
        )
    for s, (kind, v) in got.items():
        rkind, r = ref[s]
        if kind != rkind:
            raise ValueError(f"source {name!r} stream {s!r} is {kind}, but in source {first!r} it is {rkind}")
        if v.dtype != r.dtype:
            raise ValueError(
                f"source {name!r} stream {s!r} has dtype {v.dtype}, but in source {first!r} it has {r.dtype}"
            )
        if tuple(v.item_shape) != tuple(r.item_shape):
            raise ValueError(
                f"source {name!r} stream {s!r} has item shape {tuple(v.item_shape)}, but in source {first!r} "
                f"it has {tuple(r.item_shape)}"
            )
