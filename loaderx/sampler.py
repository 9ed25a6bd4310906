"""Index generation: which records make up the batch of a step, as a pure
function of ``(mode, n, batch_size, seed, step, shard)``.

The public face of :mod:`loaderx.loader.sampler`, where the code and its full
documentation live; import from here.
"""

from __future__ import annotations

from loaderx.loader.sampler import MODES, IndexSampler, Sampler, WeightedSampler, sample

__all__ = ["MODES", "IndexSampler", "Sampler", "WeightedSampler", "sample"]

import loaderx.loader.sampler as _impl

# help() on this face shows the full documentation of the module behind it
__doc__ = f"{__doc__}\n{_impl.__doc__ or ''}"
del _impl
