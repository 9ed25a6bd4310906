"""Layer 1, the sampler: index generation alone, zsampler against NumPy's two
random APIs, per batch size, in tight loops calibrated to a fixed duration."""

from __future__ import annotations

import argparse
import gc
import time
from collections.abc import Callable
from typing import Any

from contenders import samplers, selected
from report import fmt_ratio, median, out, skip_lines, table

SAMPLER_SPACE = 1_000_000
SAMPLER_BATCHES = (256, 1024, 8192)
REFERENCE = "numpy default_rng"


# zsampler row -> the original's row it is compared with
ORIGINAL_OF = {"zsampler iid": "original iid", "zsampler iid, Sampler()": "original iid",
               "zsampler cyclic": "original cyclic"}


def _run(loop: Callable[[int], float | None], iters: int) -> float:
    """Seconds for `iters` batches: the loop's own figure when it reports one
    (a contender timed in another process), else the time around the call."""
    t0 = time.perf_counter()
    own = loop(iters)
    dt = time.perf_counter() - t0
    return dt if own is None else own


def _calibrate(loop: Callable[[int], float | None], loop_s: float) -> int:
    """Iterations of `loop` that take about `loop_s` seconds."""
    k = 16
    while True:
        dt = _run(loop, k)
        if dt >= loop_s / 4 or k > 1 << 22:
            break
        k *= 4
    return max(16, int(k * loop_s / max(dt, 1e-9)))


def bench_sampler(args: argparse.Namespace, results: dict[str, Any], tmp: str) -> None:
    """Measure every selected sampler at every batch size; print the table, fill results["sampler"].
    (`tmp` is unused: samplers write nothing.)"""
    out("## 1. Sampler")
    out()
    out(f"Draws over a {SAMPLER_SPACE:,}-index space (IID: with replacement; cyclic: a "
        "permutation per cycle) into a preallocated int64 buffer for zsampler — `zsampler iid` calls "
        "`sampler.sample(\"iid\", n, batch, step, seed=0, out=buf)`, `Sampler()` calls a "
        "prevalidated `Sampler(\"iid\", n, batch)(step, out=buf)`; numpy allocates. Per-batch time is "
        f"the median of {args.sampler_runs} runs, each a tight loop of ≥{args.sampler_loop_ms:.0f} ms. "
        "`vs default_rng` is the median of per-run ratios.")
    out()
    n = SAMPLER_SPACE
    cands, skipped = samplers()
    cands = [c for c in cands if selected(args.only, c.name) or c.name == REFERENCE]

    rows = []
    loop_s = args.sampler_loop_ms / 1000
    for b in SAMPLER_BATCHES:
        loops = {c.name: c.make(n, b) for c in cands}
        iters = {name: _calibrate(loop, loop_s) for name, loop in loops.items()}
        per: dict[str, list[float]] = {name: [] for name in loops}
        for r in range(args.sampler_runs):
            order = list(loops)
            order = order[r % len(order):] + order[: r % len(order)]
            for name in order:
                gc.collect()
                per[name].append(_run(loops[name], iters[name]) / iters[name])
        base = per.get(REFERENCE)
        for name in loops:
            us = median(per[name]) * 1e6
            ratio = median([bb / x for bb, x in zip(base, per[name])]) if base else None
            orig = per.get(ORIGINAL_OF.get(name, ""))
            vs_orig = median([o / x for o, x in zip(orig, per[name])]) if orig else None
            rows.append({"sampler": name, "batch": b, "us_per_batch": us,
                         "indices_per_s": b / (us / 1e6), "vs_default_rng": ratio,
                         "vs_original": vs_orig,
                         "runs_us": [x * 1e6 for x in per[name]], "iters": iters[name]})
    skip_lines(skipped)
    with_orig = any(r["vs_original"] is not None for r in rows)
    out(table(["sampler", "batch", "per batch", "indices/s", "vs default_rng"]
              + (["loaderx / original"] if with_orig else []),
              [[r["sampler"], r["batch"], f"{r['us_per_batch']:.2f} µs",
                f"{r['indices_per_s'] / 1e6:,.0f} M/s", fmt_ratio(r["vs_default_rng"])]
               + ([fmt_ratio(r["vs_original"]) if r["vs_original"] is not None else ""] if with_orig else [])
               for r in rows]))
    out()
    if with_orig:
        out("`original` is loaderx 1.5.2 (the Zig implementation) in a process of its own: its "
            "`Sampler(n, batch, mode).next()` (which returns a fresh copy of the indices), timed "
            "there around the loop. `loaderx / original` is the original's time per batch over "
            "this row's (median of per-run ratios; above 1 means this project is faster).")
        out()
    results["sampler"] = {"space": n, "runs": args.sampler_runs, "rows": rows, "skipped": skipped}
