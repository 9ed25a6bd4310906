"""Records as an Arrow column, for the stores built on Arrow (Hugging Face
`datasets`, Lance): each record flattened into one fixed-size list, the layout
that reads back as one contiguous block of values, and the way back from a
column of such lists to a batch of records."""

from __future__ import annotations

from typing import Any

import numpy as np


def fixed_size_lists(arr: np.ndarray) -> Any:
    """`arr` (n records) as a pyarrow FixedSizeListArray of n lists of the record's
    element count; the values buffer is `arr`'s own memory (no copy)."""
    import pyarrow as pa
    n = len(arr)
    flat = np.ascontiguousarray(arr).reshape(-1)
    return pa.FixedSizeListArray.from_arrays(pa.array(flat), int(flat.size // max(n, 1)))


def records(col: Any, n: int, shape: tuple[int, ...]) -> np.ndarray:
    """The n records of a (possibly chunked) fixed-size-list column, as an array of
    shape (n, *shape) in the values' own dtype: a view of the Arrow buffer when
    the column is one chunk without nulls, else a copy."""
    if hasattr(col, "combine_chunks"):
        col = col.combine_chunks()
    values = col.flatten()  # honours the array's offset, unlike .values
    return values.to_numpy(zero_copy_only=False).reshape(n, *shape)
