"""Sequence packing for ragged token streams: ``DataLoader(pack=...)``'s
options (:class:`Pack`) and what a packed stream yields (:class:`PackedRows`).

The public face of :mod:`loaderx.loader.packing`, where the code and its full
documentation live; import from here.
"""

from __future__ import annotations

from loaderx.loader.packing import LONG, MODES, Pack, PackedRows, check_pack

__all__ = ["MODES", "LONG", "Pack", "PackedRows", "check_pack"]
