"""The step-based data loader: :class:`DataLoader`, its :class:`LoaderOptions`,
and the :class:`PackedBatch` / :class:`PaddedBatch` of a ragged stream.

The tunables (``PREFETCH_BYTES``, ``SHARED_GATHER_BYTES``, ``READY_TIMEOUT``)
are read here for reference; the loader reads them from
:mod:`loaderx.loader.dataloader`, so that is the module to change them in.

The public face of :mod:`loaderx.loader.dataloader`, where the code and its full
documentation live; import from here.
"""

from __future__ import annotations

from loaderx.loader.dataloader import (
    PREFETCH_BYTES,
    READY_TIMEOUT,
    SHARED_GATHER_BYTES,
    DataLoader,
    LoaderOptions,
    PackedBatch,
    PaddedBatch,
)

__all__ = [
    "PREFETCH_BYTES",
    "READY_TIMEOUT",
    "SHARED_GATHER_BYTES",
    "DataLoader",
    "LoaderOptions",
    "PackedBatch",
    "PaddedBatch",
]
