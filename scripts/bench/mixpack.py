"""The packed-mixture rows of the packing layer: a three-source mixture of
tokenised documents packed in concat mode, against one store of the same
documents and against a plain NumPy packer over the same documents in memory.

The documents (int32 Zipf ids, lengths MIX_MIN..MIX_MAX uniform) are split
into three sources of 60 / 30 / 10 % of them, each a ragged store, mixed by
weights 0.6 / 0.3 / 0.1; "one store" holds all of them in one ragged store
and packs through the same ``DataLoader(pack=)``; the NumPy packer walks a
permutation of the documents in memory, concatenates what a batch needs,
cuts it into rows and computes segment ids and positions (what a user would
write instead of a loader). Each figure is packed tokens per second at 16
and 64 rows of 2,048 tokens, every contender in this process, in alternated
rounds; the ratios are medians of per-round ratios.
"""

from __future__ import annotations

import argparse
import itertools
import os
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from data import _zipf_table
from report import fmt_ratio, log, out, table

#: tokens per packed row, and the rows per batch of the two runs
LENGTH, ROW_COUNTS = 2048, (16, 64)
#: documents, their lengths, and the three sources' shares of them (also the weights)
MIX_DOCS, MIX_MIN, MIX_MAX = 12_000, 10, 4000
SHARES = {"web": 0.6, "code": 0.3, "books": 0.1}


class NumpyPacker:
    """Concat packing by hand over documents in memory: a shuffled order of
    the documents, their tokens concatenated and cut into ``rows`` rows of
    ``length``, a document continuing in the next row or batch; segment ids
    count from 1 in each row, positions from 0 in each segment."""

    def __init__(self, tokens: np.ndarray, offsets: np.ndarray, rows: int, length: int, seed: int = 0) -> None:
        self.tokens, self.offsets, self.rows, self.length = tokens, offsets, rows, length
        self.rng = np.random.default_rng(seed)
        self.order = self.rng.permutation(len(offsets) - 1)
        self.at = 0
        self.carry = np.zeros(0, dtype=tokens.dtype)
        self.carry_pos = 0  # the carried document's tokens already used

    def __call__(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        need = self.rows * self.length
        pieces, starts = [self.carry], [0]
        have = self.carry.size
        first_pos = self.carry_pos
        while have < need:
            if self.at == self.order.size:
                self.order, self.at = self.rng.permutation(self.order.size), 0
            d = self.order[self.at]
            self.at += 1
            doc = self.tokens[self.offsets[d] : self.offsets[d + 1]]
            starts.append(have)
            pieces.append(doc)
            have += doc.size
        flat = np.concatenate(pieces)
        last = starts[-1]
        self.carry = flat[need:]
        self.carry_pos = (need - last + (first_pos if len(starts) == 1 else 0)) if self.carry.size else 0
        values = flat[:need].reshape(self.rows, self.length)
        bounds = np.asarray([s for s in starts if s < need], dtype=np.int64)
        # a segment starts at each document start and each row start
        seg_start = np.union1d(bounds, np.arange(0, need, self.length))
        mark = np.zeros(need, dtype=np.int32)
        mark[seg_start] = 1
        seg = mark.reshape(self.rows, self.length).cumsum(axis=1, dtype=np.int32)
        pos = np.arange(need, dtype=np.int32)
        doc_of = np.searchsorted(bounds, seg_start, side="right") - 1
        offset_in = seg_start - bounds[doc_of] + np.where(doc_of == 0, first_pos, 0)
        pos -= np.repeat((seg_start - offset_in).astype(np.int32), np.diff(np.append(seg_start, need)))
        return values, seg, pos.reshape(self.rows, self.length)


def _documents(n: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(11)
    lengths = rng.integers(MIX_MIN, MIX_MAX, size=n, endpoint=True)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    table_ = _zipf_table()
    tokens = np.take(table_, rng.integers(0, len(table_), size=int(offsets[-1]), dtype=np.intp))
    return tokens.astype(np.int32), offsets


def _stores(ldir: str, tokens: np.ndarray, offsets: np.ndarray) -> dict[str, str]:
    from loaderx.converter import from_iterator

    n = len(offsets) - 1
    cuts = np.cumsum([0, *(round(w * n) for w in SHARES.values())])
    cuts[-1] = n
    spans = {"all": (0, n), **{k: (int(cuts[i]), int(cuts[i + 1])) for i, k in enumerate(SHARES)}}
    paths = {}
    for name, (a, b) in spans.items():
        path = os.path.join(ldir, name)
        if not os.path.exists(path):
            log(f"[packing] writing the {name} store ...")
            bounds = offsets[a : b + 1].tolist()
            from_iterator(path, (tokens[x:y] for x, y in itertools.pairwise(bounds)), progress=False)
        paths[name] = path
    return paths


def _loaderx(paths: dict[str, str], rows: int, workers: int, mixture: bool) -> tuple[Callable[[], Any], Any]:
    import loaderx
    from loaderx.dataset import RaggedDataset

    pack = {"tokens": loaderx.Pack(LENGTH, rows=rows)}
    if mixture:
        src: Any = loaderx.Mixture({k: {"tokens": RaggedDataset(paths[k])} for k in SHARES}, dict(SHARES))
    else:
        src = {"tokens": RaggedDataset(paths["all"])}
    dl = loaderx.DataLoader(src, batch_size=rows, num_workers=workers, seed=0, pack=pack)

    def get() -> Any:
        b = next(dl)["tokens"]
        return b.values, b.segment_ids, b.positions

    return get, dl.close


def _rate(get: Callable[[], Any], seconds: float, tokens: int) -> tuple[float, float]:
    """(packed tokens per second of wall time, per second of this process's CPU time)."""
    t0, c0 = time.perf_counter(), time.process_time()
    k = 0
    while k < 3 or time.perf_counter() - t0 < seconds:
        get()
        k += 1
    return k * tokens / (time.perf_counter() - t0), k * tokens / max(time.process_time() - c0, 1e-9)


def bench_mixture_packing(args: argparse.Namespace, results: dict[str, Any], tmp: str) -> None:
    """Fills results["mixture_packing"]: packed tokens/s of the mixture, one
    store and the NumPy packer at each row count, and the two ratios."""
    n = min(args.records or MIX_DOCS, MIX_DOCS)
    rounds = max(3, args.loader_runs * 3)
    seconds = max(0.3, args.loader_measure / 3)
    out("### Packed mixture")
    out()
    out(f"{n:,} tokenised documents (int32 Zipf ids, lengths {MIX_MIN}..{MIX_MAX} uniform) in three ragged "
        f"stores of {' / '.join(f'{w:.0%}' for w in SHARES.values())} of them, mixed by the same weights "
        f"and packed in concat mode into rows of {LENGTH} tokens ({args.workers} workers), against one "
        "ragged store of all of them through the same loader and against a NumPy packer over the "
        "documents in memory (shuffled order, concatenate, cut into rows, segment ids and positions). "
        f"Packed tokens/s, in this process, {rounds} alternated rounds of {seconds:.1f}s after warm-up; "
        "ratios are medians of per-round ratios. `per CPU second` divides by this process's CPU time "
        "(its threads and the native library's together) instead of the wall time: on a busy machine "
        "the wall time also counts the time the process waited for a core.")
    out()
    ldir = os.path.join(tmp, "mixpack")
    os.makedirs(ldir, exist_ok=True)
    tokens, offsets = _documents(n)
    paths = _stores(ldir, tokens, offsets)
    rows_out, summary = [], []
    for rows in ROW_COUNTS:
        total = rows * LENGTH
        makers = {
            "loaderx mixture": lambda r=rows: _loaderx(paths, r, args.workers, True),
            "loaderx one store": lambda r=rows: _loaderx(paths, r, args.workers, False),
            "numpy packer": lambda r=rows: (NumpyPacker(tokens, offsets, r, LENGTH), lambda: None),
        }
        opened = {k: m() for k, m in makers.items()}
        try:
            for get, _ in opened.values():
                for _ in range(10):
                    get()
            per: dict[str, list[float]] = {k: [] for k in opened}
            cpu: dict[str, list[float]] = {k: [] for k in opened}
            for _ in range(rounds):
                for k, (get, _) in opened.items():
                    wall, busy = _rate(get, seconds, total)
                    per[k].append(wall)
                    cpu[k].append(busy)
        finally:
            for _, close in opened.values():
                close()
        ratio, cpu_ratio = ({
            theirs: float(np.median([a / b for a, b in zip(runs["loaderx mixture"], runs[theirs])]))
            for theirs in ("loaderx one store", "numpy packer")
        } for runs in (per, cpu))
        for k, v in per.items():
            mine = k == "loaderx mixture"
            rows_out.append([f"{rows} x {LENGTH}", k, f"{np.median(v) / 1e6:,.1f} M",
                             f"{np.median(cpu[k]) / 1e6:,.1f} M", "—" if mine else fmt_ratio(ratio[k]),
                             "—" if mine else fmt_ratio(cpu_ratio[k])])
        summary.append({"rows": rows, "tokens_per_s": {k: float(np.median(v)) for k, v in per.items()},
                        "tokens_per_cpu_s": {k: float(np.median(v)) for k, v in cpu.items()},
                        "runs": per, "cpu_runs": cpu, "vs_one_store": ratio["loaderx one store"],
                        "vs_numpy": ratio["numpy packer"], "cpu_vs_one_store": cpu_ratio["loaderx one store"],
                        "cpu_vs_numpy": cpu_ratio["numpy packer"]})
        log(f"[packing] mixture {rows} rows: {ratio['loaderx one store']:.2f}x one store, "
            f"{ratio['numpy packer']:.2f}x numpy")
    out(table(["rows", "packer", "packed tokens/s", "per CPU second", "mixture / this", "per CPU second"],
              rows_out))
    out()
    results["mixture_packing"] = {"documents": n, "length": LENGTH, "workers": args.workers,
                                  "shares": SHARES, "rows": summary}
