"""MosaicML Streaming: an MDS dataset written to a local directory
(`MDSWriter`) and read by index through `StreamingDataset(local=...)`.

mosaicml-streaming 0.13 pins numpy<2.2, so it installs with --no-deps, then
what it imports: ``pip install --no-deps mosaicml-streaming`` and
``pip install torch transformers zstd python-snappy Brotli catalogue xxhash``
(its dataset is a torch IterableDataset: it does not import without torch).
"""

from __future__ import annotations

import gc
from typing import Any

import numpy as np

from contenders.base import Store

VERSION = ("streaming", "mosaicml-streaming")

INSTALL = ("--no-deps mosaicml-streaming, then pip install torch transformers zstd python-snappy "
           "Brotli catalogue xxhash; 0.13 pins numpy<2.2")


class MosaicStreaming(Store):
    name = "mosaic-streaming"
    module = "streaming"
    pip = INSTALL
    allocates = "yes (an array per record, stacked into a new batch)"
    how = ("MDSWriter(columns={'x': 'ndarray:<dtype>:<shape>'}), no compression (its default); "
           "StreamingDataset(local=dir)[idx list] / [a:b] (one decode per record), np.stack of the rows")

    def write(self, arr: np.ndarray) -> None:
        from streaming import MDSWriter
        enc = f"ndarray:{arr.dtype.name}:{','.join(str(d) for d in arr.shape[1:])}"
        with MDSWriter(out=self.path, columns={"x": enc}, progress_bar=False) as w:
            for rec in arr:
                w.write({"x": rec})

    def open(self) -> None:
        from streaming import StreamingDataset
        self.ds: Any = StreamingDataset(local=self.path)

    def gather(self, idx: np.ndarray, buf: np.ndarray) -> np.ndarray:
        return np.stack([r["x"] for r in self.ds[idx.tolist()]])

    def window(self, start: int, stop: int, buf: np.ndarray) -> np.ndarray:
        return np.stack([r["x"] for r in self.ds[start:stop]])

    def close(self) -> None:
        self.ds = None
        gc.collect()


STORES: list[type[Store]] = [MosaicStreaming]
