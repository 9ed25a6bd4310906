"""The ragged loader row: variable-length int32 token sequences, each batch
packed into ``(values, offsets)`` (``offsets`` with ``batch + 1`` entries).

loaderx's DataLoader over a ragged store (one native packed gather per batch)
against torch's DataLoader over the same tokens in memory-mapped ``.npy``
files (a flat token array and its offsets), packing in its ``collate_fn``.
"""

from __future__ import annotations

import gc
import itertools
import os
from collections.abc import Iterator
from typing import Any

import numpy as np
from report import log

from contenders.base import LoaderContender, installed
from contenders.loaderx import have_loaderx, loaderx_status

#: the token sequences' length range (inclusive) and vocabulary
MIN_LEN, MAX_LEN, VOCAB = 16, 512, 32000


def make_tokens(n: int, seed: int = 4) -> tuple[np.ndarray, np.ndarray]:
    """``n`` sequences of int32 token ids, lengths uniform in MIN_LEN..MAX_LEN:
    the flat tokens and the ``n + 1`` int64 offsets."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(MIN_LEN, MAX_LEN, size=n, endpoint=True)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    tokens = rng.integers(0, VOCAB, size=int(offsets[-1]), dtype=np.int32)
    return tokens, offsets


class RaggedContender(LoaderContender):
    """A loader of the ragged row: ``prepare_tokens`` writes its files,
    ``open`` gives (get, close) where get() returns ``(values, offsets)``."""

    def prepare(self, ldir: str, data: np.ndarray, labels: np.ndarray) -> dict[str, Any]:
        raise TypeError("a ragged loader is prepared with prepare_tokens")

    def prepare_tokens(self, ldir: str, tokens: np.ndarray, offsets: np.ndarray) -> dict[str, Any]:
        raise NotImplementedError


class LoaderxRagged(RaggedContender):
    """loaderx's DataLoader over a ragged store: packed batches from one
    native gather each."""

    def __init__(self, name: str, codec: str) -> None:
        self.name, self.codec = name, codec

    def available(self) -> str | None:
        return None if have_loaderx() else f"loaderx {loaderx_status()}"

    def prepare_tokens(self, ldir: str, tokens: np.ndarray, offsets: np.ndarray) -> dict[str, Any]:
        from loaderx.converter import from_iterator
        path = os.path.join(ldir, f"tokens-{self.codec}")
        log(f"[ragged] writing {self.name} store ...")
        bounds = offsets.tolist()
        from_iterator(path, (tokens[a:b] for a, b in itertools.pairwise(bounds)), codec=self.codec,
                      progress=False)
        return {"data": path}

    def open(self, cfg: dict[str, Any]) -> Any:
        import loaderx
        from loaderx.dataloader import DataLoader
        from loaderx.dataset import RaggedDataset
        if cfg.get("threads"):
            loaderx.set_num_threads(cfg["threads"])
        ds = RaggedDataset(cfg["data"])
        dl = DataLoader({"tokens": ds}, batch_size=cfg["batch"], num_workers=cfg["workers"],
                        sampler="cyclic", seed=0)

        def get() -> tuple[Any, Any]:
            packed = next(dl)["tokens"]
            return packed.values, packed.offsets

        def close() -> None:
            dl.close()
            ds.close()
        return get, close


class TokenDataset:
    """Map-style dataset for torch's DataLoader: sequence ``i`` as a slice of
    the memory-mapped flat tokens."""

    def __init__(self, tokens_path: str, offsets_path: str) -> None:
        self.tokens_path, self.offsets_path = tokens_path, offsets_path
        self.tokens: Any = None
        self.offsets = np.load(offsets_path)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, i: int) -> np.ndarray:
        if self.tokens is None:  # opened lazily, inside each worker
            self.tokens = np.load(self.tokens_path, mmap_mode="r")
        return self.tokens[self.offsets[i] : self.offsets[i + 1]]


def pack(seqs: list[np.ndarray]) -> tuple[Any, Any]:
    """The collate_fn: concatenate the sequences, offsets from their lengths."""
    import torch
    lengths = np.fromiter((len(s) for s in seqs), dtype=np.int64, count=len(seqs))
    offsets = np.zeros(len(seqs) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return torch.from_numpy(np.concatenate(seqs)), torch.from_numpy(offsets)


class TorchRagged(RaggedContender):
    """torch's DataLoader with worker processes, packing in its collate_fn."""

    name = "torch-ragged"

    def available(self) -> str | None:
        return None if installed("torch") else "not installed (pip install torch)"

    def prepare_tokens(self, ldir: str, tokens: np.ndarray, offsets: np.ndarray) -> dict[str, Any]:
        tpath, opath = os.path.join(ldir, "tokens.npy"), os.path.join(ldir, "offsets.npy")
        log("[ragged] writing .npy files ...")
        np.save(tpath, tokens)
        np.save(opath, offsets)
        return {"data": tpath, "offsets": opath}

    def open(self, cfg: dict[str, Any]) -> Any:
        import torch
        from torch.utils.data import DataLoader

        w = cfg["workers"]
        g = torch.Generator()
        g.manual_seed(0)
        dl = DataLoader(TokenDataset(cfg["data"], cfg["offsets"]), batch_size=cfg["batch"], shuffle=True,
                        num_workers=w, drop_last=True, persistent_workers=w > 0, generator=g,
                        collate_fn=pack)

        def endless() -> Iterator[Any]:
            while True:
                yield from dl
        it = endless()

        def get() -> tuple[Any, Any]:
            return next(it)

        def close() -> None:
            it.close()
            gc.collect()
        return get, close


RAGGED_LOADERS: list[RaggedContender] = [
    LoaderxRagged("loaderx-ragged", "zstd"),
    LoaderxRagged("loaderx-ragged-raw", "raw"),
    TorchRagged(),
]
