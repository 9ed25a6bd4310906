"""A loader state's fingerprint of its data: a digest per stream (per source
of a mixture) that another dataset of the same record count does not share.

The digest covers the stream's record count, dtype and item shape, the sizes
of up to :data:`SIZES` records spread evenly over it (a ragged store's table
entries, which differ between datasets of other documents), and the bytes of
up to :data:`RECORDS` of those records. It reads that much whatever the
dataset's size: a few table pages and a few records, once per loader. It is
a check against loading a state onto other data, not a proof that every
record is the same: a dataset changed in records it does not sample shares
the digest.
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np

#: records whose sizes a fingerprint reads, and of those whose bytes it reads
SIZES, RECORDS = 1024, 16


def _spread(n: int, k: int) -> np.ndarray:
    return np.unique(np.linspace(0, n - 1, min(n, k)).astype(np.int64)) if n else np.zeros(0, np.int64)


def fingerprints(streams: Any) -> dict[str, str]:
    """``{name: digest}`` of a loader's ``(name, stream, pool)`` triples, each
    stream the loader's wrapper of a dataset or array."""
    out = {}
    for name, ds, _ in streams:
        inner = getattr(ds, "dataset", None)
        if inner is None:
            inner = getattr(ds, "array", ds)
        out[name] = fingerprint(inner)
    return out


def fingerprint(stream: Any) -> str:
    """The digest of a stream: a DenseDataset, a RaggedDataset or a NumPy array."""
    stream = getattr(stream, "array", stream)  # a NumPy array wrapped as a stream
    n = len(stream)
    h = hashlib.blake2b(digest_size=8)
    shape = tuple(stream.shape[1:]) if isinstance(stream, np.ndarray) else tuple(stream.item_shape)
    h.update(f"{n}\0{np.dtype(stream.dtype).str}\0{shape}".encode())
    if n:
        if hasattr(stream, "lengths"):  # a RaggedDataset: its table's sizes, then records
            h.update(np.ascontiguousarray(stream.lengths(_spread(n, SIZES)), dtype=np.int64).tobytes())
            for rec in stream[_spread(n, RECORDS)]:
                h.update(np.ascontiguousarray(rec).tobytes())
        else:
            h.update(np.ascontiguousarray(stream[_spread(n, RECORDS)]).tobytes())
    return h.hexdigest()


def compare_fingerprints(saved: Any, mine: dict[str, str], what: str) -> None:
    """Refuse a state whose fingerprint (``{name: digest}``) differs from
    this loader's, naming the stream or source (``what``: which of the two)."""
    if not isinstance(saved, dict):
        raise ValueError(f"state_dict has data={saved!r}, not a dict of {what} -> fingerprint")
    for name, digest in mine.items():
        theirs = saved.get(name)
        if theirs is not None and theirs != digest:
            raise ValueError(
                f"state_dict is from other data: {what} {name!r} has the same record count but other records "
                f"(its fingerprint is {digest}, the state's {theirs}: a state saved over another dataset?)"
            )
