"""Layer 3, the loader: the whole input pipeline (sample, fetch, collate, hand
over a batch) with the peak memory of each loader's whole process tree.

Each loader runs in a fresh interpreter (`_loader-child`), so one loader's
imports and worker processes never sit in another's memory figure. The
parent samples the child's whole process tree from /proc, from outside.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

import numpy as np
from contenders import LOADERS, RAGGED_LOADERS, loader_named, selected
from contenders.packing import CHECK_BATCHES, FIT_DOCS, PACK_LEN, PACK_LOADERS, ROWS, check_rows
from contenders.ragged import MAX_LEN, MIN_LEN, make_tokens
from data import DOC_MAX, DOC_MIN, make_data, make_documents, read_files_allocated
from machine import read_text
from mixpack import bench_mixture_packing
from mixture import bench_mixture
from report import MiB, fmt_ratio, log, median, out, shape_str, skip_lines, table
from store import DEFAULT_RECORDS, DEFAULT_SHAPE

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(BENCH_DIR))

SHM_DIR = "/dev/shm"
#: the longest warm-up a loader that is still choosing its workers gets, seconds
SETTLE_S = 30.0
SHM_PREFIXES = ("psm_", "sem.mp-", "torch_", "loaderx-")



def _prepared(want: list[Any], skipped: list[str], method: str, *args: Any) -> list[dict[str, Any]]:
    """Each wanted, available loader's ``method(*args)`` set-up, as {"name",
    ...}; one that is missing or fails to set up goes to ``skipped`` with why."""
    out = []
    for c in want:
        why = c.available()
        if why:
            skipped.append(f"{c.name}: {why}")
            continue
        try:
            out.append({"name": c.name, **getattr(c, method)(*args)})
        except Exception as e:
            skipped.append(f"{c.name}: setup failed: {type(e).__name__}: {str(e)[:200]}")
    return out

def loader_child(cfg: dict[str, Any]) -> None:
    """In the child: run one loader for a while and print its throughput as JSON."""
    import warnings
    warnings.filterwarnings("ignore")
    b = cfg["batch"]
    shape = tuple(cfg["shape"])
    get, close = loader_named(cfg["name"]).open(cfg)
    x = get()
    checked: dict[str, Any] = {}
    if cfg.get("packed"):  # (values, segment_ids, where, dropped) of ROWS packed rows
        got = [x] + [get() for _ in range(CHECK_BATCHES - 1)]
        for values, seg, _, _ in got:
            assert tuple(values.shape) == tuple(seg.shape) == (ROWS, PACK_LEN), (values.shape, seg.shape)
        checked = check_rows([(np.asarray(v), np.asarray(s), w) for v, s, w, _ in got], cfg["tokens"],
                             cfg["offsets"])
        checked["dropped"] = sum(d for *_, d in got) / (CHECK_BATCHES * FIT_DOCS)
        del got
        x = get()
    elif cfg.get("ragged"):  # (values, offsets) of b sequences
        values, offsets = x
        assert tuple(offsets.shape) == (b + 1,) and int(offsets[-1]) == len(values), tuple(offsets.shape)
    else:
        assert tuple(x.shape) == (b, *shape), (tuple(x.shape), (b, *shape))
    print("FLOW", flush=True)
    # warm up for warmup_s, and until a loader that chooses its workers as it
    # runs (loaderx's workers="auto") has chosen and moved: the figure is the
    # steady state, as torch's is once its workers are up (at most SETTLE_S)
    settled = getattr(get, "settled", None)
    t0 = time.perf_counter()
    k = 0
    while k < 2 or time.perf_counter() - t0 < cfg["warmup_s"] or (
            settled is not None and not settled() and time.perf_counter() - t0 < SETTLE_S):
        get()
        k += 1
    settle_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    k = 0
    while k < 3 or time.perf_counter() - t0 < cfg["measure_s"]:
        get()
        k += 1
    dt = time.perf_counter() - t0
    mode = getattr(get, "mode", None)
    res = {"batches": k, "seconds": dt, "warmup_s": settle_s, **(mode() if mode else {}), **checked}
    print("RESULT " + json.dumps(res), flush=True)
    del x
    close()  # a clean shutdown lets the workers release their shared memory


class TreeMemory:
    """Samples RSS (and PSS) summed over a process and all its descendants."""

    PAGE = os.sysconf("SC_PAGE_SIZE")

    def __init__(self, root_pid: int, interval: float = 0.05, pss_every: int = 4) -> None:
        self.root = root_pid
        self.interval = interval
        self.pss_every = pss_every
        self.active = False
        self.peak_rss = 0
        self.peak_pss = 0
        self.peak_procs = 0
        self.shm_base = self._shmem()
        self.peak_shm = 0
        self.peak_anon_shm = 0
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._t.start()

    def stop(self) -> None:
        self._stop.set()
        self._t.join(timeout=2)

    @staticmethod
    def _shmem() -> int:
        for line in (read_text("/proc/meminfo", "") or "").splitlines():
            if line.startswith("Shmem:"):
                return int(line.split()[1]) * 1024
        return 0

    def _children(self, pid: int) -> list[int]:
        kids = []
        try:
            for tid in os.listdir(f"/proc/{pid}/task"):
                s = read_text(f"/proc/{pid}/task/{tid}/children", "")
                if s:
                    kids += [int(x) for x in s.split()]
        except OSError:
            pass
        return kids

    def _tree(self) -> list[int]:
        pids, todo = [], [self.root]
        while todo:
            p = todo.pop()
            pids.append(p)
            todo += self._children(p)
        return pids

    def _sample_pss(self, pids: list[int]) -> None:
        pss = anon = 0
        for p in pids:
            s = read_text(f"/proc/{p}/smaps_rollup", "") or ""
            m = re.search(r"^Pss:\s+(\d+) kB", s, re.M)
            if m:
                pss += int(m.group(1)) * 1024
            m = re.search(r"^Pss_Anon:\s+(\d+) kB", s, re.M)
            if m:
                anon += int(m.group(1)) * 1024
        shm = max(0, self._shmem() - self.shm_base)
        self.peak_pss = max(self.peak_pss, pss)
        self.peak_shm = max(self.peak_shm, shm)
        self.peak_anon_shm = max(self.peak_anon_shm, anon + shm)

    def _run(self) -> None:
        k = 0
        while not self._stop.is_set():
            if self.active:
                pids = self._tree()
                rss = 0
                for p in pids:
                    s = read_text(f"/proc/{p}/statm")
                    if s:
                        rss += int(s.split()[1]) * self.PAGE
                self.peak_rss = max(self.peak_rss, rss)
                self.peak_procs = max(self.peak_procs, len(pids))
                if k % self.pss_every == 0:
                    self._sample_pss(pids)
                k += 1
            self._stop.wait(self.interval)


def _shm_entries() -> set[str]:
    try:
        return set(os.listdir(SHM_DIR))
    except OSError:
        return set()


def _shm_in_use(names: set[str]) -> set[str]:
    """Which of these /dev/shm names some live process still has mapped or open."""
    used = set()
    paths = {os.path.join(SHM_DIR, nm): nm for nm in names}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/maps") as fh:
                for line in fh:
                    p = line.rstrip("\n").split(None, 5)[-1].replace(" (deleted)", "")
                    if p in paths:
                        used.add(paths[p])
            for fd in os.listdir(f"/proc/{pid}/fd"):
                try:
                    t = os.readlink(f"/proc/{pid}/fd/{fd}")
                except OSError:
                    continue
                if t in paths:
                    used.add(paths[t])
        except OSError:
            continue
    return used


def _end_session(proc: subprocess.Popen[str]) -> None:
    """Whatever is left of the child's own session (it was started in a new one)."""
    for sig, wait in ((signal.SIGTERM, 3), (signal.SIGKILL, 2)):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            break
        time.sleep(wait if sig == signal.SIGTERM else 0)
    proc.wait()


def _watch(proc: subprocess.Popen[str], mem: TreeMemory, timeout: float) -> dict[str, Any]:
    """Follow the child's FLOW / RESULT lines (memory is sampled in between) until its
    result, its exit or the timeout; then end what is left of its session."""
    result: dict[str, Any] = {}
    got_result = threading.Event()

    def reader() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith("FLOW"):
                mem.active = True
            elif line.startswith("RESULT "):
                result.update(json.loads(line[7:]))
                mem.active = False
                got_result.set()

    rt = threading.Thread(target=reader, daemon=True)
    rt.start()
    deadline = time.monotonic() + timeout
    try:
        while proc.poll() is None and time.monotonic() < deadline and not got_result.is_set():
            time.sleep(0.05)
        mem.stop()
        if got_result.is_set():  # let it shut its workers down cleanly
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=60)
    finally:
        mem.stop()
        _end_session(proc)
        rt.join(timeout=2)
    return result


def run_loader_child(cfg: dict[str, Any], timeout: float) -> dict[str, Any]:
    """Run one loader in a fresh interpreter, sampling its process tree's memory while batches flow."""
    cmd = [sys.executable, BENCH_DIR, "_loader-child", json.dumps(cfg)]
    env = dict(os.environ)
    if env.get("PYTHONPATH"):  # the child starts in REPO: keep relative entries pointing where they did
        env["PYTHONPATH"] = os.pathsep.join(os.path.abspath(p) for p in env["PYTHONPATH"].split(os.pathsep) if p)
    env = loader_named(cfg["name"]).child_env(env)
    shm_before = _shm_entries()
    with tempfile.TemporaryFile(mode="w+") as errf:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=errf, text=True,
                                start_new_session=True, cwd=REPO, env=env)
        mem = TreeMemory(proc.pid)
        mem.start()
        result = _watch(proc, mem, timeout)
        errf.seek(0)
        err_tail = "\n".join(errf.read().strip().splitlines()[-6:])
    # shared-memory segments the child's tree created and left behind
    leftover = {nm for nm in _shm_entries() - shm_before if nm.startswith(SHM_PREFIXES)}
    for nm in leftover - _shm_in_use(leftover):
        with contextlib.suppress(OSError):
            os.unlink(os.path.join(SHM_DIR, nm))
    if not result:
        return {"error": err_tail or f"exit code {proc.returncode}"}
    result["peak_rss"] = mem.peak_rss
    result["peak_pss"] = mem.peak_pss
    result["procs"] = mem.peak_procs
    result["peak_shm"] = max(0, mem.peak_shm)
    result["peak_anon_shm"] = mem.peak_anon_shm
    result["leftover_shm"] = len(leftover)
    return result


def _prepare(args: argparse.Namespace, ldir: str, shape: tuple[int, ...], dtype: np.dtype[Any],
             n: int) -> tuple[list[dict[str, Any]], list[str]]:
    """Write every selected loader's files; return their configs and the skip lines."""
    cands: list[dict[str, Any]] = []
    skipped: list[str] = []
    if args.transform == "augment":
        log("[loader] transform augment: per-sample flip + scale in Python")
    want = [c for c in LOADERS if selected(args.only, c.name)]
    log(f"[loader] generating {n:,} records ...")
    data = make_data(n, shape, dtype, seed=2)
    labels = np.random.default_rng(3).integers(0, 1000, n).astype(np.int64)
    cands += _prepared(want, skipped, "prepare", ldir, data, labels)
    del data
    gc.collect()
    return cands, skipped


def _summarize(per: dict[str, list[dict[str, Any]]], cands: list[dict[str, Any]], b: int,
               sample_bytes: int) -> list[dict[str, Any]]:
    rows = []
    for c in cands:
        rs = per[c["name"]]
        if not rs:
            continue
        bps = median([x["bps"] for x in rs])
        assert bps is not None
        rows.append({"loader": c["name"], "batches_per_s": bps, "ms_per_batch": 1e3 / bps,
                     "samples_per_s": bps * b, "mib_s": bps * b * sample_bytes / MiB,
                     "peak_rss": max(x["peak_rss"] for x in rs),
                     "peak_pss": max(x["peak_pss"] for x in rs),
                     "peak_shm": max(x["peak_shm"] for x in rs),
                     "peak_anon_shm": max(x["peak_anon_shm"] for x in rs),
                     "procs": max(x["procs"] for x in rs), "workers": _workers_used(rs), "runs": rs})
    return rows


def _workers_used(rs: list[dict[str, Any]]) -> str:
    """What a loaderx loader's runs measured on: "thread", "process", or
    "process from step S" after a move (the runs' first such step); "—" for
    other loaders."""
    chosen = {x.get("workers_chosen") for x in rs} - {None}
    if not chosen:
        return "—"
    switches = sorted(x["workers_switch_step"] for x in rs if x.get("workers_switch_step") is not None)
    text = "/".join(sorted(chosen))
    return f"{text} from step {switches[0]}" if switches else text


def bench_loader(args: argparse.Namespace, results: dict[str, Any], tmp: str) -> None:
    """The dense loader table, the ragged loader row, then the mixture row."""
    bench_dense_loader(args, results, tmp)
    bench_ragged(args, results, tmp)
    bench_packing(args, results, tmp)
    if selected(args.only, "mixture"):
        bench_mixture(args, results, tmp)
        if "mixture_packing" not in results:
            bench_mixture_packing(args, results, tmp)


def _round_robin(
    args: argparse.Namespace, tag: str, cands: list[dict[str, Any]], cfg: dict[str, Any],
    on_result: Any,
) -> tuple[dict[str, list[dict[str, Any]]], dict[str, str]]:
    """Each candidate in a fresh child process, ``args.loader_runs`` rounds,
    the starting candidate rotated per round; ``on_result`` sees each run's
    result (its ``bps`` set). Returns the runs per candidate and the errors."""
    per: dict[str, list[dict[str, Any]]] = {c["name"]: [] for c in cands}
    errors: dict[str, str] = {}
    for r in range(args.loader_runs):
        order = cands[r % len(cands):] + cands[: r % len(cands)] if cands else []
        for c in order:
            if c["name"] in errors:
                continue
            run_cfg = {**c, **cfg, "workers": args.workers, "transform": "identity", "dtype": "int32",
                       "warmup_s": args.loader_warmup, "measure_s": args.loader_measure, "threads": args.threads}
            log(f"[{tag}] run {r + 1}/{args.loader_runs}: {c['name']} ...")
            res = run_loader_child(run_cfg, timeout=args.loader_timeout)
            if "error" in res:
                errors[c["name"]] = res["error"]
                log(f"[{tag}] {c['name']} failed:\n{res['error']}")
                continue
            res["bps"] = res["batches"] / res["seconds"]
            on_result(res)
            per[c["name"]].append(res)
    return per, errors


def bench_dense_loader(args: argparse.Namespace, results: dict[str, Any], tmp: str) -> None:
    """Every selected loader, round-robin over --runs fresh child processes; fills results["loader"]."""
    shape = tuple(args.shape) if args.shape else DEFAULT_SHAPE
    dtype = np.dtype(args.dtype)
    n = args.records or DEFAULT_RECORDS
    b = min(args.batch, n)
    rec_bytes = int(np.prod(shape)) * dtype.itemsize
    sample_bytes = rec_bytes + 8
    out("## 3. Loader")
    out()
    out(f"The whole pipeline — sample, fetch, collate, hand over a batch — for a stream pair "
        f"(data {shape_str(shape)} {dtype.name} + int64 label), {n:,} records, batch {b}, "
        f"{args.workers} workers, transform `{args.transform}`. Each loader runs in its own fresh "
        f"interpreter; figures are the median of {args.loader_runs} runs (loaders round-robin), each "
        f"{args.loader_measure:.0f}s of batches after {args.loader_warmup:.1f}s of warm-up. "
        "Peak memory is sampled from /proc every 50 ms over the loader's whole process tree while "
        "batches flow: `peak RSS` sums resident sets (shared pages counted once per process), "
        "`peak PSS` sums proportional set sizes (each shared page split among its users) — the "
        "honest total of what is mapped. `shm Δ` is the peak growth of the machine's shared memory "
        "(/proc/meminfo Shmem) over its level before the loader started: batches that worker "
        "processes hand over in shared memory and that no process maps at that instant appear "
        "only there (the figure is machine-wide, so other activity can leak into it). "
        "`anon + shm` is the peak of anonymous PSS plus that shared-memory growth: what the loader "
        "costs beyond the page cache, since RSS and PSS also count the pages of data files a "
        "reader maps (npy memory maps, an mmap-based store), which the kernel can reclaim.")
    out()
    ldir = os.path.join(tmp, "loader")
    os.makedirs(ldir, exist_ok=True)
    cands, skipped = _prepare(args, ldir, shape, dtype, n)
    skip_lines(skipped)
    if not cands:
        results["loader"] = {"rows": [], "skipped": skipped}
        return
    read_files_allocated(ldir)
    per: dict[str, list[dict[str, Any]]] = {c["name"]: [] for c in cands}
    errors: dict[str, str] = {}
    for r in range(args.loader_runs):
        order = cands[r % len(cands):] + cands[: r % len(cands)]
        for c in order:
            if c["name"] in errors:
                continue
            cfg = {**c, "batch": b, "workers": args.workers, "transform": args.transform,
                   "shape": list(shape), "dtype": dtype.name, "records": n,
                   "warmup_s": args.loader_warmup, "measure_s": args.loader_measure,
                   "threads": args.threads}
            log(f"[loader] run {r + 1}/{args.loader_runs}: {c['name']} ...")
            res = run_loader_child(cfg, timeout=args.loader_timeout)
            if "error" in res:
                errors[c["name"]] = res["error"]
                log(f"[loader] {c['name']} failed:\n{res['error']}")
                continue
            res["bps"] = res["batches"] / res["seconds"]
            kind = {"thread": "threads", "process": "processes"}.get(res.get("workers_chosen") or "")
            chosen = (f" on {kind} (from step {res['workers_switch_step']})"
                      if res.get("workers_switch_step") is not None else f" on {kind}" if kind else "")
            log(f"[loader]   {res['bps']:.1f} batches/s{chosen}, warm-up {res.get('warmup_s', 0):.1f} s, "
                f"peak RSS {res['peak_rss'] / MiB:.0f} MiB, "
                f"PSS {res['peak_pss'] / MiB:.0f} MiB, {res['procs']} processes"
                + (f"; removed {res['leftover_shm']} shared-memory files it left in {SHM_DIR}"
                   if res.get("leftover_shm") else ""))
            per[c["name"]].append(res)
    rows = _summarize(per, cands, b, sample_bytes)
    defaults_choice = next((c.get("codec_choice") for c in cands if c.get("defaults")), None)
    for name, err in errors.items():
        out(f"- {name} failed: " + err.replace("\n", " | ")[:400])
    if errors:
        out()
    out(table(["loader", "batches/s", "per batch", "samples/s", "throughput", "peak RSS",
               "peak PSS", "shm Δ", "anon + shm", "processes", "workers"],
              [[r["loader"], f"{r['batches_per_s']:.1f}", f"{r['ms_per_batch']:.2f} ms",
                f"{r['samples_per_s']:,.0f}", f"{r['mib_s']:,.0f} MiB/s",
                f"{r['peak_rss'] / MiB:,.0f} MiB", f"{r['peak_pss'] / MiB:,.0f} MiB",
                f"{r['peak_shm'] / MiB:,.0f} MiB", f"{r['peak_anon_shm'] / MiB:,.0f} MiB",
                r["procs"], r["workers"]] for r in rows]))
    out()
    out("`workers` is what each loaderx row's batches were measured on: a row with workers=\"auto\" "
        "(the default; every row but the `-thread` and `-process` ones) is warmed up until it has "
        "chosen, and `from step S` is where it moved to worker processes.")
    out()
    vs_orig = _original_ratios(rows, per)
    if vs_orig:
        out("loaderx / original (the original's DataLoader: cyclic sampler, one gather thread, "
            f"{args.workers} transform threads; same stores' data and codec): batches/s is "
            "loaderx / original (median of per-run ratios), memory is original / loaderx — above 1 "
            "means this project does better.")
        out()
        out(table(["pair", "batches/s", "anon + shm", "peak PSS"],
                  [[f"{r['ours']} / {r['original']}", fmt_ratio(r["speed"]), fmt_ratio(r["anon_shm"]),
                    fmt_ratio(r["pss"])] for r in vs_orig]))
        out()
    vs_torch = _torch_ratios(rows, per)
    if vs_torch:
        out("loaderx / torch (batches/s: median of per-run ratios, above 1 means loaderx is faster; "
            "anon + shm: loaderx / torch, below 1 means loaderx uses less). `loaderx (defaults)` is "
            "the README's quick start as written: both stores converted with no codec argument "
            "(codec \"auto\"), the loader built with the batch size only"
            + (f"; auto chose `{defaults_choice['codec']}`: {defaults_choice['reason']}."
               if defaults_choice else "."))
        out()
        out(table(["pair", "batches/s", "anon + shm"],
                  [[f"{r['ours']} / torch", fmt_ratio(r["speed"]),
                    f"{r['anon_shm']:.2f}" if r["anon_shm"] is not None else "—"] for r in vs_torch]))
        out()
    vs_hf = _torch_ratios(rows, per, ref="hf-datasets")
    if vs_hf:
        out("loaderx / Hugging Face datasets (" + ("torch's DataLoader over the dataset, shuffled, "
            f"{args.workers} worker processes" if any(c.get("torch") for c in cands if c["name"] == "hf-datasets")
            else "batched reads of shuffled indices in one process; torch is not installed")
            + f"; the data column read with with_format(\"numpy\", dtype={dtype.name}), the label as int64): "
            "batches/s above 1 means loaderx is faster, anon + shm below 1 means it uses less.")
        out()
        out(table(["pair", "batches/s", "anon + shm"],
                  [[f"{r['ours']} / hf-datasets", fmt_ratio(r["speed"]),
                    f"{r['anon_shm']:.2f}" if r["anon_shm"] is not None else "—"] for r in vs_hf]))
        out()
    results["loader"] = {"shape": list(shape), "dtype": dtype.name, "records": n, "batch": b,
                         "workers": args.workers, "transform": args.transform, "rows": rows,
                         "skipped": skipped, "errors": errors, "runs": args.loader_runs,
                         # per-run figures, paired by run for the checks' ratios
                         "per_run": {k: [x["bps"] for x in v] for k, v in per.items()},
                         "vs_original": vs_orig, "vs_torch": vs_torch, "vs_hf_datasets": vs_hf,
                         "defaults_codec_choice": defaults_choice}


def _original_ratios(rows: list[dict[str, Any]], per: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """loaderx / original for each loader pair measured in this run."""
    by = {r["loader"]: r for r in rows}
    res = []
    for ours, orig in (("loaderx", "original"), ("loaderx-raw", "original-raw")):
        a, b = by.get(ours), by.get(orig)
        if not a or not b:
            continue
        speed = median([x["bps"] / y["bps"] for x, y in zip(per[ours], per[orig])])
        res.append({"ours": ours, "original": orig, "speed": speed,
                    "anon_shm": b["peak_anon_shm"] / a["peak_anon_shm"] if a["peak_anon_shm"] else None,
                    "pss": b["peak_pss"] / a["peak_pss"] if a["peak_pss"] else None})
    return res


def _torch_ratios(rows: list[dict[str, Any]], per: dict[str, list[dict[str, Any]]],
                  ref: str = "torch") -> list[dict[str, Any]]:
    """loaderx / `ref` (torch, or another loader) for each loaderx loader measured in this run with it."""
    by = {r["loader"]: r for r in rows}
    t = by.get(ref)
    if not t:
        return []
    res = []
    for ours in ("loaderx", "loaderx-raw", "loaderx (defaults)", "loaderx-raw-thread"):
        a = by.get(ours)
        if not a:
            continue
        speed = median([x["bps"] / y["bps"] for x, y in zip(per[ours], per[ref])])
        res.append({"ours": ours, "speed": speed,
                    "anon_shm": a["peak_anon_shm"] / t["peak_anon_shm"] if t["peak_anon_shm"] else None})
    return res


#: token sequences in the ragged row unless --records is given
RAGGED_RECORDS = 20_000


def bench_ragged(args: argparse.Namespace, results: dict[str, Any], tmp: str) -> None:
    """The ragged loader row: packed batches of variable-length int32 token
    sequences, loaderx against torch's DataLoader packing in its collate_fn;
    fills results["ragged_loader"]."""
    n = args.records or RAGGED_RECORDS
    b = min(args.batch, n)
    out("### Ragged loader")
    out()
    out(f"Variable-length int32 token sequences ({n:,}, lengths {MIN_LEN}..{MAX_LEN} uniform), "
        f"batch {b}, {args.workers} workers, each batch packed into (values, offsets): loaderx's "
        "DataLoader over a ragged store (one native gather per batch) against torch's DataLoader "
        "(worker processes, shuffle) over the same tokens in memory-mapped .npy files, packing "
        f"in its collate_fn. Median of {args.loader_runs} runs, each {args.loader_measure:.0f}s "
        "after warm-up.")
    out()
    want = [c for c in RAGGED_LOADERS if selected(args.only, c.name)]
    skipped: list[str] = []
    ldir = os.path.join(tmp, "ragged")
    os.makedirs(ldir, exist_ok=True)
    tokens, offsets = make_tokens(n)
    token_bytes = tokens.nbytes / n
    cands: list[dict[str, Any]] = []
    cands += _prepared(want, skipped, "prepare_tokens", ldir, tokens, offsets)
    del tokens, offsets
    skip_lines(skipped)
    read_files_allocated(ldir)
    def ragged_result(res: dict[str, Any]) -> None:
        log(f"[ragged]   {res['bps']:.1f} batches/s, peak PSS {res['peak_pss'] / MiB:.0f} MiB")

    per, errors = _round_robin(args, "ragged", cands, {"ragged": True, "batch": b, "shape": [], "records": n},
                               ragged_result)
    rows = _summarize(per, cands, b, int(token_bytes))
    for name, err in errors.items():
        out(f"- {name} failed: " + err.replace("\n", " | ")[:400])
    if errors:
        out()
    if rows:
        out(table(["loader", "batches/s", "per batch", "sequences/s", "throughput", "peak PSS",
                   "anon + shm", "processes"],
                  [[r["loader"], f"{r['batches_per_s']:.1f}", f"{r['ms_per_batch']:.2f} ms",
                    f"{r['samples_per_s']:,.0f}", f"{r['mib_s']:,.0f} MiB/s",
                    f"{r['peak_pss'] / MiB:,.0f} MiB", f"{r['peak_anon_shm'] / MiB:,.0f} MiB",
                    r["procs"]] for r in rows]))
        out()
    ratios = []
    for ours in ("loaderx-ragged", "loaderx-ragged-raw"):
        if per.get(ours) and per.get("torch-ragged"):
            speed = median([x["bps"] / y["bps"] for x, y in zip(per[ours], per["torch-ragged"])])
            ratios.append({"ours": ours, "torch": "torch-ragged", "speed": speed})
    if ratios:
        out("loaderx / torch, batches/s (median of per-run ratios; above 1 means loaderx is faster):")
        out()
        out(table(["pair", "batches/s"], [[f"{x['ours']} / {x['torch']}", fmt_ratio(x["speed"])]
                                          for x in ratios]))
        out()
    results["ragged_loader"] = {"records": n, "batch": b, "workers": args.workers,
                                "lengths": [MIN_LEN, MAX_LEN], "rows": rows, "skipped": skipped,
                                "errors": errors, "vs_torch": ratios}


#: documents in the packing rows unless --records is given
PACK_DOCS = 20_000


def bench_packing(args: argparse.Namespace, results: dict[str, Any], tmp: str) -> None:
    """The packing rows: documents packed into (ROWS, PACK_LEN) rows with
    segment ids, loaderx concat and first_fit against Grain's first-fit
    packing and torch's DataLoader packing first-fit in its collate_fn;
    fills results["packing_loader"]. The figure is packed (non-padding)
    tokens per second; the padding and the dropped documents come from the
    rows each child checked against the documents before it was timed."""
    n = args.records or PACK_DOCS
    out("### Packing loader")
    out()
    out(f"{n:,} tokenised documents (int32 Zipf ids, lengths {DOC_MIN}..{DOC_MAX} uniform) packed into "
        f"{ROWS} rows of {PACK_LEN} tokens per batch with segment ids, {args.workers} workers: loaderx's "
        "DataLoader(pack=) over a ragged store in concat mode (no padding) and first_fit "
        f"({FIT_DOCS} documents per step; one that fits no row is dropped), Grain's "
        f"FirstFitPackIterDataset ({ROWS} bins, carrying what does not fit to the next batch) and "
        f"torch's DataLoader with a first-fit collate_fn ({FIT_DOCS} documents per batch, loaderx's "
        f"rule), both over memory-mapped .npy files. Each child checks {CHECK_BATCHES} batches "
        "against the documents (every segment holds a document's tokens) before it is timed. "
        f"Median of {args.loader_runs} runs, each {args.loader_measure:.0f}s after warm-up.")
    out()
    want = [c for c in PACK_LOADERS if selected(args.only, c.name)]
    skipped: list[str] = []
    ldir = os.path.join(tmp, "packing")
    os.makedirs(ldir, exist_ok=True)
    tokens, offsets = make_documents(n)
    npy = {"tokens": os.path.join(ldir, "tokens.npy"), "offsets": os.path.join(ldir, "offsets.npy")}
    np.save(npy["tokens"], tokens)
    np.save(npy["offsets"], offsets)
    cands = [{**c, **npy} for c in _prepared(want, skipped, "prepare_documents", ldir, npy, tokens, offsets)]
    del tokens, offsets
    skip_lines(skipped)
    read_files_allocated(ldir)
    def packing_result(res: dict[str, Any]) -> None:
        res["tokens_s"] = res["bps"] * ROWS * PACK_LEN * (1.0 - res["padding"])
        log(f"[packing]   {res['tokens_s'] / 1e6:.2f} M packed tokens/s, padding {res['padding']:.1%}")

    per, errors = _round_robin(args, "packing", cands,
                               {"packed": True, "batch": ROWS, "shape": [PACK_LEN], "records": n}, packing_result)
    rows = []
    for c in cands:
        rs = per[c["name"]]
        if not rs:
            continue
        first_fit = c["name"] != "loaderx-pack-concat" and c["name"] != "grain-pack-first-fit"
        rows.append({"loader": c["name"], "batches_per_s": median([x["bps"] for x in rs]),
                     "tokens_per_s": median([x["tokens_s"] for x in rs]),
                     "padding": median([x["padding"] for x in rs]),
                     "dropped": median([x["dropped"] for x in rs]) if first_fit else None,
                     "peak_pss": max(x["peak_pss"] for x in rs), "procs": max(x["procs"] for x in rs),
                     "workers": _workers_used(rs), "runs": rs})
    for name, err in errors.items():
        out(f"- {name} failed: " + err.replace("\n", " | ")[:400])
    if errors:
        out()
    if rows:
        out(table(["loader", "packed tokens/s", "batches/s", "padding", "documents dropped", "peak PSS",
                   "processes"],
                  [[r["loader"], f"{r['tokens_per_s'] / 1e6:,.2f} M", f"{r['batches_per_s']:.1f}",
                    f"{r['padding']:.1%}", "—" if r["dropped"] is None else f"{r['dropped']:.1%}",
                    f"{r['peak_pss'] / MiB:,.0f} MiB", r["procs"]] for r in rows]))
        out()
    ratios = []
    for ours in ("loaderx-pack-concat", "loaderx-pack-first-fit"):
        for theirs in ("grain-pack-first-fit", "torch-pack-first-fit"):
            if per.get(ours) and per.get(theirs):
                speed = median([x["tokens_s"] / y["tokens_s"] for x, y in zip(per[ours], per[theirs])])
                ratios.append({"ours": ours, "theirs": theirs, "speed": speed})
    if ratios:
        out("loaderx / others, packed tokens/s (median of per-run ratios; above 1 means loaderx is faster):")
        out()
        out(table(["pair", "packed tokens/s"], [[f"{x['ours']} / {x['theirs']}", fmt_ratio(x["speed"])]
                                                for x in ratios]))
        out()
    results["packing_loader"] = {"documents": n, "rows": ROWS, "length": PACK_LEN, "fit_documents": FIT_DOCS,
                                 "workers": args.workers, "lengths": [DOC_MIN, DOC_MAX], "table": rows,
                                 "skipped": skipped, "errors": errors, "ratios": ratios}
    if selected(args.only, "mixture") or selected(args.only, "loaderx-pack-concat"):
        bench_mixture_packing(args, results, tmp)
