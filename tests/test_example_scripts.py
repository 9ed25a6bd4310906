"""The scripts in examples/ run on small data: the PyTorch and JAX digits
MLPs resume bit-identically, two torchrun ranks draw disjoint batches and
end with equal weights, a token classifier learns from packed ragged
batches, and the process-worker augmentation yields the thread mode's
batches and resumes exactly, and the mixture language model checkpointed on
two ranks resumes on one with the same losses, as does the JAX causal
language model on a packed token-weighted mixture. Each is skipped, saying why, when its framework
(or scikit-learn, the data source) is missing; the augmentation needs only
NumPy."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"


def needs(*modules: str) -> pytest.MarkDecorator:
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    return pytest.mark.skipif(bool(missing), reason=f"{', '.join(missing)} not installed")


def run(args: list[str], **env: str) -> str:
    proc = subprocess.run(
        args, capture_output=True, text=True, timeout=600, cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), **env},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def weights(out: str) -> str:
    last = out.strip().splitlines()[-1]
    assert "test accuracy" in last, out
    return last.split("weights ")[1]


@pytest.mark.parametrize(
    ("script", "modules", "env"),
    [
        ("torch_digits.py", ("torch", "sklearn"), {}),
        ("jax_digits.py", ("jax", "sklearn"), {"XLA_FLAGS": "--xla_force_host_platform_device_count=2"}),
    ],
)
def test_digits_resume_is_exact(tmp_path: Path, script: str, modules: tuple[str, ...], env: dict[str, str]) -> None:
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        pytest.skip(f"{', '.join(missing)} not installed")
    cmd = [sys.executable, str(EXAMPLES / script), "--workdir", str(tmp_path), "--steps", "60"]
    out = run([*cmd, "--stop-after", "25"], **env)
    assert "checkpoint at step 25" in out
    out = run(cmd, **env)
    assert "resumed at step 25" in out
    resumed = weights(out)
    for ckpt in tmp_path.glob("*_ckpt.*"):
        ckpt.unlink()
    straight = weights(run(cmd, **env))
    assert resumed == straight


@needs("torch", "sklearn")
@pytest.mark.skipif(shutil.which("torchrun") is None, reason="torchrun is not on PATH")
def test_torchrun_two_ranks(tmp_path: Path) -> None:
    out = run(["torchrun", "--standalone", "--nproc_per_node=2", str(EXAMPLES / "torch_ddp.py"),
               "--workdir", str(tmp_path), "--steps", "20"])
    assert "2 ranks, 20 steps, disjoint batches, equal weights" in out


@needs("torch")
def test_ragged_tokens_learn_from_packed_batches(tmp_path: Path) -> None:
    out = run([sys.executable, str(EXAMPLES / "torch_ragged_tokens.py"), "--workdir", str(tmp_path),
               "--steps", "120", "--records", "1000"])
    last = out.strip().splitlines()[-1]
    assert last.endswith("on 200 sequences"), out  # the epoch pass saw each held-out sequence once
    accuracy = float(last.split("test accuracy ")[1].split()[0])
    assert accuracy >= 0.9, out  # four topics: tokens misaligned with their labels score near 0.25


def test_process_augment_matches_threads_and_resumes(tmp_path: Path) -> None:
    out = run([sys.executable, str(EXAMPLES / "process_augment.py"), "--workdir", str(tmp_path), "--steps", "15"])
    assert "same batches in both modes" in out
    assert "resumed at step 10: the next 5 batches are identical" in out


def test_demo_converts_with_the_defaults_and_compares_with_np_take(tmp_path: Path) -> None:
    """``make demo``'s script leaves the codec to ``auto`` and says what it
    chose and why, streams the same indices through the loader and through
    ``np.take`` on memory-mapped ``.npy`` files, prints the ratio, and finds
    the same batch in both."""
    out = run([sys.executable, str(ROOT / "scripts" / "demo.py"), "--dir", str(tmp_path),
               "--records", "3000", "--steps", "8", "--batch-size", "64"])
    lines = out.splitlines()
    chose = [line for line in lines if line.startswith("images: codec ")]
    assert chose and "0.5 of this machine's" in chose[0], out  # auto's reason, quoted
    assert any(line.startswith("labels: codec ") for line in lines), out
    ratio = [line for line in lines if line.startswith("loaderx / np.take: ")]
    assert ratio and float(ratio[0].split()[3].rstrip("x")) > 0, out
    assert lines[-1].endswith("the same batch from both: yes"), out
    assert (tmp_path / "images.npy").is_file() and (tmp_path / "images" / "meta.zr").exists(), out


@needs("torch", "sklearn")
def test_examples_run_as_typed_in_a_temporary_workdir(tmp_path: Path) -> None:
    """Without ``--workdir`` an example works under the temporary directory,
    says where, and a second run there finds its stores and checkpoint."""
    script = str(EXAMPLES / "torch_digits.py")
    env = {"TMPDIR": str(tmp_path)}
    out = run([sys.executable, script, "--steps", "12", "--stop-after", "6"], **env)
    workdir = tmp_path / "loaderx-digits"
    assert f"workdir: {workdir}" in out.splitlines()[0], out
    assert (workdir / "torch_ckpt.pt").is_file(), out
    out = run([sys.executable, script, "--steps", "12"], **env)
    assert "resumed at step 6" in out, out


@needs("torch")
@pytest.mark.skipif(shutil.which("torchrun") is None, reason="torchrun is not on PATH")
def test_mixture_lm_resumes_on_one_rank_with_the_two_rank_loss_curve(tmp_path: Path) -> None:
    script = str(EXAMPLES / "mixture_lm.py")
    two = ["torchrun", "--standalone", "--nproc_per_node=2", script, "--workdir", str(tmp_path), "--steps", "10"]

    def losses(out: str) -> dict[int, str]:
        return {int(line.split()[1]): line.split()[3] for line in out.splitlines() if line.startswith("step ")}

    straight = losses(run(two))
    assert sorted(straight) == list(range(10))
    assert "checkpoint at step 4" in run([*two, "--stop-after", "4"])
    out = run([sys.executable, script, "--workdir", str(tmp_path), "--steps", "10", "--resume"])
    assert "resumed at step 4 on 1 rank(s)" in out
    resumed = losses(out)
    assert sorted(resumed) == list(range(4, 10))
    assert all(resumed[s] == straight[s] for s in resumed), (resumed, straight)  # bit-identical, printed as repr
    assert float(straight[9]) < float(straight[0])  # it learns


@needs("jax")
def test_jax_packed_lm_resumes_exactly(tmp_path: Path) -> None:
    """The JAX causal LM on a token-weighted packed mixture: stopped and
    resumed, it gives the losses and the weights of a straight run."""
    env = {"XLA_FLAGS": "--xla_force_host_platform_device_count=2", "JAX_PLATFORMS": "cpu"}
    cmd = [sys.executable, str(EXAMPLES / "jax_packed_lm.py"), "--workdir", str(tmp_path), "--steps", "40"]
    out = run([*cmd, "--stop-after", "20"], **env)
    assert "checkpoint at step 20" in out
    resumed = run(cmd, **env)
    assert "resumed at step 20" in resumed
    (tmp_path / "jax_lm_ckpt.npz").unlink()
    straight = run(cmd, **env)

    def losses(text: str) -> list[str]:
        return [line for line in text.splitlines() if line.startswith("step ") and " loss " in line]

    assert losses(resumed) == losses(straight)[20:]
    assert resumed.strip().splitlines()[-1].split("weights ")[1] == straight.strip().splitlines()[-1].split("weights ")[1]
    summary = straight.strip().splitlines()[-1].split()
    first, last = float(summary[summary.index("first") + 2]), float(summary[summary.index("last") + 2])
    assert last < first, straight  # it learns
