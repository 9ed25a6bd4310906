"""Index generation: which records make up the batch of a step, as a pure
function of ``(mode, n, batch_size, seed, step, shard)``.

The public face of :mod:`loaderx.loader.sampler`, where the code and its full
documentation live; import from here.
"""

from __future__ import annotations

from loaderx.loader.sampler import MODES, IndexSampler, Sampler, WeightedSampler, sample

__all__ = ["MODES", "IndexSampler", "Sampler", "WeightedSampler", "sample"]
