"""Sequence packing for ragged token streams: ``DataLoader(pack=...)``'s
options (:class:`Pack`) and what a packed stream yields (:class:`PackedRows`).

The public face of :mod:`loaderx.loader.packing`, where the code and its full
documentation live; import from here.
"""

from __future__ import annotations

from loaderx.loader.packing import LONG, MODES, Pack, PackedRows, check_pack

__all__ = ["MODES", "LONG", "Pack", "PackedRows", "check_pack"]

import loaderx.loader.packing as _impl

# help() on this face shows the full documentation of the module behind it
__doc__ = f"{__doc__}\n{_impl.__doc__ or ''}"
del _impl
