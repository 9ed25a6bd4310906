"""Sequence packing for ragged token streams: ``DataLoader(pack=...)``'s
options (:class:`Pack`) and what a packed stream yields (:class:`PackedRows`).

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

The code lives in :mod:`loaderx.loader.packing`; import the names from here.
"""

from __future__ import annotations

from loaderx.loader.packing import LONG, MODES, Pack, PackedRows, check_pack

__all__ = ["MODES", "LONG", "Pack", "PackedRows", "check_pack"]
