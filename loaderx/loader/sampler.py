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

Custom samplers: any object with a method ``indices(step) -> int64 array``
(a pure function of ``step``, so that resuming stays exact) can stand in for
a mode in :class:`loaderx.dataloader.DataLoader`; :class:`WeightedSampler`
is the built-in example.

Sharding: with ``shard=(rank, world)`` the global batch of a step has
``batch_size * world`` positions and ``rank`` takes positions
``[rank * batch_size, (rank + 1) * batch_size)``. Together the ranks produce
exactly the batches of one process with ``batch_size * world``; in cyclic
mode the ranks never share an index within a step.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, runtime_checkable

import numpy as np

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
from loaderx.store import _native

if TYPE_CHECKING:
    from numpy.typing import NDArray

__all__ = ["MODES", "IndexSampler", "Sampler", "WeightedSampler", "sample"]


@runtime_checkable
class IndexSampler(Protocol):
    """What a custom sampler provides: the indices of one step's batch, as
    an int64 array of ``batch_size`` indices in ``[0, n)`` (fewer, but at
    least one, for a short batch such as the last of a pass), a pure function
    of ``step`` (the same step gives the same indices in every process)."""

    def indices(self, step: int) -> NDArray[np.int64]:
        """The record indices of ``step``."""
        ...


def sample(
    mode: str,
    n: int,
    batch_size: int,
    step: int,
    *,
    seed: int = 0,
    shard: tuple[int, int] = (0, 1),
    out: NDArray[np.int64] | None = None,
) -> NDArray[np.int64]:
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
    if TYPE_CHECKING:  # an instance attribute that __post_init__ sets, not a field
        _args: ClassVar[tuple[str, int, int, int, int, int]]

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

    def __call__(self, step: int, out: NDArray[np.int64] | None = None) -> NDArray[np.int64]:
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


class WeightedSampler:
    """Draws records with probability proportional to ``weights``; a pure
    function of ``(seed, step)``, so a resumed run draws what an
    uninterrupted one would. Pass it as ``DataLoader(..., sampler=...)``.

    With ``replacement=True`` every index of a batch is an independent draw
    (inverse-CDF lookup, O(batch) per step). With ``replacement=False`` a
    step's global batch holds distinct records, drawn one after another
    each time in proportion to the weights of those not drawn yet
    (Efraimidis-Spirakis keys, O(n) per step); across steps records repeat.
    Records of weight 0 are never drawn.

    Args:
        weights: one non-negative, finite weight per record (1-D, not all 0).
        batch_size: indices per step for this rank.
        replacement: draw with (True) or without (False) replacement within
            a step.
        seed: keys the draws, in ``[0, 2**64)``.
        shard: ``(rank, world)``: the global batch of ``batch_size * world``
            draws is split, rank ``r`` taking positions
            ``[r * batch_size, (r + 1) * batch_size)``.

    Raises:
        TypeError, ValueError: an argument is invalid (the message names it).
    """

    def __init__(
        self,
        weights: Any,
        batch_size: int,
        *,
        replacement: bool = True,
        seed: int = 0,
        shard: tuple[int, int] = (0, 1),
    ) -> None:
        try:
            w = np.array(weights, dtype=np.float64)
        except (TypeError, ValueError):
            raise TypeError(f"weights must be an array of numbers, got {type(weights).__name__}") from None
        if w.ndim != 1 or w.size == 0:
            raise ValueError(f"weights must be a non-empty 1-D array, got shape {w.shape}")
        bad = ~np.isfinite(w) | (w < 0)
        if bad.any():
            i = int(np.argmax(bad))
            raise ValueError(f"weights must be finite and non-negative; weights[{i}] = {float(w[i])!r}")
        if not isinstance(replacement, bool):
            raise TypeError(f"replacement must be True or False, got {replacement!r}")
        self.batch_size = check_positive(batch_size, "batch_size")
        self.seed = check_seed(seed)
        self.shard = check_shard(shard)
        self.replacement = replacement
        self.n = int(w.size)
        g = self.batch_size * self.shard[1]
        positive = int(np.count_nonzero(w))
        if positive == 0:
            raise ValueError("weights are all 0: nothing can be drawn")
        if not replacement and g > positive:
            raise ValueError(
                f"replacement=False needs the global batch (batch_size * world = {g}) to be at "
                f"most the number of records with a positive weight ({positive})"
            )
        self.weights = w
        self.weights.flags.writeable = False
        cdf = np.cumsum(w)
        self._cdf = cdf / cdf[-1]
        self._global = g

    def __repr__(self) -> str:
        return (
            f"WeightedSampler(n={self.n}, batch_size={self.batch_size}, "
            f"replacement={self.replacement}, seed={self.seed}, shard={self.shard})"
        )

    def _rng(self, step: int) -> np.random.Generator:
        # Philox keyed by (seed, step): an independent stream per step
        key = np.array([self.seed, step], dtype=np.uint64)
        return np.random.Generator(np.random.Philox(key=key))

    def indices(self, step: int) -> NDArray[np.int64]:
        """This rank's ``batch_size`` indices of ``step`` (int64)."""
        step = check_step(step)
        rng = self._rng(step)
        g = self._global
        if self.replacement:
            u = rng.random(g)
            drawn = np.searchsorted(self._cdf, u, side="right")
            np.minimum(drawn, self.n - 1, out=drawn)
        else:
            u = 1.0 - rng.random(self.n)  # in (0, 1]
            with np.errstate(divide="ignore"):
                keys = np.log(u) / self.weights  # -inf for weight 0
            top = np.argpartition(-keys, g - 1)[:g]
            drawn = top[np.argsort(-keys[top], kind="stable")]  # in draw order
        rank = self.shard[0]
        b = self.batch_size
        return drawn[rank * b : (rank + 1) * b].astype(np.int64, copy=False)


# A loader's saved state names a custom sampler by ``module.Class``, and
# states saved before this module moved into ``loaderx.loader`` say
# ``loaderx.sampler``: the public classes keep the public module's name, so
# those states still load (and pickles name the public path).
for _public in (Sampler, WeightedSampler):
    _public.__module__ = "loaderx.sampler"
del _public
