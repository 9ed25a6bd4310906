"""The step-based data loader: :class:`DataLoader`, its :class:`LoaderOptions`,
and the :class:`PackedBatch` / :class:`PaddedBatch` of a ragged stream.

The tunables (``PREFETCH_BYTES``, ``SHARED_GATHER_BYTES``, ``READY_TIMEOUT``)
are copies for reference: the loader reads ``PREFETCH_BYTES`` from
:mod:`loaderx.loader.options` and the other two from
:mod:`loaderx.loader.dataloader`, so those are the modules to change them in.

The public face of :mod:`loaderx.loader.dataloader`, where the code and its full
documentation live; import from here.
"""

from __future__ import annotations

from loaderx.loader.dataloader import (
    READY_TIMEOUT,
    SHARED_GATHER_BYTES,
    DataLoader,
    LoaderOptions,
    PackedBatch,
    PaddedBatch,
)
from loaderx.loader.options import PREFETCH_BYTES

__all__ = [
    "PREFETCH_BYTES",
    "READY_TIMEOUT",
    "SHARED_GATHER_BYTES",
    "DataLoader",
    "LoaderOptions",
    "PackedBatch",
    "PaddedBatch",
]

import loaderx.loader.dataloader as _impl

# help() on this face shows the full documentation of the module behind it
__doc__ = f"{__doc__}\n{_impl.__doc__ or ''}"
del _impl
