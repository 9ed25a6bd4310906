"""loaderx datasets in Ray Data: :class:`LoaderxDatasink` and :func:`write`
(a Ray dataset written as a sharded dataset, one shard per write task,
committed once), :class:`LoaderxDatasource` and :func:`read` (any loaderx
dataset read into Ray). Importing this module imports ray and checks its
version against :data:`SUPPORTED_RAY`.

The public face of :mod:`loaderx.integrations.ray`, where the code and its full
documentation live; import from here.
"""

from __future__ import annotations

from loaderx.integrations.ray import (
    BLOCK_BYTES,
    COLUMN,
    SUPPORTED_RAY,
    LoaderxDatasink,
    LoaderxDatasource,
    read,
    write,
)

__all__ = ["LoaderxDatasink", "LoaderxDatasource", "write", "read", "SUPPORTED_RAY", "BLOCK_BYTES", "COLUMN"]

import loaderx.integrations.ray as _impl

# help() on this face shows the full documentation of the module behind it
__doc__ = f"{__doc__}\n{_impl.__doc__ or ''}"
del _impl
