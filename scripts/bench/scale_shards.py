"""The shards part of the scale layer: what a sharded dataset costs to open
and to read as its shard count grows from 16 to 100,000.

Each dataset holds the same kind of records (int32 rows whose every value
is the record's global index) in shards of equal size, written with
loaderx.store.shards; one plain store holds the same records for the
reference. In a child process whose descriptor limit is 1024 (soft and
hard, as `ulimit -n 1024` sets them), each dataset is opened (warm, and
cold after dropping the page cache) and read: the open's time, the first
random batch's latency (its shards open at that read), the descriptors and
mappings the process holds after the open and at most while reading, and
then the rate of random batches once every shard has been read (the
dataset's default cap keeps 10,000 shards open), measured round-robin with
the one store in the same child; every byte of every batch is checked.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
import time
from typing import Any

import numpy as np
from report import fmt_ratio, log, median, out, table

#: shard counts, and the record sizes (int32 lanes) their throughput is measured at
SHARDS = (16, 1_000, 10_000, 100_000)
LANES = (64, 1024)  # 256 B and 4 KiB records
#: records of the datasets whose throughput is measured (split over the shards)
TOTAL = 60_000
BATCH = 256


def _write(root: str, n_shards: int, per: int, lanes: int) -> None:
    """A sharded dataset of n_shards shards of per records each. Each store
    is made in a directory of at most 1,000 entries and moved in: a store's
    Create looks through its parent for what an interrupted Create left."""
    from loaderx.store import _native, shards

    offsets = np.arange(per + 1, dtype=np.int64) * (lanes * 4)
    names = []
    for k in range(n_shards):
        name = f"s{k:06d}"
        stage = os.path.join(root, ".build", str(k // 1000))
        os.makedirs(stage, exist_ok=True)
        first = k * per
        data = np.repeat(np.arange(first, first + per, dtype=np.int32)[:, None], lanes, axis=1)
        h = _native.store_create(os.path.join(stage, name), "raw", schema=("dense", "<i4", (lanes,)))
        try:
            _native.store_append_packed(h, data.reshape(-1).view(np.uint8), offsets)
        finally:
            _native.store_close_unsynced(h)
        os.rename(os.path.join(stage, name), os.path.join(root, name))
        names.append(name)
    shutil.rmtree(os.path.join(root, ".build"))
    shards.commit(root, names, sync=False)


def _single(path: str, n: int, lanes: int) -> None:
    import loaderx

    rows = np.repeat(np.arange(n, dtype=np.int32)[:, None], lanes, axis=1)
    loaderx.from_numpy(path, rows, codec="raw")


def shards_child(cfg: dict[str, Any]) -> None:
    """Measure one sharded dataset (and its one-store reference) under a
    descriptor limit of 1024; JSON on stdout."""
    resource.setrlimit(resource.RLIMIT_NOFILE, (1024, 1024))
    from loaderx.dataset import DenseDataset
    from loaderx.store import _native

    _native.get_threads()  # load the library first: its start is not the open's

    def fds() -> int:
        return len(os.listdir("/proc/self/fd"))

    def maps() -> int:
        with open("/proc/self/maps") as f:
            return sum(1 for _ in f)

    rng = np.random.default_rng(7)
    fd0, maps0 = fds(), maps()
    t0 = time.perf_counter()
    ds = DenseDataset(cfg["root"])
    t_open = time.perf_counter() - t0
    fd_open, maps_open = fds() - fd0, maps() - maps0
    n = len(ds)
    idx = rng.integers(0, n, BATCH)
    t0 = time.perf_counter()
    batch = ds[idx]
    t_first = time.perf_counter() - t0
    if not (batch == idx[:, None]).all():
        raise SystemExit("a record read another's bytes")
    res: dict[str, Any] = {"open_s": t_open, "first_batch_s": t_first, "fds_open": fd_open,
                           "maps_open": maps_open, "records": n,
                           "most_fds": fds() - fd0, "most_maps": maps() - maps0}
    if cfg.get("rate"):
        one = DenseDataset(cfg["single"])
        readers = {"sharded": ds, "one store": one}
        for r in readers.values():  # every shard read once: open, under the cap
            for lo in range(0, n, 8192):
                hi = min(n, lo + 8192)
                if not (r[np.arange(lo, hi)][:, 0] == np.arange(lo, hi)).all():
                    raise SystemExit("a record read another's bytes")
        batches = [rng.integers(0, n, BATCH) for _ in range(32)]
        outs = np.empty((BATCH, ds.item_shape[0]), dtype=np.int32)
        rates: dict[str, list[float]] = {k: [] for k in readers}
        most_fds, most_maps = max(res["most_fds"], fds() - fd0), max(res["most_maps"], maps() - maps0)
        for rnd in range(cfg["rounds"]):
            for name in (list(readers) if rnd % 2 == 0 else list(readers)[::-1]):
                r = readers[name]
                k, t0 = 0, time.perf_counter()
                while k < 10 or time.perf_counter() - t0 < cfg["slice"]:
                    b = batches[k % len(batches)]
                    r.gather(b, out=outs)
                    k += 1
                rates[name].append(k / (time.perf_counter() - t0))
                if not (outs[:, 0] == batches[(k - 1) % len(batches)]).all():
                    raise SystemExit("a record read another's bytes")
            most_fds, most_maps = max(most_fds, fds() - fd0), max(most_maps, maps() - maps0)
        res.update(rates=rates, most_fds=most_fds, most_maps=most_maps)
    print(json.dumps(res))


def _run_child(cfg: dict[str, Any]) -> dict[str, Any]:
    here = os.path.dirname(os.path.abspath(__file__))
    proc = subprocess.run([sys.executable, here, "_shards-child", json.dumps(cfg)], capture_output=True, text=True,
                          timeout=1800)
    if proc.returncode != 0:
        raise RuntimeError(f"shards child failed ({proc.returncode}): {proc.stderr.strip()[-2000:]}")
    return json.loads(proc.stdout)


def bench_scale_shards(args: Any, results: dict[str, Any], tmp: str, drop_caches: Any) -> None:
    """Fills results["scale"]["shards"]."""
    counts = [s for s in SHARDS if s <= args.scale_max_shards]
    rounds = args.runs or 3
    out("### Sharded datasets")
    out()
    out(f"Shards of equal size; the throughput rows split {TOTAL:,} records over the shards and compare them "
        f"with one store of the same records (random batches of {BATCH}, `gather(out=)`, every shard opened by "
        f"a read first, {rounds} rounds round-robin in one child); the {max(SHARDS):,}-shard row holds 3 records "
        "a shard and measures the open. All in a child process under `ulimit -n 1024`.")
    out()
    rows = []
    for n_shards in counts:
        for lanes in (LANES if n_shards < 100_000 else LANES[:1]):
            per = max(3, TOTAL // n_shards) if n_shards < 100_000 else 3
            root = os.path.join(tmp, f"shards-{n_shards}-{lanes}")
            single = os.path.join(tmp, f"single-{n_shards}-{lanes}")
            log(f"[scale] writing {n_shards:,} shards of {per} records of {lanes * 4} B ...")
            t0 = time.perf_counter()
            _write(root, n_shards, per, lanes)
            write_s = time.perf_counter() - t0
            rate = n_shards < 100_000
            if rate:
                _single(single, n_shards * per, lanes)
            cfg = {"root": root, "single": single, "rate": rate, "rounds": rounds, "slice": args.store_slice}
            warm = _run_child(cfg)
            cold = None
            if drop_caches():
                cold = _run_child({**cfg, "rate": False})
            row = {"shards": n_shards, "record_bytes": lanes * 4, "records": warm["records"], "write_s": write_s,
                   "open_s": warm["open_s"], "open_cold_s": cold["open_s"] if cold else None,
                   "first_batch_s": warm["first_batch_s"],
                   "first_batch_cold_s": cold["first_batch_s"] if cold else None,
                   "fds_open": warm["fds_open"], "maps_open": warm["maps_open"],
                   "most_fds": warm.get("most_fds"), "most_maps": warm.get("most_maps")}
            if rate:
                r = warm["rates"]
                row["batches_per_s"] = median(r["sharded"])
                row["one_store_per_s"] = median(r["one store"])
                row["vs_one_store"] = median(a / b for a, b in zip(r["sharded"], r["one store"], strict=True))
                row["runs"] = r
            rows.append(row)
            shutil.rmtree(root, ignore_errors=True)
            shutil.rmtree(single, ignore_errors=True)

    def ms(x: float | None) -> str:
        return "n/a" if x is None else f"{x * 1e3:.1f} ms"

    out(table(["shards", "record", "open warm", "open cold", "first batch warm", "first batch cold",
               "descriptors: open / most", "mappings: open / most", "batches/s", "one store",
               "sharded / one store"],
              [[f"{r['shards']:,}", f"{r['record_bytes']} B", ms(r["open_s"]), ms(r["open_cold_s"]),
                ms(r["first_batch_s"]), ms(r["first_batch_cold_s"]), f"{r['fds_open']} / {r['most_fds']}",
                f"{r['maps_open']} / {r['most_maps']:,}",
                "n/a" if "batches_per_s" not in r else f"{r['batches_per_s']:,.0f}",
                "n/a" if "one_store_per_s" not in r else f"{r['one_store_per_s']:,.0f}",
                fmt_ratio(r.get("vs_one_store"))] for r in rows]))
    out()
    results.setdefault("scale", {})["shards"] = rows
