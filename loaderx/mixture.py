"""Data mixtures: :class:`Mixture`, named sources drawn by weight, step by
step, as a pure function of ``(seed, step)``.

The public face of :mod:`loaderx.loader.mixture`, where the code and its full
documentation live; import from here.
"""

from __future__ import annotations

from loaderx.loader.mixture import Mixture

__all__ = ["Mixture"]

import loaderx.loader.mixture as _impl

# help() on this face shows the full documentation of the module behind it
__doc__ = f"{__doc__}\n{_impl.__doc__ or ''}"
del _impl
