"""The mixture row of layer 3: a two-source weighted mixture of token rows
through loaderx's Mixture, against the same mixture through Hugging Face
`interleave_datasets` and torchdata's `MultiNodeWeightedSampler`, each
checked for the proportions it delivers.

Every contender runs in this process, one after another, on the same
arrays: the figure is batches per second of (batch, row) int32 token rows
with their source column, after a short warm-up. A contender that is not
installed is skipped, saying so.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
from report import fmt_ratio, log, out, skip_lines, table

#: tokens per row, and the two sources' weights
ROW = 1024
WEIGHTS = (0.7, 0.3)


def _rate(get: Callable[[], tuple[np.ndarray, np.ndarray]], warmup_s: float, measure_s: float,
          b: int) -> tuple[float, float]:
    """(batches/s, share of source 1 over the measured batches) of ``get``."""
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < warmup_s:
        get()
    k = ones = 0
    t0 = time.perf_counter()
    while k < 3 or time.perf_counter() - t0 < measure_s:
        tokens, src = get()
        assert tokens.shape == (b, ROW), tokens.shape
        ones += int(np.count_nonzero(src))
        k += 1
    return k / (time.perf_counter() - t0), ones / (k * b)


def _loaderx(
    tmp: str, a: np.ndarray, c: np.ndarray, b: int, workers: int
) -> tuple[Callable[[], Any], Callable[[], None]]:
    import loaderx

    for name, arr in (("a", a), ("c", c)):
        loaderx.from_numpy(os.path.join(tmp, name), arr, codec="raw")
    mix = loaderx.Mixture({"a": {"tokens": loaderx.DenseDataset(os.path.join(tmp, "a"))},
                           "c": {"tokens": loaderx.DenseDataset(os.path.join(tmp, "c"))}},
                          {"a": WEIGHTS[0], "c": WEIGHTS[1]})
    loader = loaderx.DataLoader(mix, batch_size=b, num_workers=workers, seed=0)

    def get() -> tuple[np.ndarray, np.ndarray]:
        batch = next(loader)
        return batch["tokens"], batch["source"]

    return get, loader.close


def _hf(a: np.ndarray, c: np.ndarray, b: int) -> tuple[Callable[[], Any], Callable[[], None]]:
    import datasets

    parts = [
        datasets.Dataset.from_dict({"tokens": arr, "src": np.full(len(arr), i, dtype=np.int64)}).shuffle(seed=i)
        for i, arr in enumerate((a, c))
    ]
    mixed = datasets.interleave_datasets(parts, probabilities=list(WEIGHTS), seed=0,
                                         stopping_strategy="all_exhausted")
    mixed = mixed.with_format("numpy", dtype=np.int32)
    n = len(mixed)
    pos = [0]

    def get() -> tuple[np.ndarray, np.ndarray]:
        i = pos[0]
        if i + b > n:
            i = 0
        pos[0] = i + b
        rows = mixed[i : i + b]
        return rows["tokens"], rows["src"]

    return get, lambda: None


def _torchdata(a: np.ndarray, c: np.ndarray, b: int) -> tuple[Callable[[], Any], Callable[[], None]]:
    from torchdata.nodes import Batcher, IterableWrapper, Loader, MultiNodeWeightedSampler

    def endless(arr: np.ndarray, src: int) -> Iterator[dict[str, Any]]:
        rng = np.random.default_rng(src)
        while True:
            for i in rng.permutation(len(arr)):
                yield {"tokens": arr[i], "src": src}

    nodes = {"a": IterableWrapper(endless(a, 0)), "c": IterableWrapper(endless(c, 1))}
    node = Batcher(MultiNodeWeightedSampler(nodes, {"a": WEIGHTS[0], "c": WEIGHTS[1]}, seed=0), batch_size=b)
    it = iter(Loader(node))

    def get() -> tuple[np.ndarray, np.ndarray]:
        rows = next(it)
        return np.stack([r["tokens"] for r in rows]), np.array([r["src"] for r in rows])

    return get, lambda: None


def bench_mixture(args: argparse.Namespace, results: dict[str, Any], tmp: str) -> None:
    """Fills results["mixture"]."""
    n = min(args.records or 20_000, 20_000)
    b = min(args.batch, n // 4)
    rng = np.random.default_rng(5)
    a = rng.integers(0, 50_000, (n * 3 // 4, ROW), dtype=np.int32)
    c = rng.integers(0, 50_000, (n // 4, ROW), dtype=np.int32)
    out("### Mixture")
    out()
    out(f"A two-source mixture ({len(a):,} and {len(c):,} rows of {ROW} int32 tokens, weights "
        f"{WEIGHTS[0]}/{WEIGHTS[1]}), batch {b}: loaderx's `Mixture` ({args.workers} workers, exact "
        "per-step counts) against Hugging Face `interleave_datasets` (shuffled sources, probabilities, "
        "batched reads) and torchdata's `MultiNodeWeightedSampler` (shuffled sources, batched and "
        f"stacked), in one process each, {args.loader_measure:.0f}s of batches after "
        f"{args.loader_warmup:.1f}s of warm-up. `share` is the measured share of the second source "
        f"(target {WEIGHTS[1]}).")
    out()
    ldir = os.path.join(tmp, "mixture")
    os.makedirs(ldir, exist_ok=True)
    contenders = [("loaderx", lambda: _loaderx(ldir, a, c, b, args.workers)), ("hf-interleave", lambda: _hf(a, c, b)),
                  ("torchdata-weighted", lambda: _torchdata(a, c, b))]
    rows, skipped = [], []
    for name, make in contenders:
        log(f"[loader] mixture: {name} ...")
        try:
            get, close = make()
        except ImportError as e:
            skipped.append(f"{name}: not installed ({e})")
            continue
        try:
            bps, share = _rate(get, args.loader_warmup, args.loader_measure, b)
        finally:
            close()
        ok = abs(share - WEIGHTS[1]) < 0.03
        rows.append({"loader": name, "batches_per_s": bps, "share": share, "proportions_ok": ok})
        log(f"[loader]   {bps:.1f} batches/s, share {share:.3f}")
    skip_lines(skipped)
    ours = next((r for r in rows if r["loader"] == "loaderx"), None)
    out(table(["loader", "batches/s", "share", "proportions", "loaderx / this"],
              [[r["loader"], f"{r['batches_per_s']:.1f}", f"{r['share']:.3f}", "ok" if r["proportions_ok"] else "OFF",
                fmt_ratio(ours["batches_per_s"] / r["batches_per_s"]) if ours else "—"] for r in rows]))
    out()
    results["mixture"] = {"records": [len(a), len(c)], "row": ROW, "batch": b, "weights": list(WEIGHTS),
                          "rows": rows, "skipped": skipped}
