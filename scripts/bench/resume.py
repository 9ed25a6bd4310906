"""The resume section: the first batch after `load_state_dict` at steps 10^3 to 10^6.

One ragged store, and a Mixture of three ragged stores weighted by their
token counts (weights whose common denominator is in the millions), int32
tokens, both packed in concat mode into 64 rows of 2,048 tokens a step. A
state is taken at each step by one loader that seeks there in turn (each
seek sums the sampler steps since the last one: the preparation is the only
replay). Then, per step, a fresh loader with the default settings loads the
state and yields its first batch, timed from `load_state_dict` on (median of
--runs): with the state's cursor, and, up to --resume-replay-max, without
it, as a state of the release before cursors was loaded (by replay). Last,
a fresh interpreter runs a LoaderIterable over the mixture with two torch
workers (forked) from each state: the time from `iter()` to the first batch
and to the first batch of the second worker, which includes starting the
workers and opening the stores in them.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from typing import Any

import numpy as np
from report import log, median, out, table

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(BENCH_DIR))

#: the steps resumed at
STEPS = (10**3, 10**4, 10**5, 10**6)
ROWS, LENGTH = 64, 2048
#: (name, records, longest record): lengths uniform in [1, longest]
SOURCES = (("web", 20_000, 1_200), ("code", 8_000, 3_000), ("books", 3_000, 8_000))
SEED = 1


def _stores(tmp: str) -> dict[str, str]:
    import loaderx

    paths = {}
    rng = np.random.default_rng(SEED)
    for name, n, longest in SOURCES:
        path = os.path.join(tmp, name)
        lens = rng.integers(1, longest + 1, n)
        loaderx.from_iterator(path, (rng.integers(0, 50_000, k, dtype=np.int32) for k in lens), progress=False)
        paths[name] = path
    return paths


def _token_counts(paths: dict[str, str]) -> dict[str, int]:
    """Each source's tokens: the mixture's weights."""
    import loaderx

    out = {}
    for name, p in paths.items():
        with loaderx.RaggedDataset(p) as ds:
            out[name] = int(ds.lengths().sum())
    return out


def _streams(kind: str, paths: dict[str, str], weights: dict[str, int]) -> Any:
    import loaderx

    if kind == "store":
        return {"tokens": loaderx.RaggedDataset(paths["web"])}
    return loaderx.Mixture({name: {"tokens": loaderx.RaggedDataset(p)} for name, p in paths.items()}, weights)


def _loader(streams: Any, **kw: Any) -> Any:
    import loaderx

    return loaderx.DataLoader(streams, batch_size=ROWS, pack={"tokens": LENGTH}, seed=SEED, **kw)


def _states(kind: str, paths: dict[str, str], weights: dict[str, int],
            steps: list[int]) -> tuple[dict[int, dict[str, Any]], float]:
    """The state at each step (JSON round-tripped), and the seconds it took
    to seek there once, step after step."""
    t0 = time.perf_counter()
    states = {}
    with _loader(_streams(kind, paths, weights), num_workers=0) as prep:
        base = {k: v for k, v in prep.state_dict().items() if k != "cursor"}
        for step in steps:
            prep.load_state_dict({**base, "step": step})
            states[step] = json.loads(json.dumps(prep.state_dict()))
            log(f"[resume] {kind}: state at step {step:,} ({time.perf_counter() - t0:.1f}s so far)")
    return states, time.perf_counter() - t0


def _first_batch(kind: str, paths: dict[str, str], weights: dict[str, int], state: dict[str, Any]) -> float:
    """Seconds from load_state_dict to the first batch of a fresh loader with the default settings."""
    with _loader(_streams(kind, paths, weights)) as dl:
        t0 = time.perf_counter()
        dl.load_state_dict(state)
        batch = next(dl)
        took = time.perf_counter() - t0
        assert batch["tokens"].values.shape == (ROWS, LENGTH)
    return took


def resume_child(cfg: dict[str, Any]) -> None:
    """In a fresh interpreter (torch forks its workers, so this process must
    not load the library): a LoaderIterable over the mixture with two torch
    workers, from each state; prints one JSON line."""
    import torch

    from loaderx.torch import LoaderIterable

    paths = cfg["paths"]
    res = {}
    for step, path in cfg["states"].items():
        with open(path) as f:
            state = json.load(f)
        it = LoaderIterable(_streams("mixture", paths, cfg["weights"]), batch_size=ROWS, pack={"tokens": LENGTH},
                            seed=SEED)
        it.load_state_dict(state)
        t0 = time.perf_counter()
        got = []
        for batch in torch.utils.data.DataLoader(it, batch_size=None, num_workers=2):
            got.append(time.perf_counter() - t0)
            assert tuple(batch["tokens"].values.shape) == (ROWS, LENGTH)
            if len(got) == 2:
                break
        res[step] = got
    print(json.dumps(res), flush=True)


def _torch(paths: dict[str, str], weights: dict[str, int], states: dict[int, dict[str, Any]], tmp: str,
           timeout: float) -> dict[int, list[float]] | str:
    try:
        import torch  # noqa: F401
    except ImportError:
        return "torch is not installed"
    files = {}
    for step, state in states.items():
        files[step] = os.path.join(tmp, f"state-{step}.json")
        with open(files[step], "w") as f:
            json.dump(state, f)
    env = {**os.environ, "PYTHONPATH": REPO + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.run(
        [sys.executable, BENCH_DIR, "_resume-child", json.dumps({"paths": paths, "weights": weights, "states": files})],
        capture_output=True, text=True, timeout=timeout, env=env,
    )
    if proc.returncode != 0:
        return proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else f"exit code {proc.returncode}"
    return {int(k): v for k, v in json.loads(proc.stdout.strip().splitlines()[-1]).items()}


def bench_resume(args: argparse.Namespace, results: dict[str, Any], tmp: str) -> None:
    """Measure the first batch after a resume at every step; print the table, fill results["resume"]."""
    steps = sorted(args.resume_steps)
    runs = args.runs or 3
    out("## Resume")
    out()
    out(f"The first batch after `load_state_dict` at each step, from `load_state_dict` on, for one ragged "
        f"store and a Mixture of three ragged stores weighted by their token counts "
        f"({', '.join(f'{n}: {k:,} records of 1..{m:,} tokens' for n, k, m in SOURCES)}; int32), packed in "
        f"concat mode into {ROWS} rows of {LENGTH} tokens a step, default loader settings; median of {runs} "
        f"runs. `cursor`: the state as a loader saves it; `replay`: the same state without its cursor "
        f"(measured up to step {args.resume_replay_max:,}). `torch`: a LoaderIterable over the mixture with "
        "2 forked torch workers, from `iter()` to the first batch and to the second worker's first batch "
        "(worker start-up and opening the stores included).")
    out()
    work = os.path.join(tmp, "resume")
    os.makedirs(work, exist_ok=True)
    paths = _stores(work)
    weights = _token_counts(paths)
    rows, prep, states_of = [], {}, {}
    for kind in ("store", "mixture"):
        states, took = _states(kind, paths, weights, steps)
        states_of[kind], prep[kind] = states, took
        for step in steps:
            cursor = median([_first_batch(kind, paths, weights, states[step]) for _ in range(runs)])
            replay = None
            if step <= args.resume_replay_max:
                old = {k: v for k, v in states[step].items() if k != "cursor"}
                replay = median([_first_batch(kind, paths, weights, old) for _ in range(runs)])
            rows.append({"kind": kind, "step": step, "cursor_s": cursor, "replay_s": replay,
                         "cursor_bytes": len(json.dumps(states[step]["cursor"])),
                         "cursor": states[step]["cursor"]})
            log(f"[resume] {kind} at {step:,}: cursor {cursor:.3f}s"
                + ("" if replay is None else f", replay {replay:.3f}s"))
    got = _torch(paths, weights, states_of["mixture"], work, args.loader_timeout)
    torch_rows = got if isinstance(got, dict) else {}
    for r in rows:
        t = torch_rows.get(r["step"]) if r["kind"] == "mixture" else None
        r["torch_first_s"], r["torch_each_s"] = (t[0], t[1]) if t else (None, None)
    if isinstance(got, str):
        out(f"- torch skipped: {got}")
        out()

    def s(x: float | None) -> str:
        return "—" if x is None else f"{x:.3f} s"

    out(table(["source", "step", "cursor", "replay", "torch: first batch", "torch: each worker's",
               "cursor size"],
              [[r["kind"], f"{r['step']:,}", s(r["cursor_s"]), s(r["replay_s"]), s(r["torch_first_s"]),
                s(r["torch_each_s"]), f"{r['cursor_bytes']} B"] for r in rows]))
    out()
    out("Taking the states (one loader seeking to each step in turn, counting every sampler step once): "
        + ", ".join(f"{k} {v:.0f} s" for k, v in prep.items()) + ".")
    out()
    ratios = {}
    for kind in ("store", "mixture"):
        by = {r["step"]: r["cursor_s"] for r in rows if r["kind"] == kind}
        if len(by) > 1:
            ratios[kind] = by[steps[0]] / by[steps[-1]]
    results["resume"] = {"steps": steps, "rows": ROWS, "length": LENGTH, "runs": runs, "table": rows,
                         "prepare_s": prep, "first_over_last": ratios}
