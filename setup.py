"""Builds the Go core (capi/, steppack/, steppipe/, zrecord/, zsampler/) into loaderx/lib/ as part of
every install: ``pip install .`` builds it into the wheel, ``pip install -e .``
builds it in place. The Python side loads it with cffi in ABI mode, so a wheel
does not depend on the CPython ABI: it is tagged ``py3-none-<platform>``."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))


#: The oldest Go that builds the core (the go directive of go.mod).
GO_MIN = "1.25"


def _go_command() -> str | None:
    """The go command the build will run, or None when there is none."""
    return os.environ.get("GO") or shutil.which("go")


def _c_compiler(go: str) -> str | None:
    """The C compiler cgo will run (``go env CC``), or None when it is missing."""
    cc = os.environ.get("CC")
    if not cc:
        try:
            cc = subprocess.run([go, "env", "CC"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                                check=True).stdout.strip()
        except (OSError, subprocess.CalledProcessError):
            return None
    exe = shlex.split(cc)[0] if cc.strip() else ""
    return shutil.which(exe) if exe else None


def _build_native(out_dir: str) -> None:
    go = _go_command()
    if not go or not shutil.which(go):
        raise SystemExit(
            f"loaderx: building from source needs Go {GO_MIN} or newer and a C compiler, and no go command "
            "was found on PATH (set GO to its path, or install a prebuilt loaderx wheel instead)."
        )
    if not _c_compiler(go):
        raise SystemExit(
            "loaderx: building from source needs a C compiler for cgo, and none was found "
            "(install gcc or clang, or set CC, or install a prebuilt loaderx wheel instead)."
        )
    sys.path.insert(0, os.path.join(HERE, "python"))
    try:
        from build_native import build
    finally:
        sys.path.pop(0)
    try:
        build(out_dir)
    except RuntimeError as e:
        raise SystemExit(f"loaderx: {e}") from None


class BuildPyWithGo(build_py):
    """build_py that also compiles the Go shared library."""

    def run(self) -> None:
        if not getattr(self, "editable_mode", False):
            # setuptools reuses build/lib between builds and only adds to it, so a
            # module moved or removed since the last build would ship in the wheel
            shutil.rmtree(os.path.join(self.build_lib, "loaderx"), ignore_errors=True)
        super().run()
        if getattr(self, "editable_mode", False):
            target = os.path.join(HERE, "loaderx", "lib")
        else:
            target = os.path.join(self.build_lib, "loaderx", "lib")
        _build_native(target)


class BinaryDistribution(Distribution):
    """The package ships a native library, so its wheel is platform-specific."""

    def has_ext_modules(self) -> bool:
        return True


cmdclass = {"build_py": BuildPyWithGo}

try:
    from wheel.bdist_wheel import bdist_wheel as _bdist_wheel
except ImportError:  # pragma: no cover - wheel is in build-system.requires
    _bdist_wheel = None

if _bdist_wheel is not None:

    class BdistWheelAnyPython(_bdist_wheel):
        """One wheel per platform serves every Python 3: no CPython ABI is used."""

        def get_tag(self):
            _, _, plat = super().get_tag()
            return "py3", "none", plat

    cmdclass["bdist_wheel"] = BdistWheelAnyPython

setup(cmdclass=cmdclass, distclass=BinaryDistribution)
