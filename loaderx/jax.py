"""Batches of a loaderx loader put onto JAX devices, prefetched:
:class:`DeviceLoader`. Importing this module imports jax.

The public face of :mod:`loaderx.integrations.jax`, where the code and its full
documentation live; import from here.
"""

from __future__ import annotations

from loaderx.integrations.jax import DeviceLoader

__all__ = ["DeviceLoader"]
