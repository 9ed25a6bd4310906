"""Two torchrun nodes (two node agents on this machine, static rendezvous,
gloo on the CPU) read one sharded dataset through ``DataLoader(...,
shard=(rank, world))``: at every step the two ranks' batches are disjoint
and together are the global batch the sampler gives for that step, and a
second launch resumed from the state saved at step ``K`` draws the same
batches as the uninterrupted launch did from ``K`` on. The per-rank
program is ``tests/torchrun_rank.py``."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import loaderx
from loaderx.sampler import Sampler
from loaderx.store import shards

pytestmark = pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed")

ROOT = Path(__file__).resolve().parent.parent
RANK = Path(__file__).resolve().parent / "torchrun_rank.py"
N, WIDTH, BATCH, STEPS, SAVE_AT = 1000, 4, 8, 12, 5
LAUNCH_TIMEOUT = 240.0  # seconds per launch of both nodes; a hang fails, it does not block the run


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(data: Path, out: Path, phase: str, *extra: str) -> None:
    """Start both node agents, wait for both (killing both process groups
    on a timeout), and fail with their output unless both succeed."""
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    procs = []
    for node in (0, 1):
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", "1",
               "--node-rank", str(node), "--rdzv-backend", "static", "--master-addr", "127.0.0.1",
               "--master-port", str(port), "--max-restarts", "0", str(RANK),
               "--data", str(data), "--out", str(out), "--phase", phase, "--steps", str(STEPS),
               "--batch", str(BATCH), *extra]
        procs.append(subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True, start_new_session=True))
    deadline = time.monotonic() + LAUNCH_TIMEOUT
    outputs = []
    try:
        for p in procs:
            outputs.append(p.communicate(timeout=max(1.0, deadline - time.monotonic()))[0])
    except subprocess.TimeoutExpired:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
        for p in procs:
            p.communicate()
        pytest.fail(f"{phase}: the two torchrun nodes did not finish within {LAUNCH_TIMEOUT:.0f} s")
    for node, (p, text) in enumerate(zip(procs, outputs)):
        assert p.returncode == 0, f"{phase}: node {node} exited with {p.returncode}:\n{text}"


def drawn(out: Path, phase: str) -> dict[int, dict[int, list[int]]]:
    """``{rank: {step: ids}}`` of one launch."""
    found = {}
    for rank in (0, 1):
        doc = json.loads((out / f"{phase}-rank{rank}.json").read_text())
        assert doc["world"] == 2 and doc["rank"] == rank
        found[rank] = {int(k): v for k, v in doc["drawn"].items()}
    return found


def test_two_nodes_split_every_global_batch_and_resume(tmp_path: Path) -> None:
    data = tmp_path / "data"
    rows = np.arange(N, dtype=np.int64)[:, None] + np.arange(WIDTH, dtype=np.int64)
    loaderx.from_numpy(data, rows, codec="zstd", num_shards=3)
    assert len(shards.read_manifest(data).shards) == 3
    out = tmp_path / "out"
    out.mkdir()

    launch(data, out, "straight", "--save-at", str(SAVE_AT))
    straight = drawn(out, "straight")
    sampler = Sampler("cyclic", N, BATCH * 2, seed=0)
    for step in range(STEPS):
        whole = sampler(step).tolist()
        a, b = straight[0][step], straight[1][step]
        assert not set(a) & set(b), f"step {step}: the ranks overlap"
        assert a == whole[:BATCH] and b == whole[BATCH:], f"step {step}: not the sampler's global batch"
    for rank in (0, 1):
        assert json.loads((out / f"state-rank{rank}.json").read_text())["step"] == SAVE_AT

    launch(data, out, "resumed", "--resume")
    resumed = drawn(out, "resumed")
    for rank in (0, 1):
        assert sorted(resumed[rank]) == list(range(SAVE_AT, STEPS))
        for step in range(SAVE_AT, STEPS):
            assert resumed[rank][step] == straight[rank][step], f"rank {rank} step {step} differs after resume"
