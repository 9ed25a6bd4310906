"""A loaderx loader as a PyTorch ``IterableDataset``: :class:`LoaderIterable`.
Importing this module imports torch.

The public face of :mod:`loaderx.integrations.torch`, where the code and its full
documentation live; import from here.
"""

from __future__ import annotations

from loaderx.integrations.torch import LoaderIterable

__all__ = ["LoaderIterable"]

import loaderx.integrations.torch as _impl

# help() on this face shows the full documentation of the module behind it
__doc__ = f"{__doc__}\n{_impl.__doc__ or ''}"
del _impl
