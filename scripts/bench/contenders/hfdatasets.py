"""Hugging Face `datasets`: an Arrow dataset saved to disk and memory-mapped back
(`save_to_disk` / `load_from_disk`), read as NumPy batches.

Three ways a user reads it, each a row:

* ``hf-datasets``: each record a flat fixed-length list (``List(Value(dtype),
  length=)``), read with ``with_format("numpy", dtype=<record dtype>)[idx]``
  and reshaped to the record shape: the fastest way we found;
* ``hf-datasets-array``: the record shape kept in the schema with the
  ``Array2D`` .. ``Array5D`` feature, whose nested lists are decoded level by
  level (in a quick run here 15x slower than the flat list on random 12 KiB
  records, on par at 256 KiB); 1-D records have no such feature;
* ``hf-datasets (no dtype=)``: the first row's files read with the plain
  ``with_format("numpy")``, which widens every integer to int64: the same
  values in other bytes, so the store layer reports it rather than time it.

The loader layer's row is ``HfLoader``: a ``torch.utils.data.DataLoader`` over
the dataset when torch is installed, else a batched read loop.
"""

from __future__ import annotations

import gc
import os
from collections.abc import Iterator
from typing import Any

import numpy as np
from report import log

from contenders.arrow_rows import fixed_size_lists
from contenders.base import Batches, LoaderContender, Store, installed, stdout_to_stderr

VERSION = ("datasets", "datasets")

_ARRAY_FEATURES = {2: "Array2D", 3: "Array3D", 4: "Array4D", 5: "Array5D"}
_INT32_MAX = (1 << 31) - 1


def _quiet() -> None:
    """No progress bars: they would land in the report."""
    import datasets
    datasets.disable_progress_bars()


def _flat_dataset(columns: dict[str, np.ndarray]) -> Any:
    """A Dataset with one column per array: a record of more than one element
    becomes a flat fixed-length list of its dtype, a scalar stays a Value."""
    from datasets import Dataset, Features, List, Value
    cols: dict[str, Any] = {}
    feats: dict[str, Any] = {}
    for name, arr in columns.items():
        if arr.ndim == 1:
            cols[name] = arr
            feats[name] = Value(arr.dtype.name)
        else:
            cols[name] = fixed_size_lists(arr)
            feats[name] = List(Value(arr.dtype.name), length=int(np.prod(arr.shape[1:])))
    return Dataset.from_dict(cols, features=Features(feats))


class HfDatasets(Store):
    name = "hf-datasets"
    module = "datasets"
    pip = "datasets"
    allocates = "yes (a new array per batch)"
    how = ('save_to_disk of one flat fixed-length list column (List(Value(dtype), length=)), '
           'load_from_disk (memory-mapped Arrow); ds.with_format("numpy", dtype=<record dtype>)[idx] '
           'for random (indices as given), [a:b] for windows, reshaped to the record shape')

    def write(self, arr: np.ndarray) -> None:
        _quiet()
        with stdout_to_stderr():
            _flat_dataset({"x": arr}).save_to_disk(self.path)

    def _format(self, ds: Any) -> Any:
        return ds.with_format("numpy", dtype=self.dtype)

    def open(self) -> None:
        import datasets
        _quiet()
        self.ds: Any = datasets.load_from_disk(self.path)
        self.view = self._format(self.ds)

    def _rows(self, x: np.ndarray, n: int) -> np.ndarray:
        return x.reshape(n, *self.shape)

    def gather(self, idx: np.ndarray, buf: np.ndarray) -> np.ndarray:
        return self._rows(self.view[idx]["x"], len(idx))

    def window(self, start: int, stop: int, buf: np.ndarray) -> np.ndarray:
        return self._rows(self.view[start:stop]["x"], stop - start)

    def close(self) -> None:
        self.view = self.ds = None
        gc.collect()  # unmaps the Arrow files


class HfDatasetsNoDtype(HfDatasets):
    """The files of hf-datasets read with the plain numpy format, as most code does."""

    name = "hf-datasets (no dtype=)"
    shares = "hf-datasets"
    how = ('the hf-datasets files with ds.with_format("numpy")[idx] (no dtype=): every integer '
           'column comes back as int64')

    def _format(self, ds: Any) -> Any:
        return ds.with_format("numpy")

    def _rows(self, x: np.ndarray, n: int) -> np.ndarray:
        return x.reshape(n, *self.shape)  # the values as returned: int64 for an integer record


class HfDatasetsArray(HfDatasets):
    """The record shape in the schema: the ArrayND feature."""

    name = "hf-datasets-array"
    how = ('save_to_disk with the Array2D..Array5D feature of the record shape (nested lists in an '
           'extension type); ds.with_format("numpy", dtype=<record dtype>)[idx] / [a:b]')

    @classmethod
    def unsupported(cls, shape: tuple[int, ...], dtype: np.dtype[Any]) -> str | None:
        if len(shape) not in _ARRAY_FEATURES:
            return (f"{cls.name}: no ArrayND feature for {len(shape)}-D records "
                    "(Array2D..Array5D only; hf-datasets is the fixed-length list)")
        return None

    def write(self, arr: np.ndarray) -> None:
        import datasets.features.features as ff
        import pyarrow as pa
        from datasets import Dataset
        _quiet()
        shape = arr.shape[1:]
        if arr.size > _INT32_MAX:
            raise ValueError(f"{arr.size:,} values: more than the int32 list offsets of an "
                             f"{_ARRAY_FEATURES[len(shape)]} column can address")
        ext = getattr(ff, f"{_ARRAY_FEATURES[len(shape)]}ExtensionType")(shape, arr.dtype.name)
        col: Any = pa.array(np.ascontiguousarray(arr).reshape(-1))
        lists = int(arr.size)
        for d in reversed(shape):  # innermost list level first
            lists //= d
            col = pa.ListArray.from_arrays(np.arange(lists + 1, dtype=np.int32) * d, col)
        col = pa.ExtensionArray.from_storage(ext, col.cast(ext.storage_type))
        del arr
        with stdout_to_stderr():
            Dataset(pa.table({"x": col})).save_to_disk(self.path)

    def _rows(self, x: np.ndarray, n: int) -> np.ndarray:
        return x  # already (n, *shape)


STORES: list[type[Store]] = [HfDatasets, HfDatasetsNoDtype, HfDatasetsArray]


# ---------------------------------------------------------------------------
# loader


class _DataLabelRows:
    """A map-style dataset over the two formatted columns: torch's DataLoader
    calls ``__getitems__`` with a batch's indices (one Arrow take per column)
    and its default collate stacks the rows. The data column is read with its
    own dtype (``dtype=``), the label column with its own (int64), so neither
    is cast to the other's."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.data: Any = None
        self.label: Any = None
        self.n: int | None = None

    def _open(self) -> None:
        import datasets
        _quiet()
        ds = datasets.load_from_disk(self.path)
        dtype = np.dtype(ds.features["data"].feature.dtype)
        self.data = ds.select_columns(["data"]).with_format("numpy", dtype=dtype)
        self.label = ds.select_columns(["label"]).with_format("numpy")
        self.n = len(ds)

    def __len__(self) -> int:
        if self.n is None:
            self._open()
        assert self.n is not None
        return self.n

    def batch(self, indices: list[int]) -> tuple[np.ndarray, np.ndarray]:
        """The data and label arrays of the records at `indices`."""
        if self.data is None:  # opened in each worker
            self._open()
        return self.data[indices]["data"], self.label[indices]["label"]

    def __getitems__(self, indices: list[int]) -> list[tuple[np.ndarray, Any]]:
        x, y = self.batch(indices)
        return list(zip(x, y))

    def __getitem__(self, i: int) -> tuple[np.ndarray, Any]:
        return self.__getitems__([i])[0]


class HfLoader(LoaderContender):
    """What users run over a Hugging Face dataset: torch's DataLoader (shuffle,
    worker processes) when torch is installed; without it, a loop of batched
    reads of shuffled indices through ``with_format("numpy", dtype=)``."""

    name = "hf-datasets"

    def available(self) -> str | None:
        return None if installed("datasets") else "not installed (pip install datasets)"

    def prepare(self, ldir: str, data: np.ndarray, labels: np.ndarray) -> dict[str, Any]:
        path = os.path.join(ldir, "hf-dataset")
        log("[loader] writing the Hugging Face dataset ...")
        _quiet()
        with stdout_to_stderr():
            _flat_dataset({"data": data, "label": labels}).save_to_disk(path)
        return {"data": path, "label": path, "torch": installed("torch")}

    def open(self, cfg: dict[str, Any]) -> Batches:
        b, shape = cfg["batch"], tuple(cfg["shape"])
        rows = _DataLabelRows(cfg["data"])
        if cfg.get("torch"):
            import torch
            from torch.utils.data import DataLoader
            w = cfg["workers"]
            g = torch.Generator()
            g.manual_seed(0)
            dl = DataLoader(rows, batch_size=b, shuffle=True, num_workers=w, drop_last=True,
                            persistent_workers=w > 0, generator=g)

            def endless() -> Iterator[Any]:
                while True:
                    yield from dl
            it = endless()

            def get() -> np.ndarray:
                x, _y = next(it)
                return x.reshape(b, *shape)

            def close() -> None:
                it.close()
                gc.collect()
            return get, close

        n = len(rows)
        rng = np.random.default_rng(0)
        state = {"perm": rng.permutation(n), "pos": 0}

        def get_plain() -> np.ndarray:
            if state["pos"] + b > n:
                state["perm"], state["pos"] = rng.permutation(n), 0
            idx = state["perm"][state["pos"]:state["pos"] + b]
            state["pos"] += b
            x, _y = rows.batch(idx.tolist())
            return x.reshape(b, *shape)

        def close_plain() -> None:
            rows.data = rows.label = None
            gc.collect()
        return get_plain, close_plain


LOADERS: list[LoaderContender] = [HfLoader()]
