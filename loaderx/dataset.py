"""Typed views of a store: :class:`DenseDataset` (fixed item shape) and
:class:`RaggedDataset` (a first axis that varies), and :func:`pad`.

The public face of :mod:`loaderx.store.dataset`, where the code and its full
documentation live; import from here.
"""

from __future__ import annotations

from loaderx.store.dataset import DenseDataset, RaggedDataset, pad

__all__ = ["DenseDataset", "RaggedDataset", "pad"]
