"""The convert-shards layer: conversion throughput into a sharded dataset
written by worker processes (``num_shards=``) against the single-store
conversion of the same array.

Two arrays in memory: LLM token rows (int32[2048], Zipf ids below 50,000)
and 12 KiB photo-like uint8 records (64x192, data.make_data), each
``--convert-mib`` MiB (2 GiB by default, 64 MiB with --quick). Each is
converted with the default codec (``auto``) and with ``zstd`` (the
CPU-bound case) three ways: ``from_numpy(path, a)`` (one store, no worker),
``num_shards=1`` (one worker process: what the hand-over to a worker costs,
the copy of the array into a raw file included) and ``num_shards=2``. The
three are timed round-robin within a run, the written data flushed
(``os.sync``) and removed between conversions, outside the timing; the
figure is MB/s of input and each ratio the median of the per-run ratios to
the single store.
"""

from __future__ import annotations

import argparse
import os
import shutil
import time
from typing import Any

import numpy as np
from data import make_data, make_token_rows
from report import MiB, fmt_ratio, human_bytes, log, median, out, table

#: (label, shards or None for the single store)
CONFIGS = (("one store", None), ("1 worker shard", 1), ("2 shards", 2))
CODECS = ("auto", "zstd")


def _workloads(mib: int) -> list[tuple[str, np.ndarray]]:
    size = mib * MiB
    tokens = make_token_rows(max(4, size // (2048 * 4)), seed=21)
    images = make_data(max(4, size // (64 * 192)), (64, 192), np.uint8, seed=22)
    return [("tokens int32[2048]", tokens), ("images uint8[64x192]", images)]


def _convert(path: str, arr: np.ndarray, codec: str, num: int | None) -> float:
    import loaderx

    t0 = time.perf_counter()
    loaderx.from_numpy(path, arr, codec=codec, num_shards=num)
    return time.perf_counter() - t0


def _codec_of(path: str) -> str:
    from loaderx.dataset import DenseDataset

    ds = DenseDataset(path)
    try:
        return str(ds.stats()["codec"])
    finally:
        ds.close()


def bench_convert_shards(args: argparse.Namespace, results: dict[str, Any], tmp: str) -> None:
    """Fills results["convert_shards"]."""
    runs = args.runs or 3
    mib = args.convert_mib
    out("## Conversion into shards")
    out()
    out(f"Arrays in memory of {human_bytes(mib * MiB)} each, converted with `from_numpy` into one store, "
        "into a sharded dataset of 1 shard written by a worker process (`num_shards=1`) and of 2 shards "
        f"(`num_shards=2`); {runs} runs round-robin, flushed and removed between conversions. MB/s of input; "
        "the ratio is the median of per-run ratios to the one store (above 1: faster).")
    out()
    rows = []
    for name, arr in _workloads(mib):
        for codec in CODECS:
            times: dict[str, list[float]] = {label: [] for label, _ in CONFIGS}
            chosen = ""
            for r in range(runs):
                order = list(CONFIGS[r % len(CONFIGS):] + CONFIGS[: r % len(CONFIGS)])
                for label, num in order:
                    path = os.path.join(tmp, "convert-shards")
                    os.sync()
                    times[label].append(_convert(path, arr, codec, num))
                    if not chosen:
                        chosen = _codec_of(path)
                    shutil.rmtree(path)
                log(f"[convert-shards] {name} {codec}: run {r + 1}/{runs} done")
            single = times["one store"]
            for label, _ in CONFIGS:
                mine = times[label]
                mb_s = median(arr.nbytes / 1e6 / t for t in mine)
                ratio = median(s / t for s, t in zip(single, mine, strict=True))
                rows.append({"workload": name, "codec": codec, "chosen": chosen, "config": label,
                             "mb_s": mb_s, "seconds": mine, "vs_single": ratio})
    out(table(["workload", "codec", "written as", "MB/s", "vs one store"],
              [[r["workload"], f"{r['codec']} ({r['chosen']})", r["config"], f"{r['mb_s']:,.0f}",
                fmt_ratio(r["vs_single"]) if r["config"] != "one store" else "1.00 (reference)"]
               for r in rows]))
    out()
    results["convert_shards"] = {"mib": mib, "runs": runs, "rows": rows,
                                 "ray": _bench_ray(_workloads(mib)[0][1], runs, tmp)}


#: blocks of the Ray dataset
RAY_BLOCKS = 8

#: Ray's writers of the same blocks, and loaderx's
RAY_WRITERS = ("loaderx", "loaderx raw", "write_parquet", "write_numpy")


def _bench_ray(tokens: np.ndarray, runs: int, tmp: str) -> dict[str, Any] | None:
    """The Ray Data table; its rows, or None when ray is missing."""
    out("### Through Ray Data")
    out()
    try:
        import ray
        import ray.data

        import loaderx.ray as lxray
    except ImportError as e:
        out(f"- skipped: ray is not installed ({e})")
        out()
        return None
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, ignore_reinit_error=True)
    try:
        # 8 blocks, so that 8 write tasks share the 2 CPUs; they live in the
        # object store before any timing
        ds = ray.data.from_numpy(np.array_split(tokens, RAY_BLOCKS)).materialize()
        blocks = ds.num_blocks()

        def write(how: str, path: str) -> None:
            if how == "loaderx":
                lxray.write(ds, path)
            elif how == "loaderx raw":
                lxray.write(ds, path, codec="raw")
            elif how == "write_parquet":
                ds.write_parquet(path)
            else:
                ds.write_numpy(path, column="data")

        times: dict[str, list[float]] = {w: [] for w in RAY_WRITERS}
        for r in range(runs):
            order = RAY_WRITERS[r % len(RAY_WRITERS):] + RAY_WRITERS[: r % len(RAY_WRITERS)]
            for how in order:
                path = os.path.join(tmp, f"ray-{how}")
                os.sync()
                t0 = time.perf_counter()
                write(how, path)
                times[how].append(time.perf_counter() - t0)
                shutil.rmtree(path)
            log(f"[convert-shards] ray: run {r + 1}/{runs} done")
    finally:
        ray.shutdown()
    def vs(mine: list[float], theirs: list[float]) -> float | None:
        return median(t / o for o, t in zip(mine, theirs, strict=True))

    rows = [{"writer": how, "mb_s": median(tokens.nbytes / 1e6 / t for t in times[how]), "seconds": times[how],
             "loaderx_vs": vs(times["loaderx"], times[how]), "raw_vs": vs(times["loaderx raw"], times[how])}
            for how in RAY_WRITERS]
    out(f"{human_bytes(tokens.nbytes)} of int32[2048] token rows in {blocks} blocks of one materialised "
        "`ray.data.from_numpy` dataset, written on a local 2-CPU Ray cluster; loaderx's datasink with its "
        "defaults (codec `auto`, chosen by each write task on its own block; one shard per task) and with "
        "`codec=\"raw\"`.")
    out()
    out(table(["writer", "MB/s", "loaderx (auto) / this", "loaderx raw / this"],
              [[r["writer"], f"{r['mb_s']:,.0f}", fmt_ratio(r["loaderx_vs"]), fmt_ratio(r["raw_vs"])]
               for r in rows]))
    out()
    return {"blocks": blocks, "rows": rows}
