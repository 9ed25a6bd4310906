"""Builds the Go core (capi/, zrecord/, zsampler/) into loaderx/lib/ as part of
every install: ``pip install .`` builds it into the wheel, ``pip install -e .``
builds it in place. The Python side loads it with cffi in ABI mode, so a wheel
does not depend on the CPython ABI: it is tagged ``py3-none-<platform>``."""

import os
import sys

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))


def _build_native(out_dir: str) -> None:
    sys.path.insert(0, os.path.join(HERE, "python"))
    try:
        from build_native import build
    finally:
        sys.path.pop(0)
    build(out_dir)


class BuildPyWithGo(build_py):
    """build_py that also compiles the Go shared library."""

    def run(self) -> None:
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
