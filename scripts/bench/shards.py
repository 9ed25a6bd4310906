"""The shards layer: one dataset read as shards against the same records in
one store.

The same records are converted once into a single store and once into a
sharded dataset of 4 and of 16 shards (equal ranges, written with
loaderx.store.shards), each with the default codec (`auto`) and with raw.
Every configuration is then read the way a training loop reads it: random
batches through `DenseDataset.gather(idx, out=)` (one native call, the
default verification) and through a default `DataLoader` (threads). The
configurations are measured round-robin within a round, and each ratio is
the median of the per-round ratios of a sharded dataset to the single store:
what splitting a dataset into shards costs its reader (target: at least
0.95x).
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

import numpy as np
from report import fmt_ratio, human_bytes, log, median, out, table

#: int32 token ids per record, and the vocabulary (Zipf-like, as data.py's token rows)
ROW = 2048
VOCAB = 50_000
SHARDS = (1, 4, 16)


def _records(n: int) -> np.ndarray:
    rng = np.random.default_rng(11)
    ranks = np.minimum(rng.zipf(1.2, (n, ROW)), VOCAB) - 1
    return ranks.astype(np.int32)


def _write(root: str, arr: np.ndarray, parts: int, codec: str) -> str:
    import loaderx
    from loaderx.store import shards

    path = os.path.join(root, f"{codec}-{parts}")
    if parts == 1:
        loaderx.from_numpy(path, arr, codec=codec)
        return path
    names = []
    for p in range(parts):
        lo, hi = len(arr) * p // parts, len(arr) * (p + 1) // parts
        with shards.ShardWriter(path) as w:
            loaderx.from_numpy(w.path, arr[lo:hi], codec=codec)
            names.append(w.name)
    shards.commit(path, names)
    return path


def _gather_rate(ds: Any, batches: list[np.ndarray], slice_s: float) -> float:
    out_buf = np.empty((len(batches[0]), *ds.item_shape), dtype=ds.dtype)
    k = 0
    t0 = time.perf_counter()
    while k < 3 or time.perf_counter() - t0 < slice_s:
        ds.gather(batches[k % len(batches)], out=out_buf)
        k += 1
    return k / (time.perf_counter() - t0)


def _loader_rate(ds: Any, batch: int, slice_s: float) -> float:
    import loaderx

    loader = loaderx.DataLoader({"tokens": ds}, batch_size=batch, seed=3)
    try:
        for _ in range(8):  # warm the pipeline
            next(loader)
        k = 0
        t0 = time.perf_counter()
        while k < 3 or time.perf_counter() - t0 < slice_s:
            next(loader)
            k += 1
        return k / (time.perf_counter() - t0)
    finally:
        loader.close()


def bench_shards(args: argparse.Namespace, results: dict[str, Any], tmp: str) -> None:
    """Fills results["shards"]."""
    import loaderx

    n = args.records * 16 if args.records else 32_768
    b = args.batch
    arr = _records(n)
    root = os.path.join(tmp, "shards")
    os.makedirs(root, exist_ok=True)
    out("## Shards")
    out()
    out(f"{n:,} token rows of int32[{ROW}] ({human_bytes(arr.nbytes)}), one store against a sharded dataset "
        f"of {' and '.join(str(s) for s in SHARDS[1:])} shards of the same records; random batches of {b}, "
        f"warm page cache, {args.store_runs} rounds round-robin, {args.store_slice:.2f}s per cell. "
        "`gather` is `DenseDataset.gather(idx, out=)`, `loader` a default `DataLoader`; the ratio is "
        "sharded / one store, the median of per-round ratios.")
    out()
    rng = np.random.default_rng(7)
    batches = [rng.integers(0, n, b).astype(np.int64) for _ in range(64)]
    cells: dict[tuple[str, int], Any] = {}
    for codec in ("auto", "raw"):
        for parts in SHARDS:
            log(f"[shards] writing {codec}, {parts} shard(s) ...")
            ds = loaderx.DenseDataset(_write(root, arr, parts, codec))
            probe = ds[batches[0]]
            if not np.array_equal(probe, arr[batches[0]]):
                raise AssertionError(f"{codec}, {parts} shards: a batch differs from the source")
            for idx in range(0, n, 4096):  # warm the page cache and the mappings
                ds[np.arange(idx, min(n, idx + 4096))]
            cells[(codec, parts)] = ds
    runs: dict[tuple[str, str, int], list[float]] = {}
    for r in range(args.store_runs):
        order = list(cells)
        order = order[r % len(order):] + order[: r % len(order)]
        for key in order:
            ds = cells[key]
            runs.setdefault(("gather", *key), []).append(_gather_rate(ds, batches, args.store_slice))
            runs.setdefault(("loader", *key), []).append(_loader_rate(ds, b, args.store_slice))
        log(f"[shards] round {r + 1}/{args.store_runs} done")
    rows = []
    for how in ("gather", "loader"):
        for codec in ("auto", "raw"):
            single = runs[(how, codec, 1)]
            for parts in SHARDS:
                mine = runs[(how, codec, parts)]
                ratio = median(x / y for x, y in zip(mine, single, strict=True)) if parts > 1 else None
                rows.append({"how": how, "codec": codec, "shards": parts, "batches_per_s": median(mine),
                             "runs": mine, "vs_single": ratio,
                             "key": f"{how}_{codec}_{parts}"})
    codec_of = {k[0]: str(v.codec) for k, v in cells.items() if k[1] == 1}
    out(table(["read", "codec", "shards", "batches/s", "MiB/s", "sharded / one store"],
              [[r["how"], f"{r['codec']} ({codec_of[r['codec']]})", r["shards"], f"{r['batches_per_s']:,.0f}",
                f"{r['batches_per_s'] * b * ROW * 4 / 2**20:,.0f}",
                fmt_ratio(r["vs_single"]) if r["vs_single"] else "1.00 (reference)"] for r in rows]))
    out()
    for ds in cells.values():
        ds.close()
    results["shards"] = {"records": n, "row": ROW, "batch": b, "rows": rows}
