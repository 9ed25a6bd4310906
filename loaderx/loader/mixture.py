"""Weighted mixtures of named sources, for :class:`loaderx.dataloader.DataLoader`.

The user documentation of these names is the docstring of :mod:`loaderx.mixture`,
their public face (``help(loaderx.mixture)`` and the API reference show it).
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Mapping
from fractions import Fraction
from typing import TYPE_CHECKING, Any

import numpy as np

from loaderx.errors import CorruptStoreError
from loaderx.loader._pipeline import ArrayStream
from loaderx.loader._ragged import RaggedStream
from loaderx.loader._schedule import COUNTS, Schedule, check_schedule, spread, weights_text
from loaderx.loader.sampler import sample
from loaderx.store import _native
from loaderx.store.dataset import DenseDataset, RaggedDataset

if TYPE_CHECKING:
    from numpy.typing import ArrayLike, NDArray

__all__ = ["Mixture"]

#: how a source's stream of record indices is drawn
SOURCE_SAMPLERS = ("cyclic", "iid", "sequential")
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
        pad: tuple[str, int] | None, offsets_dtype: np.dtype,
    ) -> None:
        self.name = name
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

    def lengths(self, idx: np.ndarray) -> np.ndarray:
        """The first-axis length of each record ``idx`` (global indices), as
        int64, from the sources' tables: what packing plans a step with."""
        out = np.empty(idx.shape[0], dtype=np.int64)
        for i, rows, local in self._plan(np.asarray(idx, dtype=np.int64)):
            out[rows] = self.parts[i][1].lengths(local)
        return out

    def gather_into(self, idx: np.ndarray, slot: list[np.ndarray], step: int = 0) -> Any:
        k = idx.shape[0]
        sizes = slot[1][:k]
        got = []
        for i, rows, local in self._groups(idx):
            ds = self.parts[i][1]
            part_sizes = np.empty(rows.size, dtype=np.int64)
            buf = np.empty(max(1, rows.size * self.nbytes_per_item), dtype=np.uint8)
            local = np.ascontiguousarray(local)
            while True:
                needed = int(ds._guarded(
                    local, lambda d=ds, i=local, s=part_sizes, b=buf: _native.store_gather_ragged(d._h, i, s, b)
                ))
                if needed <= buf.size:
                    break
                buf = np.empty(needed, dtype=np.uint8)
            sizes[rows] = part_sizes
            got.append((rows, part_sizes, buf[:needed]))
        starts = np.zeros(k + 1, dtype=np.int64)
        np.cumsum(sizes, out=starts[1:])
        needed = int(starts[-1])
        if needed > slot[0].size:
            slot[0] = np.empty(int(needed * 1.25), dtype=np.uint8)
        for rows, part_sizes, data in got:
            if data.size:
                here = np.cumsum(part_sizes) - part_sizes  # each record's start in its part's buffer
                dest = np.repeat(starts[rows] - here, part_sizes) + np.arange(data.size, dtype=np.int64)
                slot[0][dest] = data
        if self.row_bytes and (sizes % self.row_bytes).any():
            j = int(np.argmax(sizes % self.row_bytes != 0))
            raise CorruptStoreError(
                f"stream {self.name!r}: record {int(idx[j])} is {int(sizes[j])} bytes, not a multiple of "
                f"one row ({self.row_bytes} bytes)"
            )
        rows_per = sizes // self.row_bytes if self.row_bytes else np.zeros_like(sizes)
        return self.finish(idx, slot, rows_per, needed)


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
        #: ``((start step, weights summing to 1), ...)``
        self.segments = check_schedule(weights, self.names)
        self.counts = counts
        self.sampler = sampler
        self.source_key = source_key

    def __len__(self) -> int:
        """The records of all sources together (the loader's index space)."""
        return self.offsets[-1]

    def __repr__(self) -> str:
        w = {n: str(x) for n, x in zip(self.names, self.segments[0][1])}
        more = f", {len(self.segments) - 1} weight changes" if len(self.segments) > 1 else ""
        return (
            f"Mixture(sources={dict(zip(self.names, self.sizes))}, weights={w}{more}, "
            f"streams={list(self.stream_names)}, counts={self.counts!r}, sampler={self.sampler!r})"
        )

    def weights_at(self, step: int) -> dict[str, Fraction]:
        """The normalised weights in force at ``step``."""
        current = self.segments[0][1]
        for start, w in self.segments:
            if start <= step:
                current = w
        return dict(zip(self.names, current))

    def locate(self, indices: ArrayLike) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
        """``(source, record)`` of global indices (as ``DataLoader.indices`` returns)."""
        idx = np.asarray(indices, dtype=np.int64)
        src = _locate(np.asarray(self.offsets[:-1], dtype=np.int64), idx)
        return src, idx - np.asarray(self.offsets, dtype=np.int64)[src]

    def identity(self) -> dict[str, Any]:
        """What a loader's state records of the mixture (JSON-serialisable)."""
        return {
            "sources": dict(zip(self.names, self.sizes)),
            "weights": weights_text(self.segments, self.names),
            "counts": self.counts,
            "sampler": self.sampler,
            "source_key": self.source_key,
        }

    def template(self) -> dict[str, Any]:
        """The first source's streams: what the loader checks ``pad=`` against."""
        return {s: v for s, (_, v) in self._sources[self.names[0]].items()}

    def loader_streams(self, pads: Mapping[str, Any], offsets_dtype: np.dtype) -> dict[str, Any]:
        """The loader's streams over the global index space, the source stream last."""
        out: dict[str, Any] = {}
        for s in self.stream_names:
            parts = [(n, self._sources[n][s][1]) for n in self.names]
            if self._sources[self.names[0]][s][0] == "ragged":
                out[s] = MixtureRaggedStream(s, parts, self.offsets, pads.get(s), offsets_dtype)
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
