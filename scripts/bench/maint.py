"""Layer 4, writes and maintenance: what a store costs besides dense gathers,
for loaderx and the original Zig loaderx (1.5.2) on the same data.

* ragged conversion: ``from_iterator`` of variable-length records, zstd;
* ragged gather: random batches of those records through the public read;
* delete 10 % of a dense store, then compact it.

Delete and compact change the store, so each run works on a fresh copy of a
store written once; the copies are flushed (``os.sync``) before the timing, so
their write-back does not land in an fsync of the timed call. Bytes written
are the process's ``write_bytes`` from /proc (what reached the block layer or
was charged as dirty page cache), read around the call.
"""

from __future__ import annotations

import argparse
import gc
import os
import shutil
import time
from typing import Any

import numpy as np
from contenders import original, selected
from contenders.loaderx import have_loaderx, loaderx_status
from data import make_data, read_files_allocated
from report import MiB, fmt_ratio, human_bytes, log, median, out, skip_lines, table
from store import DEFAULT_SHAPE

DELETE_FRACTION = 0.10
RAGGED_MIN, RAGGED_MAX = 256, 16 << 10   # ragged record sizes, bytes (uniform)
RAGGED_BATCH = 256


def _write_bytes(pid: int | str = "self") -> int | None:
    try:
        with open(f"/proc/{pid}/io") as fh:
            for line in fh:
                if line.startswith("write_bytes:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def _ragged_data(total: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Variable-length uint8 records (photo-like bytes) packed into one array, and their lengths."""
    rng = np.random.default_rng(seed)
    mean = (RAGGED_MIN + RAGGED_MAX) // 2
    n = max(16, total // mean)
    lengths = rng.integers(RAGGED_MIN, RAGGED_MAX + 1, n).astype(np.int64)
    rows = -(-int(lengths.sum()) // (64 * 256))
    flat = make_data(rows, (64, 256), np.uint8, seed=seed).reshape(-1)[: int(lengths.sum())]
    return np.ascontiguousarray(flat), lengths


def _ours_maintain(path: str, idx: np.ndarray) -> dict[str, Any]:
    from loaderx.zrecord import Zrecord
    zr = Zrecord(path)
    try:
        n0 = len(zr)
        w0 = _write_bytes()
        t0 = time.perf_counter()
        zr.delete(idx)
        t_del = time.perf_counter() - t0
        w1 = _write_bytes()
        mid = zr.stats()
        t0 = time.perf_counter()
        zr.compact()
        t_cmp = time.perf_counter() - t0
        w2 = _write_bytes()
        after = zr.stats()
        n1 = len(zr)
    finally:
        zr.close()
    return {"delete_s": t_del, "compact_s": t_cmp, "len_before": n0, "len_after": n1,
            "chunk_bytes_before": mid["chunk_bytes"], "chunk_bytes_after": after["chunk_bytes"],
            "delete_written": None if w0 is None or w1 is None else w1 - w0,
            "compact_written": None if w0 is None or w2 is None else w2 - w0}


def _orig_maintain(path: str, idx: np.ndarray) -> dict[str, Any]:
    pid = original.worker().proc.pid
    w0 = _write_bytes(pid)
    r = original.maintain(path, idx)
    w1 = _write_bytes(pid)
    # the worker's write_bytes cover both calls: charge them to compact, where the
    # original writes (its delete only rewrites the table)
    r["delete_written"] = None
    r["compact_written"] = None if w0 is None or w1 is None else w1 - w0
    return r


def _ragged_slices(args: argparse.Namespace, ours_path: str | None, orig_key: str | None,
                   lengths: np.ndarray, runs: int) -> dict[str, list[float]]:
    """MiB/s of random ragged batches, per run, for each side (rotating order)."""
    res: dict[str, list[float]] = {"loaderx": [], "original": []}
    n = len(lengths)
    ds = None
    if ours_path:
        from loaderx.dataset import RaggedDataset
        ds = RaggedDataset(ours_path)
    for r in range(runs):
        rr = np.random.default_rng(500 + r)
        b = min(RAGGED_BATCH, n)
        batches = np.stack([np.sort(rr.choice(n, b, replace=False)) for _ in range(64)]).astype(np.int64)
        order = ["loaderx", "original"] if r % 2 == 0 else ["original", "loaderx"]
        for side in order:
            if side == "loaderx" and ds is not None:
                times = []
                total = 0.0
                for idx in batches:
                    t0 = time.perf_counter()
                    ds[idx]
                    dt = time.perf_counter() - t0
                    times.append(dt)
                    total += dt
                    if total >= args.store_slice:
                        break
                nbytes = sum(int(lengths[batches[k]].sum()) for k in range(len(times)))
                res["loaderx"].append(nbytes / sum(times) / MiB)
            elif side == "original" and orig_key:
                times = original.ragged_timed(orig_key, batches, args.store_slice)
                nbytes = sum(int(lengths[batches[k]].sum()) for k in range(len(times)))
                res["original"].append(nbytes / sum(times) / MiB)
    if ds is not None:
        ds.close()
    return res


def bench_maint(args: argparse.Namespace, results: dict[str, Any], tmp: str) -> None:
    """Ragged conversion and gather, delete 10 % and compact; fills results["maint"]."""
    size = args.maint_mib * MiB
    runs = args.maint_runs
    out("## 4. Writes and maintenance")
    out()
    out(f"A dense store of {human_bytes(size)} ({DEFAULT_SHAPE[0]}x{DEFAULT_SHAPE[1]} uint8 records, "
        f"codec `{args.maint_codec}`) is written once per library; each of {runs} runs copies it, "
        f"flushes the copy (os.sync), deletes a random {100 * DELETE_FRACTION:.0f} % of its records "
        "and compacts it, each call timed on its own (`--maint-mib`, `--maint-1gib` for the 1 GiB "
        "case). `bytes written` is the process's write_bytes from /proc around delete and compact "
        "together. Ragged: records of "
        f"{RAGGED_MIN}-{RAGGED_MAX // 1024} KiB uint8 (uniform), about {human_bytes(size // 2)}, "
        f"converted with `from_iterator(codec=\"zstd\")` and read in random batches of {RAGGED_BATCH} "
        "(this project: `RaggedDataset[idx]`; the original: `RaggedDataset.__getitems__`). Medians over "
        "the runs; the ratios are loaderx / original (above 1: this project is faster).")
    out()
    skipped: list[str] = []
    ours = have_loaderx() and selected(args.only, "loaderx")
    if not have_loaderx():
        skipped.append(f"loaderx: {loaderx_status()}")
    ok, why = original.status()
    orig = ok and selected(args.only, "original")
    if not ok:
        skipped.append(f"original: {why}")
    skip_lines(skipped)
    if not ours and not orig:
        results["maint"] = {"rows": [], "skipped": skipped}
        return
    mdir = os.path.join(tmp, "maint")
    os.makedirs(mdir, exist_ok=True)
    per: dict[str, dict[str, list[float]]] = {s: {} for s in ("loaderx", "original")}

    def add(side: str, key: str, v: float | None) -> None:
        if v is not None:
            per[side].setdefault(key, []).append(v)

    # -- ragged conversion and gather --------------------------------------
    flat, lengths = _ragged_data(size // 2, seed=7)
    recs = np.split(flat, np.cumsum(lengths)[:-1])
    rbytes = int(lengths.sum())
    log(f"[maint] ragged: {len(lengths):,} records, {human_bytes(rbytes)}")
    rpath = {s: os.path.join(mdir, f"ragged-{s}") for s in ("loaderx", "original")}
    for r in range(runs):
        for side in (["loaderx", "original"] if r % 2 == 0 else ["original", "loaderx"]):
            shutil.rmtree(rpath[side], ignore_errors=True)
            gc.collect()
            if side == "loaderx" and ours:
                from loaderx.converter import from_iterator
                t0 = time.perf_counter()
                from_iterator(rpath[side], recs, codec="zstd")
                add(side, "ragged_write", rbytes / (time.perf_counter() - t0) / MiB)
            elif side == "original" and orig:
                add(side, "ragged_write", rbytes / original.write_ragged(rpath[side], flat, lengths, "zstd") / MiB)
    del recs
    okey = None
    if orig:
        read_files_allocated(rpath["original"])
        okey = original.ragged_open(rpath["original"])
        check = np.sort(np.random.default_rng(9).choice(len(lengths), 16, replace=False))
        got = original.ragged_check(okey, check)
        bounds = np.concatenate([[0], np.cumsum(lengths)])
        want_sums = [int(flat[bounds[i]:bounds[i + 1]].astype(np.int64).sum()) for i in check]
        if got["sums"] != want_sums:
            log("[maint] WARNING: the original's ragged store returned wrong data")
    if ours:
        read_files_allocated(rpath["loaderx"])
    sl = _ragged_slices(args, rpath["loaderx"] if ours else None, okey, lengths, max(runs, 3))
    for side, v in sl.items():
        for x in v:
            add(side, "ragged_gather", x)
    if okey:
        original.close_key(okey)
    del flat, lengths
    gc.collect()

    # -- delete 10 % and compact --------------------------------------------
    n = max(10, size // (int(np.prod(DEFAULT_SHAPE))))
    log(f"[maint] dense: {n:,} records, {human_bytes(n * int(np.prod(DEFAULT_SHAPE)))}")
    data = make_data(n, DEFAULT_SHAPE, np.uint8, seed=4)
    master = {s: os.path.join(mdir, f"dense-{s}") for s in ("loaderx", "original")}
    if ours:
        from loaderx.converter import from_numpy
        from_numpy(master["loaderx"], data, codec=args.maint_codec)
    if orig:
        original.write_dense(master["original"], data, args.maint_codec)
    del data
    gc.collect()
    info: dict[str, dict[str, Any]] = {}
    for r in range(runs):
        idx = np.sort(np.random.default_rng(100 + r).choice(n, int(n * DELETE_FRACTION), replace=False))
        for side in (["loaderx", "original"] if r % 2 == 0 else ["original", "loaderx"]):
            if (side == "loaderx" and not ours) or (side == "original" and not orig):
                continue
            work = master[side] + f"-run{r}"
            shutil.rmtree(work, ignore_errors=True)
            shutil.copytree(master[side], work)
            os.sync()
            gc.collect()
            log(f"[maint] run {r + 1}/{runs}: {side} delete + compact ...")
            res = _ours_maintain(work, idx) if side == "loaderx" else _orig_maintain(work, idx.astype(np.int64))
            if res["len_after"] != n - len(idx):
                log(f"[maint] WARNING: {side} holds {res['len_after']} records after deleting "
                    f"{len(idx)} of {n}")
            add(side, "delete_ms", res["delete_s"] * 1e3)
            add(side, "compact_ms", res["compact_s"] * 1e3)
            if res.get("compact_written") is not None:
                add(side, "compact_written_mib", res["compact_written"] / MiB)
            info[side] = res
            shutil.rmtree(work, ignore_errors=True)
    shutil.rmtree(mdir, ignore_errors=True)

    # -- table ---------------------------------------------------------------
    spec = [("ragged_write", "ragged zstd conversion", "MiB/s", True),
            ("ragged_gather", f"ragged zstd gather, batch {RAGGED_BATCH}", "MiB/s", True),
            ("delete_ms", f"delete {100 * DELETE_FRACTION:.0f} % of {human_bytes(size)}", "ms", False),
            ("compact_ms", "compact after that delete", "ms", False),
            ("compact_written_mib", "bytes written by delete + compact", "MiB", False)]
    rows = []
    for key, label, unit, higher in spec:
        a = median(per["loaderx"].get(key, []))
        b = median(per["original"].get(key, []))
        ratio = None
        if a is not None and b is not None and a and b:
            ratio = a / b if higher else b / a
        rows.append({"key": key, "row": label, "unit": unit, "loaderx": a, "original": b,
                     "ratio": ratio, "higher_is_better": higher,
                     "runs": {"loaderx": per["loaderx"].get(key, []), "original": per["original"].get(key, [])}})

    def cell(v: float | None, unit: str) -> str:
        return "—" if v is None else f"{v:,.1f} {unit}" if v < 100 else f"{v:,.0f} {unit}"

    out(table(["operation", "loaderx", "original", "loaderx / original"],
              [[r["row"], cell(r["loaderx"], r["unit"]), cell(r["original"], r["unit"]), fmt_ratio(r["ratio"])]
               for r in rows]))
    out()
    out("For times and bytes written the ratio is original / loaderx, so above 1 always means "
        "this project does better.")
    out()
    results["maint"] = {"rows": rows, "skipped": skipped, "size_bytes": size, "records": n,
                        "codec": args.maint_codec, "runs": runs, "last": info}
