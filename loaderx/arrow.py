"""Arrow tables, Parquet files and Hugging Face datasets written as a
directory of aligned stores (:func:`from_arrow`), and such a directory
opened as one multi-stream dataset (:class:`MSDataset`). pyarrow is imported
only when a conversion needs it.

:func:`from_arrow` writes each column of a table to its own store under one
directory, all stores aligned (row ``i`` of every column is record ``i`` of
every store):

* a primitive column (bool, integers, floats) becomes a dense store of
  scalars;
* a ``fixed_size_list`` column (nested ones too) becomes a dense store whose
  item shape is the list sizes, e.g. ``fixed_size_list<uint8>[784]`` gives
  records of shape ``(784,)``;
* a ``list<primitive>`` (or ``large_list``) column becomes a ragged store,
  and a list of fixed-size lists a ragged store with a trailing shape.

The source is read batch by batch straight from the Arrow buffers (no Python
object per row), and every dtype is kept exactly: a ``uint8`` column stays
``uint8``. The source may be a ``pyarrow.Table`` or ``RecordBatchReader``, a
``datasets.Dataset`` (Arrow underneath; its row selection and order are
honoured), or a path: a Parquet file, a directory of Parquet files, an Arrow
IPC / Feather file, or a directory written by ``datasets``'
``save_to_disk``. Columns with no store form (strings, structs, images not
yet decoded, columns holding nulls) are refused with a message naming the
column and its type, before anything is written.

:class:`MSDataset` opens such a directory as one multi-stream dataset: a
read-only mapping ``{column: DenseDataset | RaggedDataset}`` that a
:class:`loaderx.DataLoader` takes directly (when every stream is dense).

``pyarrow`` (``pip install 'loaderx[arrow]'``) and ``datasets``
(``loaderx[hf]``) are imported only when used.

The code lives in :mod:`loaderx.io.arrow`; import the names from here.
"""

from __future__ import annotations

from loaderx.io.arrow import BATCH_BYTES, MSDataset, arrow_source, from_arrow, is_multistream

__all__ = ["BATCH_BYTES", "MSDataset", "arrow_source", "from_arrow", "is_multistream"]
