"""Blosc2 NDArrays on disk, one chunk per record, default compression."""

from __future__ import annotations

from typing import Any

import numpy as np

from contenders.base import Store

VERSION = ("blosc2", "blosc2")


class Blosc2(Store):
    name = "blosc2"
    module = "blosc2"
    pip = "blosc2"
    ext = ".b2nd"
    compresses = True
    how = ("blosc2.asarray with default cparams (zstd, shuffle), one chunk per record: "
           "SChunk.decompress_chunk(i, dst=row of buf)")

    def write(self, arr: np.ndarray) -> None:
        import blosc2
        a = blosc2.asarray(arr, chunks=(1, *arr.shape[1:]), urlpath=self.path, mode="w")
        del a

    def open(self) -> None:
        import blosc2
        self.a: Any = blosc2.open(self.path)
        self.sc = self.a.schunk

    def gather(self, idx: np.ndarray, buf: np.ndarray) -> np.ndarray:
        dec = self.sc.decompress_chunk
        for k, j in enumerate(idx.tolist()):
            dec(j, buf[k])
        return buf

    def close(self) -> None:
        self.a = self.sc = None


STORES: list[type[Store]] = [Blosc2]
