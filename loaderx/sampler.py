"""Index generation: which records make up the batch of a step.

Every mode is a pure function of ``(mode, n, batch_size, seed, step, shard)``,
so resuming a run is seeking to a step; nothing else is saved.

``"sequential"``
    walks ``0..n`` in order as a circular queue: a batch never truncates, it
    wraps around to 0.
``"iid"``
    draws each index uniformly at random, with replacement.
``"cyclic"``
    draws without replacement: each cycle of ``n // (batch_size * world)``
    steps visits a fresh permutation of the index space, so within a cycle no
    index repeats; the few indices a cycle cannot fit are dropped, a different
    few each cycle.

Sharding: with ``shard=(rank, world)`` the global batch of a step has
``batch_size * world`` positions and ``rank`` takes positions
``[rank * batch_size, (rank + 1) * batch_size)``. Together the ranks produce
exactly the batches of one process with ``batch_size * world``; in cyclic
mode the ranks never share an index within a step.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from loaderx import _native
from loaderx._args import (
    MODES,
    check_global,
    check_mode,
    check_positive,
    check_sample_out,
    check_seed,
    check_shard,
    check_step,
)

__all__ = ["MODES", "Sampler", "sample"]


def sample(
    mode: str,
    n: int,
    batch_size: int,
    step: int,
    *,
    seed: int = 0,
    shard: tuple[int, int] = (0, 1),
    out: np.ndarray | None = None,
) -> np.ndarray:
    """The indices this rank reads at ``step``, in one native call.

    Args:
        mode: ``"sequential"``, ``"iid"`` or ``"cyclic"``.
        n: the size of the index space; every index is in ``[0, n)``.
        batch_size: indices per step for this rank.
        step: the step number, 0 or more.
        seed: keys the random modes (sequential ignores it); in ``[0, 2**64)``.
        shard: ``(rank, world)`` for data-parallel training.
        out: an int64 array of shape ``(batch_size,)`` to fill instead of
            allocating one.

    Returns:
        An int64 array of ``batch_size`` indices (``out`` when given).

    Raises:
        ValueError, TypeError: an argument is invalid; the message quotes it.
    """
    # The native call checks every argument itself, so the common case goes
    # straight to it; _validate runs only to word the error when it refuses.
    try:
        rank, world = shard
        if out is None:
            out = np.empty(batch_size, dtype=np.int64)
        return _native.sample(mode, n, batch_size, seed, step, rank, world, out)
    except (TypeError, ValueError, OverflowError):
        _validate(mode, n, batch_size, step, seed, shard, out)
        raise


def _validate(
    mode: Any, n: Any, batch_size: Any, step: Any, seed: Any, shard: Any, out: Any
) -> tuple[int, int, int, int, tuple[int, int], np.ndarray | None]:
    """Check sample()'s arguments, raising an error that quotes the bad one."""
    check_mode(mode)
    n = check_positive(n, "n")
    batch_size = check_positive(batch_size, "batch_size")
    step = check_step(step)
    seed = check_seed(seed)
    rank, world = check_shard(shard)
    check_global(mode, n, batch_size, world)
    if out is not None:
        out = check_sample_out(out, batch_size)
    return n, batch_size, step, seed, (rank, world), out


@dataclasses.dataclass(frozen=True)
class Sampler:
    """A validated sampler configuration; call it with a step number.

    ::

        s = Sampler("cyclic", n=50_000, batch_size=256, seed=7)
        s(0)                      # the indices of step 0
        s(123, out=buffer)        # fill an int64 buffer instead

    Attributes:
        mode: ``"sequential"``, ``"iid"`` or ``"cyclic"``.
        n: the size of the index space.
        batch_size: indices per step for this rank.
        seed: keys the random modes, in ``[0, 2**64)``.
        shard: ``(rank, world)``.
    """

    mode: str
    n: int
    batch_size: int
    seed: int = 0
    shard: tuple[int, int] = (0, 1)

    def __post_init__(self) -> None:
        check_mode(self.mode)
        set_ = object.__setattr__
        set_(self, "n", check_positive(self.n, "n"))
        set_(self, "batch_size", check_positive(self.batch_size, "batch_size"))
        set_(self, "seed", check_seed(self.seed))
        set_(self, "shard", check_shard(self.shard))
        check_global(self.mode, self.n, self.batch_size, self.shard[1])
        # the native call's arguments, read once per call instead of field by field
        set_(self, "_args", (self.mode, self.n, self.batch_size, self.seed, *self.shard))

    @property
    def global_batch_size(self) -> int:
        """``batch_size * world``: the indices all ranks draw per step."""
        return self.batch_size * self.shard[1]

    @property
    def steps_per_cycle(self) -> int | None:
        """In cyclic mode, the steps of one pass over a permutation; else None."""
        if self.mode != "cyclic":
            return None
        return self.n // self.global_batch_size

    def __call__(self, step: int, out: np.ndarray | None = None) -> np.ndarray:
        """The indices of ``step`` (see :func:`sample`)."""
        if out is None:
            out = np.empty(self.batch_size, dtype=np.int64)
        mode, n, batch_size, seed, rank, world = self._args
        try:
            return _native.sample(mode, n, batch_size, seed, step, rank, world, out)
        except (TypeError, ValueError, OverflowError):
            check_step(step)
            check_sample_out(out, self.batch_size)
            raise
