"""Layer 2, the store: batch gathers from each record store, random and
sequential, on a warm page cache, against a memcpy of the same rows from
RAM (one thread and the store's thread count) as the ceiling."""

from __future__ import annotations

import argparse
import contextlib
import gc
import os
import shutil
import statistics
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
from contenders import STORES, selected
from contenders.base import Store, timed_batches
from contenders.loaderx import gather_threads
from contenders.original import COUNTERPART
from data import allocated_bytes, apparent_bytes, make_data, read_files_allocated
from report import MiB, fmt_num, fmt_ratio, human_bytes, log, median, out, shape_str, skip_lines, table

DEFAULT_SHAPE = (512, 512)          # 256 KiB of uint8: one image record
SMALL_SHAPE = (64, 192)             # 12 KiB: the latency-bound case
TINY_SHAPE = (512,)                 # 2 KiB of int32: a token or feature row
DEFAULT_RECORDS = 2500              # ~625 MiB at 256 KiB, more than any cache here
SMALL_FACTOR = 8                    # 12 KiB run: 8x the records (20,000, ~234 MiB)
TINY_FACTOR = 32                    # 2 KiB run: 32x the records (80,000, ~156 MiB)

# The default store runs: (shape, dtype or None for --dtype, records as a multiple of --records)
DEFAULT_RUNS: list[tuple[tuple[int, ...], str | None, int]] = [
    (DEFAULT_SHAPE, None, 1),
    (SMALL_SHAPE, None, SMALL_FACTOR),
    (TINY_SHAPE, "int32", TINY_FACTOR),
]


class Memcpy:
    """The same rows copied from the in-memory source: the ceiling."""

    def __init__(self, src: np.ndarray, threads: int) -> None:
        self.src = src
        self.threads = max(1, threads)
        self.pool = ThreadPoolExecutor(self.threads) if self.threads > 1 else None
        self.name = "memcpy" if self.threads == 1 else f"memcpy ×{self.threads}"  # noqa: RUF001 (the multiplication sign is meant)

    def gather(self, idx: np.ndarray, buf: np.ndarray) -> np.ndarray:
        if self.pool is None:
            np.take(self.src, idx, axis=0, out=buf, mode="clip")
            return buf
        b = len(idx)
        step = -(-b // self.threads)
        futs = [self.pool.submit(np.take, self.src, idx[s:s + step], 0, buf[s:s + step], "clip")
                for s in range(0, b, step)]
        for f in futs:
            f.result()
        return buf

    def window(self, start: int, stop: int, buf: np.ndarray) -> np.ndarray:
        if self.pool is None:
            np.copyto(buf, self.src[start:stop])
            return buf
        b = stop - start
        step = -(-b // self.threads)
        futs = [self.pool.submit(np.copyto, buf[s:s + step], self.src[start + s:start + s + step])
                for s in range(0, b, step)]
        for f in futs:
            f.result()
        return buf

    def timed(self, read: str, batches: Sequence[tuple[Any, ...]], buf: np.ndarray, budget_s: float,
              max_batches: int) -> list[float]:
        return timed_batches(getattr(self, read), batches, buf, budget_s, max_batches)

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown()


def _write_all(args: argparse.Namespace, shape: tuple[int, ...], src: np.ndarray, sdir: str,
               threads: int) -> tuple[list[Store], dict[str, dict[str, Any]], list[str]]:
    """Write (or share) and open every selected store; return them, their rows so far and the skip lines."""
    tag = f"[store {shape_str(shape)}]"
    logical = src.nbytes
    skipped: list[str] = []
    stores: list[Store] = []
    rows: dict[str, dict[str, Any]] = {}
    for cls in STORES:
        if not selected(args.only, cls.name):
            continue
        ok, why = cls.available()
        if not ok:
            hint = f" (pip install {cls.pip})" if cls.pip else ""
            skipped.append(f"{cls.name}: not installed{hint}" if cls.module and "No module" in why
                           else f"{cls.name}: {why}")
            continue
        owner = next((x for x in stores if x.name == cls.shares), None) if cls.shares else None
        st = cls(os.path.join(sdir, (cls.shares or cls.name) + cls.ext), shape, src.dtype, threads)
        try:
            if owner is None:
                if cls.shares:  # the writer was not selected: write the files here
                    st.path = os.path.join(sdir, cls.name + cls.ext)
                log(f"{tag} writing {cls.name} ...")
                gc.collect()
                t0 = time.perf_counter()
                st.write(src)
                wt = time.perf_counter() - t0
                wt = getattr(st, "write_seconds", None) or wt  # timed in its own process
            else:
                wt = rows[owner.name]["write_s"]
            st.open()
        except Exception as e:
            skipped.append(f"{cls.name}: write/open failed: {type(e).__name__}: {str(e)[:200]}")
            with contextlib.suppress(Exception):
                st.close()
            continue
        disk = allocated_bytes(st.disk_path())
        apparent = apparent_bytes(st.disk_path())
        rows[st.name] = {"store": st.name, "write_mib_s": logical / wt / MiB, "write_s": wt,
                         "disk_bytes": disk, "ratio": logical / disk if disk else None,
                         "apparent_bytes": apparent,
                         "apparent_ratio": logical / apparent if apparent else None,
                         "allocates": st.allocates, "how": st.how, "compresses": st.compresses,
                         "shares": cls.shares if owner is not None else None,
                         "train_s": getattr(st, "train_seconds", None) if owner is None else None}
        log(f"{tag}   {cls.name}: {logical / wt / MiB:.0f} MiB/s, {human_bytes(disk)} on disk")
        stores.append(st)
    return stores, rows, skipped


def _warm_and_verify(args: argparse.Namespace, shape: tuple[int, ...], src: np.ndarray, stores: list[Store],
                     rows: dict[str, dict[str, Any]], buf: np.ndarray) -> list[str]:
    """Read every file once, then every record through the store itself (capped at
    --warm-cap seconds); check one random batch against the source. Returns the capped stores."""
    n, b = len(src), len(buf)
    warm_notes = []
    rng = np.random.default_rng(12345)
    for st in stores:
        read_files_allocated(st.disk_path())
        t0 = time.perf_counter()
        done = 0
        for s in range(0, n, b):
            e = min(n, s + b)
            if e - s == b:
                st.window(s, e, buf)
            else:
                st.gather(np.arange(s, e, dtype=np.int64), buf[: e - s])
            done = e
            if time.perf_counter() - t0 > args.warm_cap:
                break
        if done < n:
            warm_notes.append(f"{st.name} {100 * done / n:.0f}%")
        idx = np.sort(rng.choice(n, b, replace=False)).astype(np.int64)
        buf.fill(0)
        got = st.gather(idx, buf)
        if not np.array_equal(np.asarray(got).reshape(buf.shape), src[idx]):
            rows[st.name]["mismatch"] = True
            log(f"[store {shape_str(shape)}] WARNING: {st.name} returned wrong data")
    return warm_notes


def _print_store_table(args: argparse.Namespace, out_rows: list[dict[str, Any]], ceiling: str,
                       skipped: list[str], warm_notes: list[str]) -> None:
    skip_lines(skipped)
    trows = []
    for r in out_rows:
        trows.append([
            r["store"] + (" (WRONG DATA)" if r.get("mismatch") else ""),
            fmt_num(r["write_mib_s"], 0, " MiB/s") if r["write_mib_s"] else "—",
            fmt_num(r["rnd_mib_s"], 0, " MiB/s"),
            fmt_num(r["seq_mib_s"], 0, " MiB/s"),
            f"{r['ms_per_batch']:.2f} ms",
            fmt_ratio(r["vs_memcpy"]),
            fmt_num(r["disk_bytes"] / MiB, 0, " MiB") if r["disk_bytes"] is not None else "—",
            fmt_ratio(r["ratio"]) if r["ratio"] else "—",
            r["allocates"].split(" (")[0],
        ])
        if r.get("shares"):
            trows[-1][1] = f"(= {r['shares']})"
    out(table(["store", "write", "gather rnd", "gather seq", "per batch", f"rnd vs {ceiling}",
               "on disk", "ratio", "allocates"], trows, right=range(1, 8)))
    out()
    for r in out_rows:
        if not r.get("compresses") or not r.get("ratio"):
            continue
        if r["apparent_ratio"] and r["apparent_ratio"] < 1.02:
            out(f"Note: {r['store']} stored this data uncompressed (file bytes / logical bytes = "
                f"{1 / r['apparent_ratio']:.2f}), so its gather figures include no decompression.")
            out()
        elif r["ratio"] < r["apparent_ratio"] / 1.05:
            out(f"Note: {r['store']} compresses {r['apparent_ratio']:.2f}x by file size but "
                f"{r['ratio']:.2f}x on disk: it keeps one file per record, and each file is "
                "rounded up to whole filesystem blocks.")
            out()
        if r.get("mismatch"):
            out(f"Note: {r['store']} returned data that differs from what was written.")
            out()
    if warm_notes:
        out(f"Warm-up through the store API was capped at {args.warm_cap:.0f}s for: "
            + ", ".join(warm_notes) + " (every file was still read into the page cache).")
        out()


def _paired_ratio(a: Sequence[float], b: Sequence[float]) -> float | None:
    return median([x / y for x, y in zip(a, b) if y])


def original_ratios(out_rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """For each codec measured for both loaderx and the original: write, random and
    sequential gather, loaderx / original (per-run ratios for the gathers)."""
    by = {r["store"]: r for r in out_rows}
    res = []
    for orig_name, ours_name in COUNTERPART.items():
        o, z = by.get(orig_name), by.get(ours_name)
        if not o or not z:
            continue
        res.append({"codec": ours_name.split("-", 1)[1], "ours": ours_name, "original": orig_name,
                    "write": z["write_mib_s"] / o["write_mib_s"] if o["write_mib_s"] else None,
                    "rnd": _paired_ratio(z["runs_rnd_mib_s"], o["runs_rnd_mib_s"]),
                    "seq": _paired_ratio(z["runs_seq_mib_s"], o["runs_seq_mib_s"]),
                    "disk": (o["disk_bytes"] / z["disk_bytes"]) if z["disk_bytes"] and o["disk_bytes"] else None,
                    "orig_write_s": o.get("write_s"), "orig_train_s": o.get("train_s")})
    return res


def _print_original_table(ratios: list[dict[str, Any]]) -> None:
    if not ratios:
        return
    out("loaderx / original on this record size (same data, same codec, same run; above 1 "
        "means this project is faster, or smaller on disk):")
    out()
    out(table(["codec", "conversion", "gather rnd", "gather seq", "size on disk"],
              [[r["codec"], fmt_ratio(r["write"]), fmt_ratio(r["rnd"]), fmt_ratio(r["seq"]),
                fmt_ratio(r["disk"])] for r in ratios]))
    out()
    for r in ratios:
        if r.get("orig_train_s"):
            out(f"The original's {r['codec']} conversion took {r['orig_write_s']:.1f}s, of which "
                f"{r['orig_train_s']:.1f}s is train_dict.")
            out()


def bench_store_shape(args: argparse.Namespace, shape: tuple[int, ...], n: int, tmp: str,
                      threads: int, dtype_name: str | None = None) -> dict[str, Any]:
    """One record shape: write, warm, then timed rounds over every store and the memcpy references."""
    dtype = np.dtype(dtype_name or args.dtype)
    rec_bytes = int(np.prod(shape)) * dtype.itemsize
    b = min(args.batch, n)
    batch_bytes = b * rec_bytes
    out(f"### {human_bytes(rec_bytes)} records ({shape_str(shape)} {dtype.name}), {n:,} records "
        f"({human_bytes(n * rec_bytes)}), batch {b} ({human_bytes(batch_bytes)})")
    out()
    log(f"[store {shape_str(shape)}] generating {n:,} records ...")
    t0 = time.perf_counter()
    src = make_data(n, shape, dtype, seed=1)
    log(f"[store {shape_str(shape)}] generated {human_bytes(src.nbytes)} in {time.perf_counter() - t0:.1f}s")
    sdir = os.path.join(tmp, f"store-{shape_str(shape)}")
    os.makedirs(sdir, exist_ok=True)
    stores, rows, skipped = _write_all(args, shape, src, sdir, threads)

    buf = np.empty((b, *shape), dtype)
    mem1 = Memcpy(src, 1)
    mem_n = Memcpy(src, threads)
    refs = [mem1] + ([mem_n] if threads > 1 else [])
    warm_notes = _warm_and_verify(args, shape, src, stores, rows, buf)
    for ref in refs:  # fault in the buffer / source once
        ref.gather(np.arange(b, dtype=np.int64), buf)

    # Timed rounds. Within a round every contender gets a short time slice of
    # random batches, then one of sequential windows, in rotating order, so a
    # burst of load from elsewhere on the machine lands on all of them alike.
    runs = args.store_runs
    contenders: list[Any] = refs + stores
    per: dict[str, dict[str, list[float]]] = {c.name: {"rnd": [], "seq": [], "rnd_batch": []} for c in contenders}
    pool = max(16, 2 * -(-n // b))
    for r in range(runs):
        rr = np.random.default_rng(1000 + r)
        rnd = [(np.sort(rr.choice(n, b, replace=False)).astype(np.int64),) for _ in range(pool)]
        span = max(1, n - b + 1)
        s0 = int(rr.integers(0, span))
        seq = [((s0 + k * b) % span, (s0 + k * b) % span + b) for k in range(pool)]
        order = contenders[r % len(contenders):] + contenders[: r % len(contenders)]
        log(f"[store {shape_str(shape)}] round {r + 1}/{runs}")
        for c in order:
            gc.collect()
            t = c.timed("gather", rnd, buf, args.store_slice, pool)
            per[c.name]["rnd"].append(len(t) * batch_bytes / sum(t) / MiB)
            per[c.name]["rnd_batch"].append(statistics.median(t))
            t = c.timed("window", seq, buf, args.store_slice, pool)
            per[c.name]["seq"].append(len(t) * batch_bytes / sum(t) / MiB)

    ceiling = mem_n.name if threads > 1 else mem1.name
    out_rows = []
    for c in contenders:
        p = per[c.name]
        row = rows.get(c.name, {"store": c.name, "write_mib_s": None, "disk_bytes": None,
                                "ratio": None, "allocates": "no",
                                "how": "np.take(src, idx, axis=0, out=buf, mode='clip')" +
                                ("" if c is mem1 else f", {threads} threads over contiguous slices")})
        row["rnd_mib_s"] = median(p["rnd"])
        row["seq_mib_s"] = median(p["seq"])
        row["ms_per_batch"] = median(p["rnd_batch"]) * 1e3
        row["vs_memcpy"] = median([x / y for x, y in zip(p["rnd"], per[ceiling]["rnd"])])
        row["vs_memcpy_seq"] = median([x / y for x, y in zip(p["seq"], per[ceiling]["seq"])])
        row["runs_rnd_mib_s"] = p["rnd"]
        row["runs_seq_mib_s"] = p["seq"]
        out_rows.append(row)
    for c in contenders:
        c.close()

    _print_store_table(args, out_rows, ceiling, skipped, warm_notes)
    vs_orig = original_ratios(out_rows)
    _print_original_table(vs_orig)
    shutil.rmtree(sdir, ignore_errors=True)
    del src
    gc.collect()
    return {"shape": list(shape), "dtype": dtype.name, "records": n, "record_bytes": rec_bytes,
            "batch": b, "threads": threads, "ceiling": ceiling, "rows": out_rows,
            "skipped": skipped, "warm_capped": warm_notes, "runs": runs, "vs_original": vs_orig}


def bench_store(args: argparse.Namespace, results: dict[str, Any], tmp: str) -> None:
    """Every record shape (512x512 and 64x192 by default, or --shape); fills results["store"]."""
    threads = gather_threads(args.threads)
    out("## 2. Store")
    out()
    out("Batch gather from each store: `gather rnd` is sorted random draws without replacement "
        "(one shuffled batch), `gather seq` consecutive windows (an epoch in order). "
        f"Median of {args.store_runs} rounds; in each round every contender gets a "
        f"{args.store_slice * 1e3:.0f} ms slice (at least one batch) per mode, in rotating order. "
        f"`memcpy` copies the same rows from the in-memory source with np.take(out=) on one "
        f"thread and on {threads} threads (the store's thread count) — the ceiling. "
        "`write` is ingestion into the page cache (no fsync), `on disk` is allocated blocks, "
        "`ratio` = logical bytes / on disk. `allocates`: whether the batch lands in a new array "
        "rather than the caller's buffer. `original-*` rows are loaderx 1.5.2 (the Zig "
        "implementation) run in a process of its own, timed there; its zstd_dict conversion "
        "is `train_dict` (tier balanced) plus `from_numpy(dict_bytes=...)`, as this project's "
        "`from_numpy(codec=\"zstd_dict\")` trains its dictionary inside the conversion.")
    out()
    runs = [(tuple(args.shape), None, 1)] if args.shape else DEFAULT_RUNS
    n0 = args.records or DEFAULT_RECORDS
    res = []
    for shp, dt, factor in runs:
        # smaller records get more of them (at the defaults: 2,500 / 20,000 / 80,000)
        res.append(bench_store_shape(args, shp, n0 * factor, tmp, threads, dt))
    hows: dict[str, str] = {}
    for sres in res:
        for r in sres["rows"]:
            hows.setdefault(r["store"], r["how"])
    out("Read paths timed:")
    out()
    for k, v in hows.items():
        out(f"- {k}: {v}")
    out()
    results["store"] = res
