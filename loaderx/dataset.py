"""Typed views of a store: :class:`DenseDataset` (fixed item shape) and
:class:`RaggedDataset` (a first axis that varies), :func:`pad`, and
:class:`CacheOptions`, the local cache of a dataset opened at an ``s3://``
URL.

A dense store (written by :func:`loaderx.converter.from_numpy`) holds records
of one fixed item shape, so a batch is a single fixed-stride gather into an
array of shape ``(B, *item_shape)``. A ragged store (written by
:func:`loaderx.converter.from_iterator`) holds records whose first axis
varies; a batch comes back as a list of arrays, and :func:`pad` turns such a
list into a dense array when needed.

Both open the store read-only by default; gathers from many threads at once
are safe and release the GIL for the copy. Opened with ``writable=True`` they
grow: :meth:`DenseDataset.append` / :meth:`RaggedDataset.append` add records
of the store's own dtype and shape (the schema never changes), and
``delete`` / ``compact`` pass through to the store.

The code lives in :mod:`loaderx.store.dataset`; import the names from here.
"""

from __future__ import annotations

from loaderx.store.dataset import CacheOptions, DenseDataset, RaggedDataset, pad

__all__ = ["DenseDataset", "RaggedDataset", "pad", "CacheOptions"]
