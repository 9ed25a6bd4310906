"""The settings of a :class:`~loaderx.dataloader.DataLoader`, checked:
:class:`LoaderOptions`, and the checks of the arguments that are not options.

Every argument of the loader but its streams and transform becomes a field
of a frozen :class:`LoaderOptions`, whose ``__post_init__`` refuses a bad
value (quoting it) and every combination that has no meaning (``drop_last``
without ``epoch``, ``shard`` with a custom sampler, a ``start_method`` for
threads ...). Apart from the loader, so that its checks and their messages
read in one place, and the loader holds only what runs.
:data:`TORCH_ARGS` answers a ``torch.utils.data.DataLoader`` argument that
has no counterpart here with what to do instead.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import numpy as np

from loaderx._args import MODES, as_int, check_mode, check_seed, check_shard, check_step
from loaderx.loader._autoworkers import WORKER_KINDS
from loaderx.loader._procpool import START_METHODS
from loaderx.loader.sampler import IndexSampler

__all__ = ["LoaderOptions", "PREFETCH_BYTES", "TORCH_ARGS", "check_sampler"]

#: torch.utils.data.DataLoader arguments that loaderx has no argument for,
#: with what to do instead
TORCH_ARGS = {
    "shuffle": "shuffling is sampler='cyclic' (the default, a fresh permutation each cycle), "
    "'iid' (with replacement) or 'sequential'",
    "collate_fn": "use transform=, called with each batch dict {name: array} on a worker thread",
    "pin_memory": "batches are NumPy arrays in host memory; pin in the training step "
    "(torch.from_numpy(a).pin_memory()) if you need to",
    "pin_memory_device": "batches are NumPy arrays in host memory; move them in the training step",
    "persistent_workers": "the workers (threads, or processes with workers='process') already live "
    "as long as the loader (until close())",
    "batch_sampler": "give batch_size= and sampler=, an object whose indices(step) returns "
    "the int64 indices of one batch",
    "prefetch_factor": "use prefetch=, the steps in flight ahead of the consumer for all "
    "workers together",
    "worker_init_fn": "workers are threads of this process by default, with nothing to set up "
    "per worker; with workers='process' each worker unpickles the streams, sampler and transform",
    "multiprocessing_context": "workers are threads by default; workers='process' starts worker "
    "processes, with start_method='spawn' (the default) or 'forkserver'",
    "generator": "use seed= (an int); every batch is a pure function of (seed, step)",
    "timeout": "there is no timeout; a failing step raises its error from next()",
    "in_order": "batches are always yielded in step order",
    "dataset": "pass streams={name: DenseDataset or NumPy array}",
}



def check_sampler(sampler: Any) -> Any:
    """A mode name, or an object with a callable ``indices``."""
    if isinstance(sampler, str):
        return check_mode(sampler)
    if isinstance(sampler, IndexSampler) and callable(sampler.indices):
        return sampler
    modes = ", ".join(map(repr, MODES))
    raise TypeError(
        f"sampler must be one of {modes} or an object with indices(step) -> int64 array; "
        f"got {type(sampler).__name__} (a torch Sampler iterates indices instead: wrap it in an "
        "object whose indices(step) returns the batch of that step)"
    )


def check_mixture_args(sampler: Any, epoch: Any) -> None:
    """A Mixture draws through its own per-source samplers, endlessly."""
    if isinstance(sampler, str) and sampler != "cyclic":
        raise ValueError(
            f"sampler={sampler!r} with a Mixture: its sources draw with Mixture(sampler=...) "
            "('cyclic', 'iid' or 'sequential'), and the loader's sampler= is left out"
        )
    if not isinstance(sampler, str) and not getattr(sampler, "keeps_mixture_weights", False):
        raise ValueError(
            f"sampler={type(sampler).__name__}(...) with a Mixture: the mixture draws each step from its "
            "sources by its weights, and a custom sampler would replace them (its indices would ignore the "
            "weights). Leave sampler= out: give the shares as the Mixture's weights and how each source "
            "walks its records as Mixture(sampler='cyclic' | 'iid' | 'sequential')"
        )
    if epoch is True:
        raise ValueError("epoch=True with a Mixture: a mixture is endless (give steps= for a finite run)")


def check_bool(value: Any, name: str) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be True or False, got {value!r}")
    return bool(value)


#: LoaderOptions fields its repr shows only when they differ from the default
_QUIET_FIELDS = ("steps", "epoch", "drop_last", "workers", "start_method")

#: The default prefetch keeps at most this many bytes of batches in flight.
PREFETCH_BYTES = 64 << 20

#: Small batches get a deeper default prefetch, up to this many bytes of
#: them (and at most :data:`SMALL_PREFETCH_STEPS` steps).
SMALL_PREFETCH_BYTES = 1 << 20
SMALL_PREFETCH_STEPS = 32


@dataclasses.dataclass(frozen=True)
class LoaderOptions:
    """The validated settings of a :class:`DataLoader` (apart from its streams
    and transform). Invalid values raise with the value quoted.

    Attributes:
        batch_size: records per batch (per rank).
        num_workers: worker threads asked for; at most one per available CPU is
            started (see :attr:`worker_threads`). 0 runs everything in the
            caller.
        sampler: ``"sequential"``, ``"iid"``, ``"cyclic"`` or an object
            with ``indices(step) -> int64 array``.
        seed: keys the random samplers.
        shard: ``(rank, world)`` for data-parallel training.
        start_step: the first step to yield.
        prefetch: how many steps may be claimed ahead of the consumer; None
            picks a default from the worker threads and the batch size (see
            :meth:`resolved_prefetch`).
        steps: stop after this many steps (counted from step 0), or None.
        epoch: one pass over the records, each exactly once.
        drop_last: in an ``epoch`` pass, drop the short last batch.
        workers: ``"auto"`` (threads, moved to processes when the
            transform turns out to hold the GIL), ``"thread"`` (worker
            threads of this process) or ``"process"`` (worker processes,
            for a Python transform).
        start_method: how worker processes start, ``"spawn"`` or
            ``"forkserver"``; None is ``"spawn"`` (``"auto"`` and
            ``"process"`` workers only).
    """

    batch_size: int = 256
    num_workers: int = 4
    sampler: Any = "cyclic"
    seed: int = 0
    shard: tuple[int, int] = (0, 1)
    start_step: int = 0
    prefetch: int | None = None
    steps: int | None = None
    epoch: bool = False
    drop_last: bool = False
    workers: str = "auto"
    start_method: str | None = None

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        bs = as_int(self.batch_size, "batch_size")
        if bs < 1:
            raise ValueError(f"batch_size must be at least 1, got {self.batch_size!r}")
        set_(self, "batch_size", bs)
        nw = as_int(self.num_workers, "num_workers")
        if nw < 0:
            raise ValueError(f"num_workers must be 0 or more, got {self.num_workers!r}")
        set_(self, "num_workers", nw)
        set_(self, "start_step", check_step(self.start_step))
        if self.prefetch is not None:
            pf = as_int(self.prefetch, "prefetch")
            if pf < 1:
                raise ValueError(f"prefetch must be at least 1, got {self.prefetch!r}")
            set_(self, "prefetch", pf)
        check_sampler(self.sampler)
        set_(self, "seed", check_seed(self.seed))
        set_(self, "shard", check_shard(self.shard))
        if self.steps is not None:
            st = as_int(self.steps, "steps")
            if st < 1:
                raise ValueError(f"steps must be at least 1 or None (endless), got {self.steps!r}")
            set_(self, "steps", st)
        set_(self, "epoch", check_bool(self.epoch, "epoch"))
        set_(self, "drop_last", check_bool(self.drop_last, "drop_last"))
        if self.drop_last and not self.epoch:
            raise TypeError(
                "drop_last=True applies to an epoch=True pass only; the endless loader's "
                "batches are always full"
            )
        if self.epoch and self.sampler not in ("sequential", "cyclic"):
            raise ValueError(
                "epoch=True needs sampler='sequential' (records in order) or 'cyclic' "
                f"(one permutation of them); got sampler={self.sampler!r}"
            )
        if not isinstance(self.sampler, str) and self.shard != (0, 1):
            raise ValueError(
                f"shard={self.shard!r} applies to the built-in samplers; a custom sampler "
                "shards itself (its indices(step) returns this rank's batch)"
            )
        if not isinstance(self.workers, str) or self.workers not in WORKER_KINDS:
            raise ValueError(
                "workers must be 'auto' (threads, moved to processes when that is faster), "
                f"'thread' (worker threads) or 'process' (worker processes), got {self.workers!r}"
            )
        if self.start_method is not None:
            if self.workers == "thread":
                raise ValueError(
                    f"start_method={self.start_method!r} applies to workers='process' or 'auto' only"
                )
            if self.start_method not in START_METHODS:
                why = (
                    " (the Go runtime of the native library does not survive fork())"
                    if self.start_method == "fork"
                    else ""
                )
                raise ValueError(
                    f"start_method must be 'spawn' or 'forkserver', got {self.start_method!r}{why}"
                )
        if self.workers == "process" and self.num_workers < 1:
            raise ValueError(
                f"workers='process' needs num_workers of 1 or more, got num_workers={self.num_workers!r} "
                "(num_workers=0 runs everything in the caller: use workers='thread' or the default 'auto')"
            )

    def __repr__(self) -> str:
        fields = [
            f"{f.name}={getattr(self, f.name)!r}"
            for f in dataclasses.fields(self)
            if f.name not in _QUIET_FIELDS or getattr(self, f.name) != f.default
        ]  # the finite-pass and process settings only when set
        return f"LoaderOptions({', '.join(fields)})"

    @property
    def worker_threads(self) -> int:
        """The workers actually started (threads, or processes with
        ``workers="process"``): ``num_workers``, but at most one per CPU
        available to the process. Gathers and transforms are
        CPU-bound, so threads beyond the CPUs only wait for a time slice; on a
        2-CPU machine 4 workers ran ~30% slower than 2."""
        return min(self.num_workers, _available_cpus())

    @property
    def native_workers(self) -> int:
        """The workers the native step pipeline starts: :attr:`worker_threads`,
        but at most one fewer than the CPUs available (and at least 1). The
        consumer makes the next step itself whenever it is not ready, so it
        is a maker too, and one worker per CPU besides it leaves none idle
        while sparing the switches between three makers on two CPUs. On 2
        CPUs, one worker against two (the memory bench, three alternated
        runs): 1.30-1.32x against 1.01-1.11x ``np.take`` on 256 B records,
        1.66-1.70x against 1.53-1.70x on 4 KiB, 2.01-2.14x against
        1.61-1.75x on 8 KiB token rows, 1.15-1.21x against 1.04x on 64 KiB.
        A batch that is big enough to need the cores spreads its gather over
        all of them from the one worker."""
        return min(self.worker_threads, max(1, _available_cpus() - 1))

    def resolved_prefetch(self, batch_bytes: int, small_deeper: bool = False) -> int:
        """``prefetch``, or its default for batches of ``batch_bytes`` bytes
        (all streams): twice the worker threads (at least 2), or, with
        workers and ``small_deeper`` (the native step pipeline), as many
        batches as fit in :data:`SMALL_PREFETCH_BYTES` (at most
        :data:`SMALL_PREFETCH_STEPS`) when that is more, but no more batches
        than fit in :data:`PREFETCH_BYTES`, and at least 1. Every batch in
        flight is one more buffer to fill, and once they outgrow the CPU
        caches each one costs throughput (measured on 64 MiB batches: 4 in
        flight ran at 0.57x a bare gather loop, 1 at 0.89x). Small batches
        cost next to nothing to hold, and a deeper window lets workers that
        are faster than the consumer make several steps for each time they
        are woken (batch size 1: 6.7 against 9.1 us of the consumer's CPU a
        step, 32 against 4 in flight). Worker processes get at least one
        step each, or some would sit idle."""
        if self.prefetch is not None:
            return self.prefetch
        small = 0
        if small_deeper and self.worker_threads:
            small = min(SMALL_PREFETCH_STEPS, SMALL_PREFETCH_BYTES // max(1, batch_bytes))
        by_count = max(2, 2 * self.worker_threads, small)
        by_bytes = PREFETCH_BYTES // max(1, batch_bytes)
        least = self.worker_threads if self.workers == "process" else 1  # "auto" starts on threads
        return max(least, min(by_count, by_bytes))


def _available_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1
