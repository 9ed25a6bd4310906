"""NumPy: its two random APIs (the sampler references) and `.npy` memory maps
read two ways (`np.take(out=)` into the caller's buffer, and plain fancy
indexing, the way most code is written)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from contenders.base import SamplerContender, Store


def _randint(n: int, b: int) -> Callable[[int], None]:
    f = np.random.randint

    def loop(iters: int) -> None:
        for _ in range(iters):
            f(0, n, b)
    return loop


def _default_rng(n: int, b: int) -> Callable[[int], None]:
    f = np.random.default_rng(0).integers

    def loop(iters: int) -> None:
        for _ in range(iters):
            f(0, n, b)
    return loop


# "numpy default_rng" is the reference every sampler ratio is taken against.
SAMPLERS = [SamplerContender("numpy randint", _randint), SamplerContender("numpy default_rng", _default_rng)]


class NpyMmap(Store):
    name = "npy-mmap"
    ext = ".npy"
    how = "np.take(mm, idx, axis=0, out=buf, mode='clip') (mode='raise' buffers the output)"

    def write(self, arr: np.ndarray) -> None:
        np.save(self.path, arr)

    def open(self) -> None:
        self.mm: Any = np.load(self.path, mmap_mode="r")

    def gather(self, idx: np.ndarray, buf: np.ndarray) -> np.ndarray:
        np.take(self.mm, idx, axis=0, out=buf, mode="clip")
        return buf

    def window(self, start: int, stop: int, buf: np.ndarray) -> np.ndarray:
        np.copyto(buf, self.mm[start:stop])
        return buf

    def close(self) -> None:
        mm = getattr(self, "mm", None)
        if mm is not None:
            if getattr(mm, "_mmap", None) is not None:
                mm._mmap.close()
            self.mm = None


class NpyMmapFancy(NpyMmap):
    """The same file read the way most code is written: mm[idx] and mm[a:b]."""

    name = "npy-mmap-fancy"
    shares = "npy-mmap"
    allocates = "yes (mm[idx] returns a new array)"
    how = "mm[idx] / mm[a:b].copy(): plain fancy indexing, a new array per batch"

    def gather(self, idx: np.ndarray, buf: np.ndarray) -> np.ndarray:
        return self.mm[idx]

    def window(self, start: int, stop: int, buf: np.ndarray) -> np.ndarray:
        return self.mm[start:stop].copy()


STORES: list[type[Store]] = [NpyMmap, NpyMmapFancy]
