"""The step-based data loader: endless, or one finite pass.

A :class:`DataLoader` yields one batch per step, forever (or for ``steps``
steps, or for one ``epoch=True`` pass over the records): a dict
``{name: array}`` where each array is the ``(batch_size, *item_shape)`` batch
of one dense stream (a store or a NumPy array), or the packed (or padded)
batch of a ragged store, all streams gathered at the same indices. The
indices of step ``s`` come from the sampler as a pure function of
``(seed, s)``, so the loader's position is the step number:
:meth:`DataLoader.state_dict` saves it and :meth:`DataLoader.load_state_dict`
seeks back to it. Where a step also depends on the ones before it (a stream
packed in concat mode starts where the last step's tokens ended; an exact
mixture's counts follow a schedule), the state adds a cursor at the step
(:mod:`loaderx.loader._cursor`), so seeking costs the same at any step.

Work runs on threads: each worker claims the next step, draws its indices,
gathers every stream (the copy runs natively with the GIL released) and runs
the ``transform`` callback; batches are handed out strictly in step order, so
the output is the same whatever ``num_workers`` is. The threads, the step
window and the recycled batch buffers live in :mod:`loaderx.loader._pipeline`. With
``workers="process"`` the same steps are made in spawned worker processes
that hand finished batches back through shared memory
(:mod:`loaderx.loader._procpool`), for transforms whose Python code the GIL would
serialise. The default, ``workers="auto"``, starts on threads, measures the
first steps (:mod:`loaderx.loader._autoworkers`) and moves to worker processes at a
step boundary when the transform holds the GIL and the move is safe; the
batches are the same either way.

The module stays past 700 lines because :class:`DataLoader` is one state
machine over one set of fields (the running pipeline, the position, the
process pool, a hand-over under way): iteration, ``load_state_dict``,
``close`` and the moves of ``workers="auto"`` all change them, so the
fields and their methods belong together. Its arguments and their checks
are :class:`~loaderx.loader.options.LoaderOptions` in
:mod:`loaderx.loader.options`; what is measured and judged lives in
:mod:`loaderx.loader._autoworkers`, the threads and the processes in their
own modules.
"""

from __future__ import annotations

import logging
import time
import warnings
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from loaderx._args import check_step
from loaderx.errors import ClosedError, WorkerError, WorkersWarning
from loaderx.loader._autoworkers import (
    ENV_VAR,
    TRIAL_STEPS,
    WARMUP_STEPS,
    StepTimer,
    Verdict,
    decide,
    env_workers,
    keep_processes,
    pace,
)
from loaderx.loader._cursor import Parts, make_cursor, parts_of, seek_cursor
from loaderx.loader._fingerprint import fingerprints
from loaderx.loader._lookahead import Lookahead, guards_of
from loaderx.loader._native_pipe import NativePipeline, native_blocker
from loaderx.loader._packing import PackPool, PackStream, check_layout, check_packs
from loaderx.loader._pipeline import ArrayStream as _ArrayStream
from loaderx.loader._pipeline import Batch, BufferPool, Pipeline, Stream
from loaderx.loader._procpool import (
    ProcessPipeline,
    ProcessPool,
    batch_blocker,
    process_blocker,
)
from loaderx.loader._ragged import (
    PackedBatch,
    PaddedBatch,
    RaggedPool,
    RaggedStream,
    check_offsets_dtype,
    check_pad,
)
from loaderx.loader._state import CURSOR, check_state, epoch_steps, make_state, sampler_identity
from loaderx.loader._tokenmix import pack_stream
from loaderx.loader.mixture import Mixture
from loaderx.loader.options import TORCH_ARGS, LoaderOptions, check_mixture_args, check_sampler
from loaderx.loader.sampler import IndexSampler, Sampler
from loaderx.store.dataset import DenseDataset, RaggedDataset

if TYPE_CHECKING:
    from numpy.typing import NDArray

__all__ = ["DataLoader", "LoaderOptions", "PackedBatch", "PaddedBatch"]

log = logging.getLogger("loaderx")


class _EpochDraw:
    """One pass over ``n`` records, each exactly once: in order, or in the
    order of ``order`` (a permutation). Step ``s`` covers the positions
    ``[s * G, min((s + 1) * G, n))`` of the pass (``G = batch_size * world``)
    and rank ``r`` takes its share ``[lo + r * m // world, lo + (r + 1) * m
    // world)`` of the ``m`` positions, which is ``batch_size`` of them in
    every step but a short last one."""

    def __init__(
        self, n: int, batch_size: int, shard: tuple[int, int], order: np.ndarray | None, drop_last: bool
    ) -> None:
        self.n = n
        self.batch_size = batch_size
        self.rank, self.world = shard
        self.order = order
        g = batch_size * self.world
        self.global_batch = g
        self.steps = epoch_steps(n, g, drop_last)

    def native_draw(self) -> tuple[Any, ...]:
        """This pass as the native step pipeline draws it (see
        :func:`loaderx.loader._native_pipe.native_draw`)."""
        order = None if self.order is None else np.ascontiguousarray(self.order, dtype=np.int64)
        self.order = order  # the array the native side reads stays this one
        return ("epoch", self.n, self.batch_size, self.rank, self.world, order)

    def __call__(self, step: int, out: np.ndarray) -> np.ndarray:
        if not 0 <= step < self.steps:
            raise ValueError(f"step {step} is past the end of the pass ({self.steps} steps)")
        start = step * self.global_batch
        m = min(self.global_batch, self.n - start)
        lo = start + self.rank * m // self.world
        hi = start + (self.rank + 1) * m // self.world
        rows = out[: hi - lo]
        if self.order is None:
            rows[:] = np.arange(lo, hi, dtype=np.int64)
        else:
            rows[:] = self.order[lo:hi]
        return rows


class _CustomDraw:
    """Adapts an object with ``indices(step)`` to the pipeline, checking
    what it returns."""

    def __init__(self, sampler: Any, n: int, batch_size: int) -> None:
        self.sampler = sampler
        self.n = n
        self.batch_size = batch_size
        self.indices = sampler.indices

    def __call__(self, step: int, out: np.ndarray) -> np.ndarray:
        got = np.asarray(self.indices(step))
        what = f"{type(self.sampler).__name__}.indices({step})"
        if got.dtype.kind not in "iu":
            raise TypeError(f"{what} returned an array of dtype {got.dtype}; it must return integers")
        if got.ndim != 1 or not 0 < got.shape[0] <= self.batch_size:
            raise ValueError(
                f"{what} returned shape {got.shape}; the loader's batch_size needs ({self.batch_size},) "
                "(or a short batch of fewer, at least 1)"
            )
        if got.size:
            bad = (got < 0) | (got >= self.n)
            if bad.any():
                raise IndexError(
                    f"{what} returned index {got[np.argmax(bad)]}, out of range for streams of "
                    f"length {self.n}"
                )
        rows = out if got.shape[0] == self.batch_size else out[: got.shape[0]]
        rows[:] = got
        return rows


#: seconds a ``workers="auto"`` loader lets its worker processes take to set
#: up before it gives up on them and stays on threads
READY_TIMEOUT = 60.0

#: Batches of at least this many bytes (all streams) are gathered one at a
#: time: the native gather already fans such a batch out over every core.
SHARED_GATHER_BYTES = 8 << 20

class DataLoader:
    """An iterator of batches, one per step: endless by default, or a finite
    pass with ``steps=`` or ``epoch=True``.

    Args:
        streams: ``{name: DenseDataset, RaggedDataset or NumPy array}``;
            every stream must have the same length, and all are gathered at
            the same indices, so record ``i`` lines up across streams. An
            array (a ``np.memmap`` too) is gathered with ``np.take``; a store
            is faster to gather from and can be compressed. A ragged store
            yields a :class:`PackedBatch` ``(values, offsets, lengths)`` per
            batch, read with one native call: ``values`` holds the records
            back to back (``(total_rows, *item_shape)``, the store's dtype),
            record ``k`` is ``values[offsets[k]:offsets[k + 1]]`` and
            ``offsets`` (``batch + 1`` entries, ``cu_seqlens``) starts at 0;
            or, with ``pad=``, a :class:`PaddedBatch` ``(values, lengths)``.
            Or a :class:`loaderx.mixture.Mixture` of named sources, drawn
            by weight (its batches add a ``source`` stream).
        batch_size: records per batch (per rank when sharded); by default
            256, or a custom sampler's ``batch_size``.
        transform: called on each batch dict on the worker thread; its result
            is what the loader yields. The collate step: cast, reshape, pack.
        num_workers: worker threads, at most one per available CPU (see
            :attr:`LoaderOptions.worker_threads`; the native step pipeline,
            whose consumer makes steps too, starts one fewer:
            :attr:`LoaderOptions.native_workers`). 0 runs sampling, gathering
            and the transform synchronously in the caller. Batches of at
            least :data:`SHARED_GATHER_BYTES` are gathered by one extra
            thread (the native gather spreads each of them over every core
            already) and the workers only run the transform.
        sampler: ``"cyclic"`` (default; without replacement, reshuffled each
            cycle), ``"iid"`` (with replacement), ``"sequential"``, or any
            object with ``indices(step) -> int64 array`` of ``batch_size``
            indices (fewer for a short batch), a pure function of ``step`` (for example
            :class:`loaderx.sampler.WeightedSampler`). Its ``batch_size``
            and ``n`` attributes, when it has them, must match the loader's
            batch size and stream length; it shards itself (``shard=`` is
            for the built-in modes).
        seed: keys the random samplers.
        shard: ``(rank, world)``: this process's part of a data-parallel run.
        start_step: the first step to yield.
        prefetch: steps that may be in flight ahead of the consumer; by
            default twice the worker threads (at least 2), or on the native
            step pipeline up to 32 small batches (1 MiB of them), capped so
            that no more than 64 MiB of
            batches are in flight (at least 1).
        steps: stop after step ``steps - 1`` (``len(loader) == steps``).
        epoch: one pass over the records, each exactly once per pass (over
            all ranks): in order with ``sampler="sequential"``, in one
            permutation keyed by ``seed`` with ``sampler="cyclic"``. The last
            batch is short unless the records divide into global batches
            (with ``shard``, the ranks split it as evenly as they can).
        drop_last: with ``epoch=True``, drop the short last batch instead.
        pad: ``{name: length}`` for ragged streams to yield zero-padded as a
            dense ``(batch, L, *item_shape)`` array plus lengths instead of
            packed: ``"max"`` (``L`` is the batch's longest record), an int
            (a fixed ``L``; a longer record fails its step) or
            ``("multiple", m)`` (the longest rounded up to a multiple of
            ``m``, so a few shapes recur).
        pack: ``{name: L}`` or ``{name: loaderx.Pack(L, mode=...)}`` for
            ragged streams to yield as fixed ``(rows, L)`` rows of packed
            records, a :class:`loaderx.packing.PackedRows` with segment ids,
            positions and ``cu_seqlens`` (see :mod:`loaderx.packing`; not
            with ``pad=`` for the same stream). ``"concat"`` (the default
            mode) makes every stream of the loader a packed one and runs
            without ``epoch=True``; ``"first_fit"`` packs each step's records
            and gathers the other streams at the step's indices as usual.
            Packing is global over the ranks (the step's global batch into
            ``rows x world`` rows, of which this rank gets its ``rows``), so
            an elastic resume is exact; a custom sampler packs its own
            indices and resumes only in the world that saved the state. A
            :class:`~loaderx.mixture.Mixture`'s ragged streams pack too
            (``PackedRows.sources`` names each segment's source; concat
            drops the per-row ``source`` stream).
        offsets_dtype: ``np.int64`` (default) or ``np.int32``, the dtype of a
            packed batch's offsets.
        workers: ``"auto"`` (default) starts on threads and moves to worker
            processes when that is faster and safe (below). ``"thread"`` runs
            the workers as threads of this process, always. ``"process"``
            runs them as processes (``num_workers`` of them, at most one per
            CPU), for a Python ``transform`` the GIL would serialise: each
            worker opens the stores read-only by path,
            makes whole steps (sample, gather, transform) and copies the
            batch into shared memory, and the loader yields NumPy views of
            it in step order, the same batches as with threads. The
            ``transform`` and a custom ``sampler`` must pickle (a TypeError
            names the one that does not); an in-memory NumPy stream is
            copied once into shared memory, a memmap is reopened from its
            file. A transform may return a NumPy array or dicts, lists and
            tuples of arrays (and scalars). A failure in a worker, or a
            worker that dies, raises :class:`loaderx.errors.WorkerError`
            naming the step; :meth:`close` ends the processes and frees
            their shared memory.
        start_method: with ``workers="process"`` or ``"auto"``: ``"spawn"``
            (the default) or ``"forkserver"``. ``"fork"`` is refused: the Go
            runtime of the native library does not survive a fork.

    With ``workers="auto"`` and a ``transform``, the loader times the steps
    after the first :data:`loaderx.loader._autoworkers.WARMUP_STEPS`, for
    :data:`~loaderx.loader._autoworkers.WINDOW_STEPS` steps: each gather, each
    transform, and how long the transform's thread was blocked (waiting for
    the GIL). It moves to ``num_workers`` worker processes when the
    transform is at least :data:`~loaderx.loader._autoworkers.TRANSFORM_SHARE` of a
    step, was blocked at least :data:`~loaderx.loader._autoworkers.BLOCKED_SHARE`
    of its time, two or more workers run, and a finite run has steps enough
    left to win back :data:`~loaderx.loader._autoworkers.SPAWN_SECONDS` of process
    start. It moves only when the transform, the sampler and every stream
    pickle, every stream is a store or a ``np.memmap`` (an in-memory array
    would be copied whole), and the transform's result is one a process can
    hand back; otherwise it stays on threads and warns once
    (:class:`loaderx.errors.WorkersWarning`) with the figures and what
    ``workers="process"`` would need. The processes start while the threads
    go on making steps; the threads finish the steps they claimed and the
    processes take over at the next one, so no step is lost, repeated or
    made differently (the transform must be a function of its batch, as for
    ``workers="process"``). Then it checks the move: unless the consumer
    receives its next :data:`~loaderx.loader._autoworkers.TRIAL_STEPS` steps
    :data:`~loaderx.loader._autoworkers.KEEP_GAIN` times as fast as it did on
    threads, the loader goes back to threads for good, again at a step
    boundary. Each move is logged once (INFO, logger ``loaderx``);
    :meth:`stats` says which workers run and why. The
    environment variable ``LOADERX_WORKERS`` (``thread``, ``process`` or
    ``auto``) forces the mode of every ``workers="auto"`` loader; an explicit
    ``workers=`` argument always wins.

    Batches are yielded in step order and depend only on the settings and the
    step, so a run restored with :meth:`load_state_dict` continues exactly as
    an uninterrupted one would. A finite loader raises StopIteration at its
    end and has a ``len()``; it is exhausted once (``load_state_dict`` with
    ``"step": 0`` runs the same pass again; another seed needs another
    loader).

    Batch arrays are recycled: once you drop every reference to a batch (the
    dict, its arrays and any views of them), its memory may be refilled for a
    later step. Anything you still hold is never overwritten.

    An exception raised while producing a step (in the transform, say) is
    raised from ``next()`` at that step with its original traceback; that
    step then counts as consumed, so iteration can go on.

    Call :meth:`close` (or use ``with``) to stop the workers; a loader that is
    garbage-collected stops them too (worker processes included, and their
    shared memory is unlinked).

    Arguments of ``torch.utils.data.DataLoader`` that have no counterpart here
    (``shuffle``, ``collate_fn``, ``pin_memory``, ...) raise a TypeError that
    names what to use instead.

    Example::

        loader = DataLoader({"data": DenseDataset("train_data"),
                             "label": DenseDataset("train_label")},
                            batch_size=256, seed=0)
        for step, batch in zip(range(1000), loader):
            train_step(batch["data"], batch["label"])
        checkpoint = loader.state_dict()   # {"step": 1000, ...}

        tokens = DataLoader({"tokens": RaggedDataset("train_tokens"),
                             "label": DenseDataset("train_label")},
                            batch_size=64, offsets_dtype=np.int32)
        values, cu_seqlens, lengths = next(tokens)["tokens"]
        padded = DataLoader({"tokens": RaggedDataset("train_tokens")},
                            batch_size=64, pad={"tokens": ("multiple", 64)})
        dense, lengths = next(padded)["tokens"]   # (64, L, ...), L % 64 == 0

        evaluation = DataLoader(streams, batch_size=512, sampler="sequential",
                                epoch=True)
        for batch in evaluation:           # len(evaluation) batches
            ...
    """

    def __init__(
        self,
        streams: Mapping[str, DenseDataset | RaggedDataset | np.ndarray],
        batch_size: int | None = None,
        *,
        transform: Callable[[Batch], Any] | None = None,
        num_workers: int = 4,
        sampler: str | IndexSampler = "cyclic",
        seed: int = 0,
        shard: tuple[int, int] = (0, 1),
        start_step: int = 0,
        prefetch: int | None = None,
        steps: int | None = None,
        epoch: bool = False,
        drop_last: bool = False,
        pad: Mapping[str, Any] | None = None,
        pack: Mapping[str, Any] | None = None,
        offsets_dtype: Any = np.int64,
        workers: str = "auto",
        start_method: str | None = None,
        **unsupported: Any,
    ) -> None:
        self._pipe: Pipeline | NativePipeline | ProcessPipeline | None = None
        self._procs: ProcessPool | None = None
        self._closed = False
        self._timer: StepTimer | None = None
        self._pending: ProcessPool | None = None
        if unsupported:
            key = next(iter(unsupported))
            hint = TORCH_ARGS.get(key)
            if hint is None:
                raise TypeError(f"DataLoader() got an unexpected keyword argument {key!r}")
            raise TypeError(f"DataLoader has no {key}= (a torch DataLoader argument): {hint}")
        check_sampler(sampler)
        custom = not isinstance(sampler, str)
        mixture = streams if isinstance(streams, Mixture) else None
        if mixture is not None:
            check_mixture_args(sampler, epoch)
            streams = mixture.template()
        if batch_size is None:
            batch_size = getattr(sampler, "batch_size", 256) if custom else 256
        self.options = LoaderOptions(
            batch_size=batch_size,
            num_workers=num_workers,
            sampler=sampler,
            seed=seed,
            shard=shard,
            start_step=start_step,
            prefetch=prefetch,
            steps=steps,
            epoch=epoch,
            drop_last=drop_last,
            workers=workers,
            start_method=start_method,
        )
        if transform is not None and not callable(transform):
            raise TypeError(f"transform must be callable or None, got {transform!r}")
        self._transform = transform
        if not isinstance(streams, Mapping):
            hint = (
                "; wrap one in a dict: DataLoader({'data': ds})"
                if isinstance(streams, (DenseDataset, np.ndarray))
                else ""
            )
            raise TypeError(
                "streams must be a dict of name -> DenseDataset or NumPy array, "
                f"got {type(streams).__name__}{hint}"
            )
        if not streams:
            raise ValueError("streams is empty: give at least one {name: DenseDataset}")
        offsets_dt = check_offsets_dtype(offsets_dtype)
        if pad is None:
            pad = {}
        if not isinstance(pad, Mapping):
            raise TypeError(
                f"pad must be None or a dict of ragged stream name -> length, got {pad!r} "
                "(e.g. pad={'tokens': 'max'})"
            )
        for key in pad:
            if key not in streams or not isinstance(streams[key], RaggedDataset):
                ragged = [k for k, v in streams.items() if isinstance(v, RaggedDataset)]
                raise ValueError(
                    f"pad={{{key!r}: ...}} names no ragged stream; the ragged streams are {ragged}"
                )
        pads = {key: check_pad(spec, key) for key, spec in pad.items()}
        packs = check_packs(pack, streams, pads, RaggedDataset)
        lengths = {}
        sources: dict[str, Any] = {}
        given = streams if mixture is None else mixture.loader_streams(pads, offsets_dt)
        if mixture is not None and any(p.mode == "concat" for p in packs.values()):
            # concat rows mix records of several steps: each segment names its source instead
            given = {k: v for k, v in given.items() if k != mixture.source_key}
        for name, ds in given.items():
            if not isinstance(name, str):
                raise TypeError(f"stream names must be str, got {name!r}")
            if name in packs:
                ds = pack_stream(name, ds, packs[name], offsets_dt, self.options.batch_size)
            elif isinstance(ds, RaggedDataset):
                ds = RaggedStream(name, ds, pads.get(name), offsets_dt)
            elif isinstance(ds, np.ndarray):
                ds = _ArrayStream(name, ds)
            elif not isinstance(ds, DenseDataset) and mixture is None:
                raise TypeError(
                    f"stream {name!r} must be a DenseDataset, a RaggedDataset or a NumPy array, "
                    f"got {type(ds).__name__}"
                )
            sources[name] = ds
            lengths[name] = len(ds)
        if len(set(lengths.values())) > 1:
            listed = ", ".join(f"{k}={v}" for k, v in lengths.items())
            raise ValueError(f"streams must have equal lengths; got {listed}")
        n = next(iter(lengths.values()))
        if n == 0:
            raise ValueError(f"streams are empty (length 0): {', '.join(lengths)}")
        self._lengths = lengths
        self._mixture = mixture
        opts = self.options
        check_layout(sources, opts.epoch)
        self._packs = {name: p.state() for name, p in packs.items()}
        self._end: int | None = opts.steps
        if custom:
            want = getattr(sampler, "batch_size", opts.batch_size)
            if want != opts.batch_size:
                raise ValueError(
                    f"batch_size={opts.batch_size} but the sampler draws batch_size={want}"
                )
            sampler_n = getattr(sampler, "n", n)
            if sampler_n != n:
                raise ValueError(f"the sampler draws from n={sampler_n} records but the streams hold {n}")
            self.sampler: Any = _CustomDraw(sampler, n, opts.batch_size)
        elif mixture is not None:
            self.sampler = mixture.draw(opts.batch_size, opts.seed, opts.shard)
        elif opts.epoch:
            order = None
            if opts.sampler == "cyclic":  # one permutation of all n, keyed by seed
                order = Sampler("cyclic", n, n, seed=opts.seed)(0)
            draw = _EpochDraw(n, opts.batch_size, opts.shard, order, opts.drop_last)
            if draw.steps == 0:
                raise ValueError(
                    f"drop_last=True leaves nothing: the {n} records do not fill one global batch "
                    f"of {draw.global_batch}"
                )
            self.sampler = draw
            self._end = draw.steps if self._end is None else min(self._end, draw.steps)
        else:
            self.sampler = Sampler(opts.sampler, n, opts.batch_size, seed=opts.seed, shard=opts.shard)
        if packs:
            draw, g, shard = self._global_draw(n)
            for ds in sources.values():
                if isinstance(ds, PackStream):
                    ds.bind(draw, g, shard)
        if self._end is not None and opts.start_step > self._end:
            raise ValueError(
                f"start_step={opts.start_step} is past the end of this {self._end}-step loader"
            )
        batch_bytes = sum(opts.batch_size * ds.nbytes_per_item for ds in sources.values())
        self._prefetch = opts.resolved_prefetch(batch_bytes)
        self._workers: int = opts.worker_threads
        capacity = self._prefetch + self._workers + 3
        self._streams: list[Stream] = [
            (
                name,
                ds,
                PackPool(ds, opts.batch_size, capacity)
                if isinstance(ds, PackStream)
                else RaggedPool(ds, opts.batch_size, capacity)
                if isinstance(ds, RaggedStream)
                else BufferPool((opts.batch_size, *ds.item_shape), ds.dtype, capacity),
            )
            for name, ds in sources.items()
        ]
        self._step = opts.start_step  # next step to yield while no pipeline runs
        self._ahead: Lookahead | None = None  # the prefetch of datasets in object storage
        self._init_workers()
        #: why the steps cannot be made by the native pipeline (None: they are)
        self._native_blocker = native_blocker(self._streams, self.sampler, self._transform, self._workers)
        if self._native_blocker is None and self._mode == "thread" and self._timer is None and opts.prefetch is None:
            self._prefetch = opts.resolved_prefetch(batch_bytes, small_deeper=True)

    def _global_draw(self, n: int) -> tuple[Any, int, tuple[int, int]]:
        """What packing draws from (packing is global, see
        :mod:`loaderx.loader._packing`): the unsharded draw of every step's
        global batch (the ranks' slices in rank order), its size and this
        rank's shard. A custom sampler shards itself in its own way, so it
        packs its own indices, as a world of one (and a state of another
        world is refused for it)."""
        o = self.options
        world = o.shard[1]
        g = o.batch_size * world
        if isinstance(self.sampler, _CustomDraw) or world == 1:
            return self.sampler, o.batch_size, (0, 1)
        if self._mixture is not None:  # one schedule for both draws: what one learns serves the other
            return self._mixture.draw(g, o.seed, (0, 1), self.sampler.schedule), g, o.shard
        if isinstance(self.sampler, _EpochDraw):
            return _EpochDraw(n, g, (0, 1), self.sampler.order, o.drop_last), g, o.shard
        return Sampler(o.sampler, n, g, seed=o.seed), g, o.shard

    # -- worker mode -------------------------------------------------------

    def _init_workers(self) -> None:
        """Settle the workers to start on: processes for ``"process"`` (or
        ``"auto"`` forced so by the environment), threads otherwise; with
        ``"auto"``, whether the first steps are timed."""
        opts = self.options
        mode = opts.workers
        #: the workers in use ("thread" or "process") and why
        self._mode = "thread"
        self._reason = "workers='thread' was asked for"
        self._verdict: Verdict | None = None
        self._switch_step: int | None = None
        self._handoff: int | None = None  # the step processes take over at, while threads finish
        self._next_pipe: ProcessPipeline | None = None
        self._pending_since = 0.0
        #: when the consumer received each step, while the threads are timed
        #: and, after a move, on processes (the trial); tests replace the clock
        self._clock = time.perf_counter
        self._received: list[float] = []
        self._thread_pace: float | None = None
        self._trial: list[float] | None = None
        self._trial_skip = 0
        #: with True, a loader that decided to move waits for its processes
        #: at the next step instead of going on with threads meanwhile
        #: (tests make the move land at a known step with it)
        self.wait_for_workers = False
        if mode == "auto":
            forced = env_workers()
            if forced == "process" and self._workers < 1:
                self._reason = f"{ENV_VAR}=process, but num_workers=0 makes every step in the caller"
                return
            if forced in ("thread", "process"):
                mode = forced
                self._reason = f"forced by {ENV_VAR}={forced}"
        if mode == "process":
            self._mode = "process"
            if opts.workers == "process":
                self._reason = "workers='process' was asked for"
            self._procs = self._process_pool()
            return
        if mode == "thread":
            return
        if self._transform is None:
            self._reason = "workers='auto' without a transform: a gather runs with the GIL released"
        elif self._workers < 2:
            self._reason = f"workers='auto' with {self._workers} worker: processes need 2 or more"
        else:
            self._timer = StepTimer()
            self._reason = "workers='auto': timing the first steps on threads"

    def _process_pool(self) -> ProcessPool:
        prefetch = self._prefetch
        if self.options.prefetch is None:  # a process each at least, as workers='process' has
            prefetch = max(prefetch, self._workers)
        return ProcessPool(
            self._streams,
            self.sampler,
            self._transform,
            self._workers,
            prefetch,
            self.options.start_method or "spawn",
            sum(pool.nbytes for _, _, pool in self._streams),
            self._parts().shard,
        )

    def _stay(self, reason: str, warn: str | None = None, depth: int = 0) -> None:
        """Settle on threads for good (``warn``: why processes could not be
        used; ``depth``: the calls between ``__next__`` and this one)."""
        self._timer = None
        self._pending = None
        self._reason = reason
        if warn is not None:
            warnings.warn(
                f"DataLoader(workers='auto') stays on worker threads: {reason}. workers='process' "
                f"would need {warn}",
                WorkersWarning,
                stacklevel=4 + depth,  # the caller of next()
            )

    def _advance(self, item: Any) -> None:
        """After a step with ``workers="auto"``: judge the measured window,
        start the processes, hand over to them, or judge their trial."""
        if self._trial is not None:
            self._try_processes()
            return
        timer = self._timer
        if timer is not None:
            self._received.append(self._clock())
        if timer is not None and timer.full:
            self._timer = None
            self._judge(timer, item)
        pool = self._pending
        if pool is None or self._handoff is not None:
            return
        try:
            ready = pool.ready(READY_TIMEOUT if self.wait_for_workers else 0.0)
        except WorkerError as e:
            pool.close()
            self._stay(
                f"{self._reason}, but a worker process failed to set up ({e})",
                "the transform, the sampler and the streams to unpickle in a fresh interpreter",
            )
            return
        if not ready:
            if time.monotonic() - self._pending_since > READY_TIMEOUT:
                pool.close()
                self._stay(f"{self._reason}, but the worker processes were not ready in {READY_TIMEOUT:.0f} s")
            return
        pipe = self._pipe
        assert isinstance(pipe, Pipeline)
        handoff = pipe.stop_claiming()
        self._procs, self._pending = pool, None
        nxt = ProcessPipeline(pool, handoff, self._end)
        nxt.prime()
        self._next_pipe, self._handoff = nxt, handoff
        verdict = self._verdict
        assert verdict is not None
        log.info(
            "DataLoader(workers='auto'): %s; moving to %d worker processes at step %d",
            verdict.figures(),
            self._workers,
            handoff,
        )

    def _judge(self, timer: StepTimer, item: Any) -> None:
        """Decide from the measured window; start the processes if they win
        and can be used."""
        step = self.step
        remaining = None if self._end is None else self._end - step
        unfit, nbytes = batch_blocker(item)
        verdict = decide(timer.window(), self._workers, remaining, nbytes)
        self._verdict = verdict
        if not verdict.processes:
            self._stay(f"{verdict.reason} ({verdict.figures()})")
            return
        why = f"{verdict.reason} ({verdict.figures()})"
        blocker = process_blocker(self._streams) or unfit
        if blocker is None:
            try:
                pool = self._process_pool()
            except TypeError as e:  # the transform or the sampler does not pickle
                blocker = str(e)
        if blocker is not None:
            self._stay(
                why,
                "the transform, the sampler and every stream to pickle (define the transform at "
                "module level), every stream to be a store or a np.memmap, and batches of NumPy "
                f"arrays; here {blocker}",
                depth=1,
            )
            return
        pool.start()
        self._pending = pool
        self._pending_since = time.monotonic()
        self._reason = why
        self._thread_pace = pace(self._received[WARMUP_STEPS:])
        self._received = []

    def _finish_handoff(self) -> None:
        """The threads' last step is out: the processes take over."""
        pipe, nxt = self._pipe, self._next_pipe
        assert pipe is not None and nxt is not None
        pipe.stop()
        self._pipe, self._next_pipe = nxt, None
        self._mode = "process"
        self._switch_step, self._handoff = self._handoff, None
        self._trial, self._trial_skip = [], self._prefetch

    def _try_processes(self) -> None:
        """Time the consumer's steps on processes; once :data:`TRIAL_STEPS`
        are in, keep the processes or go back to threads for good."""
        trial = self._trial
        assert trial is not None
        if self._trial_skip:  # made while the threads finished: not the processes' pace
            self._trial_skip -= 1
            return
        trial.append(self._clock())
        if len(trial) < TRIAL_STEPS + 1:
            return
        self._trial = None
        took = pace(trial)
        assert took is not None
        threads = self._thread_pace
        if keep_processes(threads, took):
            return
        assert threads is not None
        pipe, self._pipe = self._pipe, None
        assert pipe is not None
        self._step = pipe.next_out
        pipe.stop()
        procs, self._procs = self._procs, None
        if procs is not None:
            procs.close()
        self._mode = "thread"
        self._switch_step = None
        self._reason = (
            f"moved back to threads at step {self._step}: on processes a step came every "
            f"{took * 1e3:.1f} ms, on threads every {threads * 1e3:.1f} ms (the verdict was: "
            f"{self._reason})"
        )
        log.info("DataLoader(workers='auto'): %s", self._reason)

    def stats(self) -> dict[str, Any]:
        """What the loader runs on and why::

            {"step", "workers": as asked ("auto", "thread", "process"),
             "workers_chosen": in use now ("thread" or "process"),
             "workers_reason": why, with the figures measured,
             "workers_switch_step": the first step made by processes after
                 a move from threads, or None,
             "workers_settled": False while workers="auto" still times the
                 threads, starts processes, hands over to them or checks them,
             "num_workers", "prefetch",
             "measured": {"steps", "gather_s", "transform_s", "blocked_s",
                 "kernel_s"}
                 (means per step) once workers="auto" judged, else None,
             "pipeline": "native" (the native step pipeline makes the steps),
                 "python" (worker threads of this process) or "process",
             "pipeline_reason": why not native, or None}
        """
        v = self._verdict
        measured = None
        if v is not None:
            measured = {"steps": v.steps, "gather_s": v.gather_s, "transform_s": v.transform_s,
                        "blocked_s": v.blocked_s, "kernel_s": v.kernel_s}
        return {
            "step": self.step,
            "workers": self.options.workers,
            "workers_chosen": self._mode,
            "workers_reason": self._reason,
            "workers_switch_step": self._switch_step,
            "workers_settled": self._timer is None and self._pending is None and self._handoff is None
            and self._trial is None,
            "num_workers": self._pipe.num_workers if isinstance(self._pipe, NativePipeline) else self._workers,
            "prefetch": self._prefetch,
            "measured": measured,
            "pipeline": self._pipeline_kind(),
            "pipeline_reason": self._native_blocker,
        }

    def _pipeline_kind(self) -> str:
        pipe = self._pipe
        if isinstance(pipe, NativePipeline):
            return "native"
        if isinstance(pipe, ProcessPipeline) or (pipe is None and self._mode == "process"):
            return "process"
        if pipe is None and self._native_blocker is None and self._mode == "thread" and self._timer is None:
            return "native"
        return "python"

    # -- properties --------------------------------------------------------

    @property
    def streams(self) -> dict[str, Any]:
        """The streams, by name: each :class:`DenseDataset`, :class:`RaggedDataset`
        or NumPy array as it was given; over a :class:`Mixture`, the mixture's
        streams over its sources' joint index space."""
        return {
            name: ds.array if isinstance(ds, _ArrayStream) else getattr(ds, "dataset", ds)
            for name, ds, _ in self._streams
        }

    @property
    def batch_size(self) -> int:
        """Records per batch."""
        return self.options.batch_size

    @property
    def prefetch(self) -> int:
        """How many steps may be in flight ahead of the consumer."""
        return self._prefetch

    @property
    def step(self) -> int:
        """The step the next batch belongs to."""
        return self._pipe.next_out if self._pipe is not None else self._step

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` has been called."""
        return self._closed

    def __len__(self) -> int:
        """The steps of a finite loader (``steps=`` or ``epoch=True``),
        counted from step 0 whatever ``start_step`` is.

        Raises:
            TypeError: the loader is endless.
        """
        if self._end is None:
            raise TypeError(
                "an endless DataLoader has no len(); give steps=N or epoch=True for a finite pass"
            )
        return self._end

    def indices(self, step: int) -> NDArray[np.int64]:
        """The record indices gathered at ``step`` (this rank's part of the
        global batch): ``batch_size`` of them, fewer only for the short last
        batch of an ``epoch`` pass or when a custom sampler draws fewer.
        A stream packed in concat mode (``pack=``) draws its rows from the
        records of the sampler's steps in turn, not from these; each
        segment's ``records`` entry names its record.

        Raises:
            ValueError: ``step`` is negative or past the end of a finite loader.
        """
        step = check_step(step)
        if self._end is not None and step >= self._end:
            raise ValueError(f"step {step} is past the end of this {self._end}-step loader")
        return self.sampler(step, np.empty(self.options.batch_size, dtype=np.int64)).copy()

    def _identity(self) -> tuple[str, int, tuple[int, int]]:
        o = self.options
        custom = self.sampler.sampler if isinstance(self.sampler, _CustomDraw) else None
        return sampler_identity(o.sampler if custom is None else custom, o.seed, o.shard)

    def __repr__(self) -> str:
        o = self.options
        _, seed, shard = self._identity()
        state = ", closed" if self._closed else ""
        finite = ""
        if o.epoch:
            finite = f", epoch=True, drop_last={o.drop_last}"
        if self._end is not None:
            finite += f", len={self._end}"
        kind = ""  # the default, on threads
        if o.workers != "auto":
            kind = f", workers={o.workers!r}"
        elif self._mode != "thread":
            kind = f", workers='auto' (now {self._mode!r})"
        return (
            f"DataLoader(streams={[name for name, _, _ in self._streams]}, "
            f"batch_size={o.batch_size}, sampler={o.sampler!r}, seed={seed}, "
            f"shard={shard}, num_workers={o.num_workers}{kind}, "
            f"prefetch={self._prefetch}, step={self.step}{finite}{state})"
        )

    # -- iteration ---------------------------------------------------------

    def __iter__(self) -> DataLoader:
        return self

    def __next__(self) -> Any:
        pipe = self._pipe
        if pipe is None:
            if self._closed:
                raise ClosedError("the DataLoader is closed")
            if self._procs is not None and self._mode == "process":
                self._pipe = ProcessPipeline(self._procs, self._step, self._end)
                return self._pipe.next()
            if self._native_blocker is None and self._mode == "thread" and self._timer is None:
                # a batch that one gather spreads over every core already is made by one worker
                batch_bytes = sum(pool.nbytes for _, _, pool in self._streams)
                workers = 1 if batch_bytes >= SHARED_GATHER_BYTES else self.options.native_workers
                pipe = self._pipe = NativePipeline(
                    self._streams, self.sampler, workers, self._prefetch, self._step, self._end
                )
                return pipe.next()
            batch_bytes = sum(pool.nbytes for _, _, pool in self._streams)
            pipe = Pipeline(
                self._streams,
                self.sampler,
                self._transform,
                self._workers,
                self._prefetch,
                self._step,
                one_gatherer=batch_bytes >= SHARED_GATHER_BYTES,
                end=self._end,
                timer=self._timer,
            )
            self._pipe = pipe
            if pipe.num_workers:
                pipe.start()
        if self._handoff is not None and pipe.next_out >= self._handoff:
            self._finish_handoff()
            pipe = self._pipe
            assert pipe is not None
        item = pipe.next()
        if self._timer is not None or self._pending is not None or self._trial is not None:
            self._advance(item)
        ahead = self._ahead
        if ahead is not None:
            ahead.advance(self.step)
        elif not self._ahead_checked:
            self._start_lookahead()
        return item

    _ahead_checked = False

    def _start_lookahead(self) -> None:
        """Start fetching ahead for the streams that read from object
        storage (once, at the first step)."""
        self._ahead_checked = True
        guards = [g for _, ds, _ in self._streams for g in guards_of(ds)]
        # at most half the cache, so that what is fetched ahead is not evicted before its step
        budget = min((min(g.tree.opts.prefetch, g.tree.cache.limit() // 2) for g in guards), default=0)
        if guards and budget > 0:
            self._ahead = Lookahead(guards, self.sampler, self.options.batch_size, budget, self.step, self._end)

    # -- state -------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """The loader's position and what identifies its data, JSON-serialisable::

            {"step": next step to be yielded, "seed", "sampler", "batch_size",
             "shard": [rank, world],
             "streams": {name: length},
             "pass": {"steps": len or None, "epoch": bool, "drop_last": bool},
             "pack": {name: packing} (packed streams),
             "mixture": {sources, weights, counts, sampler, source_key} (a Mixture),
             "cursor": {"step", "pack", "mixture", "check"} (see below)}

        ``sampler`` is the mode, or ``module.Class`` of a custom sampler.

        A loader whose position depends on every step before it, one with a
        stream packed in concat mode or a Mixture with exact counts, also
        saves a ``cursor`` at the step, so that :meth:`load_state_dict`
        seeks there without going over the steps before (it costs the same
        at step 10 and at step 10**6). Here, a mixture of three sources
        packed into 64 rows of 2,048 tokens a step, at step 10**6::

            "cursor": {"step": 1000000,
                       "pack": {"tokens": [1009394, 91502, 125917]},
                       "mixture": [[1000000, [21376791, 21350569, 21272640]],
                                   [1009394, [21577605, 21551136, 21472475]]],
                       "check": "c88c8a43f81af79c"}

        ``pack`` gives, per concat-packed stream, where the step's first
        token is: token ``r`` of the ``n`` tokens of sampler step ``t``
        (``[t, r, n]``; the sampler's steps are the global batches, so every
        rank, and any world with the same global batch, finds its own rows
        from it). ``mixture`` gives the records each source gave before each
        sampler step the loader draws next (and before the start of their
        weights segments), from which the schedule continues. ``check`` is
        a digest of the rest. The cursor is global like the rest of the
        state: every rank saves the same one.
        """
        return self._state(self.step, cursor=True)

    def _state(self, step: int, cursor: bool) -> dict[str, Any]:
        """The state at ``step``, with its cursor or (for the checks of a
        state to load) without."""
        o = self.options
        return make_state(
            step,
            sampler=self.sampler.sampler if isinstance(self.sampler, _CustomDraw) else o.sampler,
            seed=o.seed,
            shard=o.shard,
            batch_size=o.batch_size,
            lengths=self._lengths,
            end=self._end,
            epoch=o.epoch,
            drop_last=o.drop_last,
            pack=self._packs,
            mixture=None if self._mixture is None else self._mixture.identity(),
            cursor=self._cursor(step) if cursor else None,
            data=self._fingerprints(),
        )

    def _fingerprints(self) -> dict[str, str] | None:
        """Each stream's fingerprint (a mixture's are in its identity), once."""
        if self._mixture is not None:
            return None
        got = self.__dict__.get("_data_fingerprints")
        if got is None:
            got = self.__dict__["_data_fingerprints"] = fingerprints(self._streams)
        return got

    def _parts(self) -> Parts:
        """What the loader's cursor is about (see :mod:`loaderx.loader._cursor`);
        a custom sampler packs its own rank's indices (see :meth:`_global_draw`)."""
        own = self._identity()[2] if isinstance(self.sampler, _CustomDraw) else None
        return parts_of(self._streams, self.sampler, own)

    def _cursor(self, step: int) -> dict[str, Any] | None:
        """The cursor at ``step`` (None when the loader needs none): from
        the worker process that made the step before, which has counted up
        to it, or made here."""
        pipe = self._pipe
        if isinstance(pipe, ProcessPipeline):
            got = pipe.cursor_at(step)
            if got is not None:
                return got
        return make_cursor(step, self._parts())

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue from a saved :meth:`state_dict`: the next batch is the one
        of ``state["step"]``. Prefetched work is discarded. A state saved
        before ``streams`` and ``pass`` were recorded loads without them.

        A state's ``cursor`` (see :meth:`state_dict`) lets the loader seek to
        the step directly; it is checked first (its digest, then against the
        data: the sampler step it names holds the tokens it says, the
        mixture counts are ones the schedule reaches at their steps). A
        state without one (saved by a release before cursors) loads too: a
        concat-packed stream then sums the token counts of every sampler
        step before, and an exact mixture schedule replays its steps, once
        per process. The cursor is a fact about the draw, so a state whose
        ``step`` was changed (``{**state, "step": k}``) still resumes
        exactly: from the cursor when ``k`` is at or after its step, from
        step 0 otherwise.

        Raises:
            TypeError: ``state`` is not a mapping.
            ValueError: keys are missing or unknown, the state is from other
                data (stream names or lengths, sampler, seed, batch size,
                shard or pass differ; the message says which), its step is
                past the end of a finite loader, or its cursor was changed
                or does not fit the data.
        """
        step = check_state(state, self._state(self.step, cursor=False), self._end)
        if self._packs and isinstance(self.sampler, _CustomDraw):
            saved, mine = list(state["shard"]), list(self._identity()[2])
            if saved[1] != mine[1]:
                raise ValueError(
                    f"state_dict is from world {saved[1]}, this packed loader is in world {mine[1]}: with a "
                    f"custom sampler ({type(self.sampler.sampler).__name__}) each rank packs its own "
                    "indices, so packed rows resume exactly only in the world that saved them"
                )
        if self._closed:
            raise ClosedError("the DataLoader is closed")
        cursor = state.get(CURSOR)
        if cursor is not None:
            seek_cursor(cursor, self._parts())
            for pool in (self._procs, self._pending):
                if pool is not None:  # its workers seek too, before the steps of the new run
                    pool.set_cursor(cursor)
        self._reset()
        self._step = step

    # -- lifetime ----------------------------------------------------------

    def _reset(self) -> None:
        pipe, self._pipe = self._pipe, None
        if pipe is not None:
            self._step = pipe.next_out
            pipe.stop()
        if self._ahead is not None:
            self._ahead.reset(self._step)
        nxt, self._next_pipe = self._next_pipe, None
        if nxt is not None:  # a hand-over in progress: the processes take over from here
            nxt.stop()
            self._mode = "process"
            self._switch_step, self._handoff = self._step, None
            self._trial, self._trial_skip = [], self._prefetch
        elif self._trial is not None:  # the trial starts over from the new position
            self._trial, self._trial_skip = [], self._prefetch
        self._received = []  # consumer paces across a seek mean nothing

    def close(self) -> None:
        """Stop the workers and drop prefetched batches. Safe to call twice;
        ``next()`` then raises :class:`loaderx.errors.ClosedError`. The
        datasets stay open."""
        self._closed = True
        self._reset()
        ahead, self._ahead = self._ahead, None
        if ahead is not None:
            ahead.stop()
        self._timer = None
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.close()
        if self._procs is not None:
            self._procs.close()

    def __enter__(self) -> DataLoader:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            pipe = self._pipe
            if pipe is not None:
                pipe.stop(join_timeout=0.0)
            for procs in (self._procs, self._pending):
                if procs is not None:
                    procs.close(timeout=0.2)
        except Exception:
            pass
