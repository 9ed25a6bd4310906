"""Index generation: which records make up the batch of a step, as a pure
function of ``(mode, n, batch_size, seed, step, shard)``.

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

The code lives in :mod:`loaderx.loader.sampler`; import the names from here.
"""

from __future__ import annotations

from loaderx.loader.sampler import MODES, IndexSampler, Sampler, WeightedSampler, sample

__all__ = ["MODES", "IndexSampler", "Sampler", "WeightedSampler", "sample"]
