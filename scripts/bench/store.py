"""Layer 2, the store: batch gathers from each record store, random and
sequential, on a warm page cache, against a memcpy of the same rows from
RAM (one thread and the store's thread count) as the ceiling.

The workloads: photo-like uint8 records of 256 KiB and 12 KiB, 2 KiB int32
feature rows, and LLM token rows (int32[2048] Zipf ids below 50,000). Before
anything is timed, one batch of each read of each store is checked against
the rows written, byte for byte, dtype and shape included; a store that
returns anything else gets a row that says what, and no timing."""

from __future__ import annotations

import argparse
import contextlib
import gc
import os
import shutil
import statistics
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
from contenders import STORES, selected
from contenders.base import Store, timed_batches
from contenders.loaderx import VERIFY_PAIRS, gather_threads
from contenders.original import COUNTERPART
from data import TOKEN_LEN, allocated_bytes, apparent_bytes, make_data, make_token_rows, read_files_allocated
from report import MiB, fmt_num, fmt_ratio, human_bytes, log, median, out, shape_str, skip_lines, table

DEFAULT_SHAPE = (512, 512)          # 256 KiB of uint8: one image record
SMALL_SHAPE = (64, 192)             # 12 KiB: the latency-bound case
TINY_SHAPE = (512,)                 # 2 KiB of int32: a feature row
DEFAULT_RECORDS = 2500              # ~625 MiB at 256 KiB, more than any cache here
SMALL_FACTOR = 8                    # 12 KiB run: 8x the records (20,000, ~234 MiB)
TINY_FACTOR = 32                    # 2 KiB run: 32x the records (80,000, ~156 MiB)
TOKEN_FACTOR = 20                   # token rows: 20x the records (50,000 x 8 KiB, ~391 MiB)


@dataclass(frozen=True)
class Workload:
    """One store run: its records, and how many as a multiple of --records."""

    key: str                        # for --workloads and the checks
    shape: tuple[int, ...]
    dtype: str | None               # None: --dtype
    factor: int
    make: Callable[[int, tuple[int, ...], Any], np.ndarray]
    what: str                       # for the heading


def _photos(n: int, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    return make_data(n, shape, dtype, seed=1)


def _tokens(n: int, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    return make_token_rows(n, shape[0], seed=1)


# The default store runs, in order (--workloads picks among them by key)
WORKLOADS: list[Workload] = [
    Workload("256k", DEFAULT_SHAPE, None, 1, _photos, "photo-like"),
    Workload("12k", SMALL_SHAPE, None, SMALL_FACTOR, _photos, "photo-like"),
    Workload("2k", TINY_SHAPE, "int32", TINY_FACTOR, _photos, "feature rows"),
    Workload("tokens", (TOKEN_LEN,), "int32", TOKEN_FACTOR, _tokens, "LLM token ids, Zipf below 50,000"),
]
WORKLOAD_KEYS = [w.key for w in WORKLOADS]


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
        why_not = cls.unsupported(shape, src.dtype)
        if why_not:
            skipped.append(why_not)
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
            note = st.note()
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
                         "train_s": getattr(st, "train_seconds", None) if owner is None else None,
                         "note": note}
        log(f"{tag}   {cls.name}: {logical / wt / MiB:.0f} MiB/s, {human_bytes(disk)} on disk")
        stores.append(st)
    return stores, rows, skipped


def batch_mismatch(got: Any, want: np.ndarray) -> str | None:
    """How a returned batch differs from the rows expected (type, dtype, shape or
    bytes), or None when it is exactly them."""
    if not isinstance(got, np.ndarray):
        return f"a {type(got).__name__}, not a NumPy array"
    if got.dtype != want.dtype:
        return f"dtype {got.dtype}, not {want.dtype} (values {'the same' if _same_values(got, want) else 'differ'})"
    if got.shape != want.shape:
        return f"shape {got.shape}, not {want.shape}"
    a = np.ascontiguousarray(got).reshape(-1).view(np.uint8)
    b = np.ascontiguousarray(want).reshape(-1).view(np.uint8)
    if not np.array_equal(a, b):
        k = int(np.flatnonzero(a != b)[0])
        return f"other bytes (the first at byte {k:,} of {b.size:,})"
    return None


def _same_values(got: np.ndarray, want: np.ndarray) -> bool:
    try:
        return got.shape == want.shape and bool(np.array_equal(got, want))
    except (TypeError, ValueError):
        return False


def _warm_and_check_one(args: argparse.Namespace, st: Store, src: np.ndarray, buf: np.ndarray,
                        rng: np.random.Generator) -> tuple[int, str | None]:
    """One store's warm-up sweep (capped at --warm-cap seconds) and the check of a
    random batch and a window: (records swept, how a read differs or None)."""
    n, b = len(src), len(buf)
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
    idx = np.sort(rng.choice(n, b, replace=False)).astype(np.int64)
    s0 = int(rng.integers(0, max(1, n - b + 1)))
    reads: list[tuple[str, Callable[..., Any], tuple[Any, ...], np.ndarray]] = [
        ("gather", st.gather, (idx, buf), src[idx]),
        ("window", st.window, (s0, s0 + b, buf), src[s0:s0 + b]),
    ]
    for what, read, read_args, want in reads:
        buf.fill(0)
        why = batch_mismatch(read(*read_args), want)
        if why:
            return done, f"{why} ({what})"
    return done, None


def _warm_and_verify(args: argparse.Namespace, shape: tuple[int, ...], src: np.ndarray, stores: list[Store],
                     rows: dict[str, dict[str, Any]], buf: np.ndarray) -> list[str]:
    """Read every file once, then every record through the store itself (capped at
    --warm-cap seconds); check one random batch and one window of each store
    against the source, byte for byte with dtype and shape, and mark a store that
    returns anything else (rows[name]["mismatch"]). Returns the capped stores."""
    n = len(src)
    warm_notes = []
    rng = np.random.default_rng(12345)
    for st in stores:
        read_files_allocated(st.disk_path())
        try:
            done, why = _warm_and_check_one(args, st, src, buf, rng)
        except Exception as e:  # a read that raises: reported like other rows, not timed
            rows[st.name]["mismatch"] = why = f"raised {type(e).__name__}: {str(e)[:160]}"
            rows[st.name]["read_failed"] = True
            log(f"[store {shape_str(shape)}] {st.name}: a read {why}: reported, not timed")
            continue
        if done < n:
            warm_notes.append(f"{st.name} {100 * done / n:.0f}%")
        if why:
            rows[st.name]["mismatch"] = why
            log(f"[store {shape_str(shape)}] {st.name} returns {why}: reported, not timed")
    return warm_notes


def _print_store_table(args: argparse.Namespace, out_rows: list[dict[str, Any]], ceiling: str,
                       skipped: list[str], warm_notes: list[str]) -> None:
    skip_lines(skipped)
    trows = []
    for r in out_rows:
        if r.get("mismatch"):
            what = "read failed" if r.get("read_failed") else "returns other bytes/dtype"
            timing = [f"{what}: {r['mismatch']}", "not timed", "—", "—"]
        else:
            timing = [fmt_num(r["rnd_mib_s"], 0, " MiB/s"), fmt_num(r["seq_mib_s"], 0, " MiB/s"),
                      fmt_num(r["ms_per_batch"], 2, " ms"), fmt_ratio(r["vs_memcpy"])]
        trows.append([
            r["store"],
            fmt_num(r["write_mib_s"], 0, " MiB/s") if r["write_mib_s"] else "—",
            *timing,
            fmt_num(r["disk_bytes"] / MiB, 0, " MiB") if r["disk_bytes"] is not None else "—",
            fmt_ratio(r["disk_vs_raw"]) if r.get("disk_vs_raw") else "—",
            r["allocates"].split(" (")[0],
        ])
        if r.get("shares"):
            trows[-1][1] = f"(= {r['shares']})"
    out(table(["store", "write", "gather rnd", "gather seq", "per batch", f"rnd vs {ceiling}",
               "on disk", "disk / raw", "allocates"], trows, right=range(1, 8)))
    out()
    for r in out_rows:
        if r.get("note") and not r.get("shares"):
            out(f"Note: {r['store']}: {r['note']}.")
            out()
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
    if warm_notes:
        out(f"Warm-up through the store API was capped at {args.warm_cap:g}s for: "
            + ", ".join(warm_notes) + " (every file was still read into the page cache).")
        out()


def verify_ratios(out_rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Verified / unverified raw gathers for each read form and order (median of
    per-round ratios), where both rows were timed."""
    by = {r["store"]: r for r in out_rows}
    res = []
    for form, ver, unver in VERIFY_PAIRS:
        a, b = by.get(ver), by.get(unver)
        if not a or not b or a.get("mismatch") or b.get("mismatch"):
            continue
        res.append({"form": form, "verified": ver, "unverified": unver,
                    "rnd": _paired_ratio(a["runs_rnd_mib_s"], b["runs_rnd_mib_s"]),
                    "seq": _paired_ratio(a["runs_seq_mib_s"], b["runs_seq_mib_s"])})
    return res


def _print_verify_table(ratios: list[dict[str, Any]]) -> None:
    if not ratios:
        return
    out("Raw verification on this record size: verified / unverified throughput, the same store "
        "read through two handles, set_verify(True) and set_verify(False) (1 means free):")
    out()
    out(table(["read", "random", "sequential"],
              [[r["form"], fmt_ratio(r["rnd"]), fmt_ratio(r["seq"])] for r in ratios]))
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


def bench_store_shape(args: argparse.Namespace, wl: Workload, n: int, tmp: str, threads: int) -> dict[str, Any]:
    """One workload: write, warm and check, then timed rounds over every store
    that returned the right rows, and the memcpy references."""
    shape = wl.shape
    dtype = np.dtype(wl.dtype or args.dtype)
    rec_bytes = int(np.prod(shape)) * dtype.itemsize
    b = min(args.batch, n)
    batch_bytes = b * rec_bytes
    out(f"### {human_bytes(rec_bytes)} records ({shape_str(shape)} {dtype.name}, {wl.what}), {n:,} records "
        f"({human_bytes(n * rec_bytes)}), batch {b} ({human_bytes(batch_bytes)})")
    out()
    log(f"[store {shape_str(shape)}] generating {n:,} records ...")
    t0 = time.perf_counter()
    src = wl.make(n, shape, dtype)
    log(f"[store {shape_str(shape)}] generated {human_bytes(src.nbytes)} in {time.perf_counter() - t0:.1f}s")
    sdir = os.path.join(tmp, f"store-{wl.key}-{shape_str(shape)}")
    os.makedirs(sdir, exist_ok=True)
    stores, rows, skipped = _write_all(args, shape, src, sdir, threads)
    for r in rows.values():
        r["disk_vs_raw"] = r["disk_bytes"] / src.nbytes if r["disk_bytes"] else None

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
    contenders: list[Any] = refs + [st for st in stores if not rows[st.name].get("mismatch")]
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
    for c in refs + stores:
        row = rows.get(c.name, {"store": c.name, "write_mib_s": None, "disk_bytes": None,
                                "ratio": None, "allocates": "no",
                                "how": "np.take(src, idx, axis=0, out=buf, mode='clip')" +
                                ("" if c is mem1 else f", {threads} threads over contiguous slices")})
        p = per.get(c.name)
        if p is None:  # returned other rows: reported, not timed
            row.update(rnd_mib_s=None, seq_mib_s=None, ms_per_batch=None, vs_memcpy=None,
                       vs_memcpy_seq=None, runs_rnd_mib_s=[], runs_seq_mib_s=[])
            out_rows.append(row)
            continue
        row["rnd_mib_s"] = median(p["rnd"])
        row["seq_mib_s"] = median(p["seq"])
        row["ms_per_batch"] = median(p["rnd_batch"]) * 1e3
        row["vs_memcpy"] = median([x / y for x, y in zip(p["rnd"], per[ceiling]["rnd"])])
        row["vs_memcpy_seq"] = median([x / y for x, y in zip(p["seq"], per[ceiling]["seq"])])
        row["runs_rnd_mib_s"] = p["rnd"]
        row["runs_seq_mib_s"] = p["seq"]
        out_rows.append(row)
    for c in refs + stores:
        c.close()

    _print_store_table(args, out_rows, ceiling, skipped, warm_notes)
    vs_orig = original_ratios(out_rows)
    _print_original_table(vs_orig)
    vs_verify = verify_ratios(out_rows)
    _print_verify_table(vs_verify)
    shutil.rmtree(sdir, ignore_errors=True)
    del src
    gc.collect()
    return {"workload": wl.key, "shape": list(shape), "dtype": dtype.name, "records": n,
            "record_bytes": rec_bytes, "batch": b, "threads": threads, "ceiling": ceiling,
            "rows": out_rows, "skipped": skipped, "warm_capped": warm_notes, "runs": runs,
            "vs_original": vs_orig, "verify": vs_verify}


def _print_disk_table(res: list[dict[str, Any]]) -> None:
    """Bytes on disk of every store, as a ratio to the raw bytes, one column per workload."""
    cols = [human_bytes(s["record_bytes"]) + ("" if s["workload"][0].isdigit() else f" {s['workload']}")
            for s in res]
    names = list(dict.fromkeys(r["store"] for s in res for r in s["rows"]
                               if r.get("disk_bytes") and not r.get("shares")))
    if not names or len(res) < 2:
        return
    out("Bytes on disk / raw bytes, every store and workload (allocated blocks; a store that reads "
        "another's files is listed under that one):")
    out()
    trows = []
    for nm in names:
        cells = []
        for s in res:
            r = next((x for x in s["rows"] if x["store"] == nm), None)
            cells.append(fmt_ratio(r["disk_vs_raw"]) if r and r.get("disk_vs_raw") else "—")
        trows.append([nm, *cells])
    out(table(["store", *cols], trows))
    out()


def selected_workloads(args: argparse.Namespace) -> list[Workload]:
    """--workloads (keys, or `shape` for --shape), default: the --shape run alone
    when --shape is given, else every workload."""
    keys = args.workloads or (["shape"] if args.shape else WORKLOAD_KEYS)
    res = []
    for k in keys:
        if k == "shape":
            if not args.shape:
                raise SystemExit("--workloads shape needs --shape")
            res.append(Workload("shape", tuple(args.shape), None, 1, _photos, "photo-like"))
            continue
        wl = next((w for w in WORKLOADS if w.key == k), None)
        if wl is None:
            raise SystemExit(f"unknown workload {k!r} (choose from {', '.join([*WORKLOAD_KEYS, 'shape'])})")
        res.append(wl)
    return res


def bench_store(args: argparse.Namespace, results: dict[str, Any], tmp: str) -> None:
    """Every workload (or --shape / --workloads); fills results["store"]."""
    threads = gather_threads(args.threads)
    out("## 2. Store")
    out()
    out("Batch gather from each store: `gather rnd` is sorted random draws without replacement "
        "(one shuffled batch), `gather seq` consecutive windows (an epoch in order). "
        f"Median of {args.store_runs} rounds; in each round every contender gets a "
        f"{args.store_slice * 1e3:.0f} ms slice (at least one batch) per mode, in rotating order. "
        f"`memcpy` copies the same rows from the in-memory source with np.take(out=) on one "
        f"thread and on {threads} threads (the store's thread count) — the ceiling. "
        "Before timing, one random batch and one window of every store are checked against the rows "
        "written, byte for byte with dtype and shape: a store that returns anything else is listed "
        "with what it returned and not timed. "
        "`write` is ingestion into the page cache (no fsync), `on disk` is allocated blocks, "
        "`disk / raw` = on disk / logical bytes (below 1: compressed). `allocates`: whether the "
        "batch lands in a new array rather than the caller's buffer. `zrecord (defaults)` is "
        "from_numpy and DenseDataset with every default left alone (codec \"auto\" picks raw or a "
        "codec itself); the `ds[idx]` rows read the same store as most code reads an array. "
        "`original-*` rows are loaderx 1.5.2 (the Zig "
        "implementation) run in a process of its own, timed there; its zstd_dict conversion "
        "is `train_dict` (tier balanced) plus `from_numpy(dict_bytes=...)`, as this project's "
        "`from_numpy(codec=\"zstd_dict\")` trains its dictionary inside the conversion.")
    out()
    n0 = args.records or DEFAULT_RECORDS
    res = []
    for wl in selected_workloads(args):
        # smaller records get more of them (at the defaults: 2,500 / 20,000 / 80,000 / 50,000)
        res.append(bench_store_shape(args, wl, n0 * wl.factor, tmp, threads))
    _print_disk_table(res)
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
