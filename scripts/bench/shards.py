"""The shards layer: one dataset read as shards against the same records in
one store.

The same records are converted once into a single store and once into a
sharded dataset of 4 and of 16 shards (equal ranges, written with
loaderx.store.shards), each with the default codec (`auto`) and with raw:
token rows of 8 KiB, and records of 256 bytes, where the work per record
rather than its bytes decides the speed.
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
from report import fmt_ratio, log, median, out, table

#: int32 token ids per record, and the vocabulary (Zipf-like, as data.py's token rows)
ROW = 2048
VOCAB = 50_000
SHARDS = (1, 4, 16)


#: the workloads: key, what the tables call it, and the suffix of its result keys
WORKLOADS = (("tokens", f"int32[{ROW}] token rows", ""), ("256B", "256 B uint8", "_256B"))


def _records(key: str, n: int) -> np.ndarray:
    rng = np.random.default_rng(11)
    if key == "256B":
        return rng.integers(0, 256, (n, 256), dtype=np.uint8)
    ranks = np.minimum(rng.zipf(1.2, (n, ROW)), VOCAB) - 1
    return ranks.astype(np.int32)


def _write(root: str, arr: np.ndarray, parts: int, codec: str) -> str:
    import loaderx
    from loaderx.store import shards

    path = os.path.join(root, f"{arr.itemsize * arr.shape[1]}-{codec}-{parts}")
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

    counts = {"tokens": args.records * 16 if args.records else 32_768,
              "256B": args.records * 128 if args.records else 262_144}
    b = args.batch
    root = os.path.join(tmp, "shards")
    os.makedirs(root, exist_ok=True)
    out("## Shards")
    out()
    out(f"{counts['tokens']:,} token rows of int32[{ROW}] and {counts['256B']:,} records of 256 B, each "
        f"workload in one store against a sharded dataset of {' and '.join(str(s) for s in SHARDS[1:])} shards "
        f"of the same records; random batches of {b}, warm page cache, {args.store_runs} rounds round-robin, "
        f"{args.store_slice:.2f}s per cell. `gather` is `DenseDataset.gather(idx, out=)`, `loader` a default "
        "`DataLoader`; the ratio is sharded / one store, the median of per-round ratios.")
    out()
    cells: dict[tuple[str, str, int], Any] = {}
    batches: dict[str, list[np.ndarray]] = {}
    item: dict[str, int] = {}
    for key, what, _ in WORKLOADS:
        n = counts[key]
        arr = _records(key, n)
        item[key] = arr.itemsize * arr.shape[1]
        rng = np.random.default_rng(7)
        batches[key] = [rng.integers(0, n, b).astype(np.int64) for _ in range(64)]
        for codec in ("auto", "raw"):
            for parts in SHARDS:
                log(f"[shards] writing {what}, {codec}, {parts} shard(s) ...")
                ds = loaderx.DenseDataset(_write(root, arr, parts, codec))
                probe = ds[batches[key][0]]
                if not np.array_equal(probe, arr[batches[key][0]]):
                    raise AssertionError(f"{what}, {codec}, {parts} shards: a batch differs from the source")
                for idx in range(0, n, 4096):  # warm the page cache and the mappings
                    ds[np.arange(idx, min(n, idx + 4096))]
                cells[(key, codec, parts)] = ds
        del arr
    runs: dict[tuple[str, str, str, int], list[float]] = {}
    for r in range(args.store_runs):
        order = list(cells)
        order = order[r % len(order):] + order[: r % len(order)]
        for cell in order:
            ds = cells[cell]
            runs.setdefault(("gather", *cell), []).append(_gather_rate(ds, batches[cell[0]], args.store_slice))
            runs.setdefault(("loader", *cell), []).append(_loader_rate(ds, b, args.store_slice))
        log(f"[shards] round {r + 1}/{args.store_runs} done")
    rows = []
    for key, what, suffix in WORKLOADS:
        for how in ("gather", "loader"):
            for codec in ("auto", "raw"):
                single = runs[(how, key, codec, 1)]
                for parts in SHARDS:
                    mine = runs[(how, key, codec, parts)]
                    ratio = median(x / y for x, y in zip(mine, single, strict=True)) if parts > 1 else None
                    rows.append({"records": what, "how": how, "codec": codec, "shards": parts,
                                 "batches_per_s": median(mine), "mib_s": median(mine) * b * item[key] / 2**20,
                                 "runs": mine, "vs_single": ratio, "key": f"{how}_{codec}_{parts}{suffix}"})
    codec_of = {(k[0], k[1]): str(v.codec) for k, v in cells.items() if k[2] == 1}
    key_of = {what: key for key, what, _ in WORKLOADS}
    out(table(["records", "read", "codec", "shards", "batches/s", "MiB/s", "sharded / one store"],
              [[r["records"], r["how"], f"{r['codec']} ({codec_of[(key_of[r['records']], r['codec'])]})",
                r["shards"], f"{r['batches_per_s']:,.0f}", f"{r['mib_s']:,.0f}",
                fmt_ratio(r["vs_single"]) if r["vs_single"] else "1.00 (reference)"] for r in rows]))
    out()
    for ds in cells.values():
        ds.close()
    results["shards"] = {"records": counts["tokens"], "records_256B": counts["256B"], "row": ROW, "batch": b,
                         "rows": rows}
