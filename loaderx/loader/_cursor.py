"""A loader's resume cursor, taken at a step and sought to from a state.

What a cursor holds, and why, is said in :mod:`loaderx.loader._state`,
which also checks its shape and digest. Here it is made from a loader's
parts and checked against them: the concat-packed streams
(:class:`loaderx.loader._packing.PackStream`, whose token index gives and
takes ``[t, r, n]``) and an exact mixture's schedule
(:class:`loaderx.loader._schedule.Schedule`, whose anchors are the records
of each source before a step). The loader, its worker processes and the
torch integration all go through :func:`make_cursor` and
:func:`seek_cursor`, so the cursor means the same everywhere.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from loaderx.loader._packing import PackStream
from loaderx.loader._state import check_cursor, seal_cursor


class Parts:
    """What a loader's cursor is about: its concat-packed streams by name,
    the schedule of its exact mixture (None without one), and, when the
    streams pack one rank's own indices (a custom sampler, which shards
    itself), that rank's ``(rank, world)``."""

    def __init__(self, packs: Mapping[str, PackStream], schedule: Any, shard: tuple[int, int] | None = None) -> None:
        self.packs = dict(packs)
        self.schedule = schedule
        self.shard = shard

    def __bool__(self) -> bool:
        return bool(self.packs) or self.schedule is not None


def parts_of(streams: Iterable[tuple[str, Any, Any]], sampler: Any, shard: tuple[int, int] | None = None) -> Parts:
    """The cursor's parts of a loader over ``streams`` (``(name, stream,
    pool)`` triples) drawing with ``sampler`` (``shard``: the rank whose
    own indices the streams pack, for a custom sampler). A mixture's draw
    (rank and global) shares one schedule; a custom sampler over a mixture
    draws without it, so it has none."""
    packs = {
        name: ds for name, ds, _ in streams
        if isinstance(ds, PackStream) and ds.pack.mode == "concat" and ds.keeps_cursor
    }
    schedule = getattr(sampler, "schedule", None)
    if schedule is not None and not schedule.exact:
        schedule = None  # sampled counts reach any step without a replay (their bridge)
    return Parts(packs, schedule, shard if packs else None)


def make_cursor(step: int, parts: Parts) -> dict[str, Any] | None:
    """The cursor at loader step ``step``, or None when the loader seeks
    for free (nothing of it depends on earlier steps)."""
    if not parts:
        return None
    body: dict[str, Any] = {"step": step}
    if parts.shard is not None:  # of this rank's own packing: no use to another rank
        body["shard"] = list(parts.shard)
    draws = [step]  # the sampler steps the loader draws next
    if parts.packs:
        body["pack"] = {name: ds.cursor(step) for name, ds in parts.packs.items()}
        draws += [c[0] for c in body["pack"].values()]
    if parts.schedule is not None:
        body["mixture"] = parts.schedule.anchors(draws)
    return seal_cursor(body)


def seek_cursor(cursor: Any, parts: Parts) -> None:
    """Check a saved cursor against the loader's parts and the data, and
    give each part its position (facts about the draw: the loader may then
    seek to the cursor's step or any later one without counting from 0).
    The cursor of another rank's own packing (a custom sampler) is of no
    use here and is left aside: the loader then counts from step 0.

    Raises:
        ValueError: the cursor is malformed, changed, of other streams or
            packing, or does not fit the data (the message says how).
    """
    c = check_cursor(cursor)
    if ("shard" in c) != (parts.shard is not None):
        raise ValueError(
            f"state_dict's cursor is of {'one rank' if 'shard' in c else 'the global batch'}, this loader "
            f"packs {'one rank' if parts.shard is not None else 'the global batch'}'s indices"
        )
    if "shard" in c and c["shard"] != list(parts.shard):  # type: ignore[arg-type]
        return  # another rank's packing (a custom sampler shards itself): this rank counts its own
    packs = c.get("pack", {})
    if sorted(packs) != sorted(parts.packs):
        raise ValueError(
            f"state_dict's cursor has the positions of concat-packed streams {sorted(packs)}, this loader "
            f"packs {sorted(parts.packs)} in concat mode"
        )
    if ("mixture" in c) != (parts.schedule is not None):
        have = "an exact mixture schedule" if parts.schedule is not None else "no exact mixture schedule"
        raise ValueError(
            f"state_dict's cursor {'has' if 'mixture' in c else 'has no'} mixture anchors, and this "
            f"loader has {have}"
        )
    if parts.schedule is not None:  # first: a packed stream's check draws a sampler step
        try:
            parts.schedule.seek(c["mixture"])
        except ValueError as e:
            raise ValueError(f"state_dict's cursor does not fit the mixture: {e}") from None
    for name, entry in packs.items():
        parts.packs[name].seek(c["step"], entry)
