"""Hand ml_dtypes arrays (bfloat16, float8 ...) to frameworks over DLPack:
:func:`to_dlpack`.

The public face of :mod:`loaderx.integrations.dlpack`, where the code and its full
documentation live; import from here.
"""

from __future__ import annotations

from loaderx.integrations.dlpack import to_dlpack

__all__ = ["to_dlpack"]
