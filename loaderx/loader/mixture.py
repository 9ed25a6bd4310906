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
index ``offsets[i] + k`` (:meth:`Mixture.locate` undoes it). A dense stream of
the mixture gathers a batch with one native gather per source, into the
batch rows of that source (through a scratch buffer and one copy when the
rows are not consecutive: the rows of a batch interleave the sources, so
that every rank's slice of the global batch holds close to its share of
each); a ragged one as said below. The batch also has a ``source`` int32 stream naming each row's source
(its position in :attr:`Mixture.names`).

Weights may change at given steps, ``{0: {...}, 10_000: {...}}``; the
schedule is part of the loader's state, and a state from another mixture
(sources, sizes, weights, counts, sampler, what the weights count, or other
records in a source of the same size, by the fingerprint of each source) is
refused saying what differs.

``by="tokens"`` makes the weights shares of tokens: see
:mod:`loaderx.loader._tokenmix` for how concat packing lays the rows out.

A batch of local, read-only single-store sources is one native gather over a
set of fresh read-only handles on their stores (the set's global indices are
the mixture's), as for one store; other sources (sharded, in object storage,
writable) gather one source at a time into a per-thread staging area and are
copied into place a run of consecutive batch rows at a time.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Mapping
from fractions import Fraction
from typing import TYPE_CHECKING, Any

import numpy as np

from loaderx.loader._fingerprint import fingerprint
from loaderx.loader._mixstreams import MixtureRaggedStream, MixtureStream, SourceStream, _locate
from loaderx.loader._pipeline import ArrayStream
from loaderx.loader._schedule import COUNTS, Schedule, check_schedule, spread, weights_text
from loaderx.loader.sampler import sample
from loaderx.store import _native
from loaderx.store.dataset import DenseDataset, RaggedDataset

if TYPE_CHECKING:
    from numpy.typing import ArrayLike, NDArray

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
        last = getattr(self._last, "block", None)
        if last is not None and self.mode != "sequential":  # most calls: inside the block the last one drew
            size = self.n if self.mode == "cyclic" else _IID_STEP
            frame, y0 = divmod(a, size)
            start, block = last[1], last[2]
            if last[0] == frame and start <= y0 and y0 + b - a <= start + block.size:
                return block[y0 - start : y0 - start + b - a].copy()
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

    def steps(self, p: int, c: int) -> np.ndarray:
        """The indices of steps ``[p, p + c)``, one row each (what ``c``
        calls make, by whole arrays): each source's positions of the steps
        are one stretch of its stream, drawn at once, then placed step by
        step through the steps' counts (few distinct ones)."""
        before = np.array([self.schedule.before(t) for t in range(p, p + c + 1)], dtype=np.int64)
        counts = np.diff(before, axis=0)
        out = np.empty((c, self.batch_size), dtype=np.int64)
        stretch = [
            self.draws[i].positions(int(before[0, i]), int(before[-1, i])) + self.offsets[i]
            for i in range(len(self.draws))
        ]
        keys, which = np.unique(counts, axis=0, return_inverse=True)
        which = which.reshape(-1)
        for k, key in enumerate(keys.tolist()):
            steps = np.flatnonzero(which == k)
            for i, rows, j0 in self._slice(key):
                at = before[steps, i] - before[0, i] + j0
                out[steps[:, None], rows[None, :]] = stretch[i][at[:, None] + np.arange(rows.size)]
        return out


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
            are normalised to sum 1. A NumPy float is read as the shortest
            decimal of its precision (``np.float32(0.6)`` is 3/5).
        counts: ``"exact"`` (every step's count within ±1 of the weight's
            share, and every running sum too) or ``"sampled"`` (a multinomial
            draw per step, keyed by ``(seed, step)``).
        sampler: how each source walks its records: ``"cyclic"`` (a fresh
            permutation each pass over the source), ``"iid"`` or
            ``"sequential"``.
        source_key: the name of the batch stream that gives each row's
            source (an int32 index into :attr:`names`).
        by: what the weights count. ``"records"`` (the default): shares of
            each step's records, in every pack mode. ``"tokens"``: shares of
            tokens; over ragged sources it needs concat packing
            (``pack={stream: L}``), whose rows are then ``L`` tokens of one
            source each, as many per step as the exact schedule gives with
            the rows as units (see :mod:`loaderx.loader._tokenmix`: within
            one row of the share every step, exact over each period of the
            schedule); over dense sources, whose records all have the same
            tokens, it draws as ``"records"``. A source with no tokens is
            refused.
        schedule_unit: what the keys of a weights schedule count:
            ``"steps"`` (loader steps, the default) or ``"record_batches"``,
            the global batches of records a record-weighted concat-packed
            stream is cut from, which do not line up with loader steps: a
            loader refuses such a schedule unless this says so.

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

    def locate(self, indices: ArrayLike) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
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
