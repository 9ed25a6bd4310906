"""The converters' ``codec="auto"``: measure the codecs on a sample of the
records and choose the one that makes reads cheapest where the store will be
read from.

What a training loop pays for a codec depends on where its reads come from.
A store that fits in memory is read from the page cache after the first
epoch: a raw gather is then a memory copy (11-13 GiB/s on two cores here),
and any decoding is CPU taken from the training step. zstd decodes at
0.15-0.4 GiB/s per core for records of a few KiB (klauspost's pure-Go
decoder), so a zstd store read warm costs about ten times the CPU of a raw
one: measured on 50,000 int32[2048] token rows, 560 batches/s against 5,630
raw. Narrowing (``"narrow"``: each integer minus the record's smallest, in
1, 2 or 4 bytes) widens at close to the speed of a copy and reads half the
bytes or fewer, so it costs nothing warm. A store that does not fit in
memory is read from storage on every epoch, and there the bytes saved count.

The rule (all figures measured on the sample, on this machine):

1. The regime. The store's raw size is estimated (records times their size;
   for a stream, its ``len()`` times the sample's mean record size). If it is
   at most :data:`IN_MEMORY_FRACTION` of the machine's physical memory, reads
   after the first epoch come from the page cache: the *in-memory* regime.
   Otherwise, the *cold-read* regime. A stream of unknown length, or a
   machine whose memory cannot be read, is judged in memory: the in-memory
   rule picks only codecs that decode near memory speed, which cost little
   on a cold read either, where zstd read warm would cost ten times the CPU.
2. In memory: ``narrow`` when the records are integers and it stores the
   sample in at most 1/:data:`NARROW_MIN_RATIO` of its bytes, else ``raw``;
   never zstd (its figures are still measured and recorded, to show why).
3. Cold reads: a candidate qualifies when its ratio ``r`` (logical bytes /
   stored bytes) is at least its minimum (:data:`MIN_RATIO` for zstd,
   :data:`NARROW_MIN_RATIO` for narrow) and one core decodes the sample at
   ``D >= STORAGE_MIB_S_PER_CORE * r / (r - 1)`` MiB/s or more. That floor is
   where a codec breaks even on a cold read: a core serving records from
   storage that gives it ``S`` MiB/s spends ``1/S`` per raw byte, and
   ``1/(r*S) + 1/D`` per encoded one. Among zstd and ``zstd_dict`` the
   earlier rule picks at most one: ``zstd_dict`` is tried only when the
   records average at most :data:`DICT_MAX_RECORD_BYTES` and the sample has
   at least :data:`DICT_MIN_SAMPLE_RECORDS` records (a dictionary trains on
   every other sample record, and both are measured on the others), and it
   is preferred when it qualifies and either zstd does not or it shrinks the
   records by another :data:`DICT_MIN_GAIN`. Between that pick and
   ``narrow``, the one with the lower modelled cost ``1/(r*S) + 1/D`` wins;
   ``raw`` when none qualifies.

The sample is deterministic (evenly spread records of an array, the first
records of a stream), so the ratios are too; the decode speed is timed (the
fastest of several passes), so a sample that decodes within noise of its
decode floor could be decided differently on another run. The record of the
choice (``codec_choice`` in ``schema.msgpack``, shown by ``stats()`` and
``loaderx info``) holds every figure the decision used, the regime and why.
"""

from __future__ import annotations

import os
import time
from typing import Any

import numpy as np

from loaderx.store import _native

#: zstd must store the sample in at most half its bytes, even for cold
#: reads. The benchmark's photo-like records compress 1.15-1.25x, and their
#: zstd gather ran at 1.1 GiB/s against 11.8 GiB/s raw: ten times the CPU per
#: batch for a sixth less disk. At 2x the store fits in half the memory, the
#: smallest saving that changes whether a data set stays in the page cache.
MIN_RATIO = 2.0

#: ``narrow`` must store the sample in at most 1/1.25 of its bytes. It
#: widens at about a copy's speed, so any saving is worth having warm; below
#: a fifth the saving is within what a store's growth changes anyway, and
#: the records are kept raw, as they are.
NARROW_MIN_RATIO = 1.25

#: A store whose raw size is at most this fraction of the physical memory is
#: judged to stay in the page cache after its first epoch. Half leaves room
#: for the training process itself, its batches and the rest of the system.
IN_MEMORY_FRACTION = 0.5

#: The storage bandwidth one core is assumed to get, in MiB/s: a SATA SSD or
#: a 4 Gbit/s network volume (about 500 MiB/s) shared by two cores. The
#: decode floor of a codec with ratio r is this times r / (r - 1). Records of
#: a few KiB decode at 150-420 MiB/s per core here (per-frame set-up
#: dominates), large compressible ones at 0.5-1.7 GiB/s.
STORAGE_MIB_S_PER_CORE = 250.0


def decode_floor(ratio: float) -> float:
    """The decode speed (MiB/s of records, one core) a codec of ``ratio``
    needs to qualify for cold reads: :data:`STORAGE_MIB_S_PER_CORE` * ratio /
    (ratio - 1), infinite for a ratio of 1 or less."""
    if ratio <= 1.0:
        return float("inf")
    return STORAGE_MIB_S_PER_CORE * ratio / (ratio - 1.0)


def cold_cost(ratio: float, decode_mib_s: float) -> float:
    """The modelled time one core spends per GiB of records read cold, in
    milliseconds: ``1/(r*S) + 1/D`` per MiB (reading the stored bytes, then
    decoding them), with ``S`` = :data:`STORAGE_MIB_S_PER_CORE`."""
    if ratio <= 0 or decode_mib_s <= 0:
        return float("inf")
    return 1024e3 * (1.0 / (ratio * STORAGE_MIB_S_PER_CORE) + 1.0 / decode_mib_s)


def physical_memory_bytes() -> int | None:
    """The machine's physical memory in bytes, or None where the system
    does not say (``SC_PAGE_SIZE`` times ``SC_PHYS_PAGES``)."""
    try:
        pages = os.sysconf("SC_PHYS_PAGES")
        size = os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return None
    if pages <= 0 or size <= 0:
        return None
    return int(pages) * int(size)


#: Records this large or smaller (on average) are tried with a dictionary.
DICT_MAX_RECORD_BYTES = 16 << 10

#: A dictionary is tried only on a sample of at least this many records
#: (half train it, half measure it).
DICT_MIN_SAMPLE_RECORDS = 64

#: Where both qualify, ``zstd_dict`` must store the held-out records in
#: 1/DICT_MIN_GAIN of ``zstd``'s bytes: a dictionary store trains for
#: seconds on creation and encodes at a slower level.
DICT_MIN_GAIN = 1.2

#: The sample: evenly spread records, at most this many bytes ...
SAMPLE_BYTES = 4 << 20
#: ... and at most this many records.
SAMPLE_MAX_RECORDS = 4096
#: A record larger than SAMPLE_BYTES / SAMPLE_BIG_RECORDS is sampled by its
#: leading bytes, from this many records.
SAMPLE_BIG_RECORDS = 4

MiB = 1 << 20
GiB = 1 << 30

#: The names of the two regimes, as the record of a choice gives them.
IN_MEMORY = "in memory"
COLD_READS = "cold reads"


def sample_rows(n: int, record_bytes: int) -> np.ndarray:
    """The indices of the records sampled from ``n`` records of
    ``record_bytes`` each: evenly spread, first and last included."""
    if n <= 0:
        return np.zeros(0, np.int64)
    if record_bytes * SAMPLE_BIG_RECORDS > SAMPLE_BYTES:
        count = SAMPLE_BIG_RECORDS
    else:
        count = SAMPLE_BYTES // max(record_bytes, 1)
    count = max(1, min(n, count, SAMPLE_MAX_RECORDS))
    return np.unique(np.linspace(0, n - 1, count).round().astype(np.int64))


def record_sample(record: np.ndarray, count: int, itemsize: int = 0) -> np.ndarray:
    """``record``'s bytes as one 1-D uint8 sample, cut to its leading bytes
    when the record is larger than its share of the sample budget, at a
    whole number of elements of ``itemsize`` bytes (by default the record's
    own), so that narrowing sees whole values."""
    arr = np.ascontiguousarray(record)
    flat = arr.reshape(-1).view(np.uint8)
    share = SAMPLE_BYTES // max(count, 1)
    if flat.nbytes <= share:
        return flat
    item = max(itemsize or arr.dtype.itemsize, 1)
    return flat[: max(item, share - share % item)]


def _pack(records: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    sizes = np.fromiter((r.nbytes for r in records), dtype=np.int64, count=len(records))
    offsets = np.zeros(len(records) + 1, np.int64)
    np.cumsum(sizes, out=offsets[1:])
    data = np.concatenate(records) if records else np.zeros(0, np.uint8)
    return data, offsets


def _measure(
    codec: str, records: list[np.ndarray], dict_tier: str, dictionary: bytes | None = None,
    element: str | None = None,
) -> dict[str, Any]:
    data, offsets = _pack(records)
    p = _native.codec_probe(codec, data, offsets, dict_tier=dict_tier, dictionary=dictionary, element=element)
    logical, stored = p["logical_bytes"], p["stored_bytes"]
    return {
        "ratio": round(logical / stored, 3) if stored else 1.0,
        "decode_mib_s": round(logical / MiB / (p["decode_nanos"] / 1e9), 1) if logical else 0.0,
        "logical_bytes": logical,
        "stored_bytes": stored,
        "records_compressed": p["compressed"],
    }


def _min_ratio(name: str) -> float:
    return NARROW_MIN_RATIO if name == "narrow" else MIN_RATIO


def _qualifies(name: str, m: dict[str, Any] | None) -> bool:
    """Whether candidate ``name`` qualifies for cold reads (rule 3)."""
    return (m is not None and "ratio" in m and m["ratio"] >= _min_ratio(name)
            and m["decode_mib_s"] >= decode_floor(m["ratio"]))


def _why_not(name: str, m: dict[str, Any]) -> str:
    if m["ratio"] < _min_ratio(name):
        return f"{name} ratio {m['ratio']:.2f} < {_min_ratio(name):g}"
    return (f"{name} decodes at {m['decode_mib_s']:.0f} MiB/s per core, below the "
            f"{decode_floor(m['ratio']):.0f} its ratio {m['ratio']:.2f} needs")


def _why(name: str, m: dict[str, Any]) -> str:
    return (f"{name} ratio {m['ratio']:.2f} >= {_min_ratio(name):g}, decoding at {m['decode_mib_s']:.0f} "
            f"MiB/s per core >= {decode_floor(m['ratio']):.0f}")


def _size(n: float) -> str:
    if n >= GiB:
        return f"{n / GiB:.1f} GiB"
    return f"{n / MiB:.1f} MiB"


def regime(store_bytes: int | None, basis: str) -> dict[str, Any]:
    """Where a store of ``store_bytes`` raw bytes (None: unknown; ``basis``
    says how the figure was had) will be read from: the regime of rule 1,
    with the figures and a sentence saying why."""
    memory = physical_memory_bytes()
    out: dict[str, Any] = {
        "store_bytes": store_bytes,
        "store_bytes_from": basis,
        "memory_bytes": memory,
        "in_memory_fraction": IN_MEMORY_FRACTION,
    }
    if store_bytes is None:
        out.update(regime=IN_MEMORY, regime_reason=(
            f"the size of the store is not known ({basis}), so it is judged by the sample alone and "
            "treated as one that fits in memory: only a codec that decodes near memory speed is "
            "chosen, which costs little on a cold read too"))
    elif memory is None:
        out.update(regime=IN_MEMORY, regime_reason=(
            f"the store holds about {_size(store_bytes)} of records, and this system does not say how "
            "much memory it has, so it is treated as one that fits in memory"))
    elif store_bytes <= IN_MEMORY_FRACTION * memory:
        out.update(regime=IN_MEMORY, regime_reason=(
            f"the store holds about {_size(store_bytes)} of records, at most {IN_MEMORY_FRACTION:g} of "
            f"this machine's {_size(memory)} of memory, so after the first epoch its reads come from "
            "the page cache, where only a codec that decodes near memory speed pays"))
    else:
        out.update(regime=COLD_READS, regime_reason=(
            f"the store holds about {_size(store_bytes)} of records, more than {IN_MEMORY_FRACTION:g} of "
            f"this machine's {_size(memory)} of memory, so reads will keep coming from storage, where "
            "the bytes a codec saves count"))
    return out


def choose(
    sample: list[np.ndarray],
    record_bytes: float,
    dict_tier: str,
    sampled_from: str,
    *,
    element: str | None = None,
    store_bytes: int | None = None,
    store_bytes_from: str = "unknown",
) -> dict[str, Any]:
    """Apply the rule to ``sample`` (1-D uint8 arrays, one per sampled
    record) of records averaging ``record_bytes`` and return the choice as a
    JSON-safe dict: ``codec``, ``reason``, the regime and why, the sample's
    size, the figures of every candidate and the thresholds the rule used.
    ``sampled_from`` says how the sample was drawn; ``element`` is the
    integer type the records are arrays of (``"int32"`` ...; None when they
    are not integers, which rules ``narrow`` out); ``store_bytes`` is the
    estimated raw size of the whole store (None when unknown), and
    ``store_bytes_from`` says how it was estimated."""
    t0 = time.perf_counter()
    sample_bytes = int(sum(r.nbytes for r in sample))
    choice: dict[str, Any] = {
        "rule": "auto",
        "sample_records": len(sample),
        "sample_bytes": sample_bytes,
        "sampled_from": sampled_from,
        "record_bytes": round(float(record_bytes), 1),
        "element": element,
        "min_ratio": MIN_RATIO,
        "narrow_min_ratio": NARROW_MIN_RATIO,
        "storage_mib_s_per_core": STORAGE_MIB_S_PER_CORE,
    }
    choice.update(regime(store_bytes, store_bytes_from))
    choice["candidates"] = cands = {}
    if sample_bytes == 0:
        choice.update(codec="raw", reason="the sample holds no bytes: nothing to compress")
        choice["seconds"] = round(time.perf_counter() - t0, 3)
        return choice

    warm = choice["regime"] == IN_MEMORY
    copy = _measure("raw", sample, dict_tier)
    cands["raw"] = copy
    narrow: dict[str, Any] | None = None
    if element is None:
        cands["narrow"] = {"skipped": "the records are not arrays of integers"}
    else:
        narrow = _measure("narrow", sample, dict_tier, element=element)
        narrow["element"] = element
        cands["narrow"] = narrow
    zstd = _measure("zstd", sample, dict_tier)
    cands["zstd"] = zstd
    dict_m: dict[str, Any] | None = None
    held_zstd: dict[str, Any] | None = None
    if warm:
        cands["zstd_dict"] = {"skipped": "not tried for a store read from memory: zstd is never chosen there"}
    elif record_bytes > DICT_MAX_RECORD_BYTES:
        cands["zstd_dict"] = {"skipped": f"records average {record_bytes:.0f} bytes > {DICT_MAX_RECORD_BYTES}"}
    elif len(sample) < DICT_MIN_SAMPLE_RECORDS:
        cands["zstd_dict"] = {"skipped": f"{len(sample)} sample records < {DICT_MIN_SAMPLE_RECORDS}"}
    else:
        train, held = sample[0::2], sample[1::2]
        try:
            d = _native.dict_train(train, dict_tier, 0)
        except ValueError as e:
            cands["zstd_dict"] = {"skipped": f"no dictionary could be trained on the sample ({e})"}
        else:
            dict_m = _measure("zstd_dict", held, dict_tier, d)
            held_zstd = _measure("zstd", held, dict_tier)
            dict_m.update(dict_bytes=len(d), zstd_ratio_on_same_records=held_zstd["ratio"],
                          dict_tier=dict_tier)
            cands["zstd_dict"] = dict_m
    for m in cands.values():
        if "ratio" in m:
            floor = decode_floor(m["ratio"])
            m["decode_floor_mib_s"] = round(floor, 1) if floor != float("inf") else None
            m["cold_cost_ms_per_gib"] = round(cold_cost(m["ratio"], m["decode_mib_s"]), 1)
    if warm:
        _choose_in_memory(choice, copy, narrow, zstd)
    else:
        _choose_cold(choice, narrow, zstd, dict_m, held_zstd)
    choice["seconds"] = round(time.perf_counter() - t0, 3)
    return choice


def _choose_in_memory(
    choice: dict[str, Any], copy: dict[str, Any], narrow: dict[str, Any] | None, zstd: dict[str, Any]
) -> None:
    """Rule 2: narrow when it shrinks the sample enough, else raw."""
    slower = copy["decode_mib_s"] / max(zstd["decode_mib_s"], 1e-9)
    not_zstd = (f"zstd (ratio {zstd['ratio']:.2f}) decodes at {zstd['decode_mib_s']:.0f} MiB/s per core, "
                f"{slower:.0f}x slower than a copy ({copy['decode_mib_s']:.0f} MiB/s), which every batch "
                "would pay in CPU")
    if narrow is not None and narrow["ratio"] >= NARROW_MIN_RATIO:
        choice.update(codec="narrow", reason=(
            f"{choice['regime_reason']}; narrow stores the sample in 1/{narrow['ratio']:.2f} of its bytes "
            f"(>= {NARROW_MIN_RATIO:g}) and widens it at {narrow['decode_mib_s']:.0f} MiB/s per core; "
            f"{not_zstd}"))
    elif narrow is not None:
        choice.update(codec="raw", reason=(
            f"{choice['regime_reason']}; narrow saves too little (ratio {narrow['ratio']:.2f} < "
            f"{NARROW_MIN_RATIO:g}); {not_zstd}"))
    else:
        choice.update(codec="raw", reason=(
            f"{choice['regime_reason']}; the records are not integers, so narrow does not apply; {not_zstd}"))


def _choose_cold(
    choice: dict[str, Any], narrow: dict[str, Any] | None, zstd: dict[str, Any],
    dict_m: dict[str, Any] | None, held_zstd: dict[str, Any] | None,
) -> None:
    """Rule 3: the earlier zstd / zstd_dict rule, then the lower modelled
    cost of its pick and narrow; raw when none qualifies."""
    pick: tuple[str, dict[str, Any], str] | None = None  # name, figures, why
    if dict_m is not None and held_zstd is not None and _qualifies("zstd_dict", dict_m):
        gain = held_zstd["stored_bytes"] / max(dict_m["stored_bytes"], 1)
        if not _qualifies("zstd", zstd):
            pick = ("zstd_dict", dict_m, f"{_why('zstd_dict', dict_m)}; {_why_not('zstd', zstd)}")
        elif gain >= DICT_MIN_GAIN:
            pick = ("zstd_dict", dict_m, (
                f"{_why('zstd_dict', dict_m)}, and {gain:.2f}x fewer bytes than zstd on the same "
                f"records (>= {DICT_MIN_GAIN:g})"))
        else:
            pick = ("zstd", zstd, (
                f"{_why('zstd', zstd)}; a dictionary saves only {gain:.2f}x more (< {DICT_MIN_GAIN:g})"))
    elif _qualifies("zstd", zstd):
        why = _why("zstd", zstd)
        if dict_m is not None:
            why += f"; {_why_not('zstd_dict', dict_m)}"
        pick = ("zstd", zstd, why)
    rejected = [] if pick is not None else [_why_not("zstd", zstd)]
    if pick is None and dict_m is not None:
        rejected.append(_why_not("zstd_dict", dict_m))
    if narrow is not None and _qualifies("narrow", narrow):
        if pick is None or narrow["cold_cost_ms_per_gib"] < pick[1]["cold_cost_ms_per_gib"]:
            other = "" if pick is None else (
                f"; its modelled cold read, {narrow['cold_cost_ms_per_gib']:.0f} ms per GiB, beats "
                f"{pick[0]}'s {pick[1]['cold_cost_ms_per_gib']:.0f} ({pick[2]})")
            if pick is None:
                other = "; " + "; ".join(rejected)
            pick = ("narrow", narrow, _why("narrow", narrow) + other)
        else:
            pick = (pick[0], pick[1], (
                f"{pick[2]}; its modelled cold read, {pick[1]['cold_cost_ms_per_gib']:.0f} ms per GiB, "
                f"beats narrow's {narrow['cold_cost_ms_per_gib']:.0f}"))
    elif narrow is not None:
        rejected.append(_why_not("narrow", narrow))
    if pick is None:
        choice.update(codec="raw", reason=(
            f"{choice['regime_reason']}; " + "; ".join(rejected) + ": no codec would pay for its decoding"))
    else:
        choice.update(codec=pick[0], reason=f"{choice['regime_reason']}; {pick[2]}")
