"""The moving parts behind :class:`loaderx.dataloader.DataLoader`.

:class:`BufferPool` recycles the batch arrays of one stream. A
:class:`Pipeline` is one run of a loader from a given step: the worker
threads, the window of steps claimed ahead of the consumer, and the finished
steps waiting to be handed out in order.

Every worker is the same loop (:meth:`Pipeline._serve`): take a job, make
something of it, hand the result on, until the pipeline stops. The roles
differ only in where a job comes from and what is made of it:

* a *step worker* claims the next step and samples, gathers and transforms it;
* the *gatherer* of a large-batch pipeline claims the next step, samples and
  gathers it, and queues the batch for the transform workers;
* a *transform worker* takes a gathered batch from that queue and transforms it.

A failure while making a step is handed to the consumer at that step.
"""

from __future__ import annotations

import atexit
import collections
import queue
import sys
import threading
import time
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from loaderx.errors import ClosedError, CorruptStoreError
from loaderx.store import _native

if TYPE_CHECKING:
    from loaderx.loader.sampler import Sampler

Batch = dict[str, np.ndarray]
#: a finished step as the consumer receives it: the item to yield and the
#: batch arrays to offer back to their pools
Finished = tuple[Any, list[np.ndarray]]

_POLL = 0.1  # seconds between checks of the stop flag while waiting
_JOIN_TIMEOUT = 2.0  # total seconds stop() waits for workers to finish


class BufferPool:
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

    ragged = False  # a ragged stream's pool (loaderx.loader._ragged.RaggedPool) says True

    def __init__(self, shape: tuple[int, ...], dtype: np.dtype, capacity: int) -> None:
        self.shape = shape
        self.dtype = dtype
        self.nbytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
        self.capacity = capacity
        self._free: collections.deque[np.ndarray] = collections.deque()
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


class ArrayStream:
    """A NumPy array (or memmap) used as a stream: gathered with
    ``np.take(out=)`` into the loader's buffers."""

    def __init__(self, name: str, array: np.ndarray) -> None:
        if array.ndim < 1:
            raise ValueError(f"stream {name!r} is a 0-d array; a stream needs a first (record) axis")
        if array.dtype.hasobject:
            raise TypeError(f"stream {name!r} has dtype {array.dtype}; object arrays cannot be gathered")
        self.array = array
        self.dtype = array.dtype
        self.item_shape: tuple[int, ...] = tuple(array.shape[1:])
        self.nbytes_per_item = int(np.prod(self.item_shape, dtype=np.int64)) * array.dtype.itemsize

    def __len__(self) -> int:
        return int(self.array.shape[0])

    def _gather_unchecked(self, indices: np.ndarray, out: np.ndarray) -> None:
        # indices are in range (the loader checks them); "clip" skips the
        # buffered copy that mode="raise" makes when given out=
        np.take(self.array, indices, axis=0, out=out, mode="clip")


#: ``(name, source, pool)``: a dense source with a :class:`BufferPool`, or a
#: ragged stream (``gather_into``) with a pool whose ``ragged`` is True
Stream = tuple[str, Any, Any]


class _Failure:
    """A step whose production raised; re-raised at that step."""

    __slots__ = ("error",)

    def __init__(self, error: BaseException) -> None:
        self.error = error


_LIVE: weakref.WeakSet[Pipeline] = weakref.WeakSet()


@atexit.register
def _stop_all() -> None:
    for pipe in list(_LIVE):
        pipe.stop(join_timeout=0.5)


class Pipeline:
    """One run of a loader from ``start_step``. The workers refer to this
    object, never to the loader, so a loader that goes out of scope is
    collected and stops its workers.

    Args:
        streams: ``(name, dataset, pool)`` per stream.
        sampler: draws the indices of each step.
        transform: applied to each batch dict, or None.
        num_workers: worker threads; 0 makes every step in the caller.
        prefetch: steps that may be claimed ahead of the consumer.
        start_step: the first step handed out.
        one_gatherer: with workers, gather on one thread only and let the
            workers transform (for batches large enough that one native
            gather already spreads over every core).
        end: the first step not produced (a finite pass ends there: ``next``
            raises StopIteration), or None for an endless run.
        timer: None, or a :class:`loaderx.loader._autoworkers.StepTimer` that is
            told, while it is ``active``, how long each step's gather and
            transform took (``workers="auto"`` decides from it).

    ``sampler`` is called as ``sampler(step, out)`` with an int64 buffer of
    ``sampler.batch_size`` and returns the indices to gather; it may return
    fewer (the short last batch of a pass), and the batch arrays are then
    the leading rows of the pool's buffers.
    """

    def __init__(
        self,
        streams: list[Stream],
        sampler: Sampler,
        transform: Callable[[Batch], Any] | None,
        num_workers: int,
        prefetch: int,
        start_step: int,
        one_gatherer: bool,
        end: int | None = None,
        timer: Any = None,
    ) -> None:
        self.streams = streams
        self.sampler = sampler
        # bound once: calling the bound method skips the lookup of __call__
        # that calling the instance makes on every step
        self.draw = sampler.__call__
        self.transform = transform
        self.num_workers = num_workers
        self.prefetch = prefetch
        self.next_out = start_step  # the next step handed to the consumer
        self.next_claim = start_step  # the next step a worker will produce
        self.end = end
        self.timer = timer
        self.results: dict[int, Any] = {}
        self.lock = threading.Lock()
        self.ready = threading.Condition(self.lock)  # consumer waits for a step
        self.space = threading.Condition(self.lock)  # workers wait for the window
        self.stopped = False
        self.threads: list[threading.Thread] = []
        self.sync_indices = np.empty(sampler.batch_size, dtype=np.int64)
        # A batch big enough that one native gather already spreads over
        # every core is gathered by one thread only: a second gather beside
        # it adds cache and scheduler contention, and gathers that alternate
        # between calling threads measured ~40% slower per batch than one
        # thread calling throughout. The other workers then only transform.
        self.one_gatherer = num_workers > 0 and one_gatherer
        self.gathered: queue.Queue[tuple[int, Finished]] = queue.Queue()

    # -- production --------------------------------------------------------

    def gather(self, step: int, indices: np.ndarray) -> tuple[Batch, list[np.ndarray]]:
        """Sample the indices of ``step`` and gather every stream there."""
        idx = self.draw(step, indices)
        k = idx.shape[0]
        batch: Batch = {}
        raw = []
        for name, ds, pool in self.streams:
            buf = pool.take()
            try:
                if pool.ragged:  # a RaggedPool slot: one packed gather (packed rows depend on the step)
                    batch[name] = ds.gather_into(idx, buf, step)
                else:
                    rows = buf if k == buf.shape[0] else buf[:k]  # a view keeps buf referenced
                    ds._gather_unchecked(idx, rows)
                    batch[name] = rows
            except CorruptStoreError as e:
                # the native message names the store's file and the record;
                # the step and the stream say where the loader was. The
                # buffer, partly filled, is dropped with the step.
                raise CorruptStoreError(f"step {step}, stream {name!r}: {e}") from e
            raw.append(buf)
        return batch, raw

    def produce(self, step: int, indices: np.ndarray) -> Finished:
        """Sample, gather and transform ``step``."""
        batch, raw = self.timed_gather(step, indices)
        if self.transform is not None:
            out = self.apply(step, batch)
            del batch
            return out, raw
        return batch, raw

    def timed_gather(self, step: int, indices: np.ndarray) -> tuple[Batch, list[np.ndarray]]:
        """:meth:`gather`, its seconds told to the timer while it measures."""
        timer = self.timer
        if timer is None or not timer.active or self.transform is None:
            return self.gather(step, indices)
        t0 = time.perf_counter()
        got = self.gather(step, indices)
        timer.gathered(step, time.perf_counter() - t0)
        return got

    def apply(self, step: int, batch: Batch) -> Any:
        """Run the transform on the batch of ``step``. A StopIteration it
        raises would silently end the consumer's ``for`` loop, so it becomes
        a RuntimeError (chained) naming the step."""
        transform = self.transform
        assert transform is not None
        timer = self.timer
        try:
            if timer is None or not timer.active:
                return transform(batch)
            start = timer.transform_start()
            out = transform(batch)
            timer.transformed(step, start)
            return out
        except StopIteration as e:
            raise RuntimeError(
                f"the DataLoader's transform {transform!r} raised StopIteration at step {step}; "
                "a loader never ends, so a transform must not signal the end of iteration"
            ) from e

    def start(self) -> None:
        """Start the worker threads."""
        _LIVE.add(self)
        if not self.one_gatherer:
            roles = [(f"worker-{k}", self._step_worker) for k in range(self.num_workers)]
        elif self.transform is None:
            roles = [("gather", self._step_worker)]  # a lone worker: it only gathers
        else:
            roles = [("gather", self._gatherer)]
            roles += [(f"worker-{k}", self._transform_worker) for k in range(self.num_workers)]
        for name, target in roles:
            t = threading.Thread(target=target, name=f"loaderx-{name}", daemon=True)
            self.threads.append(t)
            t.start()

    def _claim_step(self) -> tuple[int, None] | None:
        """The next step to produce, once it is inside the prefetch window;
        None when the pipeline stops."""
        with self.lock:
            while not self.stopped and self.next_claim >= self.next_out + self.prefetch:
                self.space.wait(_POLL)
            if self.stopped:
                return None
            step = self.next_claim
            if self.end is not None and step >= self.end:
                return None  # the pass is fully claimed: this worker is done
            self.next_claim = step + 1
            return step, None

    def _claim_gathered(self) -> tuple[int, Finished] | None:
        """The next gathered step waiting for its transform; None when the
        pipeline stops."""
        while not self.stopped:
            try:
                return self.gathered.get(timeout=_POLL)
            except queue.Empty:
                continue
        return None

    def _publish(self, step: int, item: Any) -> bool:
        """Hand a finished step to the consumer; False when the pipeline stops."""
        with self.lock:
            if self.stopped:
                return False
            self.results[step] = item
            self.ready.notify()
        return True

    def _serve(
        self,
        claim: Callable[[], tuple[int, Any] | None],
        make: Callable[[int, Any], Any],
    ) -> None:
        """The loop every worker runs: claim a job, make it, publish what
        ``make`` returns (None: it was handed on, nothing to publish) or the
        exception it raised; until the pipeline stops. Nothing made is kept
        past its publication, so the consumer's buffers can be recycled."""
        while True:
            job = claim()
            if job is None:
                return
            step, payload = job
            del job
            try:
                item: Any = make(step, payload)
            except BaseException as e:  # handed to the consumer at this step
                item = _Failure(e)
            del payload
            if item is not None and not self._publish(step, item):
                return
            del item

    def _step_worker(self) -> None:
        """Samples, gathers and transforms whole steps."""
        indices = np.empty(self.sampler.batch_size, dtype=np.int64)
        self._serve(self._claim_step, lambda step, _: self.produce(step, indices))

    def _gatherer(self) -> None:
        """The one gathering thread of a large-batch pipeline with a
        transform: gathered steps go to the transform workers."""
        indices = np.empty(self.sampler.batch_size, dtype=np.int64)

        def hand_on(step: int, _: None) -> None:
            self.gathered.put((step, self.timed_gather(step, indices)))

        self._serve(self._claim_step, hand_on)

    def _transform_worker(self) -> None:
        """A transform worker of a large-batch pipeline."""
        def finish(step: int, gathered: Finished) -> Finished:
            batch, raw = gathered
            del gathered
            return self.apply(step, batch), raw

        self._serve(self._claim_gathered, finish)

    # -- consumption -------------------------------------------------------

    def next(self) -> Any:
        """The item of the next step, in step order; its batch arrays go back
        to their pools. A failure of that step is raised here, and
        StopIteration once a finite run reaches ``end``. Without workers
        the step is made here, in the caller. In a child of ``os.fork()``
        it raises :class:`loaderx.errors.ForkError`: the worker threads did
        not survive the fork, and a step prefetched before it belongs to
        the parent."""
        _native.check_fork()
        if self.num_workers:
            item = self._take_finished()
        else:
            if self.stopped:
                raise ClosedError("the DataLoader is closed")
            step = self.next_out
            if self.end is not None and step >= self.end:
                raise StopIteration
            try:
                item = self.produce(step, self.sync_indices)
            except Exception as e:
                item = _Failure(e)
            # a KeyboardInterrupt leaves the step unconsumed
            self.next_out = step + 1
        if isinstance(item, _Failure):
            error = item.error
            del item
            try:
                raise error
            finally:
                del error
        out, raw = item
        del item
        for (_, _, pool), buf in zip(self.streams, raw):
            pool.give(buf)
        return out

    def _take_finished(self) -> Any:
        """Wait for the worker's result of the next step and take it."""
        with self.lock:
            step = self.next_out
            results = self.results
            if self.end is not None and step >= self.end:
                raise StopIteration
            while step not in results:
                if self.stopped:
                    raise ClosedError("the DataLoader is closed")
                if not any(t.is_alive() for t in self.threads):
                    raise RuntimeError("the DataLoader's worker threads have exited")
                self.ready.wait(_POLL)
            item = results.pop(step)
            self.next_out = step + 1
            self.space.notify()
        return item

    def stop_claiming(self) -> int:
        """Let the workers claim no step past those already claimed (they
        finish those, then end) and return the first step left unclaimed:
        the step where another pipeline takes over."""
        with self.lock:
            step = self.next_out if self.num_workers == 0 else self.next_claim
            self.end = step if self.end is None else min(self.end, step)
            self.space.notify_all()
            return self.end

    def stop(self, join_timeout: float = _JOIN_TIMEOUT) -> None:
        """Stop the workers and drop finished steps, waiting up to
        ``join_timeout`` seconds in total for the threads to end."""
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
