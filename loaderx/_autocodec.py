"""The converters' ``codec="auto"``: measure the codecs on a sample of the
records and keep the store raw unless compression pays for its decoding.

What a training loop pays for compression: with the data in the page cache
a raw gather is a memory copy (11-13 GiB/s on two cores here), while a zstd
gather decodes every record (klauspost's pure-Go decoder: 0.15-0.4 GiB/s per
core for records of a few KiB, 0.5-1.7 GiB/s for large ones). Every
compressed batch therefore costs several to tens of times the CPU of a raw
one, and that CPU is taken from the training step. What compression buys is footprint: the
store needs ``1/ratio`` of the disk and of the page cache, so more of a data
set stays in memory, and a cold read moves fewer bytes.

The rule (all figures measured on the sample, on this machine):

1. A candidate codec qualifies when its ratio ``r`` (logical bytes / stored
   bytes) is at least :data:`MIN_RATIO` and one core decodes the sample at
   ``D >= STORAGE_MIB_S_PER_CORE * r / (r - 1)`` MiB/s or more. That floor
   is where compression breaks even on a cold read: a core serving records
   from storage that gives it ``S`` MiB/s spends ``1/S`` per raw byte, and
   ``1/(r*S) + 1/D`` per compressed one, so the compressed store is no
   slower only when decoding costs no more than reading the bytes it saved
   (``1/D <= (1 - 1/r)/S``). The floor is 500 MiB/s at ``r = 2``, 375 at
   3, and falls towards 250 for very compressible data. Warm reads always
   lose, which is what :data:`MIN_RATIO` weighs against.
2. ``zstd_dict`` is tried only when the records average at most
   :data:`DICT_MAX_RECORD_BYTES` (larger records carry their own context)
   and the sample has at least :data:`DICT_MIN_SAMPLE_RECORDS` records: a
   dictionary is trained on every other sample record and both ``zstd`` and
   ``zstd_dict`` are measured on the records it did not see. ``zstd_dict``
   is chosen when it qualifies and either ``zstd`` does not or the
   dictionary shrinks the records by another :data:`DICT_MIN_GAIN`.
3. Otherwise ``zstd`` when it qualifies, else ``raw``.

The sample is deterministic (evenly spread records of an array, the first
records of a stream), so the ratios are too; the decode speed is timed (the
fastest of several passes), so a sample that decodes within noise of
its decode floor could be decided differently on another run. The
record of the choice (``codec_choice`` in ``schema.msgpack``, shown by
``stats()`` and ``loaderx info``) holds every figure the decision used.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from loaderx import _native

#: A codec must store the sample in at most half its bytes. The benchmark's
#: photo-like records compress 1.15-1.25x, and their zstd gather ran at 1.1
#: GiB/s against 11.8 GiB/s raw: ten times the CPU per batch for a sixth
#: less disk. At 2x the store fits in half the memory, the smallest saving
#: that changes whether a data set stays in the page cache.
MIN_RATIO = 2.0

#: The storage bandwidth one core is assumed to get, in MiB/s: a SATA SSD or
#: a 4 Gbit/s network volume (about 500 MiB/s) shared by two cores. The
#: decode floor of a codec with ratio r is this times r / (r - 1). Records of
#: a few KiB decode at 150-420 MiB/s per core here (per-frame set-up
#: dominates), large compressible ones at 0.5-1.7 GiB/s.
STORAGE_MIB_S_PER_CORE = 250.0


def decode_floor(ratio: float) -> float:
    """The decode speed (MiB/s of records, one core) a codec of ``ratio``
    needs to qualify: :data:`STORAGE_MIB_S_PER_CORE` * ratio / (ratio - 1),
    infinite for a ratio of 1 or less."""
    if ratio <= 1.0:
        return float("inf")
    return STORAGE_MIB_S_PER_CORE * ratio / (ratio - 1.0)

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


def record_sample(record: np.ndarray, count: int) -> np.ndarray:
    """``record``'s bytes as one 1-D uint8 sample, cut to its leading bytes
    when the record is larger than its share of the sample budget."""
    flat = np.ascontiguousarray(record).reshape(-1).view(np.uint8)
    share = SAMPLE_BYTES // max(count, 1)
    return flat[:share] if flat.nbytes > share else flat


def _pack(records: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    sizes = np.fromiter((r.nbytes for r in records), dtype=np.int64, count=len(records))
    offsets = np.zeros(len(records) + 1, np.int64)
    np.cumsum(sizes, out=offsets[1:])
    data = np.concatenate(records) if records else np.zeros(0, np.uint8)
    return data, offsets


def _measure(codec: str, records: list[np.ndarray], dict_tier: str, dictionary: bytes | None = None) -> dict[str, Any]:
    data, offsets = _pack(records)
    p = _native.codec_probe(codec, data, offsets, dict_tier=dict_tier, dictionary=dictionary)
    logical, stored = p["logical_bytes"], p["stored_bytes"]
    return {
        "ratio": round(logical / stored, 3) if stored else 1.0,
        "decode_mib_s": round(logical / MiB / (p["decode_nanos"] / 1e9), 1) if logical else 0.0,
        "logical_bytes": logical,
        "stored_bytes": stored,
        "records_compressed": p["compressed"],
    }


def _qualifies(m: dict[str, Any]) -> bool:
    return m["ratio"] >= MIN_RATIO and m["decode_mib_s"] >= decode_floor(m["ratio"])


def _why_not(name: str, m: dict[str, Any]) -> str:
    if m["ratio"] < MIN_RATIO:
        return f"{name} ratio {m['ratio']:.2f} < {MIN_RATIO:g}"
    return (f"{name} decodes at {m['decode_mib_s']:.0f} MiB/s per core, below the "
            f"{decode_floor(m['ratio']):.0f} its ratio {m['ratio']:.2f} needs")


def _why(name: str, m: dict[str, Any]) -> str:
    return (f"{name} ratio {m['ratio']:.2f} >= {MIN_RATIO:g}, decoding at {m['decode_mib_s']:.0f} "
            f"MiB/s per core >= {decode_floor(m['ratio']):.0f}")


def choose(sample: list[np.ndarray], record_bytes: float, dict_tier: str, sampled_from: str) -> dict[str, Any]:
    """Apply the rule to ``sample`` (1-D uint8 arrays, one per sampled
    record) of records averaging ``record_bytes`` and return the choice as a
    JSON-safe dict: ``codec``, ``reason``, the sample's size, the figures of
    every candidate and the thresholds the rule used. ``sampled_from`` says
    how the sample was drawn."""
    t0 = time.perf_counter()
    sample_bytes = int(sum(r.nbytes for r in sample))
    choice: dict[str, Any] = {
        "rule": "auto",
        "sample_records": len(sample),
        "sample_bytes": sample_bytes,
        "sampled_from": sampled_from,
        "record_bytes": round(float(record_bytes), 1),
        "min_ratio": MIN_RATIO,
        "storage_mib_s_per_core": STORAGE_MIB_S_PER_CORE,
        "candidates": {},
    }
    cands: dict[str, Any] = choice["candidates"]
    if sample_bytes == 0:
        choice.update(codec="raw", reason="the sample holds no bytes: nothing to compress")
        choice["seconds"] = round(time.perf_counter() - t0, 3)
        return choice

    zstd = _measure("zstd", sample, dict_tier)
    cands["zstd"] = zstd
    dict_m: dict[str, Any] | None = None
    held_zstd: dict[str, Any] | None = None
    if record_bytes > DICT_MAX_RECORD_BYTES:
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

    if dict_m is not None and held_zstd is not None and _qualifies(dict_m):
        gain = held_zstd["stored_bytes"] / max(dict_m["stored_bytes"], 1)
        if not _qualifies(zstd):
            choice.update(codec="zstd_dict", reason=f"{_why('zstd_dict', dict_m)}; {_why_not('zstd', zstd)}")
        elif gain >= DICT_MIN_GAIN:
            choice.update(codec="zstd_dict", reason=(
                f"{_why('zstd_dict', dict_m)}, and {gain:.2f}x fewer bytes than zstd on the same "
                f"records (>= {DICT_MIN_GAIN:g})"))
        else:
            choice.update(codec="zstd", reason=(
                f"{_why('zstd', zstd)}; a dictionary saves only {gain:.2f}x more (< {DICT_MIN_GAIN:g})"))
    elif _qualifies(zstd):
        reason = _why("zstd", zstd)
        if dict_m is not None:
            reason += f"; {_why_not('zstd_dict', dict_m)}"
        choice.update(codec="zstd", reason=reason)
    else:
        reason = _why_not("zstd", zstd)
        if dict_m is not None:
            reason += f"; {_why_not('zstd_dict', dict_m)}"
        choice.update(codec="raw", reason=reason + ": compression would not pay for its decoding")
    choice["seconds"] = round(time.perf_counter() - t0, 3)
    return choice
