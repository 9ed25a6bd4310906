"""The C smoke program the release checks run on every platform must keep
up with the ABI: compile it here against the built library and run it."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from loaderx.store import _native

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.skipif(sys.platform != "linux", reason="the smoke program is built with the system C compiler on Linux")
def test_abi_smoke_program_passes(tmp_path):
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler on PATH")
    exe = tmp_path / "abi_smoke"
    subprocess.run([cc, "-O1", "-o", str(exe), str(ROOT / "python" / "abi_smoke.c"), "-ldl"], check=True)
    r = subprocess.run(
        [str(exe), str(_native.library_path), str(tmp_path / "store")], capture_output=True, text=True, timeout=600
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "8 passed, 0 failed" in r.stdout
