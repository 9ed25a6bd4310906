"""Raw byte records: :class:`Zrecord`, the store engine underneath every
dataset, and the :class:`VerifyReport` / :class:`Fault` its ``verify`` returns.

The public face of :mod:`loaderx.store.zrecord`, where the code and its full
documentation live; import from here.
"""

from __future__ import annotations

from loaderx.store.zrecord import Fault, VerifyReport, Zrecord

__all__ = ["Fault", "VerifyReport", "Zrecord"]

import loaderx.store.zrecord as _impl

# help() on this face shows the full documentation of the module behind it
__doc__ = f"{__doc__}\n{_impl.__doc__ or ''}"
del _impl
