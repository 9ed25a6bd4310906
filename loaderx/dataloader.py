"""The endless, step-based data loader.

A :class:`DataLoader` yields one batch per step, forever: a dict
``{name: array}`` where each array is the ``(batch_size, *item_shape)`` batch
of one dense stream, all streams gathered at the same indices. The indices of
step ``s`` come from the sampler as a pure function of ``(seed, s)``, so the
loader's whole position is the step number: :meth:`DataLoader.state_dict`
saves it and :meth:`DataLoader.load_state_dict` seeks back to it.

Work runs on threads: each worker claims the next step, draws its indices,
gathers every stream (the copy runs natively with the GIL released) and runs
the ``transform`` callback; batches are handed out strictly in step order, so
the output is the same whatever ``num_workers`` is.
"""

from __future__ import annotations

import atexit
import collections
import dataclasses
import os
import queue
import sys
import threading
import time
import weakref
from typing import Any, Callable, Deque, Dict, List, Mapping, Optional, Tuple

import numpy as np

from loaderx import _native
from loaderx.dataset import DenseDataset, RaggedDataset
from loaderx.errors import ClosedError
from loaderx.sampler import Sampler, _check_mode, _check_seed, _check_shard, _check_step
from loaderx.zrecord import _as_int

__all__ = ["DataLoader", "LoaderOptions"]

Batch = Dict[str, np.ndarray]

_STATE_KEYS = ("step", "seed", "sampler", "batch_size", "shard")

#: The default prefetch keeps at most this many bytes of batches in flight.
PREFETCH_BYTES = 64 << 20
#: Batches of at least this many bytes (all streams) are gathered one at a
#: time: the native gather already fans such a batch out over every core.
SHARED_GATHER_BYTES = 8 << 20
_POLL = 0.1  # seconds between checks of the stop flag while waiting
_JOIN_TIMEOUT = 2.0  # total seconds close() waits for workers to finish


@dataclasses.dataclass(frozen=True)
class LoaderOptions:
    """The validated settings of a :class:`DataLoader` (apart from its streams
    and transform). Invalid values raise with the value quoted.

    Attributes:
        batch_size: records per batch (per rank).
        num_workers: worker threads asked for; at most one per available CPU is
            started (see :attr:`worker_threads`). 0 runs everything in the
            caller.
        sampler: ``"sequential"``, ``"iid"`` or ``"cyclic"``.
        seed: keys the random samplers.
        shard: ``(rank, world)`` for data-parallel training.
        start_step: the first step to yield.
        prefetch: how many steps may be claimed ahead of the consumer; None
            picks a default from the worker threads and the batch size (see
            :meth:`resolved_prefetch`).
    """

    batch_size: int = 256
    num_workers: int = 4
    sampler: str = "cyclic"
    seed: int = 0
    shard: Tuple[int, int] = (0, 1)
    start_step: int = 0
    prefetch: Optional[int] = None

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        bs = _as_int(self.batch_size, "batch_size")
        if bs < 1:
            raise ValueError(f"batch_size must be at least 1, got {self.batch_size!r}")
        set_(self, "batch_size", bs)
        nw = _as_int(self.num_workers, "num_workers")
        if nw < 0:
            raise ValueError(f"num_workers must be 0 or more, got {self.num_workers!r}")
        set_(self, "num_workers", nw)
        set_(self, "start_step", _check_step(self.start_step))
        if self.prefetch is not None:
            pf = _as_int(self.prefetch, "prefetch")
            if pf < 1:
                raise ValueError(f"prefetch must be at least 1, got {self.prefetch!r}")
            set_(self, "prefetch", pf)
        _check_mode(self.sampler)
        set_(self, "seed", _check_seed(self.seed))
        set_(self, "shard", _check_shard(self.shard))

    @property
    def worker_threads(self) -> int:
        """The worker threads actually started: ``num_workers``, but at most
        one per CPU available to the process. Gathers and transforms are
        CPU-bound, so threads beyond the CPUs only wait for a time slice; on a
        2-CPU machine 4 workers ran ~30% slower than 2."""
        return min(self.num_workers, _available_cpus())

    def resolved_prefetch(self, batch_bytes: int) -> int:
        """``prefetch``, or its default for batches of ``batch_bytes`` bytes
        (all streams): twice the worker threads (at least 2), but no more
        batches than fit in :data:`PREFETCH_BYTES`, and at least 1. Every
        batch in flight is one more buffer to fill, and once they outgrow the
        CPU caches each one costs throughput (measured on 64 MiB batches:
        4 in flight ran at 0.57x a bare gather loop, 1 at 0.89x)."""
        if self.prefetch is not None:
            return self.prefetch
        by_count = max(2, 2 * self.worker_threads)
        by_bytes = PREFETCH_BYTES // max(1, batch_bytes)
        return max(1, min(by_count, by_bytes))


class _BufferPool:
    """Batch arrays of one stream, recycled between steps.

    A fresh multi-MiB allocation per batch costs more in page faults than the
    gather itself, so arrays handed out are kept here and refilled later. An
    array is refilled only when ``sys.getrefcount`` shows that nothing but
    the pool refers to it: the batch dict, the array itself, a view or slice
    of it (views keep their base alive), a memoryview or an ``np.frombuffer``
    of it all hold a reference, so anything the caller can still reach is
    never overwritten; it simply stays out of the pool. (A raw pointer taken
    through ``.ctypes`` or ``__array_interface__`` holds no reference; copy
    the batch if you keep one.) The baseline count is measured on this
    interpreter when the pool is built.
    """

    def __init__(self, shape: Tuple[int, ...], dtype: np.dtype, capacity: int) -> None:
        self.shape = shape
        self.dtype = dtype
        self.nbytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
        self.capacity = capacity
        self._free: Deque[np.ndarray] = collections.deque()
        self._lock = threading.Lock()
        self._free.append(np.empty(0, dtype=np.uint8))
        self._baseline = self._refs(0)  # the pool's own references and nothing else
        self._free.clear()

    def _refs(self, i: int) -> int:
        buf = self._free[i]
        return sys.getrefcount(buf)

    def take(self) -> np.ndarray:
        """An array no one else can reach: a recycled one, or a new one."""
        with self._lock:
            free = self._free
            # newest first: the buffer released last is the likeliest to be
            # still in the CPU caches
            for i in range(len(free) - 1, -1, -1):
                if self._refs(i) == self._baseline:
                    buf = free[i]
                    del free[i]
                    return buf
        return np.empty(self.shape, dtype=self.dtype)

    def give(self, buf: np.ndarray) -> None:
        """Offer an array handed to the caller for reuse once the caller
        lets go of it. Beyond ``capacity`` the oldest offers are forgotten."""
        with self._lock:
            self._free.append(buf)
            while len(self._free) > self.capacity:
                self._free.popleft()

    def __len__(self) -> int:
        return len(self._free)


def _available_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


class _Failure:
    """A step whose production raised; re-raised at that step."""

    __slots__ = ("error",)

    def __init__(self, error: BaseException) -> None:
        self.error = error


_LIVE: "weakref.WeakSet[_Pipeline]" = weakref.WeakSet()


@atexit.register
def _stop_all() -> None:
    for pipe in list(_LIVE):
        pipe.stop(join_timeout=0.5)


class _Pipeline:
    """The moving parts of one run from a given step: workers, the step
    window and the finished steps. The workers refer to this object, never to
    the :class:`DataLoader`, so a loader that goes out of scope is collected
    and stops its workers."""

    def __init__(
        self,
        streams: List[Tuple[str, DenseDataset, _BufferPool]],
        sampler: Sampler,
        transform: Optional[Callable[[Batch], Any]],
        num_workers: int,
        prefetch: int,
        start_step: int,
    ) -> None:
        self.streams = streams
        rank, world = sampler.shard
        self.sample_args = (sampler.mode, sampler.n, sampler.batch_size, sampler.seed)
        self.rank, self.world = rank, world
        self.batch_size = sampler.batch_size
        self.transform = transform
        self.num_workers = num_workers
        self.prefetch = prefetch
        self.next_out = start_step  # the next step handed to the consumer
        self.next_claim = start_step  # the next step a worker will produce
        self.results: Dict[int, Any] = {}
        self.lock = threading.Lock()
        self.ready = threading.Condition(self.lock)  # consumer waits for a step
        self.space = threading.Condition(self.lock)  # workers wait for the window
        self.stopped = False
        self.threads: List[threading.Thread] = []
        self.sync_indices = np.empty(self.batch_size, dtype=np.int64)
        # A batch big enough that one native gather already spreads over
        # every core is gathered by one thread only: a second gather beside
        # it adds cache and scheduler contention, and gathers that alternate
        # between calling threads measured ~40% slower per batch than one
        # thread calling throughout. The other workers then only transform.
        batch_bytes = sum(pool.nbytes for _, _, pool in streams)
        self.one_gatherer = num_workers > 0 and batch_bytes >= SHARED_GATHER_BYTES
        self.todo: "queue.Queue[Tuple[int, Batch, List[np.ndarray]]]" = queue.Queue()

    # -- production --------------------------------------------------------

    def gather(self, step: int, indices: np.ndarray) -> Tuple[Batch, List[np.ndarray]]:
        """Sample the indices of ``step`` and gather every stream there."""
        mode, n, bs, seed = self.sample_args
        _native.sample(mode, n, bs, seed, step, self.rank, self.world, indices)
        batch: Batch = {}
        raw = []
        for name, ds, pool in self.streams:
            buf = pool.take()
            ds._gather_unchecked(indices, buf)
            batch[name] = buf
            raw.append(buf)
        return batch, raw

    def produce(self, step: int, indices: np.ndarray) -> Tuple[Any, List[np.ndarray]]:
        batch, raw = self.gather(step, indices)
        if self.transform is not None:
            out = self.transform(batch)
            del batch
            return out, raw
        return batch, raw

    def start(self) -> None:
        _LIVE.add(self)
        if self.one_gatherer and self.transform is None:
            roles = [("gather", self._work)]  # a lone worker: it only gathers
        elif self.one_gatherer:
            roles = [("gather", self._gather_only)]
            roles += [(f"worker-{k}", self._transform_only) for k in range(self.num_workers)]
        else:
            roles = [(f"worker-{k}", self._work) for k in range(self.num_workers)]
        for name, target in roles:
            t = threading.Thread(target=target, name=f"loaderx-{name}", daemon=True)
            self.threads.append(t)
            t.start()

    def _claim(self) -> Optional[int]:
        """The next step to produce, once it is inside the prefetch window;
        None when the pipeline stops."""
        with self.lock:
            while not self.stopped and self.next_claim >= self.next_out + self.prefetch:
                self.space.wait(_POLL)
            if self.stopped:
                return None
            step = self.next_claim
            self.next_claim = step + 1
            return step

    def _publish(self, step: int, item: Any) -> bool:
        """Hand a finished step to the consumer; False when the pipeline stops."""
        with self.lock:
            if self.stopped:
                return False
            self.results[step] = item
            self.ready.notify()
        return True

    def _work(self) -> None:
        """A worker that samples, gathers and transforms whole steps."""
        indices = np.empty(self.batch_size, dtype=np.int64)
        while True:
            step = self._claim()
            if step is None:
                return
            try:
                item: Any = self.produce(step, indices)
            except BaseException as e:  # handed to the consumer at this step
                item = _Failure(e)
            if not self._publish(step, item):
                return
            del item

    def _gather_only(self) -> None:
        """The one gathering thread of a large-batch pipeline with a
        transform: gathered steps go to the transform workers."""
        indices = np.empty(self.batch_size, dtype=np.int64)
        while True:
            step = self._claim()
            if step is None:
                return
            try:
                batch, raw = self.gather(step, indices)
            except BaseException as e:
                if not self._publish(step, _Failure(e)):
                    return
                continue
            self.todo.put((step, batch, raw))
            del batch, raw

    def _transform_only(self) -> None:
        """A transform worker of a large-batch pipeline."""
        while not self.stopped:
            try:
                step, batch, raw = self.todo.get(timeout=_POLL)
            except queue.Empty:
                continue
            try:
                item: Any = (self.transform(batch), raw)  # type: ignore[misc]
            except BaseException as e:
                item = _Failure(e)
            del batch, raw
            if not self._publish(step, item):
                return
            del item

    # -- consumption -------------------------------------------------------

    def next_threaded(self) -> Tuple[int, Any]:
        with self.lock:
            step = self.next_out
            results = self.results
            while step not in results:
                if self.stopped:
                    raise ClosedError("the DataLoader is closed")
                if not any(t.is_alive() for t in self.threads):
                    raise RuntimeError("the DataLoader's worker threads have exited")
                self.ready.wait(_POLL)
            item = results.pop(step)
            self.next_out = step + 1
            self.space.notify()
        return step, item

    def next_sync(self) -> Tuple[int, Any]:
        if self.stopped:
            raise ClosedError("the DataLoader is closed")
        step = self.next_out
        try:
            item: Any = self.produce(step, self.sync_indices)
        except Exception as e:
            item = _Failure(e)
        # a KeyboardInterrupt leaves the step unconsumed
        self.next_out = step + 1
        return step, item

    def stop(self, join_timeout: float = _JOIN_TIMEOUT) -> None:
        with self.lock:
            self.stopped = True
            self.results.clear()
            self.space.notify_all()
            self.ready.notify_all()
        me = threading.current_thread()
        if join_timeout > 0:
            deadline = time.monotonic() + join_timeout
            for t in self.threads:
                if t is not me:
                    t.join(max(0.0, deadline - time.monotonic()))
        _LIVE.discard(self)


class DataLoader:
    """An endless iterator of batches, one per step.

    Args:
        streams: ``{name: DenseDataset}``; every stream must have the same
            length, and all are gathered at the same indices, so record ``i``
            lines up across streams.
        batch_size: records per batch (per rank when sharded).
        transform: called on each batch dict on the worker thread; its result
            is what the loader yields. The collate step: cast, reshape, pack.
        num_workers: worker threads, at most one per available CPU (see
            :attr:`LoaderOptions.worker_threads`). 0 runs sampling, gathering
            and the transform synchronously in the caller. Batches of at
            least :data:`SHARED_GATHER_BYTES` are gathered by one extra
            thread (the native gather spreads each of them over every core
            already) and the workers only run the transform.
        sampler: ``"cyclic"`` (default; without replacement, reshuffled each
            cycle), ``"iid"`` (with replacement) or ``"sequential"``.
        seed: keys the random samplers.
        shard: ``(rank, world)``: this process's part of a data-parallel run.
        start_step: the first step to yield.
        prefetch: steps that may be in flight ahead of the consumer; by
            default twice the worker threads (at least 2), capped so that no
            more than 64 MiB of batches are in flight (at least 1).

    Batches are yielded in step order and depend only on the settings and the
    step, so a run restored with :meth:`load_state_dict` continues exactly as
    an uninterrupted one would.

    Batch arrays are recycled: once you drop every reference to a batch (the
    dict, its arrays and any views of them), its memory may be refilled for a
    later step. Anything you still hold is never overwritten.

    An exception raised while producing a step (in the transform, say) is
    raised from ``next()`` at that step with its original traceback; that
    step then counts as consumed, so iteration can go on.

    Call :meth:`close` (or use ``with``) to stop the workers; a loader that is
    garbage-collected stops them too.

    Example::

        loader = DataLoader({"data": DenseDataset("train_data"),
                             "label": DenseDataset("train_label")},
                            batch_size=256, seed=0)
        for step, batch in zip(range(1000), loader):
            train_step(batch["data"], batch["label"])
        checkpoint = loader.state_dict()   # {"step": 1000, ...}
    """

    def __init__(
        self,
        streams: Mapping[str, DenseDataset],
        batch_size: int = 256,
        *,
        transform: Optional[Callable[[Batch], Any]] = None,
        num_workers: int = 4,
        sampler: str = "cyclic",
        seed: int = 0,
        shard: Tuple[int, int] = (0, 1),
        start_step: int = 0,
        prefetch: Optional[int] = None,
    ) -> None:
        self._pipe: Optional[_Pipeline] = None
        self._closed = False
        self.options = LoaderOptions(
            batch_size=batch_size,
            num_workers=num_workers,
            sampler=sampler,
            seed=seed,
            shard=shard,
            start_step=start_step,
            prefetch=prefetch,
        )
        if transform is not None and not callable(transform):
            raise TypeError(f"transform must be callable or None, got {transform!r}")
        self._transform = transform
        if not isinstance(streams, Mapping):
            raise TypeError(
                f"streams must be a dict of name -> DenseDataset, got {type(streams).__name__}"
            )
        if not streams:
            raise ValueError("streams is empty: give at least one {name: DenseDataset}")
        lengths = {}
        for name, ds in streams.items():
            if not isinstance(name, str):
                raise TypeError(f"stream names must be str, got {name!r}")
            if isinstance(ds, RaggedDataset):
                raise TypeError(
                    f"stream {name!r} is a RaggedDataset; the loader reads dense streams only "
                    "(pad the records into a dense store with from_numpy)"
                )
            if not isinstance(ds, DenseDataset):
                raise TypeError(f"stream {name!r} must be a DenseDataset, got {type(ds).__name__}")
            lengths[name] = len(ds)
        if len(set(lengths.values())) > 1:
            listed = ", ".join(f"{k}={v}" for k, v in lengths.items())
            raise ValueError(f"streams must have equal lengths; got {listed}")
        n = next(iter(lengths.values()))
        if n == 0:
            raise ValueError(f"streams are empty (length 0): {', '.join(lengths)}")
        opts = self.options
        self.sampler = Sampler(opts.sampler, n, opts.batch_size, seed=opts.seed, shard=opts.shard)
        batch_bytes = sum(opts.batch_size * ds.nbytes_per_item for ds in streams.values())
        self._prefetch = opts.resolved_prefetch(batch_bytes)
        workers = opts.worker_threads
        self._workers = workers
        capacity = self._prefetch + workers + 3
        self._streams = [
            (name, ds, _BufferPool((opts.batch_size,) + ds.item_shape, ds.dtype, capacity))
            for name, ds in streams.items()
        ]
        self._step = opts.start_step  # next step to yield while no pipeline runs

    # -- properties --------------------------------------------------------

    @property
    def streams(self) -> Dict[str, DenseDataset]:
        """The streams, by name."""
        return {name: ds for name, ds, _ in self._streams}

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

    def __repr__(self) -> str:
        o = self.options
        state = ", closed" if self._closed else ""
        return (
            f"DataLoader(streams={[name for name, _, _ in self._streams]}, "
            f"batch_size={o.batch_size}, sampler={o.sampler!r}, seed={o.seed}, "
            f"shard={self.sampler.shard}, num_workers={o.num_workers}, "
            f"prefetch={self._prefetch}, step={self.step}{state})"
        )

    # -- iteration ---------------------------------------------------------

    def __iter__(self) -> "DataLoader":
        return self

    def __next__(self) -> Any:
        pipe = self._pipe
        if pipe is None:
            if self._closed:
                raise ClosedError("the DataLoader is closed")
            pipe = _Pipeline(
                self._streams,
                self.sampler,
                self._transform,
                self._workers,
                self._prefetch,
                self._step,
            )
            self._pipe = pipe
            if pipe.num_workers:
                pipe.start()
        step, item = pipe.next_threaded() if pipe.num_workers else pipe.next_sync()
        if isinstance(item, _Failure):
            error = item.error
            del item
            try:
                raise error
            finally:
                del error
        batch, raw = item
        del item
        for (_, _, pool), buf in zip(self._streams, raw):
            pool.give(buf)
        return batch

    # -- state -------------------------------------------------------------

    def state_dict(self) -> Dict[str, Any]:
        """The loader's position, JSON-serialisable: ``{"step": next step to be
        yielded, "seed", "sampler", "batch_size", "shard": [rank, world]}``."""
        o = self.options
        return {
            "step": self.step,
            "seed": self.sampler.seed,
            "sampler": o.sampler,
            "batch_size": o.batch_size,
            "shard": list(self.sampler.shard),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue from a saved :meth:`state_dict`: the next batch is the one
        of ``state["step"]``. Prefetched work is discarded.

        Raises:
            TypeError: ``state`` is not a mapping.
            ValueError: keys are missing or unknown, or the saved seed,
                sampler, batch size or shard differ from this loader's.
        """
        if not isinstance(state, Mapping):
            raise TypeError(f"state must be a dict from state_dict(), got {type(state).__name__}")
        missing = [k for k in _STATE_KEYS if k not in state]
        extra = [k for k in state if k not in _STATE_KEYS]
        if missing or extra:
            raise ValueError(
                f"state_dict keys do not match: missing {missing}, unexpected {extra}"
            )
        mine = self.state_dict()
        theirs = dict(state)
        try:
            theirs["shard"] = list(state["shard"])
        except TypeError:
            raise ValueError(f"state_dict has shard={state['shard']!r}, not a pair") from None
        for key in ("sampler", "seed", "batch_size", "shard"):
            if theirs[key] != mine[key]:
                raise ValueError(
                    f"state_dict has {key}={state[key]!r} but this loader has {key}={mine[key]!r}"
                )
        step = _check_step(state["step"])
        if self._closed:
            raise ClosedError("the DataLoader is closed")
        self._reset()
        self._step = step

    # -- lifetime ----------------------------------------------------------

    def _reset(self) -> None:
        pipe, self._pipe = self._pipe, None
        if pipe is not None:
            self._step = pipe.next_out
            pipe.stop()

    def close(self) -> None:
        """Stop the workers and drop prefetched batches. Safe to call twice;
        ``next()`` then raises :class:`loaderx.errors.ClosedError`. The
        datasets stay open."""
        self._closed = True
        self._reset()

    def __enter__(self) -> "DataLoader":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            pipe = self._pipe
            if pipe is not None:
                pipe.stop(join_timeout=0.0)
        except Exception:
            pass
