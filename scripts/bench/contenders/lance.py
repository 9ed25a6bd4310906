"""Lance (`pylance`): a Lance dataset on the local file system, one fixed-size
list column holding each record flattened."""

from __future__ import annotations

from typing import Any

import numpy as np

from contenders.arrow_rows import fixed_size_lists, records
from contenders.base import Store

VERSION = ("lance", "pylance")


class Lance(Store):
    name = "lance"
    module = "lance"
    pip = "pylance"
    compresses = True  # its file format picks an encoding per column page
    allocates = "yes (an Arrow table per batch, viewed as NumPy)"
    how = ("lance.write_dataset of one fixed-size-list column (defaults); LanceDataset.take(idx, "
           "columns=['x']) for random, to_table(columns=['x'], offset=, limit=) for windows, the "
           "column's values viewed as NumPy and reshaped")

    def write(self, arr: np.ndarray) -> None:
        import lance
        import pyarrow as pa
        lance.write_dataset(pa.table({"x": fixed_size_lists(arr)}), self.path, mode="create")

    def open(self) -> None:
        import lance
        self.ds: Any = lance.dataset(self.path)

    def gather(self, idx: np.ndarray, buf: np.ndarray) -> np.ndarray:
        return records(self.ds.take(idx, columns=["x"]).column("x"), len(idx), self.shape)

    def window(self, start: int, stop: int, buf: np.ndarray) -> np.ndarray:
        t = self.ds.to_table(columns=["x"], offset=start, limit=stop - start)
        return records(t.column("x"), stop - start, self.shape)

    def close(self) -> None:
        self.ds = None


STORES: list[type[Store]] = [Lance]
