"""PyTorch's DataLoader over a map-style dataset of `.npy` memory maps, with
worker processes (the usual way to feed a training loop from files)."""

from __future__ import annotations

import gc
import os
from collections.abc import Iterator
from typing import Any

import numpy as np
from data import augment_sample
from report import log

from contenders.base import Batches, LoaderContender, installed

VERSION = ("torch", "torch")


class NpyPairDataset:
    """Map-style dataset for torch's DataLoader: per-sample arrays from .npy maps."""

    def __init__(self, data_path: str, label_path: str, n: int, augment: bool) -> None:
        self.data_path, self.label_path, self.n, self.augment = data_path, label_path, n, augment
        self.data: Any = None
        self.label: Any = None

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[np.ndarray, Any]:
        if self.data is None:  # opened lazily, inside each worker
            self.data = np.load(self.data_path, mmap_mode="r")
            self.label = np.load(self.label_path, mmap_mode="r")
        x = self.data[i]
        if self.augment:
            x = augment_sample(x)
        return x, self.label[i]


class TorchLoader(LoaderContender):
    name = "torch"

    def available(self) -> str | None:
        return None if installed("torch") else "not installed (pip install torch)"

    def prepare(self, ldir: str, data: np.ndarray, labels: np.ndarray) -> dict[str, Any]:
        dpath, lpath = os.path.join(ldir, "data.npy"), os.path.join(ldir, "label.npy")
        log("[loader] writing .npy files ...")
        np.save(dpath, data)
        np.save(lpath, labels)
        return {"data": dpath, "label": lpath}

    def open(self, cfg: dict[str, Any]) -> Batches:
        import torch
        from torch.utils.data import DataLoader

        w = cfg["workers"]
        ds = NpyPairDataset(cfg["data"], cfg["label"], cfg["records"], cfg["transform"] == "augment")
        g = torch.Generator()
        g.manual_seed(0)
        dl = DataLoader(ds, batch_size=cfg["batch"], shuffle=True, num_workers=w, drop_last=True,
                        persistent_workers=w > 0, generator=g)

        def endless() -> Iterator[Any]:
            while True:
                yield from dl
        it = endless()

        def get() -> np.ndarray:
            x, _y = next(it)
            return x

        def close() -> None:
            it.close()  # ends the epoch iterator, which shuts its workers down
            gc.collect()
        return get, close


LOADERS: list[LoaderContender] = [TorchLoader()]
