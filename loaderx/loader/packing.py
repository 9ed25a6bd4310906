"""Sequence packing: ragged token streams as fixed ``(rows, L)`` batches.

``DataLoader(..., pack={"tokens": L})`` (or ``pack={"tokens": Pack(L,
mode=...)}``) turns a ragged stream into rows of exactly ``L`` tokens, with
the per-token ``segment_ids`` (1, 2, ... within a row, 0 for padding) and
``positions`` (0, 1, ... within each segment) of the T5X / MaxText / Grain
convention, and the segment boundaries a variable-length attention kernel
takes (``cu_seqlens`` over the flattened batch and the segment count of each
row). A batch comes out as a :class:`PackedRows`.

Two modes:

``"concat"`` (the default)
    concatenate, then split. The stream is the concatenation of the records
    in sampler order (the global batch of step 0, then of step 1, ...), and
    step ``s`` holds its tokens ``[s * R * L, (s + 1) * R * L)`` (``R`` the
    global rows, ``rows x world``): every token
    is used once, a record may continue from one row (or step) into the next,
    and there is no padding. The rows of a step are a pure function of
    ``(seed, s)``, so a resumed loader yields the same bits; to find where
    step ``s`` starts, the loader sums record lengths (read from the store's
    table, not from the records) over the sampler's steps, a chunk of steps
    at a time, and keeps those sums.
``"first_fit"``
    records are never split across rows (unless longer than ``L``, see
    ``long``). The records of step ``s`` are its global batch, placed in
    sampler order into the first global row with room; a record that fits no
    row is left out of the batch and counted in :attr:`PackedRows.dropped`
    (a global count, the same on every rank). The rest of each row is
    padding. The unpacked streams of the loader are gathered at this rank's
    indices as usual, so with ``world > 1`` a rank's rows may hold records
    of another rank's slice (``records`` names them).

Packing is global over the ranks of a data-parallel run (``shard=(rank,
world)``): a step has ``rows x world`` global rows, packed from the step's
global batch (the ranks' sampler slices in rank order), and rank ``r`` gets
rows ``[r * rows, (r + 1) * rows)``. In concat mode the stream is the
concatenation of the global batches' records; in ``first_fit`` mode the
global batch is placed into the global rows. So the ranks of any world with
the same global batch (``batch_size x world``, and ``rows x world``) yield
together the same rows at every step, and a state saved at world ``W``
resumes exactly at world ``W'`` (``load_state_dict``). A custom sampler
shards itself in its own way, so a loader with one packs the indices it
draws on each rank, and refuses a saved state of another world.

Over a :class:`loaderx.mixture.Mixture`, ``pack=`` names a ragged stream of
the sources; ``records`` are then global indices and ``sources`` names the
source of each segment. A concat mixture loader has no per-row ``source``
stream (a row holds records of several sources and steps); ``first_fit``
keeps it, per record of this rank's slice like every unpacked stream.

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
    def token_sources(self) -> np.ndarray:
        """``(rows, L)`` int32: the source of every token (its position in
        :attr:`loaderx.mixture.Mixture.names`, 0 for a single store, -1 on
        padding), from ``sources`` and ``cu_seqlens``; in every mode,
        concat included, where a row holds records of several sources."""
        cu = np.asarray(self.cu_seqlens, dtype=np.int64)
        rows, length = self.segment_ids.shape[:2]
        n = np.asarray(self.sources).shape[0]
        out = np.repeat(np.asarray(self.sources), np.diff(cu[: n + 1]))
        return out.reshape(rows, length)

    @property
    def padding(self) -> float:
        """The fraction of the batch's tokens that are padding."""
        seg = self.segment_ids
        return float(np.count_nonzero(seg == 0)) / seg.size if seg.size else 0.0
