"""Typed views of a store: :class:`DenseDataset` (fixed item shape) and
:class:`RaggedDataset` (a first axis that varies), :func:`pad`, and
:class:`CacheOptions`, the local cache of a dataset opened at an ``s3://``
URL.

The public face of :mod:`loaderx.store.dataset`, where the code and its full
documentation live; import from here.
"""

from __future__ import annotations

from loaderx.store.dataset import CacheOptions, DenseDataset, RaggedDataset, pad

__all__ = ["DenseDataset", "RaggedDataset", "pad", "CacheOptions"]

import loaderx.store.dataset as _impl

# help() on this face shows the full documentation of the module behind it
__doc__ = f"{__doc__}\n{_impl.__doc__ or ''}"
del _impl
