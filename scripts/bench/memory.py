"""The memory layer: the default path against `np.take` on a warm page cache.

Five record sizes, each at its batch size: 256 B uint8 (256), 4 KiB uint8
(256), 8 KiB int32 token rows (Zipf ids below 50,000; 256; the `auto` codec
chooses narrow), 64 KiB float32 (64) and 1 MiB uint8 (16). The same records
are saved as a `.npy` file and converted with every default; after a sweep
that warms the page cache, each round times, on the indices of the same
steps of the default cyclic sampler:

* `np.take(memmap, idx, axis=0)`, the reference, and `np.take(memmap, idx,
  axis=0, out=buf, mode="clip")`;
* `np.take` on two threads: each takes every other step's batch into a
  buffer of its own, with no hand-over between them, so that the pair
  copies at the rate two cores give NumPy's copy here. It
  is the ceiling a two-core gather is held to where memory, not the
  instructions, sets the pace (NumPy releases the GIL inside `take`);
* the default `DataLoader` (every default: the native step pipeline), and
  the same loader on the Python pipeline (`LOADERX_PIPELINE=python`);
* `DenseDataset.gather(idx, out=)` with the default verification, and on a
  raw store with `set_verify(False)`.

The contenders are measured one after another inside a round, in an order
shuffled from round to round (seeded by the round; a rotation would have
each cell start after the same other cell in every round but one, in the
state it leaves: the caches, parked or busy threads), and every ratio is
the median of the per-round ratios to `np.take` in the same round. A loader
cell takes its next steps (each round goes on from the step it stopped at)
while `np.take` and the gathers are given the indices of those same steps,
drawn beforehand. The last table is the loader at batch size 1 (8-byte
records): wall time per step and the CPU time the consuming thread spent
per step (the hand-over: Python's part and the native call).

The CPU path of the checked copy is named as zrecord picks it: `avx2-vpclmul`
on a CPU with AVX2 and VPCLMULQDQ, `sse42` with SSE4.2 and PCLMULQDQ,
`generic` otherwise.
"""

from __future__ import annotations

import argparse
import os
import random
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from report import fmt_ratio, human_bytes, log, median, out, table

#: (key, what, dtype, item shape, batch)
WORKLOADS = [
    ("256B", "256 B uint8", np.uint8, (256,), 256),
    ("4KiB", "4 KiB uint8", np.uint8, (4096,), 256),
    ("8KiB-tokens", "8 KiB int32 token rows", np.int32, (2048,), 256),
    ("64KiB", "64 KiB float32", np.float32, (16384,), 64),
    ("1MiB", "1 MiB uint8", np.uint8, (1 << 20,), 16),
]

CONTENDERS = ["np.take", "np.take(out=, clip)", "np.take, 2 threads", "DataLoader", "DataLoader (Python pipeline)",
              "gather(out=), verified", "gather(out=), raw, unverified"]


def cpu_path() -> str:
    """The copy-and-checksum path zrecord takes on this CPU."""
    flags: set[str] = set()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    break
    except OSError:
        return "unknown (no /proc/cpuinfo)"
    if {"sse4_2", "pclmulqdq"} <= flags:
        if {"avx2", "vpclmulqdq"} <= flags:
            return "avx2-vpclmul (AVX2 and VPCLMULQDQ)"
        return "sse42 (SSE4.2 and PCLMULQDQ; no VPCLMULQDQ)" if "avx2" in flags else "sse42 (SSE4.2 and PCLMULQDQ)"
    return "generic"


def _records(dtype: Any, shape: tuple[int, ...], n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if np.dtype(dtype) == np.int32:
        return (np.minimum(rng.zipf(1.2, (n, *shape)), 50_000) - 1).astype(np.int32)
    if np.dtype(dtype) == np.float32:
        return rng.standard_normal((n, *shape), dtype=np.float32)
    return rng.integers(0, 256, (n, *shape), dtype=np.uint8)


class _Cell:
    """One workload's data and contenders."""

    def __init__(self, root: str, key: str, dtype: Any, shape: tuple[int, ...], batch: int, mib: int) -> None:
        import loaderx

        item = int(np.prod(shape)) * np.dtype(dtype).itemsize
        n = max(32 * batch, (mib << 20) // item)
        self.key, self.batch, self.item, self.n = key, batch, item, n
        log(f"[memory] {key}: writing {n:,} records ({human_bytes(n * item)}) ...")
        arr = np.empty((n, *shape), dtype=dtype)
        for a in range(0, n, 4096):
            arr[a:a + 4096] = _records(dtype, shape, min(4096, n - a), seed=a)
        npy = os.path.join(root, f"{key}.npy")
        np.save(npy, arr)
        loaderx.from_numpy(os.path.join(root, f"{key}-auto"), arr)
        loaderx.from_numpy(os.path.join(root, f"{key}-raw"), arr, codec="raw")
        del arr
        self.mm = np.load(npy, mmap_mode="r")
        self.auto = loaderx.DenseDataset(os.path.join(root, f"{key}-auto"))
        self.raw = loaderx.DenseDataset(os.path.join(root, f"{key}-raw"))
        self.raw.set_verify(False)
        self.codec = str(self.auto.codec)
        for a in range(0, n, 1024):  # warm the page cache through every reader
            sl = np.arange(a, min(n, a + 1024), dtype=np.int64)
            self.mm[sl].sum()
            self.auto.gather(sl)
            self.raw.gather(sl)
        os.environ["LOADERX_PIPELINE"] = "native"
        self.loader = loaderx.DataLoader({"x": self.auto}, batch_size=batch)
        os.environ["LOADERX_PIPELINE"] = "python"
        self.pyloader = loaderx.DataLoader({"x": self.auto}, batch_size=batch)
        os.environ.pop("LOADERX_PIPELINE")
        got = next(self.loader)["x"]
        want = np.take(self.mm, self.loader.indices(0), axis=0)
        if not np.array_equal(got, want) or not np.array_equal(next(self.pyloader)["x"], want):
            raise AssertionError(f"{key}: the loader's step 0 differs from np.take's")
        self.out = np.empty((batch, *shape), dtype=dtype)
        self.out2 = np.empty((batch, *shape), dtype=dtype)
        self.chosen = self.loader._pipe.__class__.__name__
        check = self.auto.gather(self.loader.indices(1), out=self.out)
        if not np.array_equal(check, np.take(self.mm, self.loader.indices(1), axis=0)):
            raise AssertionError(f"{key}: gather(out=) differs from np.take")

    def draws(self, first: int, k: int) -> list[np.ndarray]:
        return [self.loader.indices(s) for s in range(first, first + k)]

    def time(self, name: str, idx: list[np.ndarray]) -> float:
        """Seconds for contender ``name`` to make the steps whose indices are
        ``idx`` (a loader: its next ``len(idx)`` steps, which are those)."""
        if name.startswith("DataLoader"):
            loader = self.pyloader if "Python" in name else self.loader
            first = loader.step
            t0 = time.perf_counter()
            for _ in idx:
                next(loader)
            took = time.perf_counter() - t0
            if not np.array_equal(loader.indices(first), idx[0]):
                raise AssertionError(f"{self.key}: {name} is not at the round's steps")
            return took
        if name == "np.take, 2 threads":
            return self._take_two(idx)
        fn: Callable[[np.ndarray], Any]
        mm, buf = self.mm, self.out
        if name == "np.take":
            def fn(i: np.ndarray) -> Any:
                return np.take(mm, i, axis=0)
        elif name == "np.take(out=, clip)":
            def fn(i: np.ndarray) -> Any:
                return np.take(mm, i, axis=0, out=buf, mode="clip")
        elif name == "gather(out=), verified":
            ds = self.auto

            def fn(i: np.ndarray) -> Any:
                return ds.gather(i, out=buf)
        else:
            ds = self.raw

            def fn(i: np.ndarray) -> Any:
                return ds.gather(i, out=buf)
        t0 = time.perf_counter()
        for i in idx:
            fn(i)
        return time.perf_counter() - t0

    def _take_two(self, idx: list[np.ndarray]) -> float:
        """Seconds for two threads to take the steps of ``idx``, the even ones
        on one and the odd ones on the other, each into its own buffer."""
        mm, outs = self.mm, (self.out, self.out2)
        start = threading.Barrier(3)

        def run(j: int) -> None:
            buf = outs[j]
            start.wait()
            for i in idx[j::2]:
                np.take(mm, i, axis=0, out=buf, mode="clip")

        threads = [threading.Thread(target=run, args=(j,)) for j in (0, 1)]
        for t in threads:
            t.start()
        start.wait()
        t0 = time.perf_counter()
        for t in threads:
            t.join()
        return time.perf_counter() - t0

    def close(self) -> None:
        self.loader.close()
        self.pyloader.close()
        self.auto.close()
        self.raw.close()


def _per_step(root: str, runs: int) -> list[dict[str, Any]]:
    """The loader at batch size 1: wall and consumer CPU per step, native and Python pipeline."""
    import loaderx

    path = os.path.join(root, "tiny")
    loaderx.from_numpy(path, np.arange(1 << 16, dtype=np.int64))
    ds = loaderx.DenseDataset(path)
    loaders = {}
    for mode in ("native", "python"):
        os.environ["LOADERX_PIPELINE"] = mode
        loaders[mode] = loaderx.DataLoader({"x": ds}, batch_size=1)
    os.environ.pop("LOADERX_PIPELINE")
    res: dict[str, list[tuple[float, float]]] = {m: [] for m in loaders}
    k = 20_000
    for _ in range(runs):
        for mode, loader in loaders.items():
            for _ in range(500):
                next(loader)
            c0, t0 = time.thread_time(), time.perf_counter()
            for _ in range(k):
                next(loader)
            res[mode].append(((time.perf_counter() - t0) / k, (time.thread_time() - c0) / k))
    for loader in loaders.values():
        loader.close()
    ds.close()
    return [{"pipeline": m, "wall_us": median(w for w, _ in v) * 1e6, "cpu_us": median(c for _, c in v) * 1e6,
             "runs": v} for m, v in res.items()]


def bench_memory(args: argparse.Namespace, results: dict[str, Any], tmp: str) -> None:
    """Fills results["memory"]."""
    root = os.path.join(tmp, "memory")
    os.makedirs(root, exist_ok=True)
    mib = args.memory_mib
    runs = args.store_runs
    path = cpu_path()
    out("## Memory speed: the default path against np.take")
    out()
    out(f"Records of 256 B to 1 MiB (about {mib} MiB of each), warm page cache, the indices of the same steps "
        "of the default cyclic sampler for every contender; "
        f"{runs} rounds, contenders in an order shuffled per round, {args.store_slice:.2f}s per cell; ratios to "
        "`np.take(memmap, idx, axis=0)`, the median of per-round ratios. The checked copy's CPU path: "
        f"{path}.")
    out()
    rows = []
    for key, what, dtype, shape, batch in WORKLOADS:
        cell = _Cell(root, key, dtype, shape, batch, mib)
        try:
            t1 = cell.time("np.take", cell.draws(0, 4)) / 4  # calibrate the steps per cell
            k = max(3, int(args.store_slice / max(t1, 1e-6)))
            times: dict[str, list[float]] = {c: [] for c in CONTENDERS}
            for r in range(runs):
                idx = cell.draws(cell.loader.step, k)  # both loaders stand at this step
                order = list(CONTENDERS)
                random.Random(r).shuffle(order)
                for name in order:
                    times[name].append(cell.time(name, idx) / k)
            ratios = {c: median(a / b for a, b in zip(times["np.take"], times[c], strict=True)) for c in CONTENDERS}
            row = {"key": key, "what": what, "batch": batch, "codec": cell.codec, "steps": k,
                   "pipeline": cell.chosen,
                   "np_take_ms": median(times["np.take"]) * 1e3,
                   "np_take_mib_s": batch * cell.item / median(times["np.take"]) / 2**20,
                   "ratios": ratios, "times": times}
            rows.append(row)
            log(f"[memory] {key}: " + ", ".join(f"{c} {fmt_ratio(v)}" for c, v in ratios.items()))
        finally:
            cell.close()
    out(table(["records", "batch", "codec (auto)", "np.take ms/batch", "np.take MiB/s", *CONTENDERS],
              [[r["what"], r["batch"], r["codec"], f"{r['np_take_ms']:.3f}", f"{r['np_take_mib_s']:,.0f}",
                *[fmt_ratio(r["ratios"][c]) for c in CONTENDERS]] for r in rows]))
    out()
    per = _per_step(root, max(3, runs))
    out("The loader at batch size 1 (8-byte records): per step, wall time and the consuming thread's CPU "
        "time (the hand-over: Python's part and the native call); target for the default path: at most 10 us.")
    out()
    out(table(["pipeline", "us/step (wall)", "us/step (consumer CPU)"],
              [[p["pipeline"], f"{p['wall_us']:.1f}", f"{p['cpu_us']:.1f}"] for p in per]))
    out()
    results["memory"] = {"cpu_path": path, "mib": mib, "rows": rows, "per_step": per}
