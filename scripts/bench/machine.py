"""The machine block printed first: what the figures were measured on.

CPU, caches, cgroup limits, kernel, Python, Go, loaderx and the versions of
the contenders (each adapter module names its distribution), plus the
environment variables that tune BLAS, OpenMP, Go or the contenders.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.metadata
import os
import platform
import re
import subprocess
import sys

import numpy as np
from contenders import VERSIONED, original
from contenders.loaderx import loaderx_status
from report import human_bytes, out, table


def read_text(path: str, default: str | None = None) -> str | None:
    """The stripped contents of a small file (a /proc or /sys entry), or default."""
    try:
        with open(path) as fh:
            return fh.read().strip()
    except OSError:
        return default


def _lscpu() -> dict[str, str]:
    try:
        res = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10,
                             env={**os.environ, "LC_ALL": "C"})
    except (OSError, subprocess.SubprocessError):
        return {}
    info = {}
    for line in res.stdout.splitlines():
        if ":" in line:
            k, v = line.split(":", 1)
            info[k.strip()] = v.strip()
    return info


def _cgroup_memory_limit() -> int | None:
    """The memory limit of this process's cgroup, or None when unlimited."""
    lines = (read_text("/proc/self/cgroup", "") or "").splitlines()
    candidates = []
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _hid, ctrls, cpath = parts
        if ctrls == "":  # cgroup v2
            candidates.append(os.path.join("/sys/fs/cgroup", cpath.lstrip("/"), "memory.max"))
        elif "memory" in ctrls.split(","):
            candidates.append(os.path.join("/sys/fs/cgroup/memory", cpath.lstrip("/"), "memory.limit_in_bytes"))
    candidates += ["/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"]
    for c in candidates:
        v = read_text(c)
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


def _cgroup_cpu_quota() -> float | None:
    v = read_text("/sys/fs/cgroup/cpu.max")
    if v:
        q, p = [*v.split(), "100000"][:2]
        return int(q) / int(p) if q != "max" else None
    q = read_text("/sys/fs/cgroup/cpu/cpu.cfs_quota_us") or read_text("/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us")
    p = read_text("/sys/fs/cgroup/cpu/cpu.cfs_period_us") or read_text("/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us")
    if q and p and int(q) > 0:
        return int(q) / int(p)
    return None


def module_version(module: str, dist: str) -> str | None:
    """The installed version of distribution `dist` (import name `module`), or None."""
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        pass
    try:
        return getattr(importlib.import_module(module), "__version__", "installed")
    except Exception:
        return None


def _cpu(info: dict[str, str]) -> None:
    cpu = _lscpu()
    model = cpu.get("Model name") or platform.processor() or "unknown"
    sockets = cpu.get("Socket(s)", "?")
    tpc = cpu.get("Thread(s) per core")
    threads = os.cpu_count()
    try:
        cores: int | str = int(cpu.get("Core(s) per socket", "")) * int(sockets)
    except ValueError:
        cores = "?"
    info["CPU"] = f"{model}, {sockets} socket(s), {cores} cores / {threads} threads"
    if tpc:
        info["CPU"] += f" ({tpc} thread(s) per core)"
    if cpu.get("Hypervisor vendor"):
        info["CPU"] += f", {cpu['Hypervisor vendor']} guest"
    fmin, fmax = cpu.get("CPU min MHz"), cpu.get("CPU max MHz")
    if fmax:
        info["frequency"] = f"{float(fmin or 0):.0f}–{float(fmax):.0f} MHz"  # noqa: RUF001 (a range)
    else:
        mhz = next((line.split(":", 1)[1].strip() for line in (read_text("/proc/cpuinfo", "") or "").splitlines()
                    if line.startswith("cpu MHz")), None)
        info["frequency"] = f"{float(mhz):.0f} MHz (nominal; no cpufreq)" if mhz else "unknown"
    caches = [f"{k.replace(' cache', '')} {cpu[k]}" for k in ("L1d cache", "L1i cache", "L2 cache", "L3 cache")
              if cpu.get(k)]
    info["caches"] = ", ".join(caches) if caches else "unknown"
    info["NUMA"] = f"{cpu.get('NUMA node(s)', '?')} node(s)"
    try:
        aff = len(os.sched_getaffinity(0))
    except AttributeError:
        aff = threads or 1
    quota = _cgroup_cpu_quota()
    info["CPU affinity / quota"] = f"{aff} usable CPUs, " + (
        f"cgroup quota {quota:.2f} CPUs" if quota else "no cgroup CPU quota")


def _memory_and_os(info: dict[str, str]) -> None:
    thp = read_text("/sys/kernel/mm/transparent_hugepage/enabled")
    thp_d = read_text("/sys/kernel/mm/transparent_hugepage/defrag")

    def pick(v: str | None) -> str | None:
        m = re.search(r"\[(\w[\w+]*)\]", v or "")
        return m.group(1) if m else v

    if thp:
        info["transparent hugepages"] = f"enabled={pick(thp)}, defrag={pick(thp_d)}"
    mem_total = None
    for line in (read_text("/proc/meminfo", "") or "").splitlines():
        if line.startswith("MemTotal:"):
            mem_total = int(line.split()[1]) * 1024
    lim = _cgroup_memory_limit()
    info["memory"] = (human_bytes(mem_total) if mem_total else "unknown") + (
        f" ({human_bytes(lim)} cgroup limit)" if lim else " (no cgroup memory limit)")
    osname = None
    for line in (read_text("/etc/os-release", "") or "").splitlines():
        if line.startswith("PRETTY_NAME="):
            osname = line.split("=", 1)[1].strip().strip('"')
    info["OS"] = f"{osname or platform.system()}, kernel {platform.release()}"


def _software(info: dict[str, str]) -> None:
    gil = ""
    if hasattr(sys, "_is_gil_enabled"):
        gil = ", GIL " + ("enabled" if sys._is_gil_enabled() else "disabled")
    info["python"] = f"{platform.python_implementation()} {platform.python_version()}{gil}, numpy {np.__version__}"
    try:
        res = subprocess.run(["go", "version"], capture_output=True, text=True, timeout=20)
        info["go"] = res.stdout.strip().replace("go version ", "") or "not found"
    except (OSError, subprocess.SubprocessError):
        info["go"] = "not found on PATH"
    info["loaderx"] = loaderx_status()
    ok, why = original.status()
    info["original loaderx"] = why if ok else f"not measured: {why}"
    vers = []
    for module, dist in [*VERSIONED, ("matplotlib", "matplotlib")]:
        v = module_version(module, dist)
        vers.append(f"{module} {v}" if v else f"{module} -")
    info["contenders"] = ", ".join(vers)
    pat = re.compile(r"(OPENBLAS|BLAS|OMP_|MKL|GOMAXPROCS|GOGC|GODEBUG|GOMEMLIMIT|LOADERX|"
                     r"MALLOC|NUMEXPR|BLOSC|TENSORSTORE)", re.I)
    env = [f"{k}={v}" for k, v in sorted(os.environ.items()) if pat.search(k)]
    info["environment"] = "; ".join(env) if env else "no BLAS/OpenMP/Go tuning variables set"
    with contextlib.suppress(OSError):
        info["load average"] = " ".join(f"{x:.2f}" for x in os.getloadavg()) + " (1/5/15 min, at start)"


def machine_info() -> dict[str, str]:
    """The machine block as an ordered {row: value} dict."""
    info: dict[str, str] = {}
    _cpu(info)
    _memory_and_os(info)
    _software(info)
    return info


def print_machine(info: dict[str, str]) -> None:
    out("## Machine")
    out()
    out(table(["machine", "value"], [[k, v] for k, v in info.items()], right=()))
    out()
