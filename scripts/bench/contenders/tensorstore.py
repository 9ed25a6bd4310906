"""TensorStore: a zarr3 array on the local file system, one chunk per record."""

from __future__ import annotations

from typing import Any

import numpy as np

from contenders.base import Store

VERSION = ("tensorstore", "tensorstore")


class TensorStore(Store):
    name = "tensorstore"
    module = "tensorstore"
    pip = "tensorstore"
    compresses = True
    allocates = "yes (read() returns a new array)"
    how = ("zarr3, chunk = one record, zstd level 3, no cache: "
           "store[idx].read() for random, store[a:b].read() for windows")

    def _spec(self, create: bool, arr: np.ndarray | None = None) -> dict[str, Any]:
        spec: dict[str, Any] = {"driver": "zarr3", "kvstore": {"driver": "file", "path": self.path}}
        if create:
            assert arr is not None
            spec["metadata"] = {
                "shape": list(arr.shape), "data_type": arr.dtype.name,
                "chunk_grid": {"name": "regular",
                               "configuration": {"chunk_shape": [1, *arr.shape[1:]]}},
                "codecs": [{"name": "bytes", "configuration": {"endian": "little"}},
                           {"name": "zstd", "configuration": {"level": 3}}]}
            spec["create"] = True
            spec["delete_existing"] = True
        return spec

    def write(self, arr: np.ndarray) -> None:
        import tensorstore as ts
        t = ts.open(self._spec(True, arr)).result()
        t.write(arr).result()
        del t

    def open(self) -> None:
        import tensorstore as ts
        ctx = ts.Context({"cache_pool": {"total_bytes_limit": 0}})
        self.t: Any = ts.open(self._spec(False), context=ctx).result()

    def gather(self, idx: np.ndarray, buf: np.ndarray) -> np.ndarray:
        return self.t[idx].read().result()

    def window(self, start: int, stop: int, buf: np.ndarray) -> np.ndarray:
        return self.t[start:stop].read().result()

    def close(self) -> None:
        self.t = None


STORES: list[type[Store]] = [TensorStore]
