"""Arrow tables, Parquet files and Hugging Face datasets written as a
directory of aligned stores (:func:`from_arrow`), and such a directory
opened as one multi-stream dataset (:class:`MSDataset`). pyarrow is imported
only when a conversion needs it.

The public face of :mod:`loaderx.io.arrow`, where the code and its full
documentation live; import from here.
"""

from __future__ import annotations

from loaderx.io.arrow import BATCH_BYTES, MSDataset, arrow_source, from_arrow, is_multistream

__all__ = ["BATCH_BYTES", "MSDataset", "arrow_source", "from_arrow", "is_multistream"]

import loaderx.io.arrow as _impl

# help() on this face shows the full documentation of the module behind it
__doc__ = f"{__doc__}\n{_impl.__doc__ or ''}"
del _impl
