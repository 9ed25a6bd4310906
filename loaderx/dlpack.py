"""Hand ml_dtypes arrays (bfloat16, float8 ...) to frameworks over DLPack:
:func:`to_dlpack`.

The public face of :mod:`loaderx.integrations.dlpack`, where the code and its full
documentation live; import from here.
"""

from __future__ import annotations

from loaderx.integrations.dlpack import to_dlpack

__all__ = ["to_dlpack"]

import loaderx.integrations.dlpack as _impl

# help() on this face shows the full documentation of the module behind it
__doc__ = f"{__doc__}\n{_impl.__doc__ or ''}"
del _impl
