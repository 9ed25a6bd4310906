"""Sequence packing: ragged token streams as fixed ``(rows, L)`` batches.

The user documentation of these names is the docstring of :mod:`loaderx.packing`,
their public face (``help(loaderx.packing)`` and the API reference show it).

This module holds the options and the batch type; the loader's packing
streams live in :mod:`loaderx.loader._packing`.
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import numpy as np

__all__ = ["MODES", "LONG", "Pack", "PackedRows", "check_pack"]

#: the packing modes
MODES = ("concat", "first_fit")
#: what ``first_fit`` does with a record longer than the row length
LONG = ("split", "truncate")


@dataclasses.dataclass(frozen=True)
class Pack:
    """How one ragged stream is packed; invalid values raise with the value quoted.

    Attributes:
        length: ``L``, the tokens (first-axis rows of a record) per packed row.
        mode: ``"concat"`` or ``"first_fit"`` (see the module docs).
        rows: packed rows per step; None is the loader's ``batch_size``. In
            ``first_fit`` mode a step's ``batch_size`` records go into these
            rows, so a ``batch_size`` above ``rows`` packs them tighter (and
            drops more when they do not fit).
        long: ``first_fit`` only: a record longer than ``length`` is cut into
            ``length``-sized pieces, each placed like a record of its own
            (``"split"``, the default: no token is lost), or keeps only its
            first ``length`` tokens (``"truncate"``, as Grain does).
    """

    length: int
    mode: str = "concat"
    rows: int | None = None
    long: str = "split"

    def __post_init__(self) -> None:
        object.__setattr__(self, "length", _positive(self.length, "pack length"))
        if not isinstance(self.mode, str) or self.mode not in MODES:
            raise ValueError(f"pack mode must be 'concat' or 'first_fit', got {self.mode!r}")
        if self.rows is not None:
            object.__setattr__(self, "rows", _positive(self.rows, "pack rows"))
        if not isinstance(self.long, str) or self.long not in LONG:
            raise ValueError(f"pack long= must be 'split' or 'truncate', got {self.long!r}")
        if self.mode == "concat" and self.long != "split":
            raise ValueError(
                f"pack long={self.long!r} applies to mode='first_fit'; concat mode continues a "
                "long record in the next row"
            )

    def state(self) -> list[Any]:
        """What a loader's saved state records of this packing."""
        return [self.length, self.mode, self.rows, self.long]


def _positive(value: Any, what: str) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{what} must be a positive int, got {value!r}")
    if value < 1:
        raise ValueError(f"{what} must be a positive int, got {value!r}")
    return int(value)


def check_pack(spec: Any, name: str) -> Pack:
    """A ``pack=`` value for stream ``name`` (an int ``L`` or a :class:`Pack`)
    as a :class:`Pack`; a bad one raises quoting it."""
    if isinstance(spec, Pack):
        return spec
    try:
        return Pack(spec)
    except (TypeError, ValueError) as e:
        raise type(e)(f"pack={{{name!r}: {spec!r}}}: {e} (or a loaderx.Pack)") from None


class PackedRows(NamedTuple):
    """One packed stream's batch: ``rows`` rows of ``L`` tokens.

    Attributes:
        values: ``(rows, L, *item_shape)`` in the store's dtype; padding is 0.
        segment_ids: ``(rows, L)`` int32: the segment of each token, counted
            from 1 within its row; 0 marks padding.
        positions: ``(rows, L)`` int32: each token's place within its
            segment, from 0 (0 on padding).
        cu_seqlens: the segment boundaries over the flattened batch
            ``values.reshape(rows * L, ...)``: segment ``k`` is
            ``[cu_seqlens[k], cu_seqlens[k + 1])``; it starts at 0 and ends
            at ``rows * L``. A row's padding (if any) is one segment of its
            own here, so a variable-length kernel can run on the flattened
            batch as it is; mask it out with ``segment_ids == 0``. The
            loader's ``offsets_dtype``.
        num_segments: ``(rows,)`` int32: the segments of each row, padding
            not counted (the largest segment id of the row).
        records: ``(len(cu_seqlens) - 1,)`` int64: the record each segment
            of ``cu_seqlens`` comes from, -1 for padding.
        starts: like ``records``: the token of that record the segment
            starts at (0 unless the record was cut, across rows in concat
            mode or into pieces by ``first_fit``'s ``long="split"``).
        dropped: ``first_fit``: the records of the step's global batch
            (all ranks') that fit no row of the global placement, so the same
            on every rank (0 in concat mode).
        sources: like ``records``, int32: the source of each segment's
            record, its position in :attr:`loaderx.mixture.Mixture.names`
            for a loader over a mixture (whose ``records`` are global
            indices: :meth:`~loaderx.mixture.Mixture.locate` splits them),
            0 for a single store; -1 for padding.
    """

    values: np.ndarray
    segment_ids: np.ndarray
    positions: np.ndarray
    cu_seqlens: np.ndarray
    num_segments: np.ndarray
    records: np.ndarray
    starts: np.ndarray
    dropped: int
    sources: np.ndarray

    @property
    def padding(self) -> float:
        """The fraction of the batch's tokens that are padding."""
        seg = self.segment_ids
        return float(np.count_nonzero(seg == 0)) / seg.size if seg.size else 0.0
