"""The loader's native step pipeline: a whole step made ahead natively.

When every stream is a local store and the loader draws with a built-in
sampler and runs no transform, a :class:`NativePipeline` takes the place of
:class:`loaderx.loader._pipeline.Pipeline`: the native library
(``steppipe/``, exposed as ``lx_pipe_*``) draws each step's indices and
gathers every stream on its own worker goroutines, ahead of the consumer,
into batch buffers allocated here; ``next()`` is one native call that hands
over a step already made (the GIL released while it waits). What Python
does per step is the hand-over: recycle the slots the consumer let go,
build the batch dict of views of the slot's arrays, and for a ragged stream
its offsets (:meth:`loaderx.loader._ragged.RaggedStream.finish`).

The buffers, and how long a batch stays valid
---------------------------------------------
The pipeline has a fixed number of *slots*, each one step's memory (its
indices, and every stream's batch arrays). A slot handed out is the
consumer's: the native workers fill only free slots. Before each step the
loader gives back every slot none of whose arrays is referenced any more
(``sys.getrefcount``, as :class:`loaderx.loader._pipeline.BufferPool`
does): so a batch, or any view of it, that the consumer still holds is never
written, whatever it does with it. A consumer that holds more than
:data:`HELD_SLOTS` batches at once gets the oldest slot's memory
*retired*: the slot is given new arrays and the consumer keeps the old ones
for good (a fresh allocation per step, as ``list(loader)`` needs anyway).
A raw pointer taken through ``.ctypes`` holds no reference: copy the batch
if you keep one.

Packed rows in concat mode
--------------------------
One stream packed in concat mode, over one local store or a record-weighted
mixture of them, runs here too (``steppack/``). Where a step starts depends
on the lengths of every record drawn before it, and a mixture's draw is
Python code, so this side *plans*: it appends the records of the sampler's
steps in order, with their lengths from the table, to the native plan, a
chunk of :data:`loaderx.loader._packing.CHUNK_STEPS` sampler steps at a
time (:meth:`loaderx.loader._packing.TokenIndex.steps`; a mixture draws a
chunk by whole arrays), whenever the steps the plan holds run short of the
prefetch window; the workers make every step the plan holds to its end
(gather its records whole, check their sizes against the plan, write the
segment ids, positions and ``cu_seqlens``) into the slot's
:class:`loaderx.loader._packing.PackPool` arrays. A step whose records
outgrow those arrays is made here instead, by the Python pipeline's own
code, in larger ones.

Where a configuration cannot use it (a transform, a custom sampler, a
mixture without packing, first-fit or token-weighted packing, NumPy arrays
or datasets in object storage as streams, worker processes,
``num_workers=0``), the loader runs the Python pipeline instead;
:func:`native_blocker` says why.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
import weakref
from typing import Any, NoReturn

import numpy as np

from loaderx.errors import ClosedError, CorruptStoreError
from loaderx.loader import _packing
from loaderx.loader._packing import _CU, _FROM, _IDX, _NSEG, _POS, _REC, _SEG, _START, PackStream
from loaderx.loader._ragged import _GROWTH, RaggedStream
from loaderx.loader.packing import PackedRows
from loaderx.loader.sampler import Sampler
from loaderx.store import _native
from loaderx.store.dataset import DenseDataset, RaggedDataset

#: a packed stream's slot arrays the native side writes after its data and
#: sizes, in the order of enum lx_pipe_aux (the meta array last, kept apart)
_PACKED_AUX = (_IDX, _SEG, _POS, _CU, _NSEG, _REC, _START, _FROM)

#: slots the consumer may hold at once before the oldest is retired
HELD_SLOTS = 4

#: microseconds one native wait lasts before Python looks at its signals
#: (a Ctrl-C is raised within this much of arriving)
WAIT_US = 50_000

#: the environment variable that picks the pipeline of the loaders made
#: after it is set: ``native`` (the default, where the configuration allows
#: it) or ``python`` (always the Python pipeline)
ENV_VAR = "LOADERX_PIPELINE"

_LIVE: weakref.WeakSet[NativePipeline] = weakref.WeakSet()


def native_blocker(streams: list[Any], sampler: Any, transform: Any, workers: int) -> str | None:
    """Why these streams and this draw cannot run on the native pipeline,
    or None when they can."""
    forced = os.environ.get(ENV_VAR, "native").strip().lower() or "native"
    if forced not in ("native", "python"):
        raise ValueError(f"{ENV_VAR}={forced!r}: want 'native' or 'python'")
    if forced == "python":
        return f"{ENV_VAR}=python"
    if transform is not None:
        return "a transform runs on the Python pipeline's worker threads"
    if workers < 1:
        return "num_workers=0 makes every step in the caller"
    packed = [(name, ds) for name, ds, _ in streams if isinstance(ds, PackStream)]
    if packed:
        return packed_blocker(packed, len(streams), sampler)
    if native_draw(sampler) is None:
        return f"the draw ({type(sampler).__name__}) is Python code"
    for name, ds, _ in streams:
        store = ds.dataset if isinstance(ds, RaggedStream) else ds
        if hasattr(ds, "array"):
            return f"stream {name!r} is a NumPy array (np.take runs in Python threads)"
        if not isinstance(store, (DenseDataset, RaggedDataset)):
            return f"stream {name!r} is a {type(store).__name__}"
        if getattr(store, "_guard", None) is not None:
            return f"stream {name!r} is in object storage (its page cache is Python code)"
    return None


def packed_blocker(packed: list[tuple[str, PackStream]], nstreams: int, sampler: Any) -> str | None:
    """Why packed streams cannot run on the native pipeline, or None: it
    makes one stream packed in concat mode, by records, over one local
    read-only ragged store or a mixture of such (whose draw the loader
    plans ahead, a chunk of steps at a time, in Python)."""
    name, ds = packed[0]
    if nstreams > 1:
        return f"{nstreams} streams are packed (the native pipeline packs one)"
    if ds.pack.mode != "concat":
        return f"stream {name!r} is packed in mode {ds.pack.mode!r} (the native pipeline packs in 'concat')"
    if type(ds) is not PackStream:
        return f"stream {name!r} is packed by token weights (its rows are cut per source)"
    if not isinstance(sampler, Sampler) and getattr(sampler, "steps", None) is None:
        # a built-in sampler, or a draw of whole chunks of steps (a mixture's); not a user's code
        return f"the draw ({type(sampler).__name__}) is Python code"
    if ds.row_bytes == 0 or ds.length > PACKED_MAX_LENGTH:
        return f"stream {name!r}: rows of {ds.length} tokens of {ds.row_bytes} bytes"
    if packed_handle(ds) is None:
        store = ds.dataset
        if isinstance(store, RaggedDataset) and getattr(store, "_guard", None) is not None:
            return f"stream {name!r} is in object storage (its page cache is Python code)"
        return f"stream {name!r} is not read from local read-only stores"
    return None


#: the longest packed row the native pipeline makes (steppack's limit)
PACKED_MAX_LENGTH = 1 << 20


def packed_handle(ds: PackStream) -> tuple[int, bool] | None:
    """The native read handle of a packed stream's records and whether its
    stores are a mixture's sources, or None where there is none: a store
    in object storage, or a mixture source that is not one local read-only
    store."""
    store = ds.dataset
    if isinstance(store, RaggedDataset):
        if getattr(store, "_guard", None) is not None:
            return None
        return store._h, False
    joined = getattr(store, "_joined", None)
    h = None if joined is None else joined()
    return None if h is None else (h, True)


def native_draw(sampler: Any) -> tuple[Any, ...] | None:
    """The draw of ``sampler`` as the native pipeline takes it, or None:
    a :class:`loaderx.loader.sampler.Sampler`, or a draw that describes
    itself (``native_draw()``, as the loader's epoch pass does)."""
    if isinstance(sampler, Sampler):
        return ("sampler", sampler.mode, sampler.n, sampler.batch_size, sampler.seed, *sampler.shard)
    describe = getattr(sampler, "native_draw", None)
    return None if describe is None else describe()


class NativePipeline:
    """One run of a loader from ``start_step`` on the native pipeline; the
    counterpart of :class:`loaderx.loader._pipeline.Pipeline` (``next``,
    ``next_out``, ``stop``).

    Args:
        streams: ``(name, dataset or RaggedStream, pool)`` per stream.
        sampler: a :class:`loaderx.loader.sampler.Sampler` or an epoch draw.
        num_workers: the native workers.
        prefetch: steps made ahead of the consumer.
        start_step: the first step handed out.
        end: the first step not made, or None.
    """

    def __init__(
        self,
        streams: list[Any],
        sampler: Any,
        num_workers: int,
        prefetch: int,
        start_step: int,
        end: int | None,
    ) -> None:
        self.streams = streams
        self.sampler = sampler
        self.num_workers = num_workers
        self.next_out = start_step
        self.end = end
        self.batch = sampler.batch_size
        self._pipe: Any = None
        self._names = [name for name, _, _ in streams]
        self._kinds = [
            "packed" if isinstance(ds, PackStream) else "ragged" if isinstance(ds, RaggedStream) else "dense"
            for _, ds, _ in streams
        ]
        self._ragged = any(k != "dense" for k in self._kinds)
        #: one dense stream: :meth:`_next_one`
        self._one = self._kinds == ["dense"]
        nslots = prefetch + num_workers + HELD_SLOTS
        self.slots = [self._new_slot() for _ in range(nslots)]
        #: a packed stream's meta array per slot (what its step holds)
        self._metas = [np.zeros(_native.PIPE_META_LEN, dtype=np.int64) for _ in range(nslots)]
        #: the packed stream, and the claim limit its plan gave last
        self._packed: PackStream | None = None
        self._limit = start_step
        self._lead = 2 * prefetch + num_workers + 2
        native_streams: list[tuple[Any, ...]] = []
        for (_, ds, _), kind in zip(streams, self._kinds):
            if kind == "packed":
                native_streams.append(self._packed_stream(ds, start_step))
            else:
                store = ds.dataset if kind == "ragged" else ds
                native_streams.append((store._h, kind, 0 if kind == "ragged" else store._stride))
        draw = ("none", self.batch) if self._packed is not None else native_draw(sampler)
        assert draw is not None
        self._pipe = _native.StepPipe(draw, native_streams, [self._native_view(s, k) for k, s in enumerate(self.slots)],
                                      num_workers, prefetch, start_step, end)
        #: per slot: its batch dict, copied for each step that fills the
        #: slot whole (dense streams only); and for a loader of one dense
        #: stream, the one array a consumer can hold (the indices are not
        #: handed out) and its reference count when nobody else holds it
        self._dicts: list[dict[str, Any] | None] = [None] * nslots
        self._watch: list[np.ndarray | None] = [None] * nslots
        self._baseline: list[list[int]] = [[] for _ in range(nslots)]
        self._watch_base = [0] * nslots
        for k, s in enumerate(self.slots):
            self._set_baseline(k, s)
        #: the slots the consumer holds, oldest first
        self.held: list[int] = []
        #: slots whose arrays changed while held (a ragged buffer grown)
        self._changed: set[int] = set()
        self._end_seen = False
        _LIVE.add(self)

    # -- the packed stream's plan --------------------------------------------

    def _packed_stream(self, ds: PackStream, start: int) -> tuple[Any, ...]:
        """The native stream of a packed stream whose first step is
        ``start``: its plan starts at the first token of the sampler step
        that holds this rank's first token of ``start``."""
        got = packed_handle(ds)
        assert got is not None
        h, sources = got
        index = ds._index()
        first = (start * ds.world + ds.rank) * ds.tokens
        t, r, _ = index.locate(first, ds.dataset)
        self._packed = ds
        wide = np.dtype(ds.offsets_dtype) == np.int64
        return (h, "packed", ds.row_bytes, ds.rows, ds.length, ds.rank, ds.world, wide, first - r, sources, t)

    def _plan(self, until: int) -> None:
        """Append sampler steps to the packed stream's plan, a chunk at a
        time, until the workers may claim every step before ``until``."""
        ds = self._packed
        assert ds is not None
        index = ds._index()
        c = _packing.CHUNK_STEPS
        # where the native plan goes on, asked for each time: an interrupt loses nothing that matters
        self._limit, at = self._pipe.plan(0)
        while self._limit < until:
            flat, lens, _ = index.steps(at, c, ds.dataset)
            if not lens.any():
                if self._limit > self.next_out:  # the steps planned go first; the next call goes on
                    return
                raise ValueError(
                    f"stream {ds.name!r}: sampler steps {at} to {at + c - 1} drew only records of length 0: "
                    "there are no tokens to pack"
                )
            self._limit, at = self._pipe.plan(0, at, flat, lens, c)

    # -- slots -------------------------------------------------------------

    def _new_slot(self) -> list[Any]:
        """One step's memory: ``[indices, stream_0, stream_1, ...]``, a dense
        stream's batch array or a ragged stream's RaggedPool slot list."""
        b = self.batch
        slot: list[Any] = [np.empty(b, dtype=np.int64)]
        for (_, ds, pool), kind in zip(self.streams, self._kinds):
            if kind != "dense":
                slot.append(pool._new())
            else:
                slot.append(np.empty((b, *ds.item_shape), dtype=ds.dtype))
        return slot

    def _native_view(self, slot: list[Any], k: int) -> list[np.ndarray | None]:
        """The arrays of slot ``k`` (the arrays ``slot``) the native side writes."""
        out: list[np.ndarray | None] = [slot[0]]
        for part, kind in zip(slot[1:], self._kinds):
            if kind == "packed":
                out += [part[0], part[1], *(part[j] for j in _PACKED_AUX), self._metas[k]]
            elif kind == "ragged":
                out += [part[0], part[1]]
            else:
                out += [part, None]
        return out

    @staticmethod
    def _arrays(slot: list[Any]) -> list[np.ndarray]:
        out = [slot[0]]
        for part in slot[1:]:
            if isinstance(part, list):
                out += part
            else:
                out.append(part)
        return out

    def _set_baseline(self, k: int, slot: list[Any]) -> None:
        """Slot ``k`` now holds the arrays of ``slot``: its batch dict, and
        the reference counts that say nobody else holds them."""
        if not self._ragged:
            self._dicts[k] = dict(zip(self._names, slot[1:]))
            if self._one:
                self._watch[k] = slot[1]
        self._baseline[k] = self._refs(slot)
        w = self._watch[k]
        if w is not None:  # counted as _next_one counts it: with a local name for it
            self._watch_base[k] = sys.getrefcount(w)

    def _refs(self, slot: list[Any]) -> list[int]:
        if not self._ragged:  # every entry an array: the slot list is the one holder counted
            return list(map(sys.getrefcount, slot))
        return [sys.getrefcount(a) for a in self._arrays(slot)]

    def _idle(self, k: int) -> bool:
        return self._refs(self.slots[k]) == self._baseline[k]

    def _releasable(self) -> list[int]:
        """The held slots the consumer let go of (they stay on ``held``
        until the native side has them back: see :meth:`_sent`); slots
        whose arrays changed go back at once with them, and the oldest held
        ones beyond :data:`HELD_SLOTS` are retired."""
        held = self.held
        if self._ragged:
            free = [k for k in held if self._idle(k)]
        else:  # the common case, spelled out: a slot list of arrays each
            refs, slots, base = sys.getrefcount, self.slots, self._baseline
            free = [k for k in held if list(map(refs, slots[k])) == base[k]]
        changed = self._changed
        if changed:
            for k in [k for k in free if k in changed]:
                free.remove(k)
                self._replace(k, self.slots[k])
        busy = len(self.held) - len(free)
        while busy >= HELD_SLOTS:
            k = next(k for k in self.held if k not in free)
            self._replace(k, None)
            busy -= 1
        return free

    def _sent(self, slots: Any) -> None:
        """Take the slots the native side has back off ``held``."""
        if slots:
            self.held = [k for k in self.held if k not in slots]

    def _replace(self, k: int, slot: list[Any] | None) -> None:
        """Give slot ``k`` back with the arrays of ``slot`` (new ones when
        None: the consumer keeps the old)."""
        if slot is None:
            slot = self._new_slot()
        try:
            self._pipe.replace(k, self._native_view(slot, k))
        except ValueError:
            if isinstance(self._pipe, _native.StepPipe) and k in self.held:
                # given back already by a call a Ctrl-C cut short: the slot is not ours to change
                self.held = [j for j in self.held if j != k]
                return
            raise
        self.held = [j for j in self.held if j != k]
        self.slots[k] = slot
        self._changed.discard(k)
        self._set_baseline(k, slot)

    # -- consumption -------------------------------------------------------

    def start(self) -> None:
        """The native workers started with the pipeline."""

    def next(self) -> Any:
        """The batch of the next step, in step order (see
        :meth:`loaderx.loader._pipeline.Pipeline.next`): a ForkError in a
        child of ``os.fork()``, whose copy of the buffers belongs to the
        parent's pipeline."""
        _native.check_fork()
        pipe = self._pipe
        if pipe is None:
            raise ClosedError("the DataLoader is closed")
        if self._one and self._unclaimed is None:
            return self._next_one(pipe)
        return self._next_any(pipe)

    def _next_any(self, pipe: Any) -> Any:
        """:meth:`next`, any streams."""
        got = self._unclaimed
        if got is None:
            got = self._take(pipe)
        self._unclaimed = None
        step, k, rows = got
        try:
            self.next_out = step + 1
            if k not in self.held:
                self.held.append(k)
            slot = self.slots[k]
            if self._ragged:
                return self._batch_ragged(step, k, slot, rows)
            if rows == self.batch:
                d = self._dicts[k]
                assert d is not None
                return d.copy()
            return {name: a[:rows] for name, a in zip(self._names, slot[1:])}
        except KeyboardInterrupt:  # the step stays the next one handed out
            self._unclaimed = got
            self.next_out = step
            raise

    _unclaimed: tuple[int, int, int] | None = None

    def _next_one(self, pipe: Any) -> Any:
        """:meth:`next` of a loader of one dense stream, the common case,
        spelled out: at batch size 1 the general path's bookkeeping was
        most of a step (8 of 12 µs of the consumer's CPU on a 2 GHz core,
        where a list comprehension costs 0.3-0.5 µs and ``dict(zip())``
        1 µs); here the step costs 7.1-7.4 µs. A step other than a batch in
        a whole slot, a slot to retire, an interrupted call: the general
        path."""
        held = self.held
        release: list[int] = []
        if held:
            if pipe.stashed:
                return self._next_any(pipe)
            watch, base, refs = self._watch, self._watch_base, sys.getrefcount
            for j in held:
                w = watch[j]
                if w is not None and refs(w) == base[j]:
                    release.append(j)
            if len(held) - len(release) >= HELD_SLOTS:
                return self._next_any(pipe)
        try:
            got, step, k, rows = pipe.next(WAIT_US, release)
        except Exception as e:
            self._sent(pipe.sent)
            self._raise_step(pipe, e)
        try:
            for j in release:
                held.remove(j)
            if got != "batch" or rows != self.batch:
                if got == "batch":  # a last step short of a batch
                    self._unclaimed = (step, k, rows)
                return self._next_any(pipe)
            held.append(k)
            self.next_out = step + 1
            d = self._dicts[k]
            assert d is not None
            return d.copy()
        except KeyboardInterrupt:  # bookkeeping done as it would have been, the step kept for the next call
            self.held = [j for j in held if j not in release]
            if got == "batch":
                self._unclaimed = (step, k, rows)
                self.next_out = step
            raise

    def _take(self, pipe: Any) -> tuple[int, int, int]:
        """``(step, slot, rows)`` of the next step from the native side."""
        release = self._releasable() if self.held and not pipe.stashed else ()
        if self._packed is not None and self._limit < self.next_out + self._lead:
            self._plan(self.next_out + self._lead)
        while True:
            try:
                got, step, k, rows = pipe.next(WAIT_US, release)
            except Exception as e:
                self._sent(pipe.sent)
                self._raise_step(pipe, e)
            self._sent(pipe.sent)
            release = ()
            if got == "batch":
                return step, k, rows
            if got == "end":
                raise StopIteration
            if got == "unplanned":  # the plan ends before the step: plan on
                self._plan(self.next_out + self._lead)
                continue
            if got == "starved":  # the consumer holds every slot: retire the oldest
                if not self.held:
                    raise RuntimeError(
                        f"the native pipeline has no free slot at step {self.next_out} and this loader "
                        "holds none of them: its slot bookkeeping is lost; close the loader and make another"
                    )
                self._replace(self.held[0], None)

    def _batch_ragged(self, step: int, k: int, slot: list[Any], rows: int) -> dict[str, Any]:
        idx = slot[0][:rows]
        batch = {}
        for i, (name, ds, _) in enumerate(self.streams):
            part = slot[1 + i]
            if self._kinds[i] == "packed":
                batch[name] = self._batch_packed(step, k, slot, i, ds)
                continue
            if self._kinds[i] == "dense":
                batch[name] = part if rows == self.batch else part[:rows]
                continue
            try:
                needed = self._pipe.needed(i)
                if needed > part[0].size:  # the bytes did not fit: grow, gather here
                    part[0] = np.empty(int(needed * _GROWTH), dtype=np.uint8)
                    self._changed.add(k)
                    batch[name] = ds.gather_into(idx, part, step)
                    # the slot's arrays stay referenced as the baseline counts them
                    self._pipe.hold(k, self._native_view(slot, k))
                else:
                    batch[name] = ds.finish(idx, part, ds.dataset._rows(part[1][:rows], idx), needed)
            except CorruptStoreError as e:
                raise CorruptStoreError(f"step {step}, stream {name!r}: {e}") from e
        return batch

    def _batch_packed(self, step: int, k: int, slot: list[Any], i: int, ds: PackStream) -> PackedRows:
        """The packed rows of ``step`` in slot ``k`` (of its packed stream
        ``i``), made here instead where they did not fit."""
        part = slot[1 + i]
        n, skip, segs = self._metas[k].tolist()
        room = min(part[_REC].size, part[_START].size, part[_FROM].size, part[_CU].size - 1)
        if n > min(part[1].size, part[_IDX].size) or self._pipe.needed(i) > part[0].size or segs > room:
            self._changed.add(k)
            try:
                return ds.gather_into(part[_IDX], part, step)
            finally:  # the slot's arrays stay referenced as the baseline counts them
                self._pipe.hold(k, self._native_view(slot, k))
        rows, length, total, rb = ds.rows, ds.length, ds.tokens, ds.row_bytes
        values = part[0][skip * rb : (skip + total) * rb].view(ds.dtype).reshape((rows, length, *ds.item_shape))
        return PackedRows(
            values, part[_SEG][:total].reshape(rows, length), part[_POS][:total].reshape(rows, length),
            part[_CU][: segs + 1], part[_NSEG][:rows], part[_REC][:segs], part[_START][:segs], 0, part[_FROM][:segs],
        )

    def _raise_step(self, pipe: Any, error: BaseException) -> NoReturn:
        """Raise what the native call of ``pipe`` raised: the loader closed,
        or a step's failure (a store closed under it: a ClosedError naming
        it)."""
        if isinstance(error, ClosedError) and pipe.failed() is None:
            raise ClosedError("the DataLoader is closed") from None
        self._failed(error)

    def _failed(self, error: BaseException) -> NoReturn:
        """Raise the failure of a step, naming its step and stream."""
        where = self._pipe.failed()
        if where is None:
            raise error
        step, i = where
        self.next_out = step + 1  # the step counts as consumed
        if i < 0:
            raise error
        name, ds, _ = self.streams[i]
        if isinstance(error, (CorruptStoreError, ClosedError)):
            raise type(error)(f"step {step}, stream {name!r}: {error}") from error
        if isinstance(error, ValueError) and not isinstance(error, ClosedError) and isinstance(ds, DenseDataset):
            # a record of another size than the schema's: damage, named as the Python path names it
            idx = self.sampler(step, np.empty(self.batch, dtype=np.int64))
            try:
                ds._size_damage(ds._h, idx, error)
            except CorruptStoreError as e:
                raise CorruptStoreError(f"step {step}, stream {name!r}: {e}") from error
        raise error

    def stop_claiming(self) -> int:
        """Let the workers claim nothing new: not supported here (the
        native pipeline runs no transform, so never hands over to worker
        processes)."""
        raise RuntimeError("the native pipeline does not hand over to worker processes")

    def stop(self, join_timeout: float = 0.0) -> None:
        """Stop the native workers and wait for them (each finishes the
        gather it is in); the buffers are then the loader's alone."""
        pipe, self._pipe = self._pipe, None
        if pipe is not None:
            pipe.close()
        _LIVE.discard(self)

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.stop()


@atexit.register
def _stop_all() -> None:
    for pipe in list(_LIVE):
        pipe.stop()
