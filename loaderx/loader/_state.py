"""A loader's saved state: what it records, and the check that a state fits.

The state of a step-based loader is its next step plus what identifies the
data and the draw (stream names and lengths, sampler, seed, batch size, shard,
the finite pass and a mixture's sources and weights), so that a state saved
by one loader refuses to load into a loader over other data. The shard is
elastic: a state loads into any rank of any world with the same global batch
(``batch_size x world``), which draws the same records in the same order. :class:`loaderx.dataloader.DataLoader` and
:class:`loaderx.torch.LoaderIterable` both build and check states here; the
functions are pure Python, so a process that only saves or checks a state
never loads the native library.

A loader whose position depends on the steps before it (a concat-packed
stream, an exact mixture schedule) adds a ``cursor``: see the comment above
:func:`cursor_digest` for what it holds; this module checks its shape and
digest, :mod:`loaderx.loader._cursor` the rest, against the data.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from loaderx._args import check_shard, check_step
from loaderx.loader._fingerprint import compare_fingerprints
from loaderx.loader._schedule import compare_mixture

#: keys every state has
KEYS = ("step", "seed", "sampler", "batch_size", "shard")
#: keys that identify the data; states saved before they existed load without them
DATA_KEYS = ("streams", "pass", "pack", "mixture", "data")
#: the key of the resume cursor, in the states of loaders that have one
CURSOR = "cursor"


def epoch_steps(n: int, global_batch: int, drop_last: bool) -> int:
    """The steps of one pass over ``n`` records in global batches of
    ``global_batch``: the short last batch counts unless ``drop_last``."""
    full, rest = divmod(n, global_batch)
    return full if drop_last or rest == 0 else full + 1


def sampler_identity(sampler: Any, seed: int, shard: tuple[int, int]) -> tuple[str, int, tuple[int, int]]:
    """``(name, seed, shard)`` as a state records them: a mode keeps the
    loader's seed and shard; a custom sampler is named ``module.Class`` and
    its own ``seed`` and ``shard`` attributes, when it has them, win."""
    if isinstance(sampler, str):
        return sampler, seed, shard
    t = type(sampler)
    return (
        f"{t.__module__}.{t.__qualname__}",
        int(getattr(sampler, "seed", seed)),
        check_shard(getattr(sampler, "shard", (0, 1))),
    )


def make_state(
    step: int,
    *,
    sampler: Any,
    seed: int,
    shard: tuple[int, int],
    batch_size: int,
    lengths: Mapping[str, int],
    end: int | None,
    epoch: bool,
    drop_last: bool,
    pack: Mapping[str, Any] | None = None,
    mixture: Mapping[str, Any] | None = None,
    cursor: Mapping[str, Any] | None = None,
    data: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The JSON-serialisable state of a loader whose next step is ``step``
    (``pack``: the packing of each packed stream, recorded when there is one;
    ``mixture``: the identity of a loader's :class:`loaderx.mixture.Mixture`;
    ``cursor``: its resume cursor, see :func:`seal_cursor`)."""
    name, seed, shard = sampler_identity(sampler, seed, shard)
    state = {
        "step": step,
        "seed": seed,
        "sampler": name,
        "batch_size": batch_size,
        "shard": list(shard),
        "streams": dict(lengths),
        "pass": {"steps": end, "epoch": epoch, "drop_last": drop_last},
    }
    if pack:
        state["pack"] = {k: list(v) for k, v in pack.items()}
    if mixture is not None:
        state["mixture"] = dict(mixture)
    if data is not None:  # the fingerprint of each stream (loaderx.loader._fingerprint)
        state["data"] = dict(data)
    if cursor is not None:
        state[CURSOR] = dict(cursor)
    return state


def check_state(state: Any, mine: Mapping[str, Any], end: int | None) -> int:
    """The step of ``state``, after checking that it was saved by a loader
    like the one whose state is ``mine`` and that its step is not past
    ``end``.

    Raises:
        TypeError: ``state`` is not a mapping.
        ValueError: keys are missing or unknown, the data or the draw differ
            (the message says what), or the step is past the end.
    """
    if not isinstance(state, Mapping):
        raise TypeError(f"state must be a dict from state_dict(), got {type(state).__name__}")
    missing = [k for k in KEYS if k not in state]
    extra = [k for k in state if k not in KEYS and k not in DATA_KEYS and k != CURSOR]
    if missing or extra:
        raise ValueError(f"state_dict keys do not match: missing {missing}, unexpected {extra}")
    theirs = dict(state)
    try:
        theirs["shard"] = list(state["shard"])
    except TypeError:
        raise ValueError(f"state_dict has shard={state['shard']!r}, not a pair") from None
    if ("mixture" in state) != ("mixture" in mine):
        which = "a Mixture" if "mixture" in state else "plain streams"
        raise ValueError(f"state_dict is from a loader over {which}, this loader's is not")
    if "mixture" in state:
        compare_mixture(state["mixture"], mine["mixture"])
        if isinstance(state["mixture"], Mapping) and "data" in state["mixture"] and "data" in mine["mixture"]:
            compare_fingerprints(state["mixture"]["data"], mine["mixture"]["data"], "source")
    for key in ("sampler", "seed", "pass"):
        if key in theirs and theirs[key] != mine[key]:
            raise ValueError(f"state_dict has {key}={state[key]!r} but this loader has {key}={mine[key]!r}")
    if _global_pack(state.get("pack", {}), theirs["shard"]) != _global_pack(mine.get("pack", {}), mine["shard"]):
        # a step of packed rows is another step
        raise ValueError(
            f"state_dict has pack={state.get('pack', {})!r} but this loader has pack={mine.get('pack', {})!r}"
        )
    if "streams" in state:  # after the packing: concat packing of a mixture leaves out the source stream
        _compare_streams(state["streams"], mine["streams"])
    if "data" in state and "data" in mine:  # the same record counts: are they the same records?
        compare_fingerprints(state["data"], mine["data"], "stream")
    _compare_global_batch(state["batch_size"], theirs["shard"], mine["batch_size"], mine["shard"])
    step = check_step(state["step"])
    if end is not None and step > end:
        raise ValueError(f"state_dict has step={step}, past the end of this {end}-step loader")
    if CURSOR in state:
        check_cursor(state[CURSOR])
    return step


# -- the resume cursor -----------------------------------------------------------
#
# A loader's next step is all its state needs, but two of its parts depend on
# every step before it: where a concat-packed step starts in the stream of
# tokens, and an exact mixture schedule's extras. The cursor records both at
# one step, so that a loader seeks there without summing or replaying what
# came before:
#
#     {"step": s,                                  # the loader step it was taken at
#      "shard": [rank, world],                    # only when a custom sampler packs this
#                                                 #   rank's own indices (it shards itself)
#      "pack": {stream: [t, r, n]},               # step s's first token is token r of
#                                                 #   sampler step t's n tokens (concat)
#      "mixture": [[u, [c_0, c_1, ...]], ...],    # an exact mixture: the records of each
#                                                 #   source before sampler step u
#      "check": digest of the above}
#
# Everything in it is global (of the global batch, not of a rank), so it
# serves every rank of every world with the same global batch. It is a set
# of facts about the draw: a loader may seek to any step at or after its
# step (a state whose step was changed by hand still resumes exactly; one
# before it is reached by summing from step 0). Its digest refuses a cursor
# changed by hand; the loader checks the rest against the data it reads
# (loaderx.loader._cursor).


def cursor_digest(body: Mapping[str, Any]) -> str:
    """The digest a cursor carries of its other entries (a JSON round trip keeps it)."""
    text = json.dumps({k: v for k, v in body.items() if k != "check"}, sort_keys=True, separators=(",", ":"))
    return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()


def seal_cursor(body: Mapping[str, Any]) -> dict[str, Any]:
    """A cursor from its entries, with their digest."""
    out = dict(body)
    out["check"] = cursor_digest(out)
    return out


def _count(value: Any, what: str) -> int:
    if type(value) is not int or value < 0:
        raise ValueError(f"state_dict's cursor has {what}={value!r}; it must be a non-negative int")
    return value


def check_cursor(cursor: Any) -> dict[str, Any]:
    """A saved cursor's entries, after checking their shapes and the digest.

    Raises:
        ValueError: it is malformed, or was changed since it was saved (the
            message says which entry).
    """
    if not isinstance(cursor, Mapping):
        raise ValueError(f"state_dict has cursor={cursor!r}, not a dict")
    unknown = [k for k in cursor if k not in ("step", "shard", "pack", "mixture", "check")]
    if unknown or "step" not in cursor or "check" not in cursor:
        raise ValueError(
            f"state_dict's cursor has keys {sorted(cursor)}; a cursor has 'step', 'check' and 'pack' "
            "or 'mixture' (or both), and 'shard' when it is of one rank's packing"
        )
    _count(cursor["step"], "step")
    if "shard" in cursor:
        shard = cursor["shard"]
        if not isinstance(shard, (list, tuple)) or len(shard) != 2:
            raise ValueError(f"state_dict's cursor has shard={shard!r}, not [rank, world]")
        for label, v in zip(("rank", "world"), shard):
            _count(v, f"shard {label}")
    packs = cursor.get("pack", {})
    if not isinstance(packs, Mapping):
        raise ValueError(f"state_dict's cursor has pack={packs!r}, not a dict of stream name -> [t, r, n]")
    for name, entry in packs.items():
        if not isinstance(entry, (list, tuple)) or len(entry) != 3:
            raise ValueError(f"state_dict's cursor has pack[{name!r}]={entry!r}, not [t, r, n]")
        for label, v in zip("trn", entry):
            _count(v, f"pack[{name!r}] {label}")
    anchors = cursor.get("mixture", [])
    if not isinstance(anchors, (list, tuple)):
        raise ValueError(f"state_dict's cursor has mixture={anchors!r}, not a list of [step, counts]")
    for entry in anchors:
        if not isinstance(entry, (list, tuple)) or len(entry) != 2 or not isinstance(entry[1], (list, tuple)):
            raise ValueError(f"state_dict's cursor has a mixture anchor {entry!r}, not [step, [counts]]")
        _count(entry[0], "a mixture anchor's step")
        for v in entry[1]:
            _count(v, f"a count of the mixture anchor at step {entry[0]}")
    if cursor["check"] != cursor_digest(cursor):
        raise ValueError(
            f"state_dict's cursor does not match its check {cursor['check']!r}: it was changed since the "
            "loader saved it. Drop the 'cursor' entry to resume from the step alone (the loader then "
            "counts from step 0)"
        )
    return dict(cursor)


def _global_pack(pack: Any, shard: Any) -> Any:
    """A state's ``pack`` entry with each explicit per-rank ``rows`` counted
    over the world (packing is global: the ranks of a world split the rows
    of one global packing), so that states of two worlds with the same
    global rows compare equal; anything malformed is returned as it is, to
    be refused as unequal."""
    try:
        world = int(shard[1])
        return {k: [v[0], v[1], None if v[2] is None else int(v[2]) * world, *v[3:]] for k, v in pack.items()}
    except (TypeError, ValueError, IndexError, KeyError, AttributeError):
        return pack


def _compare_global_batch(batch_size: Any, shard: Any, mine_bs: int, mine_shard: Any) -> None:
    """Elastic resume: a state loads into any shard of any world whose global
    batch (``batch_size x world``) is the state's, since the ranks of a world
    together draw exactly the global batch of each step, in the same order
    whatever the world. Another global batch is refused, naming the
    ``batch_size`` this world would need."""
    try:
        check_shard(shard)
        b = int(batch_size)
    except (TypeError, ValueError):
        raise ValueError(
            f"state_dict has batch_size={batch_size!r}, shard={shard!r}: not a batch size and a shard"
        ) from None
    g = b * shard[1]
    world = mine_shard[1]
    mine = mine_bs * world
    if g != mine:
        need = (
            f"batch_size={g // world} with world {world}"
            if g % world == 0
            else f"a world that divides {g} (world {world} does not)"
        )
        raise ValueError(
            f"state_dict has global batch {g} (batch_size={b} x world {shard[1]}), this loader has {mine} "
            f"(batch_size={mine_bs} x world {world}): the same sample order needs the state's global batch, "
            f"so resume with {need}"
        )


def _compare_streams(saved: Any, mine: Mapping[str, int]) -> None:
    """Raise a ValueError saying how a saved ``streams`` entry differs."""
    if not isinstance(saved, Mapping):
        raise ValueError(f"state_dict has streams={saved!r}, not a dict of name -> length")
    gone = [k for k in saved if k not in mine]
    new = [k for k in mine if k not in saved]
    if gone or new:
        raise ValueError(
            f"state_dict is from other streams: it has {sorted(saved)}, this loader has "
            f"{sorted(mine)} (missing here: {gone}, not in the state: {new})"
        )
    for name, length in mine.items():
        if saved[name] != length:
            raise ValueError(
                f"state_dict is from other data: stream {name!r} had {saved[name]!r} records, "
                f"this loader's has {length}"
            )
