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
from typing import Any, Optional, Tuple

import numpy as np

from loaderx import _native
from loaderx.zrecord import _as_int

__all__ = ["MODES", "Sampler", "sample"]

#: The sampling modes.
MODES = ("sequential", "iid", "cyclic")

_INT64_MAX = (1 << 63) - 1
_UINT64_MAX = (1 << 64) - 1


def _check_mode(mode: Any) -> str:
    if mode not in MODES:
        raise ValueError(f"sampler mode must be one of {', '.join(map(repr, MODES))}; got {mode!r}")
    return mode


def _check_positive(value: Any, name: str) -> int:
    v = _as_int(value, name)
    if not 1 <= v <= _INT64_MAX:
        raise ValueError(f"{name} must be a positive int64, got {value!r}")
    return v


def _check_seed(seed: Any) -> int:
    v = _as_int(seed, "seed")
    if not 0 <= v <= _UINT64_MAX:
        raise ValueError(f"seed must be in [0, 2**64), got {seed!r}")
    return v


def _check_step(step: Any) -> int:
    v = step if type(step) is int else _as_int(step, "step")
    if not 0 <= v <= _INT64_MAX:
        raise ValueError(f"step must be a non-negative int64, got {step!r}")
    return v


def _check_shard(shard: Any) -> Tuple[int, int]:
    try:
        rank, world = shard
    except (TypeError, ValueError):
        raise TypeError(f"shard must be a (rank, world) pair, got {shard!r}") from None
    rank = _as_int(rank, "shard rank")
    world = _as_int(world, "shard world")
    if world < 1:
        raise ValueError(f"shard world must be at least 1, got shard={shard!r}")
    if not 0 <= rank < world:
        raise ValueError(f"shard rank must be in [0, {world}), got shard={shard!r}")
    return rank, world


def _check_global(mode: str, n: int, batch_size: int, world: int) -> None:
    g = batch_size * world
    if g > _INT64_MAX:
        raise ValueError(f"global batch {batch_size} * {world} overflows int64")
    if mode == "cyclic" and g > n:
        raise ValueError(
            f"cyclic mode needs the global batch (batch_size * world = {batch_size} * {world} "
            f"= {g}) to be at most n = {n}"
        )


def _check_out(out: Any, batch_size: int) -> np.ndarray:
    if not isinstance(out, np.ndarray):
        raise TypeError(f"out must be a numpy.ndarray, got {type(out).__name__}")
    if out.dtype != np.int64:
        raise TypeError(f"out must have dtype int64, got {out.dtype}")
    if out.shape != (batch_size,):
        raise ValueError(f"out must have shape ({batch_size},), got {out.shape}")
    if not out.flags.c_contiguous:
        raise ValueError("out must be C-contiguous")
    if not out.flags.writeable:
        raise ValueError("out is read-only")
    return out


def sample(
    mode: str,
    n: int,
    batch_size: int,
    step: int,
    *,
    seed: int = 0,
    shard: Tuple[int, int] = (0, 1),
    out: Optional[np.ndarray] = None,
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
) -> Tuple[int, int, int, int, Tuple[int, int], Optional[np.ndarray]]:
    """Check sample()'s arguments, raising an error that quotes the bad one."""
    _check_mode(mode)
    n = _check_positive(n, "n")
    batch_size = _check_positive(batch_size, "batch_size")
    step = _check_step(step)
    seed = _check_seed(seed)
    rank, world = _check_shard(shard)
    _check_global(mode, n, batch_size, world)
    if out is not None:
        out = _check_out(out, batch_size)
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
    shard: Tuple[int, int] = (0, 1)

    def __post_init__(self) -> None:
        _check_mode(self.mode)
        set_ = object.__setattr__
        set_(self, "n", _check_positive(self.n, "n"))
        set_(self, "batch_size", _check_positive(self.batch_size, "batch_size"))
        set_(self, "seed", _check_seed(self.seed))
        set_(self, "shard", _check_shard(self.shard))
        _check_global(self.mode, self.n, self.batch_size, self.shard[1])
        # the native call's arguments, read once per call instead of field by field
        set_(self, "_args", (self.mode, self.n, self.batch_size, self.seed) + self.shard)

    @property
    def global_batch_size(self) -> int:
        """``batch_size * world``: the indices all ranks draw per step."""
        return self.batch_size * self.shard[1]

    @property
    def steps_per_cycle(self) -> Optional[int]:
        """In cyclic mode, the steps of one pass over a permutation; else None."""
        if self.mode != "cyclic":
            return None
        return self.n // self.global_batch_size

    def __call__(self, step: int, out: Optional[np.ndarray] = None) -> np.ndarray:
        """The indices of ``step`` (see :func:`sample`)."""
        if out is None:
            out = np.empty(self.batch_size, dtype=np.int64)
        mode, n, batch_size, seed, rank, world = self._args
        try:
            return _native.sample(mode, n, batch_size, seed, step, rank, world, out)
        except (TypeError, ValueError, OverflowError):
            _check_step(step)
            _check_out(out, self.batch_size)
            raise
