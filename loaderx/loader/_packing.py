"""The loader's packing streams: a ragged store gathered as fixed rows.

A :class:`PackStream` is a :class:`loaderx.loader._ragged.RaggedStream` whose batch
is a :class:`loaderx.packing.PackedRows`: one packed native gather of the
records a step needs (:meth:`RaggedStream.gather_into`), then the placement
arithmetic in numpy over whole arrays (segment ids and positions by cumulative
sums over per-segment marks, never a Python loop per token), into the arrays
of a :class:`PackPool` slot, recycled like every other batch buffer.

Packing is global: each rank packs the global batch of a step (the ranks'
sampler slices in rank order, drawn by one unsharded draw every rank makes
the same) into the global rows, ``rows x world`` of them, and keeps its own
``rows`` of them (rank ``r`` rows ``[r * rows, (r + 1) * rows)``), gathering
only the records those rows hold. The rows of a step are therefore the same
in every world with the same global batch, which is what makes an elastic
resume (a state saved at world ``W`` loaded at ``W'``) exact. Every rank
computes the whole placement (lengths come from the store's table), which
costs per step a sum over the global batch's lengths, not a read.

Concat mode needs to know where step ``s`` starts in the stream of tokens
(the records of the global batches in order); :class:`TokenIndex` keeps the
cumulative token counts of the sampler's steps, a chunk of steps at a time,
counted forward from step 0 or from a position a saved cursor gives
(:meth:`PackStream.cursor`, :meth:`PackStream.seek`).
"""

from __future__ import annotations

import bisect
import collections
import copy
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from loaderx.loader._ragged import _GROWTH, RaggedPool, RaggedStream
from loaderx.loader.packing import Pack, PackedRows, check_pack

if TYPE_CHECKING:
    from loaderx.store.dataset import RaggedDataset

#: sampler steps whose token counts one chunk of a TokenIndex sums
CHUNK_STEPS = 1024
#: chunks of per-step sums a TokenIndex keeps (the boundaries of every chunk stay)
CACHED_CHUNKS = 16
#: chunks whose records and lengths a TokenIndex keeps too (the last summed),
#: so that the steps packing them look neither up again; and the most
#: records a chunk may have to be kept
KEPT_CHUNKS, KEPT_RECORDS = 2, 1 << 21

# the arrays of a PackPool slot; 0-4 are a RaggedPool slot's, for the gather
_IDX, _DENSE, _SEG, _POS, _CU, _NSEG, _REC, _START, _SRC, _PAD, _FROM = range(5, 16)


def check_packs(pack: Any, streams: Mapping[str, Any], pads: Mapping[str, Any], ragged: type) -> dict[str, Pack]:
    """``pack=`` as ``{name: Pack}``: every name a ragged stream (of type
    ``ragged``), none also padded."""
    if pack is None:
        return {}
    if not isinstance(pack, Mapping):
        raise TypeError(
            f"pack must be None or a dict of ragged stream name -> length, got {pack!r} "
            "(e.g. pack={'tokens': 2048})"
        )
    out = {}
    for key, spec in pack.items():
        if key not in streams or not isinstance(streams[key], ragged):
            names = [k for k, v in streams.items() if isinstance(v, ragged)]
            what = "no stream" if key not in streams else f"{_kind(streams[key])}, not a ragged stream"
            raise ValueError(
                f"pack={{{key!r}: {spec!r}}} names {what}; only a ragged stream (RaggedDataset) packs, "
                f"and the ragged streams are {names}"
            )
        if key in pads:
            raise ValueError(
                f"stream {key!r} is given both pack={{{key!r}: {spec!r}}} and pad={{{key!r}: "
                f"{pads[key]!r}}}; a stream is packed into rows or padded per record, not both"
            )
        out[key] = check_pack(spec, key)
    return out


def _kind(stream: Any) -> str:
    """What a user calls a stream (never a loader-internal class)."""
    if isinstance(stream, np.ndarray) or hasattr(stream, "array"):
        return "a NumPy array"
    for cls in type(stream).__mro__:
        if cls.__name__ in ("DenseDataset", "RaggedDataset"):
            return f"a {cls.__name__}"
    return f"a {type(stream).__name__}"


def check_layout(sources: Mapping[str, Any], epoch: bool) -> None:
    """Refuse what concat packing leaves undefined: a stream that is not
    packed (its per-record batch has no rows to line up with, since a step's
    rows hold records of several sampler steps) and an ``epoch=True`` pass
    (whose steps count records, not tokens)."""
    for name, ds in sources.items():  # token weights need the rows of concat packing
        tokens = getattr(ds, "by", None) == "tokens" or getattr(getattr(ds, "dataset", None), "by", None) == "tokens"
        if tokens and not (isinstance(ds, PackStream) and ds.pack.mode == "concat"):
            how = f"packed in mode {ds.pack.mode!r}" if isinstance(ds, PackStream) else "not packed"
            raise ValueError(
                f"stream {name!r} is {how}, but the Mixture weighs its sources by='tokens': token "
                f"shares are made of packed rows, so pack it in concat mode (pack={{{name!r}: L}}), or "
                "weigh the sources by='records'"
            )
    concat = [name for name, ds in sources.items() if isinstance(ds, PackStream) and ds.pack.mode == "concat"]
    if not concat:
        return
    for name in concat:  # a record-weighted concat stream's batches of records are not loader steps
        mix = sources[name].dataset
        switches, unit = getattr(mix, "schedule", (0, "steps"))
        if switches and unit == "steps" and getattr(mix, "by", "records") == "records":
            raise ValueError(
                f"stream {name!r} is packed in concat mode from a Mixture weighed by='records' whose weights "
                "change at given steps: its rows are cut from the records of global batches that do not "
                "line up with loader steps, so a change would not land at the step named. Weigh the "
                "sources by='tokens' (rows of one source each; the schedule then counts loader steps "
                "exactly), pack mode='first_fit', or pass Mixture(..., schedule_unit='record_batches') "
                "to count the schedule in those global batches of records"
            )
    if epoch:
        raise ValueError(
            f"pack mode 'concat' (stream {concat[0]!r}) runs endless or for steps=N; an epoch=True "
            "pass counts records, which concat packing does not batch by: use mode='first_fit'"
        )
    for name, ds in sources.items():
        if not isinstance(ds, PackStream):
            raise ValueError(
                f"stream {name!r} is not packed, but {concat[0]!r} is packed in mode 'concat', whose "
                "rows hold the records of several sampler steps: a per-record stream has no batch "
                f"that lines up with them. Pack {name!r} too (a ragged stream) or use mode='first_fit'"
            )


class TokenIndex:
    """Where each sampler step starts in the stream of tokens.

    The stream is the records of sampler step 0, then of step 1, and so on
    (the global batches, when the loader is sharded: its ``draw`` is unsharded);
    the tokens before step ``t`` are the sum of the records' lengths over the
    steps before it. The index knows that sum at some steps (step 0, and
    any taken from a saved cursor by :meth:`seek`) and finds the others by
    summing forward from the nearest known step before, a chunk of
    :data:`CHUNK_STEPS` sampler steps at a time (the lengths come from the
    store's table, the records are not read); every chunk's end becomes a
    known step, and the per-step sums of the last :data:`CACHED_CHUNKS`
    chunks used are kept. A loader that resumes from a cursor therefore
    sums a chunk or two from the cursor's step on, whatever the step, and
    one without a cursor (a state saved before cursors existed) sums every
    sampler step before it, once per process.
    """

    #: sampler steps whose lengths every TokenIndex of this process summed
    #: (tests count the work of a seek with it)
    counted = 0

    def __init__(self, draw: Any, batch_size: int) -> None:
        self.draw = draw
        self.batch_size = batch_size
        self._steps = [0]  # sampler steps whose tokens before are known, sorted
        self._tokens = [0]  # the tokens before each
        self._init_cache()

    def _init_cache(self) -> None:
        self._sums: collections.OrderedDict[int, np.ndarray] = collections.OrderedDict()
        self._records: collections.OrderedDict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = (
            collections.OrderedDict()
        )
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        return {"draw": self.draw, "batch_size": self.batch_size, "_steps": self._steps, "_tokens": self._tokens}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._init_cache()

    def _chunk(self, p: int, dataset: RaggedDataset) -> np.ndarray:
        """``CHUNK_STEPS + 1`` tokens before each step of the sampler steps
        ``[p, p + CHUNK_STEPS]``, counted from step ``p``."""
        got = self._sums.get(p)
        if got is not None:
            self._sums.move_to_end(p)
            return got
        c = CHUNK_STEPS
        flat, lens, counts = self.steps(p, c, dataset)
        cum = np.zeros(c + 1, dtype=np.int64)
        ends = np.cumsum(counts)
        total = np.cumsum(lens)
        cum[1:] = total[ends - 1]
        self._sums[p] = cum
        while len(self._sums) > CACHED_CHUNKS:
            self._sums.popitem(last=False)
        if flat.size <= KEPT_RECORDS:  # the records themselves, for the steps that pack them
            bounds = np.zeros(c + 1, dtype=np.int64)
            bounds[1:] = ends
            self._records[p] = (flat, lens, bounds)
            while len(self._records) > KEPT_CHUNKS:
                self._records.popitem(last=False)
        return cum

    def steps(self, p: int, c: int, dataset: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The records of the sampler steps ``[p, p + c)`` in order, their
        lengths, and how many records each step drew (drawn and looked up
        in the table; nothing kept)."""
        bs = self.batch_size
        whole = getattr(self.draw, "steps", None)  # a draw of many steps at once (a mixture's)
        if whole is not None:
            flat = whole(p, c).reshape(-1)
            counts = np.full(c, bs, dtype=np.int64)
        else:
            rows = np.empty((c, bs), dtype=np.int64)
            drawn = [self.draw(p + j, rows[j]) for j in range(c)]
            counts = np.fromiter((d.shape[0] for d in drawn), dtype=np.int64, count=c)
            flat = rows.reshape(-1) if (counts == bs).all() else np.concatenate(drawn)
        TokenIndex.counted += c
        return flat, dataset.lengths(flat), counts

    def records(self, t0: int, t1: int, dataset: RaggedDataset) -> tuple[np.ndarray, np.ndarray]:
        """The records of sampler steps ``[t0, t1]`` in order and their
        lengths: from the chunks whose records are kept (those last summed),
        else drawn and looked up again."""
        c = CHUNK_STEPS
        with self._lock:
            got = [self._records.get(p) for p in range(t0 - t0 % c, t1 - t1 % c + 1, c)]
        if all(g is not None for g in got):
            parts = []
            for k, (flat, lens, bounds) in enumerate(got):  # type: ignore[misc]  # all() above ruled the Nones out
                base = (t0 - t0 % c) + k * c
                a = bounds[max(t0, base) - base]
                b = bounds[min(t1, base + c - 1) - base + 1]
                parts.append((flat[a:b], lens[a:b]))
            if len(parts) == 1:
                return parts[0]
            return np.concatenate([x for x, _ in parts]), np.concatenate([y for _, y in parts])
        buf = np.empty(self.batch_size, dtype=np.int64)
        drawn = [self.draw(t, buf).copy() for t in range(t0, t1 + 1)]
        every = drawn[0] if len(drawn) == 1 else np.concatenate(drawn)
        return every, dataset.lengths(every)

    def _known(self, step: int, tokens: int) -> None:
        """Keep ``tokens before sampler step step`` (under the lock),
        refusing a value that contradicts the known ones (the tokens before
        a step never exceed those before a later step)."""
        i = bisect.bisect_left(self._steps, step)
        if i < len(self._steps) and self._steps[i] == step:
            if self._tokens[i] != tokens:
                raise ValueError(
                    f"{self._tokens[i]} tokens come before sampler step {step}, the cursor says {tokens}"
                )
            return
        if not self._tokens[i - 1] <= tokens <= (self._tokens[i] if i < len(self._tokens) else tokens):
            raise ValueError(
                f"the cursor puts {tokens} tokens before sampler step {step}, but {self._tokens[i - 1]} come "
                f"before step {self._steps[i - 1]}"
                + (f" and {self._tokens[i]} before step {self._steps[i]}" if i < len(self._steps) else "")
            )
        self._steps.insert(i, step)
        self._tokens.insert(i, tokens)

    def seek(self, step: int, tokens: int) -> None:
        """Take ``tokens`` before sampler step ``step`` from a saved cursor.

        Raises:
            ValueError: it contradicts what the index knows.
        """
        with self._lock:
            self._known(step, tokens)

    def locate(self, token: int, dataset: RaggedDataset) -> tuple[int, int, int]:
        """``(t, r, n)``: token ``token`` of the stream is token ``r`` of
        sampler step ``t``'s ``n`` tokens (its records, of ``dataset``, laid
        end to end)."""
        c = CHUNK_STEPS
        with self._lock:
            # the last known step at or before the token's; with steps of no
            # tokens, several share a count, and the last of them is the one
            i = bisect.bisect_right(self._tokens, token) - 1
            p, base = self._steps[i], self._tokens[i]
            while True:
                cum = self._chunk(p, dataset)
                if base + int(cum[-1]) > token:
                    break
                if cum[-1] == 0:
                    raise ValueError(
                        f"sampler steps {p} to {p + c - 1} drew only records of length 0: there are no tokens to pack"
                    )
                p, base = p + c, base + int(cum[-1])
                self._known(p, base)
        rel = token - base
        j = int(np.searchsorted(cum, rel, side="right")) - 1
        return p + j, rel - int(cum[j]), int(cum[j + 1] - cum[j])


def first_fit(lens: np.ndarray, length: int, rows: int, truncate: bool) -> tuple[np.ndarray, np.ndarray, int]:
    """Place records of ``lens`` tokens, in order, each into the first of
    ``rows`` rows of ``length`` with room for it.

    A record longer than ``length`` is cut into pieces of ``length`` (the
    last shorter), each placed in turn, or with ``truncate`` keeps one piece
    of ``length``. A record that fits no row (one piece of it) is left out
    whole, its pieces taken back. Records of length 0 have no piece.

    Returns ``(pieces, used, dropped)``: ``pieces`` is an int64 array of
    ``(record position, token offset in the record, tokens, row, column)``
    per placed piece, in placement order; ``used`` the tokens of each row.
    The loop runs once per piece (numpy compares all rows at once), not per
    token.
    """
    free = np.full(rows, length, dtype=np.int64)
    fits = np.empty(rows, dtype=bool)
    out: list[tuple[int, int, int, int, int]] = []
    dropped = 0
    for k, n in enumerate(lens.tolist()):
        if n <= 0:
            continue
        mine = len(out)
        off = 0
        while off < n:
            piece = min(length, n - off)
            np.greater_equal(free, piece, out=fits)
            j = int(fits.argmax())
            if not fits[j]:
                for _, _, m, row, _ in out[mine:]:  # take the record's pieces back
                    free[row] += m
                del out[mine:]
                dropped += 1
                break
            out.append((k, off, piece, j, length - int(free[j])))
            free[j] -= piece
            off = n if truncate else off + piece
    pieces = np.array(out, dtype=np.int64).reshape(-1, 5)
    return pieces, length - free, dropped


def _merge_starts(row_starts: np.ndarray, inside: np.ndarray, length: int) -> np.ndarray:
    """The sorted segment starts of a step: every row start and every
    record start ``inside`` it (sorted, distinct), each once."""
    inside = inside[inside % length != 0]
    out = np.concatenate([row_starts, inside])
    out.sort(kind="stable")
    return out


def _fit(slot: list[np.ndarray], i: int, n: int, dtype: Any) -> np.ndarray:
    """``slot[i]``, replaced by a larger array when it has fewer than ``n`` items."""
    if slot[i].size < n:
        slot[i] = np.empty(int(n * _GROWTH) + 1, dtype=dtype)
    return slot[i]


class PackStream(RaggedStream):
    """A ragged store as a packed loader stream (see :mod:`loaderx.packing`).

    Args:
        name: the stream's name (for messages).
        dataset: the store, or a mixture's ragged stream
            (:class:`loaderx.loader._mixstreams.MixtureRaggedStream`), whose
            records are those of its sources over the global index space.
        pack: how it is packed.
        offsets_dtype: the dtype of ``cu_seqlens``.
        batch_size: the loader's records per step (the default rows).
    """

    #: whether a concat stream's position goes into a state's cursor
    keeps_cursor = True

    def __init__(
        self, name: str, dataset: Any, pack: Pack, offsets_dtype: np.dtype, batch_size: int
    ) -> None:
        super().__init__(name, dataset, None, offsets_dtype)
        self.pack = pack
        self.rows = pack.rows if pack.rows is not None else batch_size
        self.length = pack.length
        self.tokens = self.rows * self.length
        if self.tokens > np.iinfo(np.int32).max:
            raise ValueError(
                f"pack={{{name!r}: ...}}: {self.rows} rows of {self.length} tokens are more than "
                "int32 segment ids and positions can address"
            )
        mean_rows = max(self.nbytes_per_item / max(self.row_bytes, 1), 1.0)
        #: segments a batch is expected to hold (buffers start at twice this)
        self.expected_segments = int(self.tokens / mean_rows) + self.rows + 1
        per_token = self.row_bytes + 8  # values, segment ids and positions
        self.nbytes_per_item = -(-self.tokens * per_token // batch_size) + 1
        self.index: TokenIndex | None = None
        self._cols = np.arange(self.length, dtype=np.int32)
        #: 0, 1, ... over a step's flattened tokens (positions are these minus their segment's start)
        self._tokens_at = np.arange(self.tokens, dtype=np.int32)
        self._row_starts = np.arange(0, self.tokens, self.length, dtype=np.int64)
        self.draw: Any = None
        self.global_batch = batch_size
        self.rank, self.world = 0, 1
        #: where each source's records start in a mixture's index space (None: one store)
        self.source_starts: np.ndarray | None = getattr(dataset, "starts", None)

    @property
    def mixture_parts(self) -> list[tuple[str, Any]] | None:
        """A mixture's ``(source name, stream)`` pairs (what a worker process
        reopens), None over a single store."""
        return None if self.source_starts is None else self.dataset.mixture_parts

    def with_parts(self, parts: list[tuple[str, Any]]) -> PackStream:
        """A copy over a mixture's reopened per-source streams."""
        new = copy.copy(self)
        new.dataset = self.dataset.with_parts(parts)
        return new

    def bind(self, draw: Any, global_batch: int, shard: tuple[int, int] = (0, 1)) -> None:
        """Give the stream the unsharded draw of the global batches
        (``draw(step, out)``, up to ``global_batch`` indices: the ranks'
        slices in rank order) and this rank's ``(rank, world)``."""
        self.draw = draw
        self.global_batch = global_batch
        self.rank, self.world = shard
        if self.pack.mode == "concat":
            self.index = TokenIndex(draw, global_batch)

    def cursor(self, step: int) -> list[int]:
        """Where the global step ``step`` starts in the stream of tokens, as
        a state records it: ``[t, r, n]``, token ``r`` of sampler step
        ``t``'s ``n`` tokens (concat mode)."""
        index = self._index()
        t, r, n = index.locate(step * self.world * self.tokens, self.dataset)
        return [t, r, n]

    def seek(self, step: int, cursor: Any) -> None:
        """Take the position of global step ``step`` from a saved cursor's
        ``[t, r, n]`` (concat mode), after checking it against the data:
        sampler step ``t`` holds ``n`` tokens here and ``r`` is one of them.

        Raises:
            ValueError: the cursor does not fit the data (the message says how).
        """
        index = self._index()
        t, r, n = cursor
        idx = self.draw(t, np.empty(self.global_batch, dtype=np.int64))
        here = int(self.dataset.lengths(idx).sum())
        first = step * self.world * self.tokens
        where = f"stream {self.name!r}: the cursor's [t, r, n] = {list(cursor)}"
        if here != n:
            raise ValueError(
                f"{where} does not fit the data: sampler step {t} holds {here} tokens here, not {n} (a state "
                "saved over other data?)"
            )
        if not 0 <= r < n:
            raise ValueError(f"{where} does not fit the data: token {r} is not one of sampler step {t}'s {n}")
        if r > first:
            raise ValueError(
                f"{where} puts step {step}'s first token {r} tokens into sampler step {t}, but only "
                f"{first} tokens come before step {step}"
            )
        try:
            index.seek(t, first - r)
        except ValueError as e:
            raise ValueError(f"{where} does not fit what this loader counted: {e}") from None

    def _index(self) -> TokenIndex:
        if self.index is None:
            raise RuntimeError(f"stream {self.name!r}: a concat packing stream was not given its sampler")
        return self.index

    def gather_into(self, idx: np.ndarray, slot: list[np.ndarray], step: int = 0) -> PackedRows:  # type: ignore[override]
        """The packed rows of ``step`` in the arrays of ``slot``: in concat
        mode the step's stretch of tokens (``idx`` is not used), in
        ``first_fit`` mode the records ``idx`` placed into the rows."""
        if self.pack.mode == "concat":
            return self._concat(step, slot)
        if self.world > 1:  # the step's global batch; this rank's slice of it is idx
            idx = self.draw(step, np.empty(self.global_batch, dtype=np.int64))
        return self._first_fit(idx, slot)

    def _records_gather(self, idx: np.ndarray, slot: list[np.ndarray]) -> Any:
        """The packed record batch of ``idx`` (a mixture's stream gathers
        from its sources)."""
        if self.source_starts is not None:
            return self.dataset.gather_into(idx, slot)
        return super().gather_into(idx, slot)

    def _sources(self, slot: list[np.ndarray], rec: np.ndarray) -> np.ndarray:
        """The source of each segment's record (-1 for padding): its
        position in the mixture's sources, 0 for a single store."""
        s = rec.shape[0]
        out = _fit(slot, _FROM, s, np.int32)[:s]
        if self.source_starts is None:
            np.copyto(out, 0)
        else:
            np.copyto(out, np.searchsorted(self.source_starts, rec, side="right") - 1, casting="unsafe")
        np.copyto(out, -1, where=rec < 0)
        return out

    def _gather(self, idx: np.ndarray, slot: list[np.ndarray], lens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """One packed native gather of the records ``idx`` (whose lengths
        were planned as ``lens``): their rows back to back, and the start of
        each."""
        k = idx.shape[0]
        for i in (1, 3):
            _fit(slot, i, k, np.int64)
        _fit(slot, 2, k + 1, self.offsets_dtype)
        got = self._records_gather(idx, slot)
        if not np.array_equal(got.lengths, lens):
            j = int(np.argmax(got.lengths != lens))
            raise RuntimeError(
                f"stream {self.name!r}: record {int(idx[j])} has {int(got.lengths[j])} rows, but its table "
                f"entry said {int(lens[j])} when the batch was planned (was the store changed meanwhile?)"
            )
        return got.values, got.offsets

    def _concat(self, step: int, slot: list[np.ndarray]) -> PackedRows:
        index = self._index()
        total, length = self.tokens, self.length
        first = (step * self.world + self.rank) * total  # this rank's stretch of the global step
        t0, r0, _ = index.locate(first, self.dataset)
        t1, _, _ = index.locate(first + total - 1, self.dataset)
        every, lens = index.records(t0, t1, self.dataset)
        ends = np.cumsum(lens)
        a = int(np.searchsorted(ends, r0, side="right"))  # the record holding the step's first token
        b = int(np.searchsorted(ends, r0 + total - 1, side="right"))  # and its last
        n = b + 1 - a
        idx = _fit(slot, _IDX, n, np.int64)[:n]
        idx[:] = every[a : b + 1]
        values, _ = self._gather(idx, slot, lens[a : b + 1])
        doc_end = ends[a : b + 1] - r0  # in the step's coordinates
        doc_start = doc_end - lens[a : b + 1]
        skip = -int(doc_start[0])
        rows = values[skip : skip + total].reshape((self.rows, length, *self.item_shape))
        # a segment starts at every row start and at every record start inside the step
        inside = doc_start[(doc_start > 0) & (lens[a : b + 1] > 0)]
        starts = _merge_starts(self._row_starts, inside, length)
        which = np.searchsorted(doc_end, starts, side="right")
        s = starts.shape[0]
        rec = _fit(slot, _REC, s, np.int64)[:s]
        np.take(idx, which, out=rec)
        at = _fit(slot, _START, s, np.int64)[:s]
        np.subtract(starts, doc_start[which], out=at)
        seg, pos, nseg, cu = self._marks(slot, starts, s)
        np.copyto(nseg, seg[:, -1])
        cu[s] = total
        return PackedRows(rows, seg, pos, cu, nseg, rec, at, 0, self._sources(slot, rec))

    def _marks(
        self, slot: list[np.ndarray], starts: np.ndarray, s: int, real: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Segment ids (per row) and positions from the sorted segment
        ``starts`` over the flattened rows (``real``: the starts that are not
        padding; all of them when None), and ``cu_seqlens`` with ``starts``
        filled in."""
        total, length = self.tokens, self.length
        lens = np.diff(starts, append=total)
        # each segment's id: the real segments of its row up to it (a padding
        # segment keeps the id before it; the caller zeroes padding)
        first = np.searchsorted(starts, starts - starts % length)  # the first segment of each one's row
        if real is None:
            ids = np.arange(1, starts.shape[0] + 1, dtype=np.int64) - first
        else:
            mark = np.zeros(starts.shape[0], dtype=np.int64)
            mark[np.searchsorted(starts, real)] = 1
            count = np.cumsum(mark)
            ids = count - (count[first] - mark[first])
        seg = slot[_SEG][:total]
        seg[:] = np.repeat(ids.astype(np.int32), lens)
        seg2 = seg.reshape(self.rows, length)
        # positions: each token's offset from its segment's start
        pos = slot[_POS][:total]
        np.subtract(self._tokens_at[:total], np.repeat(starts.astype(np.int32), lens), out=pos)
        cu = _fit(slot, _CU, s + 1, self.offsets_dtype)[: s + 1]
        cu[:s] = starts
        nseg = slot[_NSEG][: self.rows]
        return seg2, pos.reshape(self.rows, length), nseg, cu

    def _first_fit(self, idx: np.ndarray, slot: list[np.ndarray]) -> PackedRows:
        total, length, nrows = self.tokens, self.length, self.rows
        lens = self.dataset.lengths(idx)
        pieces, used, dropped = first_fit(lens, length, nrows * self.world, self.pack.long == "truncate")
        if self.world > 1:  # this rank's rows of the global placement
            lo = self.rank * nrows
            pieces = pieces[(pieces[:, 3] >= lo) & (pieces[:, 3] < lo + nrows)]
            pieces[:, 3] -= lo
            used = used[lo : lo + nrows]
        placed = np.unique(pieces[:, 0])  # record positions with a piece, in order
        dense = slot[_DENSE][: total * self.row_items].reshape((total, *self.item_shape))
        n = placed.shape[0]
        if n:
            ids = _fit(slot, _IDX, n, np.int64)[:n]
            np.take(idx, placed, out=ids)
            values, offsets = self._gather(ids, slot, lens[placed])
            src_start = offsets[np.searchsorted(placed, pieces[:, 0])].astype(np.int64) + pieces[:, 1]
        else:
            values = np.zeros((1, *self.item_shape), dtype=self.dtype)
            src_start = np.zeros(0, dtype=np.int64)
        # the segments in flattened order: placed pieces and each row's padding tail
        dest = pieces[:, 3] * length + pieces[:, 4]
        tails = np.flatnonzero(used < length)
        pad_at = tails * length + used[tails]
        starts = np.concatenate([dest, pad_at])
        order = np.argsort(starts, kind="stable")
        starts = starts[order]
        s = starts.shape[0]
        rec = _fit(slot, _REC, s, np.int64)[:s]
        at = _fit(slot, _START, s, np.int64)[:s]
        rec_all = np.concatenate([idx[pieces[:, 0]], np.full(tails.shape[0], -1, dtype=np.int64)])
        at_all = np.concatenate([pieces[:, 1], np.zeros(tails.shape[0], dtype=np.int64)])
        np.take(rec_all, order, out=rec)
        np.take(at_all, order, out=at)
        # the source row of every token: runs that count up from each
        # segment's first source row (a padding tail reads row 0, then is zeroed)
        src_all = np.concatenate([src_start, np.zeros(tails.shape[0], dtype=np.int64)])[order]
        seg_len = np.diff(starts, append=total)
        src = slot[_SRC][:total]
        src.fill(1)
        src[starts[1:]] = src_all[1:] - (src_all[:-1] + seg_len[:-1] - 1)
        src[0] = src_all[0]
        np.cumsum(src, out=src)
        np.take(values, src, axis=0, out=dense, mode="clip")
        seg, pos, nseg, cu = self._marks(slot, starts, s, real=np.sort(dest))
        pad = slot[_PAD][:total].reshape(nrows, length)
        np.greater_equal(self._cols[None, :], used[:, None], out=pad)
        np.copyto(seg, 0, where=pad)
        np.copyto(pos, 0, where=pad)
        np.copyto(dense.reshape((nrows, length, *self.item_shape)), 0,
                  where=pad.reshape((nrows, length) + (1,) * len(self.item_shape)))
        np.max(seg, axis=1, out=nseg)
        cu[s] = total
        return PackedRows(
            dense.reshape((nrows, length, *self.item_shape)), seg, pos, cu, nseg, rec, at, dropped,
            self._sources(slot, rec),
        )


class PackPool(RaggedPool):
    """The recycled arrays of a :class:`PackStream`'s batches: a
    :class:`RaggedPool` slot (for the gather) followed by the rows, segment
    ids, positions, ``cu_seqlens``, segment counts, records, starts, and the
    scratch of a first-fit placement."""

    def __init__(self, stream: PackStream, batch_size: int, capacity: int) -> None:
        super().__init__(stream, batch_size, capacity)
        self.stream: PackStream = stream

    def _new(self) -> list[np.ndarray]:
        s = self.stream
        total = s.tokens
        segs = 2 * s.expected_segments
        fit = s.pack.mode == "first_fit"  # only a placement needs the dense rows and its scratch
        # a concat step's records are about its segments, whatever the batch size
        records = 2 * self.batch_size if fit else max(2 * self.batch_size, segs)
        first = super()._new()
        if not fit:
            first[1] = np.empty(records, dtype=np.int64)
        return [
            *first,
            np.empty(records, dtype=np.int64),
            np.empty(total * s.row_items if fit else 0, dtype=s.dtype),
            np.empty(total, dtype=np.int32),
            np.empty(total, dtype=np.int32),
            np.empty(segs + 1, dtype=s.offsets_dtype),
            np.empty(s.rows, dtype=np.int32),
            np.empty(segs, dtype=np.int64),
            np.empty(segs, dtype=np.int64),
            np.empty(total if fit else 0, dtype=np.int64),
            np.empty(total if fit else 0, dtype=bool),
            np.empty(segs, dtype=np.int32),
        ]
