"""Throughput of loaderx against the alternatives, in three layers.

    python3 scripts/bench {sampler|store|loader|memory|packing|maint|shards|convert-shards|remote|scale|resume|all}
                          [options]

sampler  index generation alone: numpy's two random APIs against zsampler.
store    batch gather from a record store: zrecord (its defaults, raw verified
         and unverified, zstd, zstd+dict) against .npy memory maps, HDF5,
         Blosc2, TensorStore, ArrayRecord, Hugging Face datasets, Lance,
         MosaicML Streaming and LitData, with a memcpy of the same rows from
         RAM as the ceiling, on four workloads: photo-like records of 256 KiB
         and 12 KiB, 2 KiB int32 feature rows and LLM token rows (int32[2048]
         Zipf ids below 50,000; --workloads picks among 256k, 12k, 2k, tokens).
loader   the whole input pipeline (sample, fetch, collate, hand over a batch):
         loaderx against PyTorch's DataLoader, Grain and Hugging Face datasets
         (torch's DataLoader over it when torch is installed), with the peak
         memory of each loader's whole process tree.
         Its last rows pack tokenised documents into fixed rows with segment
         ids: loaderx's pack= (concat, first_fit) against Grain's first-fit
         packing and a first-fit collate_fn on torch's DataLoader.
packing  those packing rows of the loader layer alone.
memory   the default path against np.take on a warm page cache, at record
         sizes 256 B to 1 MiB: the default DataLoader (native step pipeline)
         and on the Python pipeline, gather(out=) verified and raw unverified,
         np.take(out=, mode="clip"); the loader at batch size 1 for the cost
         of a step's hand-over; the CPU path of the checked copy.
maint    ragged conversion and gather, delete 10 % of a store and compact it.
shards   a dataset read as 4 and 16 shards against the same records in one
         store: gather(out=) and the default DataLoader.
convert-shards  conversion MB/s of from_numpy(num_shards=1 and 2) against the
         single-store conversion: 2 GiB token rows and 12 KiB images
         (--convert-mib; 64 MiB with --quick), codecs auto and zstd.
scale    what grows with the data and the run (not part of all: its largest
         store is 2^28 records, --scale-max caps it, --scale-max-shards the
         shard count): open and first-batch latency, memory, descriptors
         and mappings from 10^6 to 2^28 records warm and cold against a
         NumPy memory map; from_numpy of small records against np.save;
         sharded datasets of 16 to 100,000 shards under ulimit -n 1024
         against one store; and the resume section below.
remote   one epoch of token rows (--remote-mib, 256 MiB; 32 with --quick) read
         from a local SeaweedFS S3 server (tests/s3server.py; skipped without
         its `weed` binary) by loaderx, MosaicML Streaming and LitData, cold
         (a fresh cache) and warm (the same cache, a new process), against
         loaderx reading the store from local disk, with the bytes each
         fetched against the dataset's stored size.
resume   the first batch after load_state_dict at steps 10^3 to 10^6
         (--resume-steps) of one ragged store and a three-source packed
         mixture, with the state's cursor and (to --resume-replay-max)
         without it, and in each of two torch workers. Not part of `all`:
         taking a state at step 10^6 counts every sampler step before it
         once (about a minute here).

The original Zig loaderx (loaderx==1.5.2 on PyPI) takes part in every layer
when it is installed in a directory of its own (--original DIR, or
$LOADERX_BENCH_ORIG, default ~/.cache/loaderx-bench/orig-1.5.2;
--install-original runs `pip install --target` there). Its import name is
also `loaderx`, so every figure of it is measured in a child interpreter with
PYTHONPATH=DIR, and every table gets a `loaderx / original` ratio.

--quick runs a small configuration: about 11 minutes for `all` with the original
on a two-core machine under a load average of 8 (the store layer has two dozen
contenders on four workloads); `store --quick --no-original` alone took 3.5
minutes there.

Every contender is driven through the binding a client actually uses, so the
foreign-call cost, the GIL and NumPy allocations are inside the timings. Each
figure is the median of several runs; contenders are measured round-robin
inside a run so that the load of a shared machine spreads over all of them,
and every ratio is taken between figures measured side by side in one run.
Gathers run on a warm page cache: every file is read and every record is
gathered once before timing. The run ends with the checks: each ratio the
README reports, against its target (report.TARGETS).

loaderx must be importable (installed, or PYTHONPATH=<repo root>). Contenders
that are not installed are skipped with a line saying so. The optional ones
install with:  pip install -e '.[bench]'  (h5py blosc2 tensorstore array-record
grain torch datasets pylance litdata, and what MosaicML Streaming imports),
then MosaicML Streaming on its own, without its dependencies, since 0.13 pins
numpy<2.2:  pip install --no-deps mosaicml-streaming  (its skip line says so
when it is missing). Streaming and LitData need torch.

Layout: machine.py (the machine block), contenders/ (one adapter per library,
registered per layer in contenders/__init__.py), data.py (the records and the
transform), sampler.py, store.py and loader.py (one module per layer),
maint.py, shards.py, convert_shards.py, remote.py, scale.py and resume.py (one
module per layer), report.py (tables, targets and checks, plot, JSON) and this
CLI; s3client.py compares S3 clients on its own.
contenders/original.py drives the original through contenders/original_worker.py.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

from contenders import original
from convert_shards import bench_convert_shards
from loader import bench_loader, bench_packing, loader_child
from machine import machine_info, print_machine
from maint import bench_maint
from memory import bench_memory
from remote import bench_remote, remote_child
from report import checks, out, plot, write_json
from resume import STEPS, bench_resume, resume_child
from sampler import bench_sampler
from scale import SIZES as SCALE_SIZES
from scale import bench_scale
from scale import child as scale_child
from scale_shards import SHARDS as SCALE_SHARDS
from scale_shards import shards_child
from shards import bench_shards
from store import DEFAULT_RECORDS, WORKLOAD_KEYS, WORKLOADS, bench_store

# The layers in the order `all` runs them: name -> bench(args, results, work dir).
LAYERS: dict[str, Callable[[argparse.Namespace, dict[str, Any], str], None]] = {
    "sampler": bench_sampler,
    "store": bench_store,
    "loader": bench_loader,
    "memory": bench_memory,
    "maint": bench_maint,
    "shards": bench_shards,
    "convert-shards": bench_convert_shards,
    "remote": bench_remote,
}

# --quick: a small configuration (flags given explicitly still win)
QUICK = {"records": 200, "runs": 2, "store_slice": 0.04, "warm_cap": 0.5, "sampler_loop_ms": 10.0,
         "loader_warmup": 0.3, "loader_measure": 1.0, "maint_mib": 32, "memory_mib": 32,
         "convert_mib": 64, "remote_mib": 32, "scale_max": 10**7, "scale_max_shards": 1_000}


def parse_shape(text: str) -> tuple[int, ...]:
    """'512x512', '512,512' or '512 512' (or with the multiplication sign) -> (512, 512)."""
    parts = [p for p in re.split(r"[x,×* ]+", text.strip()) if p]  # noqa: RUF001 (the multiplication sign is meant)
    try:
        shape = tuple(int(p) for p in parts)
    except ValueError:
        shape = ()
    if not shape or any(d <= 0 for d in shape):
        raise argparse.ArgumentTypeError(f"bad shape {text!r}")
    return shape


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python3 scripts/bench",
        description="Benchmark loaderx against other samplers, record stores and data loaders.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("section", nargs="?", default="all", choices=[*LAYERS, "packing", "scale", "resume", "all"])
    ap.add_argument("--shape", type=parse_shape, default=None,
                    help="record shape, e.g. 512x512 (default: store runs 512x512 and 64x192, loader 512x512)")
    ap.add_argument("--dtype", default="uint8",
                    help="record dtype (the default store runs' 2 KiB shape is always int32[512])")
    ap.add_argument("--records", type=int, default=None,
                    help=f"records (default {DEFAULT_RECORDS}; the store runs of smaller records get more: "
                         + ", ".join(f"{w.key} {w.factor}x" for w in WORKLOADS if w.factor > 1) + ")")
    ap.add_argument("--workloads", type=lambda s: [x.strip() for x in s.split(",") if x.strip()], default=None,
                    help="comma-separated store workloads: " + ", ".join(WORKLOAD_KEYS)
                         + ", or shape (the --shape run); default: all, or shape when --shape is given")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--workers", type=int, default=4, help="loader workers (threads or processes)")
    ap.add_argument("--threads", type=int, default=None,
                    help="zrecord gather threads (loaderx.set_num_threads); default: the library's")
    ap.add_argument("--runs", type=int, default=None,
                    help="runs per figure for every section (default: sampler 7, store 5 rounds, loader 3)")
    ap.add_argument("--only", type=lambda s: [x.strip() for x in s.split(",") if x.strip()],
                    default=None, help="comma-separated contender names, families or patterns, e.g. "
                    "zrecord,npy-mmap,torch,'original*' "
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
    ap.add_argument("--memory-mib", type=int, default=128,
                    help="size of each record size's data in the memory layer, MiB")
    ap.add_argument("--maint-mib", type=int, default=256,
                    help="size of the store that maint deletes from and compacts, MiB")
    ap.add_argument("--convert-mib", type=int, default=2048,
                    help="size of each array that convert-shards converts, MiB")
    ap.add_argument("--remote-mib", type=int, default=256,
                    help="size of the token rows that remote writes to its S3 server, MiB")
    ap.add_argument("--remote-runs", type=int, default=None,
                    help="rounds of the remote layer, each with fresh caches (default: --runs, else 1)")
    ap.add_argument("--remote-timeout", type=float, default=900.0,
                    help="seconds one epoch of the remote layer may take before its process is killed")
    ap.add_argument("--scale-max", type=int, default=SCALE_SIZES[-1],
                    help="the largest store the scale layer opens, in records")
    ap.add_argument("--resume-steps", type=lambda x: [int(float(v)) for v in x.split(",") if v.strip()],
                    default=list(STEPS), help="comma-separated steps that resume measures a resume at")
    ap.add_argument("--resume-replay-max", type=int, default=10**4,
                    help="the largest step resume also measures without the cursor (by replay)")
    ap.add_argument("--scale-max-shards", type=int, default=SCALE_SHARDS[-1],
                    help="the most shards a dataset of the scale layer has")
    ap.add_argument("--maint-1gib", action="store_true", help="maint on a 1 GiB store (--maint-mib 1024)")
    ap.add_argument("--maint-runs", type=int, default=None, help="delete + compact runs (default 3, --quick 1)")
    ap.add_argument("--maint-codec", choices=["raw", "zstd", "zstd_dict"], default="zstd")
    ap.add_argument("--quick", action="store_true",
                    help="a small configuration: " + ", ".join(f"{k.replace('_', '-')} {v}" for k, v in QUICK.items()))
    ap.add_argument("--original", default=None, metavar="DIR",
                    help=f"where loaderx==1.5.2 is pip-installed with --target (default: ${original.ENV_DIR} "
                         f"or {original.default_dir()})")
    ap.add_argument("--install-original", action="store_true",
                    help="pip install --target the original into that directory when it is missing")
    ap.add_argument("--no-original", action="store_true", help="leave the original out")
    return ap


def apply_quick(args: argparse.Namespace, argv: list[str]) -> None:
    """Fill in the --quick values for every option not given on the command line."""
    given = {a.split("=")[0] for a in argv if a.startswith("--")}
    for k, v in QUICK.items():
        if f"--{k.replace('_', '-')}" not in given:
            setattr(args, k, v)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "_loader-child":
        loader_child(json.loads(argv[1]))
        return 0
    if argv and argv[0] == "_shards-child":
        shards_child(json.loads(argv[1]))
        return 0
    if argv and argv[0] == "_scale-child":
        scale_child(json.loads(argv[1]))
        return 0
    if argv and argv[0] == "_remote-child":
        remote_child(json.loads(argv[1]))
        return 0
    if argv and argv[0] == "_resume-child":
        resume_child(json.loads(argv[1]))
        return 0
    args = parser().parse_args(argv)
    if args.quick:
        apply_quick(args, argv)
    if args.maint_1gib:
        args.maint_mib = 1024
    args.sampler_runs = args.runs or 7
    args.store_runs = args.runs or 5
    args.loader_runs = args.runs or 3
    args.maint_runs = args.maint_runs or (1 if args.quick else 3)
    original.configure(args.original, enabled=not args.no_original, install=args.install_original)

    t_start = time.perf_counter()
    results: dict[str, Any] = {"argv": argv, "started": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
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
        for name, bench in LAYERS.items():
            if args.section in (name, "all"):
                bench(args, results, work)
        if args.section == "packing":  # a part of the loader layer, run on its own
            bench_packing(args, results, work)
        if args.section == "scale":  # tens of GiB of stores at its largest: never part of `all`
            bench_scale(args, results, work)
        if args.section == "resume":
            bench_resume(args, results, work)
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
        write_json(results, args.json)
    if args.plot:
        plot(results, args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
