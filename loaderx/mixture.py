"""Data mixtures: :class:`Mixture`, named sources drawn by weight, step by
step, as a pure function of ``(seed, step)``.

A :class:`Mixture` stands where a loader takes its streams::

    mix = Mixture({"web": {"tokens": web_tokens}, "code": {"tokens": code_tokens}},
                  {"web": 0.7, "code": 0.3})
    loader = DataLoader(mix, batch_size=256)
    batch = next(loader)   # batch["tokens"], and batch["source"]: 0 (web) or 1 (code) per row

Each source is a mapping of aligned streams with the same stream names,
dtypes and trailing shapes as the others. Step ``s`` takes from the sources
in proportion to the weights, as a pure function of ``(seed, s)``: by
default every step's count for source ``i`` is within ±1 of ``w_i x G`` and
its running sum within ±1 of ``w_i x G x (s + 1)`` (``G`` the global batch,
``batch_size x world``; :mod:`loaderx.loader._schedule` says how), or with
``counts="sampled"`` a multinomial draw per step.

Each source reads through its own endless stream of record indices: the
``j``-th record source ``i`` ever contributes is position ``j`` of that
stream, and ``j`` is the running count of the source, so a source is covered
once per cycle whatever the weights. The stream is ``sampler="cyclic"`` (a
fresh permutation of the source per pass, from the native cyclic sampler),
``"iid"`` or ``"sequential"``; its positions are drawn with a few native
calls over aligned blocks of the permutation (one, two or, near the end of a
pass, a few more per source per step).

The loader sees one index space: record ``k`` of source ``i`` has the global
index ``offsets[i] + k`` (:meth:`Mixture.locate` undoes it). A stream of the
mixture gathers a batch with one native gather per source per stream, into
the batch rows of that source (through a scratch buffer and one copy when the
rows are not consecutive: the rows of a batch interleave the sources, so
that every rank's slice of the global batch holds close to its share of
each). The batch also has a ``source`` int32 stream naming each row's source
(its position in :attr:`Mixture.names`).

Weights may change at given steps, ``{0: {...}, 10_000: {...}}``; the
schedule is part of the loader's state, and a state from another mixture
(sources, sizes, weights, counts, sampler) is refused saying what differs.

The code lives in :mod:`loaderx.loader.mixture`; import the names from here.
"""

from __future__ import annotations

from loaderx.loader.mixture import Mixture

__all__ = ["Mixture"]
