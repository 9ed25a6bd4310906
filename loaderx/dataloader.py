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
the output is the same whatever ``num_workers`` is. The threads, the step
window and the recycled batch buffers live in :mod:`loaderx._pipeline`.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping
from typing import Any

from loaderx._args import as_int, check_mode, check_seed, check_shard, check_step
from loaderx._pipeline import Batch, BufferPool, Pipeline, Stream
from loaderx.dataset import DenseDataset, RaggedDataset
from loaderx.errors import ClosedError
from loaderx.sampler import Sampler

__all__ = ["DataLoader", "LoaderOptions"]

_STATE_KEYS = ("step", "seed", "sampler", "batch_size", "shard")

#: The default prefetch keeps at most this many bytes of batches in flight.
PREFETCH_BYTES = 64 << 20
#: Batches of at least this many bytes (all streams) are gathered one at a
#: time: the native gather already fans such a batch out over every core.
SHARED_GATHER_BYTES = 8 << 20


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
    shard: tuple[int, int] = (0, 1)
    start_step: int = 0
    prefetch: int | None = None

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
        check_mode(self.sampler)
        set_(self, "seed", check_seed(self.seed))
        set_(self, "shard", check_shard(self.shard))

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


def _available_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


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
        transform: Callable[[Batch], Any] | None = None,
        num_workers: int = 4,
        sampler: str = "cyclic",
        seed: int = 0,
        shard: tuple[int, int] = (0, 1),
        start_step: int = 0,
        prefetch: int | None = None,
    ) -> None:
        self._pipe: Pipeline | None = None
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
        self._streams: list[Stream] = [
            (name, ds, BufferPool((opts.batch_size, *ds.item_shape), ds.dtype, capacity))
            for name, ds in streams.items()
        ]
        self._step = opts.start_step  # next step to yield while no pipeline runs

    # -- properties --------------------------------------------------------

    @property
    def streams(self) -> dict[str, DenseDataset]:
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

    def __iter__(self) -> DataLoader:
        return self

    def __next__(self) -> Any:
        pipe = self._pipe
        if pipe is None:
            if self._closed:
                raise ClosedError("the DataLoader is closed")
            batch_bytes = sum(pool.nbytes for _, _, pool in self._streams)
            pipe = Pipeline(
                self._streams,
                self.sampler,
                self._transform,
                self._workers,
                self._prefetch,
                self._step,
                one_gatherer=batch_bytes >= SHARED_GATHER_BYTES,
            )
            self._pipe = pipe
            if pipe.num_workers:
                pipe.start()
        return pipe.next()

    # -- state -------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
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
        step = check_step(state["step"])
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

    def __enter__(self) -> DataLoader:
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
