"""The scale layer: what opening, converting, sharding and resuming cost as
the dataset and the run grow.

Open. Stores of n records of int32[4] (record i holds 4i .. 4i+3; the
default codec, ``auto``, chooses narrow for them) for n = 10^6, 10^7, 10^8
and 2^28 (``--scale-max`` caps n): in a fresh process, ``DenseDataset(path)``
and one random batch of 256, timed together, with the resident memory, the
descriptors and the mappings the open and the batch added, and the pages of
the record table the process mapped in (its ``Rss`` in /proc/self/smaps).
Each is measured with the page cache warm (right after conversion) and
cold (after ``echo 3 > /proc/sys/vm/drop_caches``, when this process may
write it), both as the first open of the process (the native library
loads with it) and as a second open of another dataset in a process that
has the library loaded. The alternative is a NumPy memory map of the same
records (``np.load(npy, mmap_mode="r")`` and ``[idx]``), in a fresh process
too.

Convert. The same arrays are converted with ``from_numpy`` from a
memory-mapped .npy file, timed with ``np.save`` of the array (the bytes a
user would write instead, and less: no table, no checksums) in the same
run; records per second and the ratio.

Shards (:mod:`scale_shards`): sharded datasets of 16 to 100,000 shards,
opened and read under ``ulimit -n 1024``. Resume (:mod:`resume`): the first
batch after ``load_state_dict`` at steps 10^3 to 10^6. Both run as parts of
this layer, in the same run.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from typing import Any

import numpy as np
from report import fmt_ratio, human_bytes, log, median, out, table
from resume import bench_resume
from scale_shards import bench_scale_shards

#: record counts of the open and convert sections
SIZES = (10**6, 10**7, 10**8, 1 << 28)
#: records per piece when the source array is generated
_PIECE = 1 << 22
BATCH = 256


def _source(path: str, n: int) -> np.ndarray:
    """A memory-mapped .npy of n records of int32[4]: record i is 4i .. 4i+3
    (modulo 2^32), generated a piece at a time."""
    arr = np.lib.format.open_memmap(path, mode="w+", dtype=np.int32, shape=(n, 4))
    for lo in range(0, n, _PIECE):
        hi = min(n, lo + _PIECE)
        vals = np.arange(lo * 4, hi * 4, dtype=np.int64) & 0xFFFFFFFF
        arr[lo:hi] = vals.astype(np.uint32).view(np.int32).reshape(-1, 4)
    arr.flush()
    return arr


def _drop_caches() -> bool:
    """Empty the page cache (needs root); whether it could."""
    try:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return True
    except OSError:
        return False


def child(spec: dict[str, Any]) -> None:
    """The measuring process: one open and first batch of each path in
    spec["paths"] (the first one loads the library), as JSON on stdout."""
    import loaderx
    from loaderx import DenseDataset

    def rss() -> tuple[int, int]:
        """(anonymous, file-backed) resident bytes: the process's own memory,
        and the pages of files it has mapped in (page cache it shares)."""
        got = {}
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(("RssAnon:", "RssFile:")):
                    key, kib, _ = line.split()
                    got[key] = int(kib) * 1024
        return got["RssAnon:"], got["RssFile:"]

    def fds() -> int:
        return len(os.listdir("/proc/self/fd"))

    def maps() -> int:
        with open("/proc/self/maps") as f:
            return sum(1 for _ in f)

    def table_kib(path: str) -> int:
        want = os.path.abspath(os.path.join(path, "0.tab"))
        total, inside = 0, False
        with open("/proc/self/smaps") as f:
            for line in f:
                fields = line.split()
                if fields and "-" in fields[0] and not fields[0].endswith(":"):
                    inside = len(fields) >= 6 and fields[-1] == want
                elif inside and fields[:1] == ["Rss:"]:
                    total += int(fields[1])
        return total

    del loaderx
    results = []
    keep = []
    for path, n, seed in spec["paths"]:
        idx = np.random.default_rng(seed).integers(0, n, BATCH)
        r0, f0, m0 = rss(), fds(), maps()
        maj0 = resource.getrusage(resource.RUSAGE_SELF).ru_majflt
        t0 = time.perf_counter()
        if spec["kind"] == "npy":
            arr = np.load(path, mmap_mode="r")
            got = arr[idx]
        else:
            arr = DenseDataset(path)
            got = arr[idx]
        dt = time.perf_counter() - t0
        majors = resource.getrusage(resource.RUSAGE_SELF).ru_majflt - maj0
        want = ((idx[:, None] * 4 + np.arange(4)) & 0xFFFFFFFF).astype(np.uint32).view(np.int32)
        if not np.array_equal(got, want):
            raise SystemExit(f"{path}: the first batch differs from the records written")
        r1 = rss()
        results.append({"seconds": dt, "rss_anon": r1[0] - r0[0], "rss_file": r1[1] - r0[1],
                        "fds": fds() - f0, "maps": maps() - m0, "major_faults": majors,
                        "table_kib": table_kib(path) if spec["kind"] != "npy" else 0})
        keep.append(arr)
    print(json.dumps(results))


def _measure(kind: str, paths: list[tuple[str, int, int]]) -> list[dict[str, Any]]:
    here = os.path.dirname(os.path.abspath(__file__))
    spec = json.dumps({"kind": kind, "paths": paths})
    proc = subprocess.run([sys.executable, here, "_scale-child", spec], capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"scale child failed ({proc.returncode}): {proc.stderr.strip()[-2000:]}")
    return json.loads(proc.stdout)


def bench_scale(args: argparse.Namespace, results: dict[str, Any], tmp: str) -> None:
    """Fills results["scale"]."""
    import loaderx

    top = args.scale_max
    sizes = [n for n in SIZES if n <= top] or [top]
    runs = args.runs or 3
    root = os.path.join(tmp, "scale")
    os.makedirs(root, exist_ok=True)
    out("## Scale")
    out()
    out(f"Stores of int32[4] records (record i holds 4i .. 4i+3; `auto` chooses narrow), n = "
        f"{', '.join(f'{n:,}' for n in sizes)}. Open: `DenseDataset(path)` and one random batch of {BATCH}, "
        "timed together in a fresh process, against `np.load(npy, mmap_mode='r')[idx]` of the same records; "
        f"the median of {runs} runs, warm (page cache as the conversion left it) and cold (after dropping "
        "the page cache). Convert: `from_numpy` from a memory-mapped .npy against `np.save` of the same "
        "array in the same run.")
    out()
    conv_rows, open_rows = [], []
    cold_ok = True
    for n in sizes:
        src_path = os.path.join(root, f"src-{n}.npy")
        log(f"[scale] generating {n:,} records ...")
        src = _source(src_path, n)
        times: dict[str, list[float]] = {"loaderx": [], "np.save": []}
        store = os.path.join(root, f"store-{n}")
        for r in range(runs if n <= 10**7 else 1):
            for who in (("loaderx", "np.save") if r % 2 == 0 else ("np.save", "loaderx")):
                dst = store if who == "loaderx" else os.path.join(root, f"save-{n}.npy")
                shutil.rmtree(dst, ignore_errors=True)
                if os.path.isfile(dst):
                    os.remove(dst)
                os.sync()
                t0 = time.perf_counter()
                if who == "loaderx":
                    loaderx.from_numpy(dst, src)
                else:
                    np.save(dst, src)
                times[who].append(time.perf_counter() - t0)
            log(f"[scale] converted {n:,} records, run {r + 1}")
        os.remove(os.path.join(root, f"save-{n}.npy"))
        ds = loaderx.DenseDataset(store)
        codec = str(ds.stats()["codec"])
        ds.close()
        lx, ns = median(times["loaderx"]), median(times["np.save"])
        conv_rows.append({"records": n, "codec": codec, "loaderx_rec_s": n / lx, "npsave_rec_s": n / ns,
                          "vs_npsave": ns / lx, "runs": times})
        # a second store to open after the first, so the library is loaded
        other = os.path.join(root, "other")
        if not os.path.isdir(other):
            loaderx.from_numpy(other, src[: min(n, 1000)])
        # The source's mapping goes before the opens are timed: pages this
        # process still maps are not dropped with the page cache, and the
        # cold np.load rows would read warm pages.
        del src
        gc.collect()
        cells: dict[str, list[dict[str, Any]]] = {}
        m = min(n, 1000)
        for state in ("warm", "cold"):
            if state == "cold" and not cold_ok:
                break
            def fresh(state: str = state) -> bool:
                return state == "warm" or _drop_caches()

            for r in range(runs):
                if not fresh():
                    cold_ok = False
                    break
                cells.setdefault(f"{state}-first", []).append(_measure("store", [(store, n, r)])[0])
                fresh()
                cells.setdefault(f"{state}-second", []).append(
                    _measure("store", [(other, m, r), (store, n, r + 100)])[1])
                fresh()
                cells.setdefault(f"{state}-npy", []).append(_measure("npy", [(src_path, n, r)])[0])
        for state in ("warm", "cold"):
            if f"{state}-first" not in cells:
                continue
            first, npy = cells[f"{state}-first"], cells[f"{state}-npy"]
            second = cells.get(f"{state}-second", [])

            def med(rows: list[dict[str, Any]], key: str) -> float | None:
                return median(x[key] for x in rows)

            open_rows.append({
                "records": n, "state": state,
                "first_s": med(first, "seconds"), "second_s": med(second, "seconds"),
                "npy_s": med(npy, "seconds"),
                "rss_anon": med(first, "rss_anon"), "rss_file": med(first, "rss_file"),
                "fds": med(first, "fds"), "maps": med(first, "maps"),
                "major_faults": med(second or first, "major_faults"),
                "table_kib": med(first, "table_kib"),
                "vs_npy": (med(npy, "seconds") or 0) / (med(second, "seconds") or med(first, "seconds") or 1),
                "runs": {"first": first, "second": second, "npy": npy},
            })
        os.remove(src_path)
        if n == sizes[-1] or n > 10**7:
            shutil.rmtree(store, ignore_errors=True)
    out("### Open and first batch")
    out()
    out(table(["records", "page cache", "first open in a process", "open, library loaded", "np.load mmap",
               "np / loaderx", "pages read from disk", "memory added", "file pages mapped in", "of the table",
               "descriptors", "mappings"],
              [[f"{r['records']:,}", r["state"], f"{r['first_s'] * 1e3:.1f} ms",
                f"{r['second_s'] * 1e3:.1f} ms" if r["second_s"] else "n/a", f"{r['npy_s'] * 1e3:.1f} ms",
                fmt_ratio(r["vs_npy"]), f"{r.get('major_faults') or 0:.0f}", human_bytes(r["rss_anon"]),
                human_bytes(r["rss_file"]),
                human_bytes(r["table_kib"] * 1024), f"{r['fds']:.0f}", f"{r['maps']:.0f}"] for r in open_rows]))
    out()
    out("Pages read from disk are the major page faults of the open and batch (with the library loaded): a "
        "warm row with some is a row where the page cache had already lost pages of the store to other "
        "work, and pays a disk read for each. Memory added is the process's anonymous resident memory (the "
        "library, its runtime, the batch); file pages mapped in are page-cache pages of the store's files "
        "(shared, not copied) that the batch's reads mapped in: the kernel maps up to 64 KiB around each "
        "page a read touches, or the whole of a large page-cache folio (a conversion's writes leave folios "
        "of up to 512 KiB, up to 2 MiB mapped at once where the mapping allows), so they follow the batch "
        "and the page cache, not the store's size.")
    out()
    if not cold_ok:
        out("(cold rows left out: this process may not write /proc/sys/vm/drop_caches)")
        out()
    out("### Conversion of small records")
    out()
    out(table(["records", "codec", "from_numpy", "np.save", "loaderx / np.save"],
              [[f"{r['records']:,}", r["codec"], f"{r['loaderx_rec_s'] / 1e6:.1f} M records/s",
                f"{r['npsave_rec_s'] / 1e6:.1f} M records/s", fmt_ratio(r["vs_npsave"])] for r in conv_rows]))
    out()
    results.setdefault("scale", {}).update(open=open_rows, convert=conv_rows)
    bench_scale_shards(args, results, tmp, _drop_caches)
    bench_resume(args, results, tmp)
