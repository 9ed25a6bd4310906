"""Worker processes for a :class:`loaderx.dataloader.DataLoader` whose
transform is Python code that the GIL would serialise on threads.

It stays one file past 700 lines because the worker's loop and the consumer's
dispatch speak one message protocol (job, done, error, grow, slot, drop,
cancel, skip, cursor, ready, fatal, stop) about the slots between them; split, each
half would only make sense next to the other. The shared memory itself (the
named segments, the slots, a batch flattened into them) is
:mod:`loaderx.loader._shm`.

A :class:`ProcessPool` starts its workers with ``spawn`` (or ``forkserver``),
never ``fork``: the Go runtime of the native library does not survive a fork.
Each worker unpickles the loader's recipe once: the stores (a dataset pickles
as its path and opens read-only in the worker), NumPy streams (a memmap is
reopened from its file; an in-memory array is copied once into a shared
segment at start), the sampler and the transform. It then makes whole steps
with the thread mode's own code (:class:`loaderx.loader._pipeline.Pipeline`: sample,
gather, transform) and copies the finished batch into a shared-memory *slot*
that the consumer's process created. Only small metadata crosses the pipe:
the step, the slot, and per array its offset, dtype and shape.

The consumer drives everything from ``next()``; there is no thread in the
consumer's process. It keeps up to ``prefetch`` steps dispatched (to the
worker with the fewest outstanding), waits on the workers' pipes and process
sentinels, and yields step ``s`` as NumPy views of its slot: no copy. A slot
is dispatched again only once no view of it is referenced any more (the
:class:`loaderx.loader._pipeline.BufferPool` rule, on the slot's base array). Views
rather than a copy out: copying a 64 MiB batch out of its slot took 5-12 ms
here, on the consumer's thread, which is the training loop's, against
microseconds for the views; the one copy a batch costs is the worker's, into
its slot, beside the other workers.

Failures: an exception while making a step is raised at that step as a
:class:`loaderx.errors.WorkerError` chained to the original exception (whose
cause is the worker's traceback); the step counts as consumed. A worker that
dies fails the step it was making; the steps queued behind it are made again
by a fresh worker. A worker that cannot start (its recipe does not unpickle)
breaks the loader: every ``next()`` raises.

Cleanup: the consumer's process owns every segment and unlinks it when the
pool is closed, garbage-collected or the interpreter exits; a view the
consumer still holds stays valid (only the name goes). A worker whose
consumer died unlinks the segments it knows, so a killed consumer leaves
nothing behind either. No segment is registered with multiprocessing's
resource tracker, so it never warns about (or unlinks) them behind the
pool's back.
"""

from __future__ import annotations

import collections
import contextlib
import copy
import ctypes
import mmap
import multiprocessing
import pickle
import signal
import sys
import time
import traceback
import warnings
import weakref
from collections.abc import Callable
from multiprocessing import connection as mp_connection
from typing import Any

import numpy as np

from loaderx.errors import ClosedError, CorruptStoreError, LoaderxError, WorkerError
from loaderx.loader._cursor import Parts, make_cursor, parts_of, seek_cursor
from loaderx.loader._packing import PackPool, PackStream
from loaderx.loader._pipeline import ArrayStream, BufferPool, Pipeline, Stream
from loaderx.loader._ragged import RaggedPool, RaggedStream
from loaderx.loader._shm import (
    _ALIGN,
    _ArraySource,
    _attach,
    _drop,
    _flatten,
    _layout,
    _map,
    _memmap_source,
    _Names,
    _Slot,
    _slot_refs,
    _unflatten,
    _unlink,
    _views,
)
from loaderx.store import _native

#: the start methods a process pool accepts (``fork`` would copy the Go runtime)
START_METHODS = ("spawn", "forkserver")

_GROWTH = 1.25  # headroom when a slot is replaced by a larger one
_CURSORS_KEPT = 64  # the cursors after the last steps handed out that the consumer keeps
_POLL = 0.1  # seconds between liveness checks while waiting for a step
_JOIN_TIMEOUT = 2.0  # seconds close() waits for workers before terminating them


# -- the worker process ------------------------------------------------------


def _exception_message(e: BaseException) -> tuple[bytes | None, str, str, str]:
    """An exception as ``(pickle or None, type name, message, traceback text)``."""
    t = type(e)
    blob: bytes | None
    try:
        blob = pickle.dumps(e)
        pickle.loads(blob)  # an exception whose __init__ takes other arguments fails here
    except Exception:
        blob = None
    tb = "".join(traceback.format_exception(t, e, e.__traceback__))
    return blob, f"{t.__module__}.{t.__qualname__}" if t.__module__ != "builtins" else t.__qualname__, str(e), tb


def _keep_freed_memory() -> None:
    """With glibc, serve large blocks from the heap and keep freed ones: a
    transform that allocates a new batch array every step then reuses pages
    instead of faulting in fresh ones (a 64 MiB batch of the bench's
    augmentation: 61 ms with faults, 34 ms without). Only in worker
    processes, which are the pool's own."""
    if not sys.platform.startswith("linux"):
        return
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # not glibc (musl has no mallopt)
        return
    mallopt(-3, 1 << 30)  # M_MMAP_THRESHOLD
    mallopt(-1, 1 << 30)  # M_TRIM_THRESHOLD


def _worker_main(conn: Any, recipe: bytes) -> None:
    """A worker process: make the steps the consumer sends, until it says
    stop (or its end of the pipe closes)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the consumer's to handle
    _keep_freed_memory()
    maps: dict[str, tuple[mmap.mmap, np.ndarray]] = {}
    known: set[str] = set()  # every live segment name this worker was told of
    try:
        try:
            spec = pickle.loads(recipe)
            _native.set_threads(1)  # the processes are the parallelism
            bs = spec["batch_size"]
            streams: list[Stream] = []
            for name, src in spec["streams"]:
                src = _reopen(name, src, known)
                if isinstance(src, PackStream):
                    pool: Any = PackPool(src, bs, 2)
                else:
                    pool = RaggedPool(src, bs, 2) if isinstance(src, RaggedStream) else BufferPool(
                        (bs, *src.item_shape), src.dtype, 2)
                streams.append((name, src, pool))
            pipe = Pipeline(streams, spec["sampler"], spec["transform"], 0, 1, 0, False)
        except BaseException as e:
            conn.send(("fatal", *_exception_message(e)))
            return
        conn.send(("ready",))
        indices = np.empty(pipe.sampler.batch_size, dtype=np.int64)
        try:
            _serve(conn, pipe, indices, maps, known, spec["own_shard"])
        except ValueError as e:  # a cursor the loader accepted does not fit here
            conn.send(("fatal", *_exception_message(e)))
    except (EOFError, OSError):
        # The consumer is gone without saying stop: nobody else will unlink.
        # Jobs still in the pipe name slots this worker has not mapped yet.
        with contextlib.suppress(EOFError, OSError):
            while True:
                _note_names(conn.recv(), known)
        for name in known:
            _unlink(name)


def _reopen(name: str, src: Any, known: set[str]) -> Any:
    """A stream as a worker uses it: a NumPy one reopened (its segment names
    added to ``known``), a mixture's over its reopened per-source streams."""
    if isinstance(src, _ArraySource):
        arr, names = src.open()
        known.update(names)
        return ArrayStream(name, arr)
    parts = getattr(src, "mixture_parts", None)
    if parts is not None:
        return src.with_parts([(s, _reopen(f"{name}/{s}", p, known)) for s, p in parts])
    return src


def _note_names(msg: tuple[Any, ...], known: set[str]) -> None:
    """Keep ``known`` up to date with the segment names a message gives or retires."""
    if msg[0] == "job":
        known.add(msg[4])
    elif msg[0] == "slot":
        known.add(msg[2])
    elif msg[0] == "drop":
        known.discard(msg[1])


def _cursor_after(step: int, parts: Parts) -> Any:
    """The cursor at the step after ``step`` (what the loader's state holds
    once it yielded ``step``), made here, where the token index and the
    schedule are already there; None when the loader needs none, or when it
    cannot be made (the consumer then makes it itself, if asked)."""
    if not parts:
        return None
    try:
        return make_cursor(step + 1, parts)
    except Exception:
        return None


def _serve(
    conn: Any,
    pipe: Pipeline,
    indices: np.ndarray,
    maps: dict[str, tuple[mmap.mmap, np.ndarray]],
    known: set[str],
    own_shard: tuple[int, int] | None = None,
) -> None:
    jobs: collections.deque[tuple[Any, ...]] = collections.deque()
    replacement: dict[int, tuple[str, int]] = {}
    parts = parts_of(pipe.streams, pipe.sampler, own_shard)  # what a resume cursor is about, if anything

    def handle(msg: tuple[Any, ...]) -> bool:
        """Queue a job or act on another message; False on stop."""
        _note_names(msg, known)
        kind = msg[0]
        if kind == "job":
            jobs.append(msg)
        elif kind == "drop":
            _drop(maps, msg[1])
        elif kind == "cancel":  # a new run: jobs of older runs are not made
            keep = []
            for job in jobs:
                if job[1] < msg[1]:
                    conn.send(("skip", job[1], job[2], job[3]))
                else:
                    keep.append(job)
            jobs.clear()
            jobs.extend(keep)
        elif kind == "slot":
            replacement[msg[1]] = (msg[2], msg[3])
        elif kind == "cursor":  # the loader loaded a state: seek as it did, before its new run's jobs
            seek_cursor(msg[1], parts)
        elif kind == "stop":
            return False
        return True

    while True:
        while conn.poll():  # take in everything sent so far: a cancel must see the jobs before it
            if not handle(conn.recv()):
                return
        if not jobs:
            if not handle(conn.recv()):
                return
            continue
        _, gen, step, slot_id, name, size = jobs.popleft()
        try:
            out, raw = pipe.produce(step, indices)
            arrays: list[np.ndarray] = []
            skeleton = _flatten(out, arrays, "the batch")
            specs, needed = _layout(arrays)
        except BaseException as e:
            conn.send(("error", gen, step, slot_id, *_exception_message(e)))
            continue
        if needed > size:  # ask for a larger slot; the batch waits here
            conn.send(("grow", gen, step, slot_id, needed))
            while slot_id not in replacement:
                if not handle(conn.recv()):
                    return
            name, size = replacement.pop(slot_id)
        if arrays:
            base = _attach(maps, name, size)
            for dst, src in zip(_views(base, specs), arrays):
                dst[...] = src
            del dst, src, base
        del out, arrays
        for (_, _, pool), buf in zip(pipe.streams, raw):
            pool.give(buf)
        del raw
        conn.send(("done", gen, step, slot_id, (skeleton, specs), _cursor_after(step, parts)))


# -- the consumer's side -----------------------------------------------------


class _Worker:
    __slots__ = ("index", "proc", "conn", "heard", "ready")

    def __init__(self, index: int, proc: Any, conn: Any) -> None:
        self.index = index
        self.proc = proc
        self.conn = conn
        self.heard = False  # has it sent anything yet
        self.ready = False  # has it set up its streams, sampler and transform


class _Failure:
    __slots__ = ("error",)

    def __init__(self, error: BaseException) -> None:
        self.error = error


class _RemoteTraceback(Exception):
    """The traceback of an exception raised in a worker process."""

    def __str__(self) -> str:
        return str(self.args[0])


def _shutdown(workers: list[_Worker | None], names: _Names, timeout: float) -> None:
    """End the worker processes (asking first, waiting up to ``timeout``
    seconds, then terminating) and unlink every segment."""
    live = [w for w in workers if w is not None]
    workers[:] = [None] * len(workers)
    for w in live:
        with contextlib.suppress(OSError, ValueError):
            w.conn.send(("stop",))
    deadline = time.monotonic() + timeout
    for w in live:
        w.proc.join(max(0.0, deadline - time.monotonic()))
    for w in live:
        if w.proc.is_alive():
            w.proc.terminate()
    for w in live:
        w.proc.join(1.0)
        if w.proc.is_alive():
            w.proc.kill()
            w.proc.join(1.0)
        w.conn.close()
        with contextlib.suppress(ValueError):  # still running after SIGKILL (uninterruptible sleep)
            w.proc.close()
    names.unlink_all()


def check_picklable(obj: Any, what: str) -> bytes:
    """``pickle.dumps(obj)``, or a TypeError naming ``what`` that cannot cross
    to a worker process."""
    try:
        return pickle.dumps(obj)
    except Exception as e:
        raise TypeError(
            f"workers='process' needs {what} to be picklable, and {obj!r} is not "
            f"({type(e).__name__}: {e}); define it at module level (a lambda, a nested "
            "function or an object holding an open file or lock cannot cross to a worker process)"
        ) from e


def process_blocker(streams: list[Stream]) -> str | None:
    """Why a worker process could not reopen one of ``streams`` without a
    copy, or None when each is a store or a file-backed memmap (an
    in-memory array would be copied whole into shared memory)."""
    for name, ds, _ in streams:
        parts = getattr(ds, "mixture_parts", None)
        if parts is not None:  # a mixture's stream: each source's stream in turn
            why = process_blocker([(f"{name}/{s}", p, None) for s, p in parts])
            if why is not None:
                return why
            continue
        if isinstance(ds, ArrayStream):
            if _memmap_source(ds.array) is None:
                return f"stream {name!r} is an in-memory NumPy array (a worker process needs a store or a np.memmap)"
            continue
        try:
            pickle.dumps(ds)
        except Exception as e:
            return f"stream {name!r} does not pickle ({type(e).__name__}: {e})"
    return None


def batch_blocker(batch: Any) -> tuple[str | None, int]:
    """Why a worker process could not hand ``batch`` (a transform's result)
    back (None when it can), and the bytes of its arrays (what a worker
    copies into shared memory)."""
    arrays: list[np.ndarray] = []
    try:
        _flatten(batch, arrays, "the batch")
    except TypeError as e:
        return str(e), 0
    return None, sum(a.nbytes for a in arrays)


def portable_streams(streams: list[Stream], names: _Names) -> tuple[list[tuple[str, Any]], list[mmap.mmap]]:
    """The streams as a worker reopens them; an in-memory array is copied
    into a new shared segment (the returned mappings keep it in this process
    until the pool closes)."""
    out: list[tuple[str, Any]] = []
    keep: list[mmap.mmap] = []
    for name, ds, _ in streams:
        parts = getattr(ds, "mixture_parts", None)
        if parts is not None:  # a mixture's stream: each source's stream reopens like a stream
            got, more = portable_streams([(s, p, None) for s, p in parts], names)
            keep.extend(more)
            out.append((name, ds.with_parts(got)))
            continue
        if isinstance(ds, ArrayStream):
            src = _memmap_source(ds.array)
            if src is None:
                arr = ds.array
                seg = names.new()
                mm = _map(seg, max(arr.nbytes, 1), create=True)
                keep.append(mm)
                dst = np.frombuffer(mm, dtype=np.uint8, count=arr.nbytes).view(arr.dtype).reshape(arr.shape)
                dst[...] = arr
                del dst
                src = _ArraySource(arr.dtype, tuple(arr.shape), None, 0, seg)
            out.append((name, src))
        else:
            if isinstance(ds, RaggedStream):
                if ds.dataset.writable:  # the worker reads; a writable copy would take the writer lock
                    ds = copy.copy(ds)
                    ds.dataset = type(ds.dataset)._deferred(ds.dataset.path)
            elif getattr(ds, "writable", False):  # a store (a mixture's source stream is neither)
                ds = type(ds)._deferred(ds.path)
            check_picklable(ds, f"stream {name!r}")
            out.append((name, ds))
    return out, keep


class ProcessPool:
    """Worker processes making the steps of one loader, and the shared
    memory they hand batches back in.

    Args:
        streams: ``(name, source, pool)`` per stream, as the thread mode has
            them (the pools are not used here).
        sampler: draws the indices of each step (pickled to the workers).
        transform: applied to each batch in the worker, or None.
        num_workers: processes to start (at least 1).
        prefetch: steps dispatched ahead of the consumer.
        start_method: ``"spawn"`` or ``"forkserver"``.
        slot_bytes: the first size of a slot (a slot grows when a batch
            needs more).
        own_shard: the ``(rank, world)`` whose own indices the packed
            streams pack (a custom sampler's), for the resume cursor.
    """

    def __init__(
        self,
        streams: list[Stream],
        sampler: Any,
        transform: Callable[[Any], Any] | None,
        num_workers: int,
        prefetch: int,
        start_method: str,
        slot_bytes: int,
        own_shard: tuple[int, int] | None = None,
    ) -> None:
        self.num_workers = num_workers
        self.prefetch = prefetch
        self._ctx: Any = multiprocessing.get_context(start_method)  # a spawn or forkserver context
        self._names = _Names()
        self._workers: list[_Worker | None] = [None] * num_workers
        self._finalizer = weakref.finalize(self, _shutdown, self._workers, self._names, 0.5)
        self._keep: list[mmap.mmap] = []
        try:
            portable, self._keep = portable_streams(streams, self._names)
            recipe = {
                "streams": portable,
                "sampler": sampler,
                "transform": transform,
                "batch_size": sampler.batch_size,
                "own_shard": own_shard,
            }
            check_picklable(getattr(sampler, "sampler", sampler), "the sampler")  # a custom one: the user's object
            if transform is not None:
                check_picklable(transform, "transform")
            self._recipe = pickle.dumps(recipe)
        except BaseException:
            self._finalizer()
            raise
        self._slot_bytes = max(_ALIGN, int(slot_bytes * _GROWTH))
        self._slot_ids = 0
        self._free: list[_Slot] = []
        self._handed: collections.deque[_Slot] = collections.deque()
        self._capacity = prefetch + num_workers + 3  # handed-out slots remembered for reuse
        self._baseline = _slot_refs(_Slot(-1, "", 0, np.empty(0, dtype=np.uint8)))
        self._inflight: dict[int, tuple[int, int, int, _Slot]] = {}  # slot id -> worker, gen, step, slot
        self._gen = 0
        self._results: dict[int, Any] = {}
        self._redo: list[int] = []
        self._broken: BaseException | None = None
        self.closed = False
        self.next_out = 0
        self._claim = 0
        self._end: int | None = None
        self._cursor: Any = None  # the last cursor the loader sought to (every worker seeks to it)
        #: step -> the cursor there, after the last steps handed out, as their workers made them
        self.cursors: collections.OrderedDict[int, Any] = collections.OrderedDict()

    # -- runs --------------------------------------------------------------

    def set_cursor(self, cursor: Any) -> None:
        """Have every worker seek to a cursor the loader accepted, before
        the jobs of the next run (a worker started later seeks to it first)."""
        self._cursor = cursor
        for w in self._workers:
            if w is not None:
                self._send(w, ("cursor", cursor))

    def begin(self, start_step: int, end: int | None) -> None:
        """Start a run at ``start_step``: work of an earlier run is dropped
        (its slots come back as the workers report)."""
        if self._inflight or self._results or self._redo:
            self._gen += 1
            for w in self._workers:
                if w is not None:
                    self._send(w, ("cancel", self._gen))
        for item in self._results.values():  # made but never handed out: reusable now
            if not isinstance(item, _Failure):
                self._free.append(item[0])
        self._results.clear()
        self._redo.clear()
        self.cursors.clear()
        self.next_out = self._claim = start_step
        self._end = end

    def start(self) -> None:
        """Start every worker process now rather than at the first step (they
        set up while the caller goes on: see :meth:`ready`)."""
        for k in range(self.num_workers):
            self._worker(k)

    def ready(self, timeout: float = 0.0) -> bool:
        """Whether every worker has set up its streams, sampler and
        transform, waiting up to ``timeout`` seconds for them to report.
        Raises the :class:`loaderx.errors.WorkerError` of a worker that
        could not."""
        deadline = time.monotonic() + timeout
        while True:
            self._pump(min(max(0.0, deadline - time.monotonic()), _POLL))
            if self._broken is not None:
                raise self._broken
            if all(w is not None and w.ready for w in self._workers):
                return True
            if time.monotonic() >= deadline:
                return False

    def pids(self) -> list[int]:
        """The process ids of the running workers."""
        return [w.proc.pid for w in self._workers if w is not None]

    def next(self) -> Any:
        """The batch of the next step, in step order (see the module docs)."""
        _native.check_fork()
        if self.closed:
            raise ClosedError("the DataLoader is closed")
        if self._broken is not None:
            raise self._broken
        step = self.next_out
        if self._end is not None and step >= self._end:
            raise StopIteration
        self._fill()
        while step not in self._results:
            self._pump(_POLL)
            if self._broken is not None:
                raise self._broken
            self._fill()
        item = self._results.pop(step)
        self.next_out = step + 1
        if isinstance(item, _Failure):
            self._fill()
            error = item.error
            del item
            try:
                raise error
            finally:
                del error
        slot, (skeleton, specs), after = item
        if after is not None:
            self.cursors[step + 1] = after
            while len(self.cursors) > _CURSORS_KEPT:
                self.cursors.popitem(last=False)
        del item
        value = _unflatten(skeleton, _views(slot.base, specs))
        self._handed.append(slot)
        while len(self._handed) > self._capacity:
            self._retire(self._handed.popleft())
        self._fill()
        return value

    # -- dispatch ----------------------------------------------------------

    def _take_slot(self) -> _Slot:
        if self._free:
            return self._free.pop()
        handed = self._handed
        base = self._baseline
        for i in range(len(handed) - 1, -1, -1):  # newest first: likeliest still in cache
            if _slot_refs(handed[i]) == base:
                slot = handed[i]
                del handed[i]
                return slot
        return self._new_slot(self._slot_bytes)

    def _new_slot(self, size: int) -> _Slot:
        name = self._names.new()
        mm = _map(name, size, create=True)
        self._slot_ids += 1
        return _Slot(self._slot_ids, name, size, np.frombuffer(mm, dtype=np.uint8))

    def _retire(self, slot: _Slot) -> None:
        """Forget a slot: unlink it and let the workers unmap it (a view the
        consumer holds keeps its pages)."""
        self._names.unlink(slot.name)
        for w in self._workers:
            if w is not None:
                self._send(w, ("drop", slot.name))

    def _worker(self, k: int) -> _Worker | None:
        w = self._workers[k]
        if w is None and not self.closed:
            here, there = self._ctx.Pipe(duplex=True)
            proc = self._ctx.Process(
                target=_worker_main, args=(there, self._recipe), name=f"loaderx-worker-{k}", daemon=True
            )
            proc.start()
            there.close()
            w = self._workers[k] = _Worker(k, proc, here)
            if self._cursor is not None:
                self._send(w, ("cursor", self._cursor))
        return w

    def _fill(self) -> None:
        """Dispatch steps until ``prefetch`` are ahead of the consumer."""
        if self._broken is not None or self.closed:
            return
        load = [0] * self.num_workers
        for wk, gen, _, _ in self._inflight.values():
            if gen == self._gen:
                load[wk] += 1
        while True:
            if self._redo:
                step = self._redo[0]
            else:
                step = self._claim
                if step >= self.next_out + self.prefetch or (self._end is not None and step >= self._end):
                    return
            k = min(range(self.num_workers), key=load.__getitem__)
            w = self._worker(k)
            if w is None:
                return
            slot = self._take_slot()
            if self._redo:
                self._redo.pop(0)
            else:
                self._claim += 1
            self._inflight[slot.id] = (k, self._gen, step, slot)
            load[k] += 1
            self._send(w, ("job", self._gen, step, slot.id, slot.name, slot.size))

    def _send(self, w: _Worker, msg: tuple[Any, ...]) -> None:
        with contextlib.suppress(OSError, ValueError):  # a dead worker: its sentinel reports it
            w.conn.send(msg)

    # -- collection --------------------------------------------------------

    def _pump(self, timeout: float) -> None:
        """Handle what the workers sent (waiting up to ``timeout`` seconds
        for something), and any worker that died."""
        live = [w for w in self._workers if w is not None]
        if not live:
            return
        waitables: dict[Any, _Worker] = {}
        for w in live:
            waitables[w.conn] = w
            waitables[w.proc.sentinel] = w
        ready: list[Any] = mp_connection.wait(list(waitables), timeout)
        dead = []
        for obj in ready:
            w = waitables[obj]
            if obj is w.conn:
                try:
                    while w.conn.poll():
                        w.heard = True
                        self._handle(w, w.conn.recv())
                except (EOFError, OSError):
                    dead.append(w)
            else:
                dead.append(w)
        for w in dict.fromkeys(dead):
            if self._workers[w.index] is w:
                self._died(w)

    def _handle(self, w: _Worker, msg: tuple[Any, ...]) -> None:
        kind = msg[0]
        if kind == "ready":
            w.ready = True
            return
        if kind == "fatal":
            blob, tname, text, tb = msg[1:]
            err: LoaderxError = WorkerError(
                f"worker process {w.proc.pid} could not set up the loader's streams, sampler or "
                f"transform: {tname}: {text}"
            )
            err.__cause__ = self._original(blob, tname, text, tb)
            self._broken = err
            return
        gen, step, slot_id = msg[1], msg[2], msg[3]
        if kind == "grow":
            _, _, _, slot = self._inflight[slot_id]
            self._slot_bytes = max(self._slot_bytes, int(msg[4] * _GROWTH))
            self._retire(slot)
            new = self._new_slot(self._slot_bytes)
            new.id = slot.id
            self._inflight[slot_id] = (w.index, gen, step, new)
            self._send(w, ("slot", slot_id, new.name, new.size))
            return
        _, _, _, slot = self._inflight.pop(slot_id)
        if gen != self._gen:  # a cancelled run's step
            self._free.append(slot)
            return
        if kind == "done":
            self._results[step] = (slot, msg[4], msg[5])
        elif kind == "error":
            self._free.append(slot)
            blob, tname, text, tb = msg[4:]
            original = self._original(blob, tname, text, tb)
            if isinstance(original, CorruptStoreError):
                # damage is damage wherever it was read: the same exception
                # as in thread mode (its message names the step, the stream,
                # the store's file and the record)
                err = CorruptStoreError(f"{text} (read in worker process {w.proc.pid})")
            else:
                err = WorkerError(f"step {step}: {tname}: {text} (raised in worker process {w.proc.pid})")
            err.__cause__ = original
            self._results[step] = _Failure(err)
        else:  # "skip" of the current run cannot happen; treat it as lost work
            self._free.append(slot)
            self._redo.append(step)
            self._redo.sort()

    @staticmethod
    def _original(blob: bytes | None, tname: str, text: str, tb: str) -> BaseException:
        """The worker's exception, unpickled (or a stand-in naming its type),
        its cause the worker's traceback."""
        original: BaseException | None = None
        if blob is not None:
            try:
                original = pickle.loads(blob)
            except Exception:
                original = None
        if original is None:
            original = RuntimeError(f"{tname}: {text}")
        original.__cause__ = _RemoteTraceback(f"\n\"\"\"\n{tb}\"\"\"")
        return original

    def _died(self, w: _Worker) -> None:
        """A worker ended without being asked to: fail the step it was
        making and queue the rest of its steps for a fresh worker."""
        self._workers[w.index] = None
        w.proc.join(1.0)
        code = w.proc.exitcode
        if code is not None and code < 0:
            try:
                how = f"killed by {signal.Signals(-code).name}"
            except ValueError:
                how = f"killed by signal {-code}"
        else:
            how = f"exit code {code}"
        w.conn.close()
        mine = sorted(
            (step, gen, sid) for sid, (k, gen, step, _) in self._inflight.items() if k == w.index
        )
        lost = []
        for step, gen, sid in mine:
            _, _, _, slot = self._inflight.pop(sid)
            self._free.append(slot)
            if gen == self._gen:
                lost.append(step)
        if self._broken is not None:
            return
        if not w.heard and code is not None and code > 0:
            # it never got as far as its loop (an import failed before the
            # recipe was read): a new worker would fail the same way
            self._broken = WorkerError(
                f"worker process {w.proc.pid} could not start ({how}); its error is on stderr (a "
                "script that makes the loader at module level needs an `if __name__ == '__main__':` "
                "guard, since each spawned worker imports the script)"
            )
            return
        if not lost:
            warnings.warn(
                f"a loaderx worker process (pid {w.proc.pid}) ended while idle ({how}); "
                "no step was lost and a new worker takes its place",
                RuntimeWarning,
                stacklevel=4,
            )
            return
        self._results[lost[0]] = _Failure(
            WorkerError(
                f"step {lost[0]}: worker process {w.proc.pid} died while making it ({how}); "
                "the steps after it are made by a new worker"
            )
        )
        self._redo = sorted(set(self._redo) | set(lost[1:]))

    # -- lifetime ----------------------------------------------------------

    def close(self, timeout: float = _JOIN_TIMEOUT) -> None:
        """End the workers and unlink every segment. Safe to call twice."""
        self.closed = True
        self._results.clear()
        self._inflight.clear()
        self._free.clear()
        self._handed.clear()
        _shutdown(self._workers, self._names, timeout)
        self._keep.clear()
        self._finalizer.detach()


class ProcessPipeline:
    """One run of a loader on a :class:`ProcessPool`, shaped like
    :class:`loaderx.loader._pipeline.Pipeline` for the loader: ``next()``,
    ``next_out`` and ``stop()`` (which cancels the run; the processes stay
    for the next run)."""

    def __init__(self, pool: ProcessPool, start_step: int, end: int | None) -> None:
        self.pool = pool
        self.num_workers = pool.num_workers
        pool.begin(start_step, end)

    @property
    def next_out(self) -> int:
        return self.pool.next_out

    def prime(self) -> None:
        """Dispatch the first steps now, before the first ``next()``."""
        self.pool._fill()

    def cursor_at(self, step: int) -> Any:
        """The resume cursor at ``step`` when the worker of the step before
        made it (one of the last steps handed out), else None."""
        return self.pool.cursors.get(step)

    def next(self) -> Any:
        return self.pool.next()

    def stop(self, join_timeout: float = _JOIN_TIMEOUT) -> None:
        if not self.pool.closed:
            self.pool.begin(self.pool.next_out, self.pool._end)
