"""Write NumPy data into a loaderx store: :func:`from_numpy` (a dense store)
and :func:`from_iterator` (a ragged store), with :func:`train_dict` for a
zstd dictionary trained on sample records.

The public face of :mod:`loaderx.store.converter`, where the code and its full
documentation live; import from here.
"""

from __future__ import annotations

from loaderx.store.converter import DICT_TIERS, MAX_RECORD_BYTES, from_iterator, from_numpy, train_dict

__all__ = ["DICT_TIERS", "MAX_RECORD_BYTES", "from_iterator", "from_numpy", "train_dict"]

import loaderx.store.converter as _impl

# help() on this face shows the full documentation of the module behind it
__doc__ = f"{__doc__}\n{_impl.__doc__ or ''}"
del _impl
