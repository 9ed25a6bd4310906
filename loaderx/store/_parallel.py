"""Converting one input into a sharded dataset with worker processes, one
shard each at a time (``num_shards=`` of
:func:`loaderx.converter.from_numpy`, :func:`~loaderx.converter.from_iterator`
and :func:`loaderx.arrow.from_arrow`).

The caller (a converter) has already checked the input and decided the
codec once for the whole of it, so every shard is written with the same
codec, dictionary and element type. It hands :func:`run` one task per shard:
a module-level function and its arguments, pickled by reference to a
``spawn`` child (the Go runtime of the native library does not survive a
fork, so no process that loaded it is ever forked). One child runs per
usable CPU (:func:`max_workers`; more would only share the cores, each with
an interpreter of its own); each writes the shard it is given into the path
of a :class:`~loaderx.store.shards.ShardWriter` that the parent holds open,
so a commit by anyone else never deletes it, reports its progress and its
end over its pipe, and takes the next shard. Once every shard is written,
one :func:`~loaderx.store.shards.commit` names them in range order.

No large input crosses a pipe. A memory-mapped array is reopened from its
file by each child; an array in memory is first copied into a raw file
beside the shards, which the children map. Measured here (1 GiB of int32,
median of 5): writing the file took 0.37 s against 1.70 s to copy the array
into ``multiprocessing.shared_memory`` (every tmpfs page is faulted in on
first touch), and reading it back through a mapping 3.7 s against 1.7 s,
a read that the children share, so with two shards the file costs about
0.37 + 1.8 s of wall time against 1.7 + 0.9 s, on par; the file also cannot
run a small ``/dev/shm`` out of room (which kills the writer with SIGBUS),
needs no resource tracker and works wherever the shards do, so it is the
one way. A stream (:func:`from_iterator`) is spooled the same way: see
:class:`RaggedSpool`.

Failure: a child that raises, or dies (a signal, the OOM killer), makes
:func:`run` raise :class:`loaderx.errors.WorkerError` naming the shard and
its records, after it has killed the other children, waited for each (with
a timeout, so nothing hangs) and removed every shard and staging directory
of the call; nothing is committed. Ctrl-C does the same and re-raises
:class:`KeyboardInterrupt`. The children ignore SIGINT (the terminal sends it
to the whole process group): the parent ends them. A child whose parent
died stops at its next progress report, when the pipe breaks, or at once
when it is waiting for a task.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import pickle
import shutil
import signal
import traceback
from collections.abc import Callable, Sequence
from multiprocessing import connection as mp_connection
from typing import Any

import numpy as np

from loaderx._progress import Progress
from loaderx.errors import StoreExistsError, WorkerError
from loaderx.store import shards

#: Seconds between checks of the children while none reports.
_POLL = 0.25
#: Seconds to wait for a killed child to be reaped before giving up on it.
_REAP_TIMEOUT = 10.0
#: Bytes copied per piece into a raw file (an in-memory array, a spool).
_COPY_BYTES = 64 << 20


def check_num_shards(value: Any) -> int | None:
    """``num_shards`` as an int >= 1, or None; a clear error otherwise."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"num_shards must be None or an int >= 1, got {value!r}")
    if int(value) < 1:
        raise ValueError(f"num_shards must be at least 1, got {value!r}")
    return int(value)


def ranges(n: int, num: int) -> list[tuple[int, int]]:
    """``num`` contiguous ranges covering ``[0, n)`` in order, their sizes
    differing by at most one (some empty when ``num > n``)."""
    return [(i * n // num, (i + 1) * n // num) for i in range(num)]


def prepare_dir(path: str, overwrite: bool) -> bool:
    """Make sure ``path`` may become a sharded dataset and return whether it
    has to be created. It may be absent, an empty directory, or (with
    ``overwrite``) a sharded dataset, whose shards stay readable until the
    new manifest replaces them. A single store or any other content is
    refused: a dataset does not share its directory with other files."""
    if not os.path.lexists(path):
        return True
    if os.path.islink(path) or not os.path.isdir(path):
        raise StoreExistsError(f"{path!r} already exists and is not a directory")
    if not os.listdir(path):
        return False
    if not shards.is_sharded(path):
        raise StoreExistsError(
            f"{path!r} already exists and is not a sharded dataset (it holds "
            f"{sorted(os.listdir(path))[:5]}); num_shards= writes a new directory, or replaces "
            "a sharded dataset with overwrite=True"
        )
    if not overwrite:
        raise StoreExistsError(
            f"{path!r} already holds a sharded dataset; pass overwrite=True to replace it"
        )
    return False


def remove_entry(dataset_dir: str, name: str) -> None:
    """Remove ``name`` in ``dataset_dir`` and the hidden staging directories
    a store creation leaves beside it (``.NAME.*``) when it is killed."""
    path = os.path.join(dataset_dir, name)
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
    with contextlib.suppress(OSError):
        for e in os.listdir(dataset_dir):
            if e.startswith(f".{name}."):
                shutil.rmtree(os.path.join(dataset_dir, e), ignore_errors=True)


# ---------------------------------------------------------------------------
# inputs the children map


class Scratch:
    """A hidden-from-commits directory of the dataset for the call's own
    files (a copy of the input, a spool): it is a ShardWriter's path, so a
    concurrent commit leaves it alone, and it is never committed."""

    def __init__(self, dataset_dir: str) -> None:
        self._writer = shards.ShardWriter(dataset_dir, prefix="spool")
        self.dir = dataset_dir
        self.name = self._writer.name
        self.path = self._writer.path
        os.mkdir(self.path)

    def close(self) -> None:
        """Remove the directory and release its writer. Safe to call twice."""
        try:
            remove_entry(self.dir, self.name)
        finally:
            self._writer.close()
            shards.abandon(self.dir, [self.name])  # its reservation too


def _mapped_file(array: np.ndarray) -> tuple[str, int] | None:
    """``(file, byte offset)`` of a shared file mapping that holds
    ``array``'s elements in C or Fortran order, else None."""
    mm = getattr(array, "_mmap", None)
    filename = getattr(array, "filename", None)
    if (
        not isinstance(array, np.memmap)
        or mm is None
        or not filename
        or getattr(array, "mode", None) not in ("r", "r+", "w+")  # 'c': edits are private
        or not (array.flags.c_contiguous or array.flags.f_contiguous)
        or array.size == 0
    ):
        return None
    try:
        probe = np.frombuffer(mm, dtype=np.uint8)
    except (TypeError, ValueError, BufferError):
        return None
    base = int(probe.__array_interface__["data"][0])
    del probe
    import mmap

    offset = int(getattr(array, "offset", 0))
    start = offset - offset % mmap.ALLOCATIONGRANULARITY
    at = int(array.__array_interface__["data"][0]) - base
    if at < 0 or at + array.nbytes > len(mm):
        return None
    return os.fspath(filename), start + at


def export_array(array: np.ndarray, target: np.dtype, scratch: Callable[[], Scratch]) -> tuple:
    """What a child needs to map ``array`` (converted to ``target``): its
    own file when it is a shared memory map, else a raw copy written into
    the scratch directory ``scratch()`` returns (in pieces, so a converted
    copy of the whole array is never in memory)."""
    shape = tuple(int(d) for d in array.shape)
    if array.size == 0:
        return ("empty", shape, target)
    found = _mapped_file(array)
    if found is not None:
        order = "C" if array.flags.c_contiguous else "F"
        return ("file", found[0], found[1], array.dtype, shape, order)
    path = os.path.join(scratch().path, "source.raw")
    out = np.memmap(path, dtype=target, mode="w+", shape=shape)
    try:
        row = max(1, array[0].nbytes)
        step = max(1, _COPY_BYTES // row)
        for i in range(0, shape[0], step):
            out[i : i + step] = array[i : i + step]
        out.flush()
    finally:
        del out
    return ("file", path, 0, target, shape, "C")


def open_array(spec: tuple) -> np.ndarray:
    """The array :func:`export_array` described, memory-mapped read-only."""
    if spec[0] == "empty":
        return np.empty(spec[1], dtype=spec[2])
    _, path, offset, dtype, shape, order = spec
    return np.memmap(path, dtype=dtype, mode="r", offset=offset, shape=shape, order=order)


class RaggedSpool:
    """A stream's records, written once in order into two raw files of the
    scratch directory (the values back to back, the sizes as int64) so that
    the children can each map a contiguous range once the length is known.

    Why a spool: the iterator can only be consumed once, by the parent, in
    order, and shard ``i`` must hold a contiguous range; streamed straight
    into per-shard queues, the records of shard ``i + 1`` arrive only after
    all of shard ``i``'s, so the children would run one after another unless
    each queue held its whole shard in memory. Spooling costs a sequential
    write and read of the raw bytes (page cache speed, against tens of MB/s
    for zstd), and then every shard is encoded at once.
    """

    def __init__(self, scratch: Scratch) -> None:
        self.values_path = os.path.join(scratch.path, "values.raw")
        self.sizes_path = os.path.join(scratch.path, "sizes.raw")
        self._values = open(self.values_path, "wb")  # noqa: SIM115 (closed by finish)
        self._sizes = open(self.sizes_path, "wb")  # noqa: SIM115
        self.count = 0
        self.nbytes = 0

    def write(self, records: Sequence[np.ndarray]) -> None:
        """Append ``records`` (C-contiguous arrays) in order."""
        sizes = np.fromiter((r.nbytes for r in records), dtype=np.int64, count=len(records))
        for r in records:
            if r.nbytes:
                self._values.write(memoryview(r.reshape(-1).view(np.uint8)))  # type: ignore[arg-type]  # numpy's stubs give ndarray the buffer protocol from 3.12 on
        self._sizes.write(memoryview(sizes))  # type: ignore[arg-type]  # numpy's stubs give ndarray the buffer protocol from 3.12 on
        self.count += len(records)
        self.nbytes += int(sizes.sum())

    def finish(self) -> tuple:
        """Close the files; return what :func:`open_spool` takes."""
        self.close()
        return ("spool", self.values_path, self.sizes_path, self.count, self.nbytes)

    def close(self) -> None:
        """Close the files. Safe to call twice."""
        self._values.close()
        self._sizes.close()


def open_spool(spec: tuple) -> tuple[np.ndarray, np.ndarray]:
    """``(values as uint8, offsets as int64, count + 1 of them)`` of a spool."""
    _, values_path, sizes_path, count, nbytes = spec
    values = np.memmap(values_path, dtype=np.uint8, mode="r") if nbytes else np.empty(0, np.uint8)
    offsets = np.zeros(count + 1, dtype=np.int64)
    if count:
        np.cumsum(np.memmap(sizes_path, dtype=np.int64, mode="r", shape=(count,)), out=offsets[1:])
    return values, offsets


# ---------------------------------------------------------------------------
# the children


class _RemoteTraceback(Exception):
    """The traceback of an exception raised in a child, as text."""

    def __str__(self) -> str:
        return str(self.args[0])


def _child(conn: Any) -> None:
    """A child's whole life: take shard tasks from the parent one at a time,
    write each with ``fn(path, report, *args)`` (which returns the shard's
    length) and say so, until told to stop or the parent is gone. An error
    is sent, and ends the child."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent ends the children on Ctrl-C

    def report(records: int, nbytes: int) -> None:
        conn.send(("progress", records, nbytes))  # a dead parent: BrokenPipeError ends the child

    try:
        while True:
            try:
                msg = conn.recv()
            except EOFError:
                return  # the parent is gone
            if msg[0] == "stop":
                return
            _, fn, args, path = msg
            conn.send(("done", fn(path, report, *args)))
    except BaseException as e:
        tb = traceback.format_exc()
        try:
            blob = pickle.dumps(e)
        except Exception:
            blob = None
        with contextlib.suppress(OSError):
            conn.send(("error", blob, f"{type(e).__name__}: {e}", tb))
    finally:
        conn.close()


def _exit_reason(code: int | None) -> str:
    if code is None:
        return "did not exit"
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with status {code} without finishing"


class _Shard:
    __slots__ = ("index", "writer", "what", "length")

    def __init__(self, index: int, writer: shards.ShardWriter, what: str) -> None:
        self.index = index
        self.writer = writer
        self.what = what
        self.length: int | None = None


class _Child:
    __slots__ = ("proc", "conn", "shard")

    def __init__(self, proc: Any, conn: Any) -> None:
        self.proc = proc
        self.conn = conn
        self.shard: _Shard | None = None  # the shard it writes now


#: What a converter hands :func:`run`: given a way to get the call's scratch
#: directory, it prepares the input and returns the tasks, one ``(fn, args,
#: what)`` per shard, and the totals (records, bytes; None when unknown) the
#: progress line counts towards.
MakeTasks = Callable[[Callable[[], Scratch]], tuple[list[tuple[Callable[..., int], tuple, str]], Any, Any]]


def run(
    dataset_dir: str,
    num: int,
    make_tasks: MakeTasks,
    *,
    created: bool,
    label: str,
    progress: bool | None,
    sync: bool = True,
) -> shards.Manifest:
    """Write the ``num`` shards of ``dataset_dir``, shard ``i`` by
    ``tasks[i] = (fn, args, what)`` in a child process (``fn(path, report,
    *args)`` returns the shard's length; ``what`` names its records in
    messages), :func:`max_workers` children at a time, each taking the next
    shard when it finishes one; then commit them in order and return the
    manifest.

    The children are started first, so that they import the library while
    ``make_tasks`` prepares the input (a copy of an array takes about as
    long as a child's start here, 0.5 s per 512 MiB). ``make_tasks`` runs
    inside the cleanup's reach: what it writes into the scratch directory
    is removed at the end, committed or not. ``created``: the directory
    did not exist before the call, so a failure removes it. ``sync``: the
    commit syncs the shards and the manifest (the converters' ``sync``)."""
    ctx = multiprocessing.get_context("spawn")
    children: list[_Child] = []
    items: list[_Shard] = []
    scratch: list[Scratch] = []
    bar: Progress | None = None
    ok = False

    def get_scratch() -> Scratch:
        if not scratch:
            scratch.append(Scratch(dataset_dir))
        return scratch[0]

    try:
        for k in range(min(num, max_workers())):
            mine, theirs = ctx.Pipe(duplex=True)
            proc = ctx.Process(target=_child, args=(theirs,), name=f"loaderx-shard-{k}", daemon=True)
            proc.start()
            children.append(_Child(proc, mine))
            theirs.close()  # the child holds the other end alone: its death is EOF here
        tasks, total_records, total_bytes = make_tasks(get_scratch)
        if len(tasks) != num:
            raise AssertionError(f"{len(tasks)} tasks for {num} shards")
        bar = Progress(label, total_records, total_bytes, enabled=progress)
        for i, (_, _, what) in enumerate(tasks):
            items.append(_Shard(i, shards.ShardWriter(dataset_dir), what))
        _wait(items, tasks, children, bar)
        manifest = shards.commit(dataset_dir, [s.writer.name for s in items], sync=sync)
        ok = True
        return manifest
    finally:
        interrupt: KeyboardInterrupt | None = None
        while True:
            try:
                if bar is not None:
                    bar.close()
                _end(children, items, dataset_dir, created, ok, scratch[0] if scratch else None)
                break
            except KeyboardInterrupt as e:  # a second Ctrl-C does not stop the cleanup
                interrupt = e
        if interrupt is not None:
            raise interrupt


def max_workers() -> int:
    """How many children run at once: one per CPU this process may use.
    More would only share the cores, each with its own interpreter and
    encoder memory."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def _wait(items: list[_Shard], tasks: Sequence[tuple[Callable[..., int], tuple, str]],
          children: list[_Child], bar: Progress) -> None:
    """Hand the shards to the children in order, the next one to whichever
    finishes first, until every shard is written; raise for the first
    failure."""
    n = len(items)
    queue = list(items)

    def assign(c: _Child) -> None:
        if not queue:
            c.shard = None
            with contextlib.suppress(OSError):  # a child gone by now has nothing left to do
                c.conn.send(("stop",))
            return
        s = queue.pop(0)
        fn, args, _ = tasks[s.index]
        c.shard = s
        with contextlib.suppress(OSError):  # a dead child: seen below as EOF
            c.conn.send(("task", fn, args, s.writer.path))

    for c in children:
        assign(c)
    while True:
        active = [c for c in children if c.shard is not None]
        if not active:
            return
        mp_connection.wait([c.conn for c in active] + [c.proc.sentinel for c in active], _POLL)
        for c in active:
            s = c.shard
            assert s is not None
            eof = False
            while c.shard is s:
                try:
                    if not c.conn.poll():
                        break
                    msg = c.conn.recv()
                except (EOFError, OSError):
                    eof = True
                    break
                if msg[0] == "progress":
                    bar.update(msg[1], msg[2])
                elif msg[0] == "done":
                    s.length = int(msg[1])
                    assign(c)
                else:
                    _, blob, summary, tb = msg
                    cause: BaseException | None = None
                    if blob is not None:
                        with contextlib.suppress(Exception):
                            cause = pickle.loads(blob)
                    if cause is None:
                        cause = _RemoteTraceback(tb)
                    else:
                        cause.__cause__ = _RemoteTraceback(tb)
                    raise WorkerError(
                        f"shard {s.index} of {n} ({s.what}) failed in its worker process: {summary}"
                    ) from cause
            if c.shard is s and (eof or not c.proc.is_alive()):
                c.proc.join(_REAP_TIMEOUT)
                raise WorkerError(
                    f"shard {s.index} of {n} ({s.what}): its worker process "
                    f"{_exit_reason(c.proc.exitcode)}"
                )


def _committed(dataset_dir: str, name: str) -> bool:
    """Whether the dataset's manifest names the shard ``name``."""
    try:
        return shards.is_sharded(dataset_dir) and any(
            s.name == name for s in shards.read_manifest(dataset_dir).shards
        )
    except Exception:  # an unreadable manifest names nothing of ours
        return False


def _end(children: list[_Child], items: list[_Shard], dataset_dir: str, created: bool, ok: bool,
         scratch: Scratch | None) -> None:
    """End every child (those told to stop get a moment to exit by
    themselves), release the writers, remove the scratch files and, unless
    the shards were committed, the shards (or the directory the call
    created)."""
    for c in children:
        if not ok and c.proc.is_alive():
            c.proc.kill()
    for c in children:
        if c.proc.exitcode is None:
            c.proc.join(_REAP_TIMEOUT)
            if c.proc.exitcode is None:
                c.proc.kill()
                c.proc.join(_REAP_TIMEOUT)
        c.conn.close()
    if scratch is not None:
        scratch.close()
    if not ok and items and _committed(dataset_dir, items[0].writer.name):
        ok = True  # an interrupt between the commit and its caller: the dataset stands
    for s in items:
        if not ok:
            remove_entry(dataset_dir, s.writer.name)
        s.writer.close()
        if not ok:
            shards.abandon(dataset_dir, [s.writer.name])  # its reservation too
    if not ok and created:
        shutil.rmtree(dataset_dir, ignore_errors=True)
