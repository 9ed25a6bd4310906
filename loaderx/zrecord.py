"""Raw byte records: :class:`Zrecord`, the store engine underneath every
dataset, and the :class:`VerifyReport` / :class:`Fault` its ``verify`` returns.

A :class:`Zrecord` is a directory holding N records, each an opaque byte
string, addressed by a dense index space ``0..N``. Every operation is a batch:
``append`` takes a list, ``gather`` takes a list of indices, and one record is
just a batch of one. Type interpretation is the caller's job; the dataset
classes in :mod:`loaderx.dataset` add a dtype and shape on top.

Deleting swaps the last record into the hole, so an index is stable only until
something is deleted. ``gather`` and ``append`` may run concurrently from any
number of threads; ``delete`` and ``compact`` need the store to themselves.

The code lives in :mod:`loaderx.store.zrecord`; import the names from here.
"""

from __future__ import annotations

from loaderx.store.zrecord import Fault, VerifyReport, Zrecord

__all__ = ["Fault", "VerifyReport", "Zrecord"]
