"""Batches of a loaderx loader put onto JAX devices, prefetched:
:class:`DeviceLoader`. Importing this module imports jax.

The public face of :mod:`loaderx.integrations.jax`, where the code and its full
documentation live; import from here.
"""

from __future__ import annotations

from loaderx.integrations.jax import DeviceLoader

__all__ = ["DeviceLoader"]

import loaderx.integrations.jax as _impl

# help() on this face shows the full documentation of the module behind it
__doc__ = f"{__doc__}\n{_impl.__doc__ or ''}"
del _impl
