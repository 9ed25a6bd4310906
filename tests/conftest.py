"""Shared test setup: make the repository importable and the native library present.

Before any test module imports loaderx, the native library is built with
python/build_native.py when it is missing or older than the Go sources (once
per session; a lock file serialises concurrent pytest processes). Set
LOADERX_LIB to test a library built elsewhere (nothing is built then), or
LOADERX_NO_BUILD=1 to never build.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import signal
import sys
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

# the session's S3 server (SeaweedFS), for tests that take the s3server fixture
from s3server import s3server  # noqa: F401

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

#: The Go sources the library is built from.
_GO_SOURCES = ("capi", "steppack", "steppipe", "zrecord", "zsampler")


def load_build_native() -> ModuleType:
    """Import python/build_native.py (python/ is not a package)."""
    name = "loaderx_build_native"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, ROOT / "python" / "build_native.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _newest_source() -> float:
    newest = max((ROOT / f).stat().st_mtime for f in ("go.mod", "go.sum") if (ROOT / f).exists())
    for top in _GO_SOURCES:
        for dirpath, _, files in os.walk(ROOT / top):
            for f in files:
                if f.endswith(".go") and not f.endswith("_test.go"):
                    newest = max(newest, os.stat(os.path.join(dirpath, f)).st_mtime)
    return newest


def _needs_build(lib: Path) -> bool:
    cdef = lib.parent / "cdef.h"
    if not lib.exists() or not cdef.exists():
        return True
    return min(lib.stat().st_mtime, cdef.stat().st_mtime) < _newest_source()


def ensure_library() -> None:
    """Build the native library unless it is present and current."""
    if os.environ.get("LOADERX_LIB") or os.environ.get("LOADERX_NO_BUILD"):
        return
    build_native = load_build_native()
    lib = ROOT / "loaderx" / "lib" / build_native.library_filename()
    if not _needs_build(lib):
        return
    lib.parent.mkdir(parents=True, exist_ok=True)
    lock_path = Path(tempfile.gettempdir()) / f"loaderx-build-{hashlib.sha1(bytes(ROOT)).hexdigest()[:12]}.lock"
    with open(lock_path, "w") as lock:
        try:
            import fcntl
        except ImportError:  # Windows: no lock, concurrent builds just repeat work
            pass
        else:
            fcntl.flock(lock, fcntl.LOCK_EX)
        if _needs_build(lib):
            try:
                build_native.build(lib.parent)
            except RuntimeError as e:
                if not lib.exists():
                    raise
                # A half-edited Go tree should not stop the Python tests: keep
                # testing the library that is there, and say so.
                warnings.warn(f"rebuilding the native library failed, testing the old one: {e}", stacklevel=1)


ensure_library()


@pytest.fixture(scope="session")
def build_native() -> ModuleType:
    """python/build_native.py, imported."""
    return load_build_native()


@pytest.fixture(scope="session")
def native() -> ModuleType:
    """The binding module, loaderx.store._native."""
    from loaderx.store import _native

    return _native


@pytest.fixture
def store_path(tmp_path: Path) -> Path:
    """A path where a test may create a store (it does not exist yet)."""
    return tmp_path / "store"


@pytest.fixture
def raw_store(native: ModuleType, store_path: Path) -> Iterator[int]:
    """An empty writable raw store, closed after the test."""
    h = native.store_create(str(store_path), "raw")
    try:
        yield h
    finally:
        native.store_close(h)


@pytest.fixture
def deadline() -> Iterator[None]:
    """Fail the test instead of hanging: SIGALRM after 600 s (POSIX): generous, as a loaded machine is slow, but finite."""

    def expired(signum: int, frame: Any) -> None:
        raise TimeoutError("the test did not finish within 600 s (a hang)")

    old = signal.signal(signal.SIGALRM, expired)
    signal.alarm(600)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
