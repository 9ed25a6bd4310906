"""Token-weighted concat packing of a mixture: rows of one source each.

``Mixture(..., by="tokens")`` with ``pack={stream: Pack(L)}`` (concat mode)
makes the weights shares of *tokens*. Each source is an endless stream of
tokens: its records in the order of its own index stream (the same one a
record-weighted mixture walks), laid end to end and cut into rows of ``L``.
Step ``s`` has ``R`` global rows (``rows x world``), and source ``i`` gives
it ``c_i(s)`` whole rows of its stream, the counts of the exact mixture
schedule (:class:`loaderx.loader._schedule.Schedule`) with the rows as its
units: within ±1 row of ``w_i·R`` every step, the running sum within ±1 row
of ``w_i·R·(s + 1)``, and exactly ``w_i·R·K`` rows over each run of ``K``
steps from a multiple of ``K``, ``K`` the schedule's period (the least common
multiple of the denominators of the ``w_i·R``). A row holds ``L`` tokens, so
in tokens the shares are those counts times ``L``; no token is padding.

The rows of a step are spread over the global batch as the records of a
record-weighted step are (:func:`loaderx.loader._schedule.spread`), so every
rank's rows hold close to its share of each source, and a source's rows of a
rank are consecutive rows of its token stream. Where a row starts in a
source's stream is found by a :class:`loaderx.loader._packing.TokenIndex` per
source over blocks of its index stream (record lengths from the store's
table, not the records), so a step costs what a concat step of one store
costs, plus one lookup per source; the records of all sources are gathered in
one native call when the sources are local stores.

A weights schedule ``{step: weights}`` counts loader steps here: the counts
of step ``s`` are the schedule's at ``s``, whatever the records' lengths.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from loaderx.loader._packing import _DENSE, _IDX, _REC, _START, PackStream, TokenIndex, _fit
from loaderx.loader._schedule import Schedule, spread
from loaderx.loader.packing import Pack, PackedRows

#: index-stream positions of a source per block of its TokenIndex
BLOCK = 256


class _Positions:
    """Block ``t`` of one source's index stream as global indices: what a
    source's TokenIndex reads as its sampler steps."""

    def __init__(self, source: Any, offset: int) -> None:
        self.source = source
        self.offset = offset

    def __call__(self, t: int, out: np.ndarray) -> np.ndarray:
        out[:] = self.source.positions(t * BLOCK, (t + 1) * BLOCK)
        out += self.offset
        return out


class TokenMixStream(PackStream):
    """A mixture's ragged stream packed in concat mode with token weights
    (see the module docs). Made by :func:`pack_stream`. Its state has no
    cursor of its own: a resumed loader sums each source's record lengths
    (from the tables) up to where the step's rows start, once per process."""

    keeps_cursor = False

    def __init__(
        self, name: str, dataset: Any, pack: Pack, offsets_dtype: np.dtype, batch_size: int
    ) -> None:
        super().__init__(name, dataset, pack, offsets_dtype, batch_size)
        self.rows_schedule: Schedule | None = None
        self.indices: list[TokenIndex] = []
        self._slices: dict[tuple[int, ...], list[tuple[int, np.ndarray, int]]] = {}

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "_slices"}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._slices = {}

    def bind(self, draw: Any, global_batch: int, shard: tuple[int, int] = (0, 1)) -> None:
        """Take the per-source index streams and the weights from the
        mixture's draw; the rows' schedule has the global rows as its batch."""
        self.draw = draw
        self.global_batch = global_batch
        self.rank, self.world = shard
        sched = draw.schedule
        segments = list(zip(sched.starts, sched.weights))
        self.rows_schedule = Schedule(segments, self.rows * self.world, "exact" if sched.exact else "sampled",
                                      draw.seed)
        self.indices = [TokenIndex(_Positions(src, off), BLOCK) for src, off in zip(draw.draws, draw.offsets)]
        self.index = None

    def cursor(self, step: int) -> list[int]:
        raise RuntimeError(f"stream {self.name!r}: a token-weighted stream keeps no cursor")

    def _slice(self, counts: list[int]) -> list[tuple[int, np.ndarray, int]]:
        """``(source, this rank's batch rows, first j)`` per source of a step
        with these row counts (remembered: exact counts repeat)."""
        key = tuple(counts)
        got = self._slices.get(key)
        if got is None:
            src, j = spread(counts)
            lo = self.rank * self.rows
            src, j = src[lo : lo + self.rows], j[lo : lo + self.rows]
            got = [(i, np.flatnonzero(src == i), int(j[src == i][0])) for i in np.unique(src).tolist()]
            if len(self._slices) > 1024:
                self._slices.clear()
            self._slices[key] = got
        return got

    def counts(self, step: int) -> list[int]:
        """The global rows each source gives ``step``."""
        assert self.rows_schedule is not None
        return self.rows_schedule.window(step)[1]

    def gather_into(self, idx: np.ndarray, slot: list[np.ndarray], step: int = 0) -> PackedRows:  # type: ignore[override]
        if self.rows_schedule is None:
            raise RuntimeError(f"stream {self.name!r}: a token-weighted stream was not given its mixture")
        length, nrows = self.length, self.rows
        before, counts = self.rows_schedule.window(step)
        plan = []  # per source: (its batch rows, its records, their lengths, the span's first token in them)
        for i, rows, j0 in self._slice(counts):
            index = self.indices[i]
            first = (before[i] + j0) * length
            span = rows.size * length
            t0, r0, _ = index.locate(first, self.dataset)
            t1, _, _ = index.locate(first + span - 1, self.dataset)
            every, lens = index.records(t0, t1, self.dataset)
            ends = np.cumsum(lens)
            a = int(np.searchsorted(ends, r0, side="right"))
            b = int(np.searchsorted(ends, r0 + span - 1, side="right"))
            start = r0 - (int(ends[a - 1]) if a else 0)  # the span's first token in record a
            plan.append((rows, every[a : b + 1], lens[a : b + 1], start))
        n = sum(p[1].size for p in plan)
        ids = _fit(slot, _IDX, n, np.int64)[:n]
        np.concatenate([p[1] for p in plan], out=ids)
        values, offsets = self._gather(ids, slot, np.concatenate([p[2] for p in plan]))
        total = nrows * length
        dense = self._dense(slot, total)
        seg_starts, seg_rec, seg_at = [], [], []
        k = 0
        for rows, recs, lens, start in plan:
            m = recs.size
            span = rows.size * length
            lo = int(offsets[k]) + start
            dense[rows] = values[lo : lo + span].reshape((rows.size, length, *self.item_shape))
            # segments in the span: at each row start and each record start inside it
            doc_start = np.cumsum(lens) - lens - start
            inside = doc_start[(doc_start > 0) & (lens > 0)]
            starts = np.union1d(np.arange(0, span, length, dtype=np.int64), inside)
            which = np.searchsorted(doc_start, starts, side="right") - 1
            seg_starts.append(rows[starts // length] * length + starts % length)  # flattened batch positions
            seg_rec.append(recs[which])
            seg_at.append(starts - doc_start[which])
            k += m
        flat = np.concatenate(seg_starts)
        order = np.argsort(flat, kind="stable")
        starts = flat[order]
        s = starts.shape[0]
        rec = _fit(slot, _REC, s, np.int64)[:s]
        np.take(np.concatenate(seg_rec), order, out=rec)
        at = _fit(slot, _START, s, np.int64)[:s]
        np.take(np.concatenate(seg_at), order, out=at)
        seg, pos, nseg, cu = self._marks(slot, starts, s)
        np.copyto(nseg, seg[:, -1])
        cu[s] = total
        return PackedRows(dense, seg, pos, cu, nseg, rec, at, 0, self._sources(slot, rec))

    def _dense(self, slot: list[np.ndarray], total: int) -> np.ndarray:
        """The step's rows, in the slot's dense array (grown to fit)."""
        arr = _fit(slot, _DENSE, total * self.row_items, self.dtype)[: total * self.row_items]
        return arr.reshape((self.rows, self.length, *self.item_shape))


def pack_stream(name: str, dataset: Any, pack: Pack, offsets_dtype: np.dtype, batch_size: int) -> PackStream:
    """The loader's packing stream of ``dataset``: token-weighted rows for a
    token-weighted mixture's stream in concat mode, else a
    :class:`~loaderx.loader._packing.PackStream`."""
    if getattr(dataset, "by", "records") == "tokens" and pack.mode == "concat":
        return TokenMixStream(name, dataset, pack, offsets_dtype, batch_size)
    return PackStream(name, dataset, pack, offsets_dtype, batch_size)
