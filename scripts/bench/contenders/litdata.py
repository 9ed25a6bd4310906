"""LitData: `optimize(...)` into a local directory of chunk files, read by
index through `StreamingDataset(input_dir=...)`, with its default decoding
and with ``batch_decode=0``.

Its default (``batch_decode="auto"``) deserialises an aligned window of rows
around each index it is asked for (up to 256 rows, fewer for records of
64 KiB and more, by its own rule), so a random read decodes a window per
record; ``batch_decode=0`` decodes only the row asked for.
"""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
from typing import Any

import numpy as np

from contenders.base import Store

VERSION = ("litdata", "litdata")

WRITER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "litdata_writer.py")


class LitData(Store):
    name = "litdata"
    module = "litdata"
    pip = "litdata"
    batch_decode: Any = None  # None: the default, not passed
    allocates = "yes (an array per record, stacked into a new batch)"
    how = ("optimize(fn, spans, output_dir, num_workers=1, chunk_bytes='64MB') in a process of its own "
           "(litdata_writer.py), no compression (its default); StreamingDataset(input_dir=dir) with "
           "batch_decode left at its default ('auto'), ds[i] per index, np.stack of the rows")

    def write(self, arr: np.ndarray) -> None:
        npy = self.path + ".src.npy"
        np.save(npy, arr)
        try:  # its progress output is captured, not shown
            p = subprocess.run([sys.executable, "-P", WRITER, npy, self.path], capture_output=True, text=True,
                               timeout=3600)
        finally:
            os.unlink(npy)
        lines = p.stdout.strip().splitlines()
        if p.returncode != 0 or not lines or not lines[-1].startswith("{"):
            tail = " | ".join((p.stderr or p.stdout).strip().splitlines()[-3:])
            raise RuntimeError(f"litdata optimize() exited with {p.returncode}: {tail[:300]}")
        # optimize()'s own time: not the .npy it reads nor the interpreter's start
        self.write_seconds = float(json.loads(lines[-1])["seconds"])

    def open(self) -> None:
        from litdata import StreamingDataset
        kw = {} if self.batch_decode is None else {"batch_decode": self.batch_decode}
        self.ds: Any = StreamingDataset(input_dir=self.path, **kw)

    def note(self) -> str | None:
        """How many rows its default decodes per read, as it resolved `auto` for this data."""
        if self.batch_decode is not None:
            return None
        self.ds[0]  # the item loader is set up by the first read
        loader = getattr(getattr(getattr(self.ds, "cache", None), "_reader", None), "_item_loader", None)
        rows = getattr(loader, "_batch_rows", None)
        if rows is None:
            return None
        return (f"batch_decode \"auto\" (its default) decodes the aligned window of {rows} rows "
                "that holds each index read")

    def gather(self, idx: np.ndarray, buf: np.ndarray) -> np.ndarray:
        ds = self.ds
        return np.stack([ds[i]["x"] for i in idx.tolist()])

    def window(self, start: int, stop: int, buf: np.ndarray) -> np.ndarray:
        ds = self.ds
        return np.stack([ds[i]["x"] for i in range(start, stop)])

    def close(self) -> None:
        self.ds = None
        gc.collect()


class LitDataPerItem(LitData):
    name = "litdata batch_decode=0"
    shares = "litdata"
    batch_decode = 0
    how = "the litdata files with StreamingDataset(input_dir=dir, batch_decode=0): each row decoded alone"


STORES: list[type[Store]] = [LitData, LitDataPerItem]
