"""The type checker bites: ``make check`` runs mypy over loaderx/ with the
configuration of pyproject.toml, and a wrong annotation on a public function
fails it.

Each case copies the package into a temporary directory, changes one
annotation of a public function so that it no longer holds, and runs mypy
there with the project's configuration: the run must fail, naming that line.
The unchanged copy must pass, so the failure is the change's. The checks
reuse the checkout's mypy cache when there is one (``make check`` leaves it),
which keeps each run under a second.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("mypy", reason="mypy is not installed (the test extra)")

ROOT = Path(__file__).resolve().parent.parent
if not (ROOT / "loaderx" / "__init__.py").is_file() or not (ROOT / "pyproject.toml").is_file():
    pytest.skip("the package's sources are not beside the tests (a run against an installed wheel)",
                allow_module_level=True)

# (file, annotation as written, the wrong one, what mypy must say)
CASES = [
    ("loaderx/__init__.py", "def get_num_threads() -> int:", "def get_num_threads() -> str:",
     'Incompatible return value type (got "int", expected "str")'),
    ("loaderx/__init__.py", "def set_num_threads(n: int) -> None:", "def set_num_threads(n: str) -> None:",
     'Argument 1 to "set_threads" has incompatible type "str"'),
    ("loaderx/store/dataset.py",
     "    def gather(self, indices: IndexLike, out: np.ndarray | None = None) -> np.ndarray:",
     "    def gather(self, indices: IndexLike, out: np.ndarray | None = None) -> bytes:",
     "Incompatible return value type"),
]


@pytest.fixture(scope="module")
def copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("typed")
    # copytree keeps the files' times, so the checkout's cache holds for the copy
    shutil.copytree(ROOT / "loaderx", root / "loaderx",
                    ignore=shutil.ignore_patterns("__pycache__", "*.so", "*.dylib", "*.dll"))
    shutil.copy2(ROOT / "pyproject.toml", root / "pyproject.toml")
    return root


def mypy(root: Path) -> subprocess.CompletedProcess[str]:
    """mypy over the copy, from a fresh copy of the checkout's cache each time: a
    cache that saw a changed file could take the restored one (same size, same
    second) for the changed one."""
    cache = root / "mypy-cache"
    shutil.rmtree(cache, ignore_errors=True)
    if (ROOT / ".mypy_cache").is_dir():
        shutil.copytree(ROOT / ".mypy_cache", cache)
    return subprocess.run([sys.executable, "-m", "mypy", "--no-color-output", "--cache-dir", str(cache)], cwd=root,
                          capture_output=True, text=True, timeout=600)


def test_the_package_checks_clean(copy: Path) -> None:
    res = mypy(copy)
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]
    assert "Success: no issues found" in res.stdout


@pytest.mark.parametrize("case", CASES, ids=[c[2].split("(")[0].split()[-1] for c in CASES])
def test_a_wrong_annotation_fails_the_check(copy: Path, case: tuple[str, str, str, str]) -> None:
    rel, right, wrong, message = case
    path = copy / rel
    text = path.read_text(encoding="utf-8")
    assert text.count(right) == 1, f"{rel} no longer has {right!r}: update this test"
    line = text[: text.index(right)].count("\n") + 1
    times = path.stat()
    path.write_text(text.replace(right, wrong), encoding="utf-8")
    try:
        res = mypy(copy)
    finally:
        path.write_text(text, encoding="utf-8")
        os.utime(path, ns=(times.st_atime_ns, times.st_mtime_ns))
    assert res.returncode == 1, res.stdout[-4000:]
    errors = [ln for ln in res.stdout.splitlines() if ": error: " in ln]
    assert errors and all(ln.startswith(f"{rel}:") for ln in errors), res.stdout[-4000:]
    assert any(message in ln for ln in errors), res.stdout[-4000:]
    # the error is at the function, or in its body
    assert all(int(ln.split(":")[1]) >= line for ln in errors), (line, errors)
