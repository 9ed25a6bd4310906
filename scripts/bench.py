#!/usr/bin/env python3
"""Throughput of loaderx against the alternatives, in three layers.

    python3 scripts/bench.py {sampler|store|loader|all} [options]

sampler  index generation alone: numpy's two random APIs against zsampler.
store    batch gather from a record store: zrecord (raw / zstd / zstd+dict)
         against .npy memory maps, HDF5, Blosc2, TensorStore and ArrayRecord,
         with a memcpy of the same rows from RAM as the ceiling.
loader   the whole input pipeline (sample, fetch, collate, hand over a batch):
         loaderx against PyTorch's DataLoader and Grain, with the peak memory
         of each loader's whole process tree.

Every contender is driven through the binding a client actually uses, so the
foreign-call cost, the GIL and NumPy allocations are inside the timings. Each
figure is the median of several runs; contenders are measured round-robin
inside a run so that the load of a shared machine spreads over all of them,
and every ratio is taken between figures measured side by side in one run.
Gathers run on a warm page cache: every file is read and every record is
gathered once before timing.

Contenders that are not installed are skipped with a line saying so. The
optional ones install with:  pip install h5py blosc2 tensorstore array-record
grain torch matplotlib
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

MiB = 1 << 20
KiB = 1 << 10
SCRIPT = os.path.abspath(__file__)
REPO = os.path.dirname(os.path.dirname(SCRIPT))

DEFAULT_SHAPE = (512, 512)          # 256 KiB of uint8: one image record
SMALL_SHAPE = (64, 192)             # 12 KiB: the latency-bound case
DEFAULT_RECORDS = 2500              # ~625 MiB at 256 KiB, more than any cache here
SMALL_FACTOR = 8                    # 12 KiB run: 8x the records (20,000, ~234 MiB)
SAMPLER_SPACE = 1_000_000
SAMPLER_BATCHES = (256, 1024, 8192)


# --------------------------------------------------------------------------
# small helpers


def log(msg: str = "") -> None:
    print(msg, file=sys.stderr, flush=True)


def out(msg: str = "") -> None:
    print(msg, flush=True)


def median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def fmt_num(x, digits=0, unit=""):
    if x is None:
        return "n/a"
    return f"{x:,.{digits}f}{unit}"


def fmt_ratio(x):
    return "n/a" if x is None else f"{x:.2f}x"


def table(headers, rows, right=None):
    """Markdown table; columns listed in `right` are right-aligned."""
    right = set(range(1, len(headers))) if right is None else set(right)
    cells = [[str(c) for c in r] for r in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]

    def line(vals):
        parts = []
        for i, v in enumerate(vals):
            parts.append(v.rjust(widths[i]) if i in right else v.ljust(widths[i]))
        return "| " + " | ".join(parts) + " |"

    sep = "|" + "|".join(
        ("-" * (w + 1) + ":") if i in right else ("-" * (w + 2)) for i, w in enumerate(widths)
    ) + "|"
    return "\n".join([line(headers), sep] + [line(r) for r in cells])


def parse_shape(text: str):
    parts = [p for p in re.split(r"[x,×* ]+", text.strip()) if p]
    shape = tuple(int(p) for p in parts)
    if not shape or any(d <= 0 for d in shape):
        raise argparse.ArgumentTypeError(f"bad shape {text!r}")
    return shape


def shape_str(shape):
    return "x".join(str(d) for d in shape)


def human_bytes(n):
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit in ("B", "KiB") or n >= 100 else f"{n:.1f} {unit}"
        n /= 1024


def allocated_bytes(path: str) -> int:
    """Allocated blocks (st_blocks * 512) of a file or of every file under a dir."""
    if os.path.isfile(path):
        return os.stat(path).st_blocks * 512
    total = 0
    for root, _dirs, files in os.walk(path):
        for f in files:
            try:
                total += os.lstat(os.path.join(root, f)).st_blocks * 512
            except FileNotFoundError:
                pass
    return total


def apparent_bytes(path: str) -> int:
    """Sum of file sizes, not counting holes of sparse files."""
    paths = [path] if os.path.isfile(path) else [
        os.path.join(r, f) for r, _d, fs in os.walk(path) for f in fs]
    total = 0
    for p in paths:
        try:
            st = os.stat(p)
        except OSError:
            continue
        # a sparse file is charged at most its allocated blocks
        total += min(st.st_size, st.st_blocks * 512) if st.st_blocks * 512 < st.st_size else st.st_size
    return total


def read_files_allocated(path: str) -> int:
    """Read every allocated byte under `path` once, pulling it into the page
    cache; holes of sparse files are skipped (SEEK_DATA/SEEK_HOLE)."""
    paths = [path] if os.path.isfile(path) else [
        os.path.join(r, f) for r, _d, fs in os.walk(path) for f in fs]
    buf = bytearray(8 * MiB)
    mv = memoryview(buf)
    total = 0
    for p in paths:
        try:
            fd = os.open(p, os.O_RDONLY)
        except OSError:
            continue
        try:
            size = os.fstat(fd).st_size
            pos = 0
            while pos < size:
                try:
                    data = os.lseek(fd, pos, os.SEEK_DATA)
                    hole = os.lseek(fd, data, os.SEEK_HOLE)
                except OSError:
                    break
                off = data
                while off < hole:
                    n = os.preadv(fd, [mv[: min(len(buf), hole - off)]], off)
                    if n <= 0:
                        break
                    off += n
                    total += n
                pos = hole
        finally:
            os.close(fd)
    return total


# --------------------------------------------------------------------------
# machine block


def _read(path, default=None):
    try:
        with open(path) as fh:
            return fh.read().strip()
    except OSError:
        return default


def _lscpu():
    try:
        res = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10,
                             env={**os.environ, "LC_ALL": "C"})
        info = {}
        for line in res.stdout.splitlines():
            if ":" in line:
                k, v = line.split(":", 1)
                info[k.strip()] = v.strip()
        return info
    except (OSError, subprocess.SubprocessError):
        return {}


def _cgroup_memory_limit():
    """The memory limit of this process's cgroup, or None when unlimited."""
    try:
        lines = _read("/proc/self/cgroup", "").splitlines()
    except Exception:
        lines = []
    candidates = []
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _hid, ctrls, cpath = parts
        if ctrls == "":  # cgroup v2
            candidates.append(os.path.join("/sys/fs/cgroup", cpath.lstrip("/"), "memory.max"))
        elif "memory" in ctrls.split(","):
            candidates.append(os.path.join("/sys/fs/cgroup/memory", cpath.lstrip("/"),
                                           "memory.limit_in_bytes"))
    candidates += ["/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"]
    for c in candidates:
        v = _read(c)
        if v is None:
            continue
        if v == "max":
            return None
        try:
            n = int(v)
        except ValueError:
            continue
        return None if n >= (1 << 60) else n
    return None


def _cgroup_cpu_quota():
    v = _read("/sys/fs/cgroup/cpu.max")
    if v:
        q, p = (v.split() + ["100000"])[:2]
        if q != "max":
            return int(q) / int(p)
        return None
    q = _read("/sys/fs/cgroup/cpu/cpu.cfs_quota_us") or _read("/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us")
    p = _read("/sys/fs/cgroup/cpu/cpu.cfs_period_us") or _read("/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us")
    if q and p and int(q) > 0:
        return int(q) / int(p)
    return None


def _module_version(name, attr="__version__"):
    try:
        import importlib
        import importlib.metadata as md
        dist = {"array_record": "array-record", "grain": "grain"}.get(name, name)
        try:
            return md.version(dist)
        except md.PackageNotFoundError:
            mod = importlib.import_module(name)
            return getattr(mod, attr, "installed")
    except Exception:
        return None


def machine_info():
    info = {}
    cpu = _lscpu()
    model = cpu.get("Model name") or platform.processor() or "unknown"
    sockets = cpu.get("Socket(s)", "?")
    cores_per = cpu.get("Core(s) per socket")
    tpc = cpu.get("Thread(s) per core")
    threads = os.cpu_count()
    try:
        cores = int(cores_per) * int(sockets)
    except (TypeError, ValueError):
        cores = "?"
    info["CPU"] = f"{model}, {sockets} socket(s), {cores} cores / {threads} threads"
    if tpc:
        info["CPU"] += f" ({tpc} thread(s) per core)"
    if cpu.get("Hypervisor vendor"):
        info["CPU"] += f", {cpu['Hypervisor vendor']} guest"
    fmin, fmax = cpu.get("CPU min MHz"), cpu.get("CPU max MHz")
    if fmax:
        info["frequency"] = f"{float(fmin or 0):.0f}–{float(fmax):.0f} MHz"
    else:
        mhz = None
        for line in (_read("/proc/cpuinfo", "") or "").splitlines():
            if line.startswith("cpu MHz"):
                mhz = line.split(":", 1)[1].strip()
                break
        info["frequency"] = f"{float(mhz):.0f} MHz (nominal; no cpufreq)" if mhz else "unknown"
    caches = [f"{k.replace(' cache', '')} {cpu[k]}" for k in
              ("L1d cache", "L1i cache", "L2 cache", "L3 cache") if cpu.get(k)]
    info["caches"] = ", ".join(caches) if caches else "unknown"
    info["NUMA"] = f"{cpu.get('NUMA node(s)', '?')} node(s)"
    try:
        aff = len(os.sched_getaffinity(0))
    except AttributeError:
        aff = threads
    quota = _cgroup_cpu_quota()
    info["CPU affinity / quota"] = f"{aff} usable CPUs, " + (
        f"cgroup quota {quota:.2f} CPUs" if quota else "no cgroup CPU quota")
    thp = _read("/sys/kernel/mm/transparent_hugepage/enabled")
    thp_d = _read("/sys/kernel/mm/transparent_hugepage/defrag")
    if thp:
        pick = lambda v: (re.search(r"\[(\w[\w+]*)\]", v or "") or [None, v])[1]  # noqa: E731
        info["transparent hugepages"] = f"enabled={pick(thp)}, defrag={pick(thp_d)}"
    mem_total = None
    for line in (_read("/proc/meminfo", "") or "").splitlines():
        if line.startswith("MemTotal:"):
            mem_total = int(line.split()[1]) * 1024
    lim = _cgroup_memory_limit()
    info["memory"] = (human_bytes(mem_total) if mem_total else "unknown") + (
        f" ({human_bytes(lim)} cgroup limit)" if lim else " (no cgroup memory limit)")
    osname = None
    for line in (_read("/etc/os-release", "") or "").splitlines():
        if line.startswith("PRETTY_NAME="):
            osname = line.split("=", 1)[1].strip().strip('"')
    info["OS"] = f"{osname or platform.system()}, kernel {platform.release()}"
    gil = ""
    if hasattr(sys, "_is_gil_enabled"):
        gil = ", GIL " + ("enabled" if sys._is_gil_enabled() else "disabled")
    info["python"] = (f"{platform.python_implementation()} {platform.python_version()}{gil}, "
                      f"numpy {np.__version__}")
    try:
        res = subprocess.run(["go", "version"], capture_output=True, text=True, timeout=20)
        info["go"] = res.stdout.strip().replace("go version ", "") or "not found"
    except (OSError, subprocess.SubprocessError):
        info["go"] = "not found on PATH"
    lx = loaderx_status()
    info["loaderx"] = lx
    vers = []
    for name in ("h5py", "blosc2", "tensorstore", "array_record", "torch", "grain", "matplotlib"):
        v = _module_version(name)
        vers.append(f"{name} {v}" if v else f"{name} -")
    info["contenders"] = ", ".join(vers)
    pat = re.compile(r"(OPENBLAS|BLAS|OMP_|MKL|GOMAXPROCS|GOGC|GODEBUG|GOMEMLIMIT|LOADERX|"
                     r"MALLOC|NUMEXPR|BLOSC|TENSORSTORE)", re.I)
    env = [f"{k}={v}" for k, v in sorted(os.environ.items()) if pat.search(k)]
    info["environment"] = "; ".join(env) if env else "no BLAS/OpenMP/Go tuning variables set"
    try:
        info["load average"] = " ".join(f"{x:.2f}" for x in os.getloadavg()) + " (1/5/15 min, at start)"
    except OSError:
        pass
    return info


def print_machine(info):
    out("## Machine")
    out()
    out(table(["machine", "value"], [[k, v] for k, v in info.items()], right=()))
    out()


# --------------------------------------------------------------------------
# loaderx discovery (the library may be absent or half-built)


_LX = {"checked": False, "ok": False, "why": ""}


def loaderx_status():
    if not _LX["checked"]:
        _LX["checked"] = True
        if REPO not in sys.path:
            sys.path.insert(0, REPO)
        try:
            import loaderx  # noqa: F401
            import loaderx.dataset  # noqa: F401
            _LX["ok"] = True
            ver = getattr(loaderx, "__version__", "dev")
            _LX["why"] = f"{ver} from {os.path.dirname(loaderx.__file__)}"
        except Exception as e:  # ImportError, OSError from dlopen, ...
            _LX["why"] = f"not importable ({type(e).__name__}: {str(e).splitlines()[0][:120]})"
    return _LX["why"]


def have_loaderx():
    loaderx_status()
    return _LX["ok"]


def store_threads(args):
    """Threads the zrecord gather fans out to (the threaded memcpy row uses the same)."""
    if have_loaderx():
        import loaderx
        if args.threads:
            loaderx.set_num_threads(args.threads)
        for getter in ("get_num_threads", "num_threads"):
            f = getattr(loaderx, getter, None)
            if callable(f):
                try:
                    return int(f())
                except Exception:
                    pass
    if args.threads:
        return args.threads
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def try_import(name):
    try:
        __import__(name)
        return True, ""
    except Exception as e:
        return False, f"{type(e).__name__}: {str(e).splitlines()[0][:100] if str(e) else ''}"


def installed(name):
    """Whether a top-level module can be found, without importing it."""
    import importlib.util
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


# --------------------------------------------------------------------------
# data: smooth gradients plus noise, so zstd finds ~1.15-1.25x, like photos


def make_data(n, shape, dtype, seed=0):
    rng = np.random.default_rng(seed)
    if len(shape) >= 2:
        h, w = shape[0], int(np.prod(shape[1:]))
    else:
        h, w = 1, int(np.prod(shape))
    spread, noise, nbase = 128, 32, 32
    yy = np.linspace(0, 1, h, dtype=np.float32)[:, None]
    xx = np.linspace(0, 1, w, dtype=np.float32)[None, :]
    bases = np.empty((nbase, h, w), np.uint8)
    for k in range(nbase):
        a, b, c = rng.uniform(-1, 1, 3).astype(np.float32)
        g = a * xx + b * yy + c * xx * yy
        g = (g - g.min()) / max(float(np.ptp(g)), 1e-3)
        bases[k] = (spread * g).astype(np.uint8)
    raw = np.empty((n, h, w), np.uint8)
    step = max(1, (16 * MiB) // (h * w))
    tmp = np.empty((step, h, w), np.uint8)
    for s in range(0, n, step):
        e = min(n, s + step)
        m = e - s
        blk = raw[s:e]
        np.take(bases, rng.integers(0, nbase, m), axis=0, out=blk, mode="clip")
        blk += rng.integers(0, 256 - spread - noise, m, dtype=np.uint8)[:, None, None]
        nz = np.frombuffer(rng.bytes(m * h * w), np.uint8).reshape(m, h, w)
        np.bitwise_and(nz, noise - 1, out=tmp[:m])
        blk += tmp[:m]
    raw = raw.reshape((n,) + tuple(shape))
    dt = np.dtype(dtype)
    if dt == np.uint8:
        return raw
    return raw.astype(dt)


# --------------------------------------------------------------------------
# 1. sampler


def bench_sampler(args, results):
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
    cands = []

    def mk_randint(b):
        f = np.random.randint

        def loop(iters):
            for _ in range(iters):
                f(0, n, b)
        return loop

    def mk_default_rng(b):
        rng = np.random.default_rng(0)
        f = rng.integers

        def loop(iters):
            for _ in range(iters):
                f(0, n, b)
        return loop

    cands.append(("numpy randint", mk_randint))
    cands.append(("numpy default_rng", mk_default_rng))
    skipped = []
    if have_loaderx():
        try:
            from loaderx import sampler as zs
            _o = np.empty(256, np.int64)
            zs.sample("iid", n, 256, 0, seed=0, out=_o)
            assert int(_o.min()) >= 0 and int(_o.max()) < n

            def mk_zs(mode):
                def mk(b):
                    buf = np.empty(b, np.int64)
                    f = zs.sample
                    state = {"step": 0}

                    def loop(iters):
                        s0 = state["step"]
                        for s in range(s0, s0 + iters):
                            f(mode, n, b, s, seed=0, out=buf)
                        state["step"] = s0 + iters
                    return loop
                return mk
            cands.append(("zsampler iid", mk_zs("iid")))
            if hasattr(zs, "Sampler"):
                def mk_obj(b):
                    buf = np.empty(b, np.int64)
                    f = zs.Sampler("iid", n, b, seed=0)
                    state = {"step": 0}

                    def loop(iters):
                        s0 = state["step"]
                        for s in range(s0, s0 + iters):
                            f(s, out=buf)
                        state["step"] = s0 + iters
                    return loop
                cands.append(("zsampler iid, Sampler()", mk_obj))
            cands.append(("zsampler cyclic", mk_zs("cyclic")))
        except Exception as e:
            skipped.append(f"zsampler: loaderx.sampler failed: {type(e).__name__}: {e}")
    else:
        skipped.append(f"zsampler: loaderx {loaderx_status()}")
    cands = [c for c in cands if selected(args, c[0]) or c[0] == "numpy default_rng"]

    rows = []
    loop_s = args.sampler_loop_ms / 1000
    for b in SAMPLER_BATCHES:
        loops = {name: mk(b) for name, mk in cands}
        iters = {}
        for name, loop in loops.items():  # calibrate iterations to the loop time
            k = 16
            while True:
                t0 = time.perf_counter()
                loop(k)
                dt = time.perf_counter() - t0
                if dt >= loop_s / 4 or k > 1 << 22:
                    break
                k *= 4
            iters[name] = max(16, int(k * loop_s / max(dt, 1e-9)))
        per = {name: [] for name in loops}
        for r in range(args.sampler_runs):
            order = list(loops)
            order = order[r % len(order):] + order[: r % len(order)]
            for name in order:
                gc.collect()
                t0 = time.perf_counter()
                loops[name](iters[name])
                per[name].append((time.perf_counter() - t0) / iters[name])
        base = per.get("numpy default_rng")
        for name in loops:
            us = median(per[name]) * 1e6
            ratio = median([bb / x for bb, x in zip(base, per[name])]) if base else None
            rows.append({"sampler": name, "batch": b, "us_per_batch": us,
                         "indices_per_s": b / (us / 1e6), "vs_default_rng": ratio,
                         "runs_us": [x * 1e6 for x in per[name]], "iters": iters[name]})
    for s in skipped:
        out(f"- skipped {s}")
    if skipped:
        out()
    out(table(["sampler", "batch", "per batch", "indices/s", "vs default_rng"],
              [[r["sampler"], r["batch"], f"{r['us_per_batch']:.2f} µs",
                f"{r['indices_per_s'] / 1e6:,.0f} M/s", fmt_ratio(r["vs_default_rng"])]
               for r in rows]))
    out()
    results["sampler"] = {"space": n, "runs": args.sampler_runs, "rows": rows, "skipped": skipped}


KNOWN_NAMES = {"numpy randint", "numpy default_rng", "zsampler iid", "zsampler iid, Sampler()",
               "zsampler cyclic", "loaderx", "loaderx-raw", "torch", "grain"}


def selected(args, name):
    """--only takes exact names, or a family prefix such as `zrecord` or `zsampler`."""
    if not args.only:
        return True
    known = KNOWN_NAMES | {c.name for c in STORES}
    for o in args.only:
        if o == name or o.replace("-", " ") == name:
            return True
        if o not in known and (name.startswith(o + "-") or name.startswith(o + " ")):
            return True
    return False


# --------------------------------------------------------------------------
# 2. store contenders
#
# Each contender writes the same in-memory array, then answers two reads:
# gather(idx) for sorted random indices and window(start, stop) for a
# consecutive run. Where the library can fill a caller's buffer, that path
# is the one timed (`allocates` says which do not).


class Store:
    name = ""
    module = None          # import needed, for the skip line
    pip = None
    allocates = "no"
    how = ""               # read path, for the notes
    shares = None          # reads the files another contender wrote

    def __init__(self, path, shape, dtype, threads):
        self.path = path
        self.shape = tuple(shape)
        self.dtype = np.dtype(dtype)
        self.threads = threads

    @classmethod
    def available(cls):
        if cls.module is None:
            return True, ""
        ok, why = try_import(cls.module)
        return ok, why

    def write(self, arr):
        raise NotImplementedError

    def open(self):
        pass

    def gather(self, idx, buf):
        raise NotImplementedError

    def window(self, start, stop, buf):
        return self.gather(np.arange(start, stop, dtype=np.int64), buf)

    def close(self):
        pass

    def disk_path(self):
        return self.path


class ZrecordStore(Store):
    codec = "raw"
    allocates = "no"
    how = "DenseDataset.gather(idx, out=buf): one native call per batch"

    @classmethod
    def available(cls):
        if not have_loaderx():
            return False, f"loaderx {loaderx_status()}"
        return True, ""

    def write(self, arr):
        from loaderx.converter import from_numpy
        from_numpy(self.path, arr, codec=self.codec)

    def open(self):
        from loaderx.dataset import DenseDataset
        self.ds = DenseDataset(self.path)
        assert len(self.ds) > 0

    def gather(self, idx, buf):
        self.ds.gather(idx, out=buf)
        return buf

    def close(self):
        ds = getattr(self, "ds", None)
        if ds is not None:
            ds.close()
            self.ds = None


class ZrecordRaw(ZrecordStore):
    name = "zrecord-raw"
    codec = "raw"


class ZrecordZstd(ZrecordStore):
    name = "zrecord-zstd"
    codec = "zstd"


class ZrecordZstdict(ZrecordStore):
    name = "zrecord-zstdict"
    codec = "zstd_dict"


class NpyMmap(Store):
    name = "npy-mmap"
    allocates = "no"
    how = "np.take(mm, idx, axis=0, out=buf, mode='clip') (mode='raise' buffers the output)"

    def write(self, arr):
        np.save(self.path, arr)

    def open(self):
        self.mm = np.load(self.path, mmap_mode="r")

    def gather(self, idx, buf):
        np.take(self.mm, idx, axis=0, out=buf, mode="clip")
        return buf

    def window(self, start, stop, buf):
        np.copyto(buf, self.mm[start:stop])
        return buf

    def close(self):
        mm = getattr(self, "mm", None)
        if mm is not None:
            mm._mmap.close() if getattr(mm, "_mmap", None) is not None else None
            self.mm = None


class NpyMmapFancy(NpyMmap):
    """The same file read the way most code is written: mm[idx] and mm[a:b]."""
    name = "npy-mmap-fancy"
    shares = "npy-mmap"
    allocates = "yes (mm[idx] returns a new array)"
    how = "mm[idx] / mm[a:b].copy(): plain fancy indexing, a new array per batch"

    def gather(self, idx, buf):
        return self.mm[idx]

    def window(self, start, stop, buf):
        return self.mm[start:stop].copy()


class Hdf5(Store):
    name = "hdf5"
    module = "h5py"
    pip = "h5py"
    allocates = "no"
    how = ("h5py, one chunk per record, no filter: Dataset.id.read_direct_chunk into each "
           "row of buf (faster here than dset[idx], read_direct or per-record dset[i])")
    compression = None

    def write(self, arr):
        import h5py
        with h5py.File(self.path, "w") as f:
            d = f.create_dataset("data", shape=arr.shape, dtype=arr.dtype,
                                 chunks=(1,) + arr.shape[1:], compression=self.compression)
            step = max(1, (64 * MiB) // max(1, arr[0].nbytes))
            for s in range(0, len(arr), step):
                d[s:s + step] = arr[s:s + step]

    def open(self):
        import h5py
        self.f = h5py.File(self.path, "r")
        self.d = self.f["data"]
        self.zero = (0,) * (len(self.shape))

    def gather(self, idx, buf):
        flat = buf.reshape(len(buf), -1).view(np.uint8)
        rdc = self.d.id.read_direct_chunk
        z = self.zero
        for k, j in enumerate(idx.tolist()):
            rdc((j,) + z, out=flat[k])
        return buf

    def window(self, start, stop, buf):
        self.d.read_direct(buf, np.s_[start:stop])
        return buf

    def close(self):
        f = getattr(self, "f", None)
        if f is not None:
            f.close()
            self.f = None


class Hdf5Gzip(Hdf5):
    name = "hdf5-gzip"
    compression = "gzip"
    how = ("h5py gzip (level 4, h5py's default), one chunk per record: low-level "
           "Dataset.id.read of each record into a row of buf (through the filter pipeline)")

    def open(self):
        super().open()
        import h5py
        self.fspace = self.d.id.get_space()
        self.mspace = h5py.h5s.create_simple((1,) + self.shape)
        self.tail = (0,) * len(self.shape)
        self.count = (1,) + self.shape

    def gather(self, idx, buf):
        fs, ms, rd = self.fspace, self.mspace, self.d.id.read
        tail, count = self.tail, self.count
        for k, j in enumerate(idx.tolist()):
            fs.select_hyperslab((j,) + tail, count)
            rd(ms, fs, buf[k:k + 1])
        return buf


class Blosc2(Store):
    name = "blosc2"
    module = "blosc2"
    pip = "blosc2"
    allocates = "no"
    how = ("blosc2.asarray with default cparams (zstd, shuffle), one chunk per record: "
           "SChunk.decompress_chunk(i, dst=row of buf)")

    def write(self, arr):
        import blosc2
        a = blosc2.asarray(arr, chunks=(1,) + arr.shape[1:], urlpath=self.path, mode="w")
        del a

    def open(self):
        import blosc2
        self.a = blosc2.open(self.path)
        self.sc = self.a.schunk

    def gather(self, idx, buf):
        dec = self.sc.decompress_chunk
        for k, j in enumerate(idx.tolist()):
            dec(j, buf[k])
        return buf

    def close(self):
        self.a = self.sc = None


class TensorStore(Store):
    name = "tensorstore"
    module = "tensorstore"
    pip = "tensorstore"
    allocates = "yes (read() returns a new array)"
    how = ("zarr3, chunk = one record, zstd level 3, no cache: "
           "store[idx].read() for random, store[a:b].read() for windows")

    def _spec(self, create, arr=None):
        spec = {"driver": "zarr3", "kvstore": {"driver": "file", "path": self.path}}
        if create:
            spec["metadata"] = {
                "shape": list(arr.shape), "data_type": arr.dtype.name,
                "chunk_grid": {"name": "regular",
                               "configuration": {"chunk_shape": [1] + list(arr.shape[1:])}},
                "codecs": [{"name": "bytes", "configuration": {"endian": "little"}},
                           {"name": "zstd", "configuration": {"level": 3}}]}
            spec["create"] = True
            spec["delete_existing"] = True
        return spec

    def write(self, arr):
        import tensorstore as ts
        t = ts.open(self._spec(True, arr)).result()
        t.write(arr).result()
        del t

    def open(self):
        import tensorstore as ts
        ctx = ts.Context({"cache_pool": {"total_bytes_limit": 0}})
        self.t = ts.open(self._spec(False), context=ctx).result()

    def gather(self, idx, buf):
        return self.t[idx].read().result()

    def window(self, start, stop, buf):
        return self.t[start:stop].read().result()

    def close(self):
        self.t = None


class ArrayRecord(Store):
    name = "arrayrecord"
    module = "array_record.python.array_record_module"
    pip = "array-record"
    allocates = "yes (bytes per record, copied into buf)"
    how = ("ArrayRecordWriter 'group_size:1' (default zstd:3); "
           "ArrayRecordReader('readahead_buffer_size:0').read(indices), np.frombuffer copied into buf")

    def write(self, arr):
        from array_record.python import array_record_module as arm
        w = arm.ArrayRecordWriter(self.path, "group_size:1")
        for x in arr:
            w.write(x.tobytes())
        w.close()

    def open(self):
        from array_record.python import array_record_module as arm
        self.r = arm.ArrayRecordReader(self.path, "readahead_buffer_size:0")

    def gather(self, idx, buf):
        recs = self.r.read(idx.tolist())
        flat = buf.reshape(len(buf), -1).view(np.uint8)
        for k, b in enumerate(recs):
            flat[k] = np.frombuffer(b, np.uint8)
        return buf

    def window(self, start, stop, buf):
        return self.gather(np.arange(start, stop, dtype=np.int64), buf)

    def close(self):
        r = getattr(self, "r", None)
        if r is not None:
            r.close()
            self.r = None


COMPRESSING = {"zrecord-zstd", "zrecord-zstdict", "hdf5-gzip", "blosc2", "tensorstore",
               "arrayrecord"}

STORES = [ZrecordRaw, ZrecordZstd, ZrecordZstdict, NpyMmap, NpyMmapFancy, Hdf5, Hdf5Gzip, Blosc2,
          TensorStore, ArrayRecord]


class Memcpy:
    """The same rows copied from the in-memory source: the ceiling."""

    def __init__(self, src, threads):
        self.src = src
        self.threads = max(1, threads)
        self.pool = ThreadPoolExecutor(self.threads) if self.threads > 1 else None
        self.name = "memcpy" if self.threads == 1 else f"memcpy ×{self.threads}"

    def gather(self, idx, buf):
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

    def window(self, start, stop, buf):
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

    def close(self):
        if self.pool is not None:
            self.pool.shutdown()


def timed_batches(fn, batches, buf, budget_s, max_batches):
    """Run fn over batches until the time budget is spent; returns per-batch seconds."""
    times = []
    total = 0.0
    for args in batches[:max_batches]:
        t0 = time.perf_counter()
        fn(*args, buf)
        dt = time.perf_counter() - t0
        times.append(dt)
        total += dt
        if total >= budget_s:
            break
    return times


def bench_store_shape(args, shape, n, results, tmp, threads):
    dtype = np.dtype(args.dtype)
    rec_bytes = int(np.prod(shape)) * dtype.itemsize
    b = min(args.batch, n)
    batch_bytes = b * rec_bytes
    title = (f"{human_bytes(rec_bytes)} records ({shape_str(shape)} {dtype.name}), {n:,} records "
             f"({human_bytes(n * rec_bytes)}), batch {b} ({human_bytes(batch_bytes)})")
    out(f"### {title}")
    out()
    log(f"[store {shape_str(shape)}] generating {n:,} records ...")
    t0 = time.perf_counter()
    src = make_data(n, shape, dtype, seed=1)
    log(f"[store {shape_str(shape)}] generated {human_bytes(src.nbytes)} in {time.perf_counter() - t0:.1f}s")
    logical = src.nbytes
    sdir = os.path.join(tmp, f"store-{shape_str(shape)}")
    os.makedirs(sdir, exist_ok=True)

    skipped = []
    stores = []
    rows = {}
    for cls in STORES:
        if not selected(args, cls.name):
            continue
        ok, why = cls.available()
        if not ok:
            hint = f" (pip install {cls.pip})" if cls.pip else ""
            skipped.append(f"{cls.name}: not installed{hint}" if cls.module and "No module" in why
                           else f"{cls.name}: {why}")
            continue
        ext = {"npy-mmap": ".npy", "hdf5": ".h5", "hdf5-gzip": ".h5", "blosc2": ".b2nd",
               "arrayrecord": ".array_record"}.get(cls.shares or cls.name, "")
        owner = next((x for x in stores if x.name == cls.shares), None) if cls.shares else None
        st = cls(os.path.join(sdir, (cls.shares or cls.name) + ext), shape, dtype, threads)
        try:
            if owner is None:
                if cls.shares:  # the writer was not selected: write the files here
                    st.path = os.path.join(sdir, cls.name + ext)
                log(f"[store {shape_str(shape)}] writing {cls.name} ...")
                gc.collect()
                t0 = time.perf_counter()
                st.write(src)
                wt = time.perf_counter() - t0
            else:
                wt = rows[owner.name]["write_s"]
            st.open()
        except Exception as e:
            skipped.append(f"{cls.name}: write/open failed: {type(e).__name__}: {str(e)[:200]}")
            try:
                st.close()
            except Exception:
                pass
            continue
        disk = allocated_bytes(st.disk_path())
        apparent = apparent_bytes(st.disk_path())
        rows[st.name] = {"store": st.name, "write_mib_s": logical / wt / MiB, "write_s": wt,
                         "disk_bytes": disk, "ratio": logical / disk if disk else None,
                         "apparent_bytes": apparent,
                         "apparent_ratio": logical / apparent if apparent else None,
                         "allocates": st.allocates, "how": st.how,
                         "shares": cls.shares if owner is not None else None}
        log(f"[store {shape_str(shape)}]   {cls.name}: {logical / wt / MiB:.0f} MiB/s, "
            f"{human_bytes(disk)} on disk")
        stores.append(st)

    buf = np.empty((b,) + tuple(shape), dtype)
    mem1 = Memcpy(src, 1)
    memN = Memcpy(src, threads)
    refs = [mem1] + ([memN] if threads > 1 else [])

    # warm: every file read once, then every record through the store itself
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
        # correctness: one random batch against the source
        idx = np.sort(rng.choice(n, b, replace=False)).astype(np.int64)
        buf.fill(0)
        got = st.gather(idx, buf)
        if not np.array_equal(np.asarray(got).reshape(buf.shape), src[idx]):
            rows[st.name]["mismatch"] = True
            log(f"[store {shape_str(shape)}] WARNING: {st.name} returned wrong data")
    for ref in refs:  # fault in the buffer / source once
        ref.gather(np.arange(b, dtype=np.int64), buf)

    # Timed rounds. Within a round every contender gets a short time slice of
    # random batches, then one of sequential windows, in rotating order, so a
    # burst of load from elsewhere on the machine lands on all of them alike.
    runs = args.store_runs
    contenders = refs + stores
    per = {c.name: {"rnd": [], "seq": [], "rnd_batch": []} for c in contenders}
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
            t = timed_batches(c.gather, rnd, buf, args.store_slice, pool)
            per[c.name]["rnd"].append(len(t) * batch_bytes / sum(t) / MiB)
            per[c.name]["rnd_batch"].append(statistics.median(t))
            t = timed_batches(c.window, seq, buf, args.store_slice, pool)
            per[c.name]["seq"].append(len(t) * batch_bytes / sum(t) / MiB)

    ceiling = memN.name if threads > 1 else mem1.name
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

    for s in skipped:
        out(f"- skipped {s}")
    if skipped:
        out()
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
        if r["store"] not in COMPRESSING or not r.get("ratio"):
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
    shutil.rmtree(sdir, ignore_errors=True)
    del src
    gc.collect()
    return {"shape": list(shape), "dtype": dtype.name, "records": n, "record_bytes": rec_bytes,
            "batch": b, "threads": threads, "ceiling": ceiling, "rows": out_rows,
            "skipped": skipped, "warm_capped": warm_notes, "runs": runs}


def bench_store(args, results, tmp):
    threads = store_threads(args)
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
        "rather than the caller's buffer.")
    out()
    shapes = [tuple(args.shape)] if args.shape else [DEFAULT_SHAPE, SMALL_SHAPE]
    n0 = args.records or DEFAULT_RECORDS
    res = []
    for i, shp in enumerate(shapes):
        # the small shape gets SMALL_FACTOR times the records (20,000 at the defaults)
        n = n0 if i == 0 else n0 * SMALL_FACTOR
        res.append(bench_store_shape(args, shp, n, results, tmp, threads))
    hows = {}
    for sres in res:
        for r in sres["rows"]:
            hows.setdefault(r["store"], r["how"])
    out("Read paths timed:")
    out()
    for k, v in hows.items():
        out(f"- {k}: {v}")
    out()
    results["store"] = res


# --------------------------------------------------------------------------
# 3. loader
#
# Each loader runs in a fresh interpreter (`_loader-child`), so one loader's
# imports and worker processes never sit in another's memory figure. The
# parent samples the child's whole process tree from outside.


def augment_sample(x, out=None):
    """A per-sample Python-side augmentation: horizontal flip and intensity scale."""
    return np.floor_divide(x[..., ::-1], 2, out=out)


def augment_batch(batch):
    data = batch["data"]
    res = np.empty_like(data)
    for i in range(len(data)):
        augment_sample(data[i], out=res[i])
    return {"data": res, "label": batch["label"]}


class NpyPairDataset:
    """Map-style dataset for torch's DataLoader: per-sample arrays from .npy maps."""

    def __init__(self, data_path, label_path, n, augment):
        self.data_path, self.label_path, self.n, self.augment = data_path, label_path, n, augment
        self.data = self.label = None

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if self.data is None:  # opened lazily, inside each worker
            self.data = np.load(self.data_path, mmap_mode="r")
            self.label = np.load(self.label_path, mmap_mode="r")
        x = self.data[i]
        if self.augment:
            x = augment_sample(x)
        return x, self.label[i]


GRAIN_ENV = "LOADERX_BENCH_GRAIN_CHILD"
if os.environ.get(GRAIN_ENV) == "1":
    # Grain's operations must be module-level classes its spawned workers can
    # import; only the Grain child defines them, so no other loader pays for
    # importing Grain.
    import grain.python as _gp

    class GrainParse(_gp.MapTransform):
        def __init__(self, shape, dtype, augment):
            self.shape, self.dtype, self.augment = tuple(shape), np.dtype(dtype), augment

        def map(self, rec):
            a = np.frombuffer(rec, np.uint8)
            x = a[:-8].view(self.dtype).reshape(self.shape)
            if self.augment:
                x = augment_sample(x)
            return {"data": x, "label": a[-8:].view(np.int64)[0]}


def loader_child(cfg):
    """Run one loader for a while and print its throughput as JSON."""
    import warnings
    warnings.filterwarnings("ignore")
    name = cfg["name"]
    b = cfg["batch"]
    w = cfg["workers"]
    aug = cfg["transform"] == "augment"
    shape = tuple(cfg["shape"])
    if name.startswith("loaderx"):
        if REPO not in sys.path:
            sys.path.insert(0, REPO)
        import loaderx
        from loaderx.dataloader import DataLoader
        from loaderx.dataset import DenseDataset
        if cfg.get("threads"):
            loaderx.set_num_threads(cfg["threads"])
        data = DenseDataset(cfg["data"])
        label = DenseDataset(cfg["label"])
        dl = DataLoader({"data": data, "label": label}, batch_size=b,
                        transform=augment_batch if aug else None, num_workers=w,
                        sampler="cyclic", seed=0)
        it = iter(dl)

        def get():
            bt = next(it)
            return bt["data"]

        def close():
            dl.close()
            data.close()
            label.close()
    elif name == "torch":
        import torch
        from torch.utils.data import DataLoader as TorchLoader
        ds = NpyPairDataset(cfg["data"], cfg["label"], cfg["records"], aug)
        g = torch.Generator()
        g.manual_seed(0)
        dl = TorchLoader(ds, batch_size=b, shuffle=True, num_workers=w, drop_last=True,
                         persistent_workers=w > 0, generator=g)

        def endless():
            while True:
                for bt in dl:
                    yield bt
        it = endless()

        def get():
            x, _y = next(it)
            return x

        def close():
            it.close()  # ends the epoch iterator, which shuts its workers down
            gc.collect()
    elif name == "grain":
        import grain.python as gp
        src = gp.ArrayRecordDataSource(cfg["data"])
        sampler = gp.IndexSampler(num_records=len(src), shuffle=True, seed=0, num_epochs=None,
                                  shard_options=gp.NoSharding())
        dl = gp.DataLoader(data_source=src, sampler=sampler,
                           operations=[GrainParse(shape, cfg["dtype"], aug),
                                       gp.Batch(b, drop_remainder=True)],
                           worker_count=w)
        holder = {"it": iter(dl)}

        def get():
            return next(holder["it"])["data"]

        def close():
            # dropping the iterator stops the workers and frees their shared
            # memory; a killed tree would leave its segments in /dev/shm
            holder.clear()
            gc.collect()
    else:
        raise SystemExit(f"unknown loader {name}")

    x = get()
    assert tuple(x.shape) == (b,) + shape, (tuple(x.shape), (b,) + shape)
    print("FLOW", flush=True)
    t0 = time.perf_counter()
    k = 0
    while k < 2 or time.perf_counter() - t0 < cfg["warmup_s"]:
        get()
        k += 1
    t0 = time.perf_counter()
    k = 0
    while k < 3 or time.perf_counter() - t0 < cfg["measure_s"]:
        get()
        k += 1
    dt = time.perf_counter() - t0
    print("RESULT " + json.dumps({"batches": k, "seconds": dt}), flush=True)
    del x
    close()  # a clean shutdown lets the workers release their shared memory


class TreeMemory:
    """Samples RSS (and PSS) summed over a process and all its descendants."""

    PAGE = os.sysconf("SC_PAGE_SIZE")

    def __init__(self, root_pid, interval=0.05, pss_every=4):
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

    def start(self):
        self._t.start()

    def stop(self):
        self._stop.set()
        self._t.join(timeout=2)

    @staticmethod
    def _shmem():
        for line in (_read("/proc/meminfo", "") or "").splitlines():
            if line.startswith("Shmem:"):
                return int(line.split()[1]) * 1024
        return 0

    def _children(self, pid):
        kids = []
        try:
            for tid in os.listdir(f"/proc/{pid}/task"):
                s = _read(f"/proc/{pid}/task/{tid}/children", "")
                if s:
                    kids += [int(x) for x in s.split()]
        except OSError:
            pass
        return kids

    def _tree(self):
        pids, todo = [], [self.root]
        while todo:
            p = todo.pop()
            pids.append(p)
            todo += self._children(p)
        return pids

    def _run(self):
        k = 0
        while not self._stop.is_set():
            if self.active:
                pids = self._tree()
                rss = 0
                for p in pids:
                    s = _read(f"/proc/{p}/statm")
                    if s:
                        rss += int(s.split()[1]) * self.PAGE
                self.peak_rss = max(self.peak_rss, rss)
                self.peak_procs = max(self.peak_procs, len(pids))
                if k % self.pss_every == 0:
                    pss = anon = 0
                    for p in pids:
                        s = _read(f"/proc/{p}/smaps_rollup", "") or ""
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
                k += 1
            self._stop.wait(self.interval)


SHM_DIR = "/dev/shm"
SHM_PREFIXES = ("psm_", "sem.mp-", "torch_")


def _shm_entries():
    try:
        return set(os.listdir(SHM_DIR))
    except OSError:
        return set()


def _shm_in_use(names):
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


def run_loader_child(cfg, timeout):
    cmd = [sys.executable, SCRIPT, "_loader-child", json.dumps(cfg)]
    env = dict(os.environ)
    if cfg["name"] == "grain":
        env[GRAIN_ENV] = "1"
    shm_before = _shm_entries()
    errf = tempfile.TemporaryFile(mode="w+")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=errf, text=True,
                            start_new_session=True, cwd=REPO, env=env)
    mem = TreeMemory(proc.pid)
    mem.start()
    result = {}
    got_result = threading.Event()

    def reader():
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
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                pass
    finally:
        mem.stop()
        # whatever is left of the child's own session (it was started in a new one)
        for sig, wait in ((signal.SIGTERM, 3), (signal.SIGKILL, 2)):
            try:
                os.killpg(proc.pid, sig)
            except (ProcessLookupError, PermissionError):
                break
            time.sleep(wait if sig == signal.SIGTERM else 0)
        proc.wait()
        rt.join(timeout=2)
    # shared-memory segments the child's tree created and left behind
    leftover = {nm for nm in _shm_entries() - shm_before if nm.startswith(SHM_PREFIXES)}
    if leftover:
        for nm in leftover - _shm_in_use(leftover):
            try:
                os.unlink(os.path.join(SHM_DIR, nm))
            except OSError:
                pass
    if not result:
        errf.seek(0)
        tail = "\n".join(errf.read().strip().splitlines()[-6:])
        errf.close()
        return {"error": tail or f"exit code {proc.returncode}"}
    errf.close()
    result["peak_rss"] = mem.peak_rss
    result["peak_pss"] = mem.peak_pss
    result["procs"] = mem.peak_procs
    result["peak_shm"] = max(0, mem.peak_shm)
    result["peak_anon_shm"] = mem.peak_anon_shm
    result["leftover_shm"] = len(leftover)
    return result


def bench_loader(args, results, tmp):
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
    cands = []
    skipped = []
    if args.transform == "augment":
        log("[loader] transform augment: per-sample flip + scale in Python")
    want = [("loaderx", "zstd"), ("loaderx-raw", "raw"), ("torch", None), ("grain", None)]
    want = [w for w in want if selected(args, w[0])]
    log(f"[loader] generating {n:,} records ...")
    data = make_data(n, shape, dtype, seed=2)
    labels = np.random.default_rng(3).integers(0, 1000, n).astype(np.int64)
    for name, codec in want:
        try:
            if name.startswith("loaderx"):
                if not have_loaderx():
                    skipped.append(f"{name}: loaderx {loaderx_status()}")
                    continue
                from loaderx.converter import from_numpy
                dpath = os.path.join(ldir, f"data-{codec}")
                lpath = os.path.join(ldir, "label")
                log(f"[loader] writing {name} store ...")
                from_numpy(dpath, data, codec=codec)
                if not os.path.exists(lpath):
                    from_numpy(lpath, labels)
                cands.append({"name": name, "data": dpath, "label": lpath})
            elif name == "torch":
                if not installed("torch"):
                    skipped.append("torch: not installed (pip install torch)")
                    continue
                dpath, lpath = os.path.join(ldir, "data.npy"), os.path.join(ldir, "label.npy")
                log("[loader] writing .npy files ...")
                np.save(dpath, data)
                np.save(lpath, labels)
                cands.append({"name": name, "data": dpath, "label": lpath})
            elif name == "grain":
                if not installed("grain"):
                    skipped.append("grain: not installed (pip install grain)")
                    continue
                ok, why = try_import("array_record.python.array_record_module")
                if not ok:
                    skipped.append("grain: array-record not installed (pip install array-record)")
                    continue
                from array_record.python import array_record_module as arm
                dpath = os.path.join(ldir, "data.array_record")
                log("[loader] writing ArrayRecord (data + label per record) ...")
                wr = arm.ArrayRecordWriter(dpath, "group_size:1")
                lb = labels.view(np.uint8).reshape(n, 8)
                for i in range(n):
                    wr.write(data[i].tobytes() + lb[i].tobytes())
                wr.close()
                cands.append({"name": name, "data": dpath, "label": None})
        except Exception as e:
            skipped.append(f"{name}: setup failed: {type(e).__name__}: {str(e)[:200]}")
    del data
    gc.collect()
    for s in skipped:
        out(f"- skipped {s}")
    if skipped:
        out()
    if not cands:
        results["loader"] = {"rows": [], "skipped": skipped}
        return
    read_files_allocated(ldir)
    per = {c["name"]: [] for c in cands}
    errors = {}
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
            log(f"[loader]   {res['bps']:.1f} batches/s, peak RSS {res['peak_rss'] / MiB:.0f} MiB, "
                f"PSS {res['peak_pss'] / MiB:.0f} MiB, {res['procs']} processes"
                + (f"; removed {res['leftover_shm']} shared-memory files it left in {SHM_DIR}"
                   if res.get("leftover_shm") else ""))
            per[c["name"]].append(res)
    rows = []
    for c in cands:
        rs = per[c["name"]]
        if not rs:
            continue
        bps = median([x["bps"] for x in rs])
        rows.append({"loader": c["name"], "batches_per_s": bps, "ms_per_batch": 1e3 / bps,
                     "samples_per_s": bps * b, "mib_s": bps * b * sample_bytes / MiB,
                     "peak_rss": max(x["peak_rss"] for x in rs),
                     "peak_pss": max(x["peak_pss"] for x in rs),
                     "peak_shm": max(x["peak_shm"] for x in rs),
                     "peak_anon_shm": max(x["peak_anon_shm"] for x in rs),
                     "procs": max(x["procs"] for x in rs), "runs": rs})
    for name, err in errors.items():
        out(f"- {name} failed: " + err.replace("\n", " | ")[:400])
    if errors:
        out()
    out(table(["loader", "batches/s", "per batch", "samples/s", "throughput", "peak RSS",
               "peak PSS", "shm Δ", "anon + shm", "processes"],
              [[r["loader"], f"{r['batches_per_s']:.1f}", f"{r['ms_per_batch']:.2f} ms",
                f"{r['samples_per_s']:,.0f}", f"{r['mib_s']:,.0f} MiB/s",
                f"{r['peak_rss'] / MiB:,.0f} MiB", f"{r['peak_pss'] / MiB:,.0f} MiB",
                f"{r['peak_shm'] / MiB:,.0f} MiB", f"{r['peak_anon_shm'] / MiB:,.0f} MiB",
                r["procs"]] for r in rows]))
    out()
    results["loader"] = {"shape": list(shape), "dtype": dtype.name, "records": n, "batch": b,
                         "workers": args.workers, "transform": args.transform, "rows": rows,
                         "skipped": skipped, "errors": errors, "runs": args.loader_runs}
    # per-run pairing for the ratios the checks use
    results["loader"]["per_run"] = {k: [x["bps"] for x in v] for k, v in per.items()}


# --------------------------------------------------------------------------
# checks: the ratios the project tracks, all from this run


def checks(results):
    lines = []

    def add(name, value, target, ok):
        lines.append([name, value, target, "met" if ok else "MISSED"])

    s = results.get("sampler")
    if s:
        by = {(r["sampler"], r["batch"]): r for r in s["rows"]}
        for nm in ("zsampler iid", "zsampler iid, Sampler()"):
            for bsz, tgt in ((256, 4.0), (8192, 2.5)):
                r = by.get((nm, bsz))
                if r and r["vs_default_rng"]:
                    add(f"{nm} vs default_rng, batch {bsz}", fmt_ratio(r["vs_default_rng"]),
                        f"≥ {tgt:.1f}x", r["vs_default_rng"] >= tgt)
    for st in results.get("store", []) or []:
        if st["record_bytes"] < 128 * KiB:
            continue
        by = {r["store"]: r for r in st["rows"]}
        raw = by.get("zrecord-raw")
        if raw:
            add(f"zrecord-raw rnd gather vs {st['ceiling']} ({human_bytes(st['record_bytes'])})",
                f"{100 * raw['vs_memcpy']:.0f}%", "≥ 90%", raw["vs_memcpy"] >= 0.9)
            npy = by.get("npy-mmap")
            if npy:
                rr = median([x / y for x, y in zip(raw["runs_rnd_mib_s"], npy["runs_rnd_mib_s"])])
                add(f"zrecord-raw rnd gather vs npy-mmap ({human_bytes(st['record_bytes'])})",
                    fmt_ratio(rr), "≥ 2.0x", rr >= 2.0)
        z = by.get("zrecord-zstd")
        if z:
            for other in ("hdf5-gzip", "blosc2", "tensorstore", "arrayrecord"):
                o = by.get(other)
                if o:
                    rr = median([x / y for x, y in zip(z["runs_rnd_mib_s"], o["runs_rnd_mib_s"])])
                    add(f"zrecord-zstd rnd gather vs {other} ({human_bytes(st['record_bytes'])})",
                        fmt_ratio(rr), "≥ 10x", rr >= 10)
    ld = results.get("loader")
    if ld and ld.get("rows"):
        by = {r["loader"]: r for r in ld["rows"]}
        lx = by.get("loaderx")
        pr = ld.get("per_run", {})
        for other, tgt in (("torch", 2.0), ("grain", 1.0)):
            o = by.get(other)
            if lx and o:
                pairs = list(zip(pr.get("loaderx", []), pr.get(other, [])))
                rr = median([x / y for x, y in pairs]) if pairs else lx["batches_per_s"] / o["batches_per_s"]
                add(f"loaderx vs {other}, batches/s ({ld['transform']})", fmt_ratio(rr),
                    f"{'≥ 2.0x' if tgt > 1 else '> 1.0x'}", rr >= tgt if tgt > 1 else rr > 1.0)
        o = by.get("torch")
        if lx and o:
            for label, f in (("RSS", lambda r: r["peak_rss"]), ("PSS", lambda r: r["peak_pss"]),
                             ("anon + shm", lambda r: r["peak_anon_shm"])):
                if f(o):
                    frac = f(lx) / f(o)
                    add(f"loaderx peak {label} vs torch", f"{frac:.2f} "
                        f"({f(lx) / MiB:,.0f} / {f(o) / MiB:,.0f} MiB)", "≤ 0.25", frac <= 0.25)
    if lines:
        out("## Checks")
        out()
        out("Each ratio is taken between figures measured in this run (median of per-run ratios).")
        out()
        out(table(["check", "measured", "target", "result"], lines, right=(1, 2)))
        out()
    results["checks"] = [dict(zip(["check", "measured", "target", "result"], x)) for x in lines]


# --------------------------------------------------------------------------
# plot


def plot(results, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception:
        log("matplotlib is not installed: no plot (pip install matplotlib)")
        return
    panels = []
    if results.get("sampler"):
        panels.append(("sampler", None))
    for st in results.get("store", []) or []:
        panels.append(("store", st))
    if results.get("loader") and results["loader"].get("rows"):
        panels.append(("loader", results["loader"]))
    if not panels:
        return
    fig, axes = plt.subplots(len(panels), 1, figsize=(10, 3.6 * len(panels)), squeeze=False)
    for ax, (kind, data) in zip(axes[:, 0], panels):
        if kind == "sampler":
            rows = results["sampler"]["rows"]
            names = list(dict.fromkeys(r["sampler"] for r in rows))
            batches = list(dict.fromkeys(r["batch"] for r in rows))
            width = 0.8 / len(names)
            for i, nm in enumerate(names):
                ys = [next((r["us_per_batch"] for r in rows if r["sampler"] == nm and r["batch"] == bt), 0)
                      for bt in batches]
                ax.bar(np.arange(len(batches)) + i * width, ys, width, label=nm)
            ax.set_xticks(np.arange(len(batches)) + width * (len(names) - 1) / 2)
            ax.set_xticklabels([f"batch {bt}" for bt in batches])
            ax.set_yscale("log")
            ax.set_ylabel("µs per batch (lower is better)")
            ax.set_title("Sampler: IID over 1M indices")
            ax.legend(fontsize=8)
        elif kind == "store":
            rows = data["rows"]
            names = [r["store"] for r in rows]
            y = np.arange(len(names))
            ax.barh(y - 0.2, [r["rnd_mib_s"] or 0 for r in rows], 0.4, label="gather rnd")
            ax.barh(y + 0.2, [r["seq_mib_s"] or 0 for r in rows], 0.4, label="gather seq")
            ax.set_yticks(y)
            ax.set_yticklabels(names, fontsize=8)
            ax.invert_yaxis()
            ax.set_xlabel("MiB/s (higher is better)")
            ax.set_title(f"Store: {human_bytes(data['record_bytes'])} records, batch {data['batch']}")
            ax.legend(fontsize=8)
        else:
            rows = data["rows"]
            names = [r["loader"] for r in rows]
            x = np.arange(len(names))
            ax.bar(x - 0.2, [r["batches_per_s"] for r in rows], 0.4, label="batches/s", color="C0")
            ax.set_ylabel("batches/s (higher is better)")
            ax2 = ax.twinx()
            ax2.bar(x + 0.2, [r["peak_pss"] / MiB for r in rows], 0.4, label="peak PSS MiB", color="C3")
            ax2.set_ylabel("peak PSS, MiB (lower is better)")
            ax.set_xticks(x)
            ax.set_xticklabels(names)
            ax.set_title(f"Loader: batch {data['batch']}, {data['workers']} workers, "
                         f"transform {data['transform']}")
            h1, l1 = ax.get_legend_handles_labels()
            h2, l2 = ax2.get_legend_handles_labels()
            ax.legend(h1 + h2, l1 + l2, fontsize=8, loc="upper center")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    log(f"plot written to {path}")


# --------------------------------------------------------------------------


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "_loader-child":
        loader_child(json.loads(argv[1]))
        return 0
    ap = argparse.ArgumentParser(
        description="Benchmark loaderx against other samplers, record stores and data loaders.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("section", nargs="?", default="all", choices=["sampler", "store", "loader", "all"])
    ap.add_argument("--shape", type=parse_shape, default=None,
                    help="record shape, e.g. 512x512 (default: store runs 512x512 and 64x192, "
                         "loader 512x512)")
    ap.add_argument("--dtype", default="uint8")
    ap.add_argument("--records", type=int, default=None,
                    help=f"records (default {DEFAULT_RECORDS}; the default store run's 12 KiB "
                         f"shape gets {SMALL_FACTOR}x as many)")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--workers", type=int, default=4, help="loader workers (threads or processes)")
    ap.add_argument("--threads", type=int, default=None,
                    help="zrecord gather threads (loaderx.set_num_threads); default: the library's")
    ap.add_argument("--runs", type=int, default=None,
                    help="runs per figure for every section (default: sampler 7, store 5 rounds, loader 3)")
    ap.add_argument("--only", type=lambda s: [x.strip() for x in s.split(",") if x.strip()],
                    default=None, help="comma-separated contender names or families, e.g. zrecord,npy-mmap,torch "
                         "(memcpy and numpy default_rng always run: they are the references)")
    ap.add_argument("--transform", choices=["identity", "augment"], default="identity")
    ap.add_argument("--json", default=None, help="write every result to this file")
    ap.add_argument("--plot", default=None, help="draw the tables as bar charts into this PNG")
    ap.add_argument("--tmp", default=None, help="directory for the stores (default: a new temp dir)")
    ap.add_argument("--keep", action="store_true", help="keep the temp directory")
    ap.add_argument("--store-slice", type=float, default=0.1,
                    help="seconds of batches per contender and mode in each round (at least one batch)")
    ap.add_argument("--warm-cap", type=float, default=2.0,
                    help="seconds cap for the per-store warm-up sweep through its API")
    ap.add_argument("--sampler-loop-ms", type=float, default=40.0)
    ap.add_argument("--loader-warmup", type=float, default=0.5)
    ap.add_argument("--loader-measure", type=float, default=2.5)
    ap.add_argument("--loader-timeout", type=float, default=240.0)
    args = ap.parse_args(argv)
    args.sampler_runs = args.runs or 7
    args.store_runs = args.runs or 5
    args.loader_runs = args.runs or 3

    t_start = time.perf_counter()
    results = {"argv": argv, "started": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    info = machine_info()
    results["machine"] = info
    out("# loaderx benchmark")
    out()
    print_machine(info)

    made_tmp = args.tmp is None
    tmp = tempfile.mkdtemp(prefix="loaderx-bench-") if made_tmp else os.path.abspath(args.tmp)
    os.makedirs(tmp, exist_ok=True)
    work = tempfile.mkdtemp(prefix="run-", dir=tmp)
    try:
        if args.section in ("sampler", "all"):
            bench_sampler(args, results)
        if args.section in ("store", "all"):
            bench_store(args, results, work)
        if args.section in ("loader", "all"):
            bench_loader(args, results, work)
        checks(results)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
            if made_tmp:
                shutil.rmtree(tmp, ignore_errors=True)
    elapsed = time.perf_counter() - t_start
    try:
        la = " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        la = "n/a"
    out(f"Finished in {elapsed:.0f}s; load average at the end: {la}.")
    results["elapsed_s"] = elapsed
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(results, fh, indent=1, default=str)
        log(f"results written to {args.json}")
    if args.plot:
        plot(results, args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
