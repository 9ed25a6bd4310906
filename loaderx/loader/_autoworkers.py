"""``workers="auto"``: watch the first steps on threads and decide whether
worker processes would make them faster.

A step on a worker thread is a native gather, which runs with the GIL
released, then the ``transform``, which is Python. Threads are the right
workers while the transform is small beside the gather, or while its work
is NumPy calls on large arrays (they release the GIL too). They are the
wrong ones when the transform's Python code holds the GIL: the workers then
wait for each other, and worker processes, each with a GIL of its own, run
the transforms side by side. They are the wrong ones too when the transform
allocates a large fresh output array per batch: the allocator hands a large
block back to the kernel when it is freed, so every batch faults its pages
in anew (on the bench's 64 MiB batches that was 45-125 ms of system time in
a 100-190 ms transform), while a worker process keeps its freed memory
(:func:`loaderx.loader._procpool._keep_freed_memory`) and faults nothing after its
first batches.

:class:`StepTimer` is what the thread pipeline reports to: per measured
step, the seconds of its gather, the wall seconds of its transform and, of
those, the seconds the transform's thread was *blocked*: off the CPU without
being preempted (wall time minus the thread's CPU time minus the time it
waited for a CPU, read from ``/proc/thread-self/schedstat`` on Linux), and
the seconds it spent in the kernel (``getrusage(RUSAGE_THREAD)``'s system
time: page faults, for a transform that does no I/O). A transform that does
no I/O is blocked when it waits for the GIL (or for another lock of the
process, such as the one page faults take), which is exactly what a separate
process would not wait for. Without schedstat (not Linux) the time waiting
for a CPU counts as blocked too; without ``RUSAGE_THREAD`` the kernel's
seconds count as nothing. The wait for a CPU is left out of the
transform's seconds, as it is the machine's load, not the transform's; a
thread woken to take the GIL waits there too, so on busy CPUs part of the
GIL's cost goes uncounted, but not enough to hide it: two threads of a
pure-Python loop at a load average of 8 on 2 CPUs spent, per 62 ms
transform, 16 ms on a CPU, 15 ms blocked and 31 ms waiting for a CPU, which
is 15 of the 31 ms the transform counts, 49 %, blocked. A transform shorter
than the GIL's switch interval (5 ms) is seldom made to give the GIL up, so
its threads wait for the GIL between transforms instead, where this
measure does not look; ``LOADERX_WORKERS=process`` or ``workers="process"``
moves such a transform when it matters.

:func:`decide` turns the figures of :data:`WINDOW_STEPS` steps into a
:class:`Verdict`. It says "processes" when, over the window,

* the transform takes at least :data:`TRANSFORM_SHARE` of a step's seconds
  (gather plus transform),
* the transform's thread was blocked or in the kernel at least
  :data:`BLOCKED_SHARE` of the transform's seconds together,
* more than one worker runs,
* the transform takes at least :data:`MIN_TRANSFORM_SECONDS` and those
  seconds exceed what copying its result into shared memory costs a
  worker process (at :data:`COPY_BYTES_PER_SECOND`), and
* the steps left (when the run is finite) win back :data:`SPAWN_SECONDS`:
  a process does each step without those seconds, so with ``k`` workers a
  step gains about ``(blocked + kernel) / k`` seconds.

These figures predict; they do not promise. A process also copies each
finished batch into shared memory, gathers on one core instead of fanning
out, and competes with whatever else the machine runs. So the loader checks
the prediction: it notes the pace at which its consumer received steps on
threads (from the step after the warm-up to the verdict) and, after the
move, the pace of :data:`TRIAL_STEPS` steps on processes (after the
prefetch window the processes filled while the threads finished).
:func:`keep_processes` keeps the processes only when they are at least
:data:`KEEP_GAIN` times as fast; otherwise the loader moves back to threads
for good, at a step boundary, the batches unchanged.

Whether the switch is *safe* (what pickles, which streams a worker can
reopen, what the transform returns) is the loader's to check; this module
only measures and judges. Tests replace the measured figures through
:attr:`StepTimer.inject` (a callable ``step -> StepTimes``), so no test
depends on the machine's speed.
"""

from __future__ import annotations

import dataclasses
import os
import threading
import time
from collections.abc import Callable

try:
    import resource
except ImportError:  # not Unix
    resource = None  # type: ignore[assignment]

#: what ``workers=`` accepts
WORKER_KINDS = ("auto", "thread", "process")
#: forces the mode of every loader made with ``workers="auto"``: ``thread``,
#: ``process`` or ``auto`` (an explicit ``workers=`` argument always wins)
ENV_VAR = "LOADERX_WORKERS"

#: steps made before the window opens, not measured: their figures hold the
#: first allocation of each batch buffer and the first native call of each
#: new thread
WARMUP_STEPS = 2
#: steps measured for the verdict
WINDOW_STEPS = 8
#: the transform's least share of a step's seconds (gather + transform) for
#: a switch: below it the gather is the bottleneck, which processes do not
#: make faster
TRANSFORM_SHARE = 0.5
#: the least share of the transform's wall seconds its thread was blocked
#: or in the kernel for a switch. Two workers whose transforms hold the GIL
#: throughout are each blocked half of the time; a transform of NumPy calls
#: on large arrays into a reused output is blocked, and faults, almost never
BLOCKED_SHARE = 0.25
#: the least mean seconds of a transform for a switch: a step made in a
#: process costs two pipe messages and a wake-up of the consumer (~0.1-0.3 ms
#: here), which a shorter transform does not win back
MIN_TRANSFORM_SECONDS = 0.002
#: how fast a worker process copies a finished batch into shared memory:
#: 64 MiB took 5-12 ms on the bench's machine; the slow end is taken
COPY_BYTES_PER_SECOND = 5e9
#: steps on processes whose pace is compared with the threads'
TRIAL_STEPS = 8
#: how much faster than threads the processes must deliver steps to be
#: kept. At par threads win: processes hold a second copy of each batch
#: (the bench's augment rows: 651 against 217 MiB of anonymous and shared
#: memory), and the pace of 8 steps moved by 10 % and more between windows
#: on the shared 2-CPU machine, so only a clear win counts
KEEP_GAIN = 1.15
#: seconds that starting the worker processes costs (each imports NumPy,
#: loaderx and the user's script, and unpickles the recipe): two workers
#: were ready 0.6-0.7 s after the start on the 2-CPU machine the bench runs
#: on, 1.0-1.2 s while other work kept its load average at 4-7. The threads
#: go on making steps meanwhile, but the starting processes take CPU from
#: them
SPAWN_SECONDS = 1.5


@dataclasses.dataclass(frozen=True)
class StepTimes:
    """The figures of one step made on a thread: seconds of the gather (wall),
    of the transform (wall, less the time its thread waited for a CPU: that
    is the machine's other load, which processes would wait for too) and,
    of the transform's, the seconds its thread was blocked (waiting for the
    GIL, mostly) and in the kernel (page faults, mostly)."""

    gather_s: float
    transform_s: float
    blocked_s: float
    kernel_s: float = 0.0


@dataclasses.dataclass(frozen=True)
class Verdict:
    """What :func:`decide` concluded: ``processes`` or not, why, and the
    figures it used (seconds are means per step)."""

    processes: bool
    reason: str
    steps: int
    gather_s: float
    transform_s: float
    blocked_s: float
    kernel_s: float

    def figures(self) -> str:
        """The measured figures in one phrase."""
        share = self.transform_s / max(1e-12, self.gather_s + self.transform_s)
        blocked = self.blocked_s / max(1e-12, self.transform_s)
        kernel = self.kernel_s / max(1e-12, self.transform_s)
        return (
            f"over {self.steps} steps a gather took {self.gather_s * 1e3:.1f} ms and the transform "
            f"{self.transform_s * 1e3:.1f} ms ({share:.0%} of the step), {blocked:.0%} of it blocked "
            f"(waiting for the GIL) and {kernel:.0%} in the kernel (page faults)"
        )


def env_workers() -> str | None:
    """The mode :data:`ENV_VAR` forces, or None when it is unset or empty.

    Raises:
        ValueError: it holds something else than ``auto``, ``thread`` or
            ``process``.
    """
    value = os.environ.get(ENV_VAR, "").strip()
    if not value:
        return None
    if value not in WORKER_KINDS:
        raise ValueError(
            f"{ENV_VAR}={value!r}: it must be 'auto', 'thread' or 'process' (or unset)"
        )
    return value


def _schedstat() -> Callable[[], float] | None:
    """A reader of this thread's seconds spent waiting for a CPU (Linux's
    schedstat), or None where there is none."""
    path = "/proc/thread-self/schedstat"
    try:
        with open(path, "rb") as f:
            f.read()
    except OSError:
        return None

    def runqueue_seconds() -> float:
        try:
            with open(path, "rb") as f:
                return int(f.read().split()[1]) * 1e-9
        except (OSError, IndexError, ValueError):
            return 0.0

    return runqueue_seconds


_RUNQUEUE = _schedstat()


def _no_runqueue() -> float:
    return 0.0


def _thread_kernel_seconds() -> float:
    """This thread's system CPU seconds so far (0.0 where not measurable)."""
    return resource.getrusage(resource.RUSAGE_THREAD).ru_stime  # type: ignore[union-attr, unused-ignore]


def _kernel_clock() -> Callable[[], float]:
    if resource is None or not hasattr(resource, "RUSAGE_THREAD"):
        return _no_runqueue
    try:
        _thread_kernel_seconds()
    except OSError:
        return _no_runqueue
    return _thread_kernel_seconds


_KERNEL = _kernel_clock()


class StepTimer:
    """Collects the figures of the first steps a thread pipeline makes.

    The pipeline asks :attr:`active` before timing a step, then reports the
    gather (:meth:`gathered`) and the transform (:meth:`transform_start`,
    :meth:`transformed`), possibly from different threads. Once
    :data:`WARMUP_STEPS` + :data:`WINDOW_STEPS` steps are in, :attr:`active`
    turns False and :attr:`full` True. Thread-safe.

    Attributes:
        inject: None, or a callable ``step -> StepTimes`` whose figures
            replace the measured ones (for tests).
    """

    def __init__(self) -> None:
        self.inject: Callable[[int], StepTimes] | None = None
        self.active = True
        self.full = False
        self._lock = threading.Lock()
        self._gathers: dict[int, float] = {}
        self._times: list[StepTimes] = []
        self._runqueue = _RUNQUEUE or _no_runqueue
        self._kernel = _KERNEL

    def gathered(self, step: int, seconds: float) -> None:
        """The gather of ``step`` took ``seconds``."""
        with self._lock:
            self._gathers[step] = seconds

    def transform_start(self) -> tuple[float, float, float, float]:
        """The clocks at the start of a transform, on its thread."""
        return time.perf_counter(), time.thread_time(), self._runqueue(), self._kernel()

    def transformed(self, step: int, start: tuple[float, float, float, float]) -> None:
        """The transform of ``step``, started at ``start``
        (:meth:`transform_start` on the same thread), just returned."""
        wall = time.perf_counter() - start[0]
        cpu = time.thread_time() - start[1]
        waited = self._runqueue() - start[2]
        kernel = min(cpu, max(0.0, self._kernel() - start[3]))
        busy = max(cpu, wall - waited)  # the machine's other load is not the transform's
        blocked = busy - cpu
        with self._lock:
            gather = self._gathers.pop(step, 0.0)
            if not self.active:
                return
            times = StepTimes(gather, busy, blocked, kernel)
            if self.inject is not None:
                times = self.inject(step)
            self._times.append(times)
            if len(self._times) >= WARMUP_STEPS + WINDOW_STEPS:
                self.active = False
                self.full = True

    def window(self) -> list[StepTimes]:
        """The measured steps' figures, the warm-up steps left out."""
        with self._lock:
            return list(self._times[WARMUP_STEPS : WARMUP_STEPS + WINDOW_STEPS])

    def stop(self) -> None:
        """Measure nothing more."""
        with self._lock:
            self.active = False
            self._gathers.clear()


def decide(times: list[StepTimes], workers: int, remaining: int | None, batch_bytes: int) -> Verdict:
    """The verdict on the figures of a window of steps made by ``workers``
    threads, with ``remaining`` steps left in the run (None: endless), for
    transforms whose result holds ``batch_bytes`` bytes of arrays."""
    n = max(1, len(times))
    gather = sum(t.gather_s for t in times) / n
    transform = sum(t.transform_s for t in times) / n
    blocked = sum(t.blocked_s for t in times) / n
    kernel = sum(t.kernel_s for t in times) / n
    lost = blocked + kernel  # what a worker process would not spend

    def verdict(processes: bool, reason: str) -> Verdict:
        return Verdict(processes, reason, len(times), gather, transform, blocked, kernel)

    step = gather + transform
    if workers < 2:
        return verdict(False, f"{workers} worker: processes need 2 or more to run transforms side by side")
    if step <= 0 or transform < TRANSFORM_SHARE * step:
        return verdict(
            False,
            f"the transform is {transform / max(step, 1e-12):.0%} of a step, under "
            f"{TRANSFORM_SHARE:.0%}: the gather is the bottleneck",
        )
    if lost < BLOCKED_SHARE * transform:
        return verdict(
            False,
            f"the transform was blocked or in the kernel {lost / transform:.0%} of its time, under "
            f"{BLOCKED_SHARE:.0%}: it runs side by side on threads",
        )
    if transform < MIN_TRANSFORM_SECONDS:
        return verdict(
            False,
            f"the transform takes {transform * 1e3:.2f} ms, under {MIN_TRANSFORM_SECONDS * 1e3:.0f} ms: "
            "handing each step over from a process would cost about what it wins",
        )
    copy = batch_bytes / COPY_BYTES_PER_SECOND
    if lost <= copy:
        return verdict(
            False,
            f"a process would save {lost * 1e3:.1f} ms a step but spend about {copy * 1e3:.1f} ms "
            f"copying the {batch_bytes / 2**20:.1f} MiB batch into shared memory",
        )
    gain = (lost - copy) / workers
    if remaining is not None and remaining * gain < SPAWN_SECONDS:
        return verdict(
            False,
            f"the {remaining} steps left would win back {remaining * gain:.2f} s, less than the "
            f"{SPAWN_SECONDS:.1f} s that starting worker processes costs",
        )
    why = (
        "it holds the GIL, which worker processes do not share"
        if blocked >= kernel
        else "it faults in fresh pages, which worker processes keep from batch to batch"
    )
    return verdict(
        True,
        f"the transform is {transform / step:.0%} of a step and was blocked or in the kernel "
        f"{lost / transform:.0%} of its time: {why}",
    )


def pace(times: list[float]) -> float | None:
    """Mean seconds between consecutive times (when a consumer received its
    steps), or None with fewer than three of them."""
    if len(times) < 3:
        return None
    return (times[-1] - times[0]) / (len(times) - 1)


def keep_processes(thread_step_s: float | None, process_step_s: float) -> bool:
    """Whether steps that came every ``process_step_s`` seconds on processes
    beat the ``thread_step_s`` of threads by :data:`KEEP_GAIN` (without a
    thread figure there is nothing to compare with: keep them)."""
    if thread_step_s is None:
        return True
    return process_step_s * KEEP_GAIN <= thread_step_s
