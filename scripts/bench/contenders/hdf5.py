"""HDF5 through h5py: one chunk per record, unfiltered and with gzip."""

from __future__ import annotations

from typing import Any

import numpy as np

from contenders.base import MiB, Store

VERSION = ("h5py", "h5py")


class Hdf5(Store):
    name = "hdf5"
    module = "h5py"
    pip = "h5py"
    ext = ".h5"
    how = ("h5py, one chunk per record, no filter: Dataset.id.read_direct_chunk into each "
           "row of buf (faster here than dset[idx], read_direct or per-record dset[i])")
    compression: str | None = None

    def write(self, arr: np.ndarray) -> None:
        import h5py
        with h5py.File(self.path, "w") as f:
            d = f.create_dataset("data", shape=arr.shape, dtype=arr.dtype,
                                 chunks=(1, *arr.shape[1:]), compression=self.compression)
            step = max(1, (64 * MiB) // max(1, arr[0].nbytes))
            for s in range(0, len(arr), step):
                d[s:s + step] = arr[s:s + step]

    def open(self) -> None:
        import h5py
        self.f: Any = h5py.File(self.path, "r")
        self.d = self.f["data"]
        self.zero = (0,) * (len(self.shape))

    def gather(self, idx: np.ndarray, buf: np.ndarray) -> np.ndarray:
        flat = buf.reshape(len(buf), -1).view(np.uint8)
        rdc = self.d.id.read_direct_chunk
        z = self.zero
        for k, j in enumerate(idx.tolist()):
            rdc((j, *z), out=flat[k])
        return buf

    def window(self, start: int, stop: int, buf: np.ndarray) -> np.ndarray:
        self.d.read_direct(buf, np.s_[start:stop])
        return buf

    def close(self) -> None:
        f = getattr(self, "f", None)
        if f is not None:
            f.close()
            self.f = None


class Hdf5Gzip(Hdf5):
    name = "hdf5-gzip"
    compression = "gzip"
    compresses = True
    how = ("h5py gzip (level 4, h5py's default), one chunk per record: low-level "
           "Dataset.id.read of each record into a row of buf (through the filter pipeline)")

    def open(self) -> None:
        super().open()
        import h5py
        self.fspace = self.d.id.get_space()
        self.mspace = h5py.h5s.create_simple((1, *self.shape))
        self.tail = (0,) * len(self.shape)
        self.count = (1, *self.shape)

    def gather(self, idx: np.ndarray, buf: np.ndarray) -> np.ndarray:
        fs, ms, rd = self.fspace, self.mspace, self.d.id.read
        tail, count = self.tail, self.count
        for k, j in enumerate(idx.tolist()):
            fs.select_hyperslab((j, *tail), count)
            rd(ms, fs, buf[k:k + 1])
        return buf


STORES: list[type[Store]] = [Hdf5, Hdf5Gzip]
