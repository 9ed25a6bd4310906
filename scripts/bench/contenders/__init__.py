"""The contenders: one adapter module per library, registered here per layer.

The ragged loader row's contenders are in ``ragged`` (``RAGGED_LOADERS``),
the packing rows' in ``packing`` (``PACK_LOADERS``).
The tuples below fix the order of each layer's table. To add a contender,
write its adapter module (see ``base`` for what it may define) and list it in
the layers it takes part in.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence
from types import ModuleType

from contenders import (
    arrayrecord,
    blosc2,
    grain,
    hdf5,
    hfdatasets,
    lance,
    litdata,
    loaderx,
    numpy,
    original,
    streaming,
    tensorstore,
    torch,
)
from contenders.base import LoaderContender, SamplerContender, Store
from contenders.packing import PACK_LOADERS
from contenders.ragged import RAGGED_LOADERS

SAMPLER_MODULES: tuple[ModuleType, ...] = (numpy, loaderx, original)
STORE_MODULES: tuple[ModuleType, ...] = (loaderx, original, numpy, hdf5, blosc2, tensorstore, arrayrecord,
                                         hfdatasets, lance, streaming, litdata)
LOADER_MODULES: tuple[ModuleType, ...] = (loaderx, original, torch, grain, hfdatasets)

STORES: list[type[Store]] = [cls for m in STORE_MODULES for cls in m.STORES]
LOADERS: list[LoaderContender] = [c for m in LOADER_MODULES for c in m.LOADERS]

# (import name, distribution) of every optional library, for the machine block
VERSIONED: list[tuple[str, str]] = [
    m.VERSION for m in (hdf5, blosc2, tensorstore, arrayrecord, torch, grain, hfdatasets, lance, streaming,
                        litdata) if hasattr(m, "VERSION")
]


def samplers() -> tuple[list[SamplerContender], list[str]]:
    """The runnable sampler contenders in table order, and a skip line per family that cannot run."""
    found: list[SamplerContender] = []
    skipped: list[str] = []
    for m in SAMPLER_MODULES:
        check = getattr(m, "check_samplers", None)
        why = check() if check else None
        if why:
            skipped.append(why)
        else:
            found += m.SAMPLERS
    return found, skipped


def known_names() -> set[str]:
    """Every contender name of every layer."""
    names = {c.name for m in SAMPLER_MODULES for c in m.SAMPLERS}
    names |= {cls.name for cls in STORES}
    names |= {c.name for c in LOADERS}
    names |= {c.name for c in RAGGED_LOADERS}
    names |= {c.name for c in PACK_LOADERS}
    return names


def selected(only: Sequence[str] | None, name: str) -> bool:
    """--only takes exact names, a family prefix such as `zrecord` or `zsampler`
    (when it is not itself a contender's name: `loaderx` is the zstd loader
    only), or a shell pattern such as `original*`."""
    if not only:
        return True
    known = known_names()
    for o in only:
        if o == name or o.replace("-", " ") == name:
            return True
        if any(ch in o for ch in "*?[") and fnmatch.fnmatchcase(name, o):
            return True
        if o not in known and (name.startswith(o + "-") or name.startswith(o + " ")):
            return True
    return False


def loader_named(name: str) -> LoaderContender:
    """The loader contender called `name` (in a loader's child process)."""
    for c in [*LOADERS, *RAGGED_LOADERS, *PACK_LOADERS]:
        if c.name == name:
            return c
    raise SystemExit(f"unknown loader {name}")
