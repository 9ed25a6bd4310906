"""The packing rows of the loader layer: tokenised documents packed into
fixed ``(ROWS, PACK_LEN)`` rows with per-token segment ids.

loaderx's DataLoader with ``pack=`` (concat and first_fit) against Grain's
``FirstFitPackIterDataset`` and torch's DataLoader with a ``collate_fn``
that packs each batch of documents first-fit (the rule loaderx's first_fit
follows: in order, into the first row with room, a document that fits no row
is left out). Every contender reads the same documents; :func:`check_rows`
checks, in the loader's child before timing, that each segment of its rows
holds the tokens of one of them, and measures the padding.
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

#: tokens per packed row, and rows per batch
PACK_LEN, ROWS = 2048, 16
#: documents per batch of the first-fit contenders that pack a fixed batch
#: of documents (loaderx first_fit, torch): ~90 % of the rows' tokens at the
#: mean document length, so that few fit no row
FIT_DOCS = 28
#: batches each contender's rows are checked (and padding counted) on
CHECK_BATCHES = 20


class DocumentDataset:
    """Document ``i`` as a slice of memory-mapped flat tokens (opened lazily,
    in each worker): the source of torch's and Grain's loaders."""

    def __init__(self, tokens_path: str, offsets_path: str, as_dict: bool = False) -> None:
        self.tokens_path, self.offsets_path, self.as_dict = tokens_path, offsets_path, as_dict
        self.tokens: Any = None
        self.offsets = np.load(offsets_path)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, i: int) -> Any:
        if self.tokens is None:
            self.tokens = np.load(self.tokens_path, mmap_mode="r")
        doc = np.asarray(self.tokens[self.offsets[i] : self.offsets[i + 1]])
        return {"tokens": doc} if self.as_dict else doc


class FirstFitCollate:
    """torch's collate_fn: a batch of documents packed first-fit into
    ``rows`` rows of ``length``, with segment ids and positions; the
    documents that fit no row are counted."""

    def __init__(self, rows: int, length: int) -> None:
        self.rows, self.length = rows, length
        self.arange = np.arange(length, dtype=np.int32)

    def __call__(self, docs: list[np.ndarray]) -> tuple[Any, Any, Any, Any]:
        import torch
        r, n = self.rows, self.length
        tokens = np.zeros((r, n), np.int32)
        seg = np.zeros((r, n), np.int32)
        pos = np.zeros((r, n), np.int32)
        free = [n] * r
        count = [0] * r
        dropped = 0
        for d in docs:
            k = len(d)
            for row in range(r):
                if free[row] >= k:
                    c = n - free[row]
                    count[row] += 1
                    tokens[row, c : c + k] = d
                    seg[row, c : c + k] = count[row]
                    pos[row, c : c + k] = self.arange[:k]
                    free[row] -= k
                    break
            else:
                dropped += 1
        return (torch.from_numpy(tokens), torch.from_numpy(seg), torch.from_numpy(pos),
                torch.tensor(dropped))


def check_rows(batches: list[tuple[np.ndarray, np.ndarray, Any]], tokens_path: str,
               offsets_path: str) -> dict[str, Any]:
    """Check that every segment of ``batches`` ((values, segment_ids, where)
    each; ``where`` is loaderx's (records, starts, cu_seqlens) or None) holds
    the tokens of one document (or, with ``where``, the part of it that it
    names), and count the padding."""
    tokens = np.load(tokens_path, mmap_mode="r")
    offsets = np.load(offsets_path)
    by_hash: dict[int, list[int]] = {}
    for i in range(len(offsets) - 1):
        by_hash.setdefault(hash(tokens[offsets[i] : offsets[i + 1]].tobytes()), []).append(i)
    pad = total = segments = 0
    for values, seg, where in batches:
        pad += int(np.count_nonzero(seg == 0))
        total += seg.size
        if where is not None:
            recs, starts, cu = where
            flat = values.reshape(-1)
            for k, rec in enumerate(recs.tolist()):
                if rec < 0:
                    continue
                lo, hi = int(cu[k]), int(cu[k + 1])
                a = int(offsets[rec]) + int(starts[k])
                if not np.array_equal(flat[lo:hi], tokens[a : a + hi - lo]):
                    raise AssertionError(f"segment {k} does not hold record {rec} from token {starts[k]}")
                segments += 1
            continue
        for row in range(seg.shape[0]):
            ids = seg[row]
            for s in np.unique(ids[ids > 0]).tolist():
                got = values[row][ids == s]
                cands = by_hash.get(hash(got.tobytes()), [])
                if not any(np.array_equal(got, tokens[offsets[i] : offsets[i + 1]]) for i in cands):
                    raise AssertionError(f"row {row} segment {s} ({len(got)} tokens) is no document")
                segments += 1
    return {"padding": pad / total if total else 0.0, "checked_segments": segments}


class PackContender(LoaderContender):
    """A loader of the packing rows: ``prepare_documents`` writes its files,
    ``open`` gives (get, close) where get() returns ``(values, segment_ids,
    where, dropped)`` (numpy; ``where`` as :func:`check_rows` takes it)."""

    def prepare(self, ldir: str, data: np.ndarray, labels: np.ndarray) -> dict[str, Any]:
        raise TypeError("a packing loader is prepared with prepare_documents")

    def prepare_documents(self, ldir: str, npy: dict[str, str], tokens: np.ndarray,
                          offsets: np.ndarray) -> dict[str, Any]:
        return {}


class LoaderxPack(PackContender):
    """loaderx's DataLoader(pack=) over a ragged store (its default codec)."""

    def __init__(self, name: str, mode: str) -> None:
        self.name, self.mode = name, mode

    def available(self) -> str | None:
        return None if have_loaderx() else f"loaderx {loaderx_status()}"

    def prepare_documents(self, ldir: str, npy: dict[str, str], tokens: np.ndarray,
                          offsets: np.ndarray) -> dict[str, Any]:
        from loaderx.converter import from_iterator
        path = os.path.join(ldir, "documents")
        if not os.path.exists(path):
            log("[packing] writing the loaderx store ...")
            bounds = offsets.tolist()
            from_iterator(path, (tokens[a:b] for a, b in itertools.pairwise(bounds)), progress=False)
        return {"store": path}

    def open(self, cfg: dict[str, Any]) -> Any:
        import loaderx
        from loaderx.dataloader import DataLoader
        from loaderx.dataset import RaggedDataset
        if cfg.get("threads"):
            loaderx.set_num_threads(cfg["threads"])
        ds = RaggedDataset(cfg["store"])
        docs = FIT_DOCS if self.mode == "first_fit" else ROWS
        dl = DataLoader({"tokens": ds}, batch_size=docs, num_workers=cfg["workers"], seed=0,
                        pack={"tokens": loaderx.Pack(PACK_LEN, mode=self.mode, rows=ROWS)})

        def get() -> tuple[Any, Any, Any, int]:
            b = next(dl)["tokens"]
            return b.values, b.segment_ids, (b.records, b.starts, b.cu_seqlens), b.dropped

        def close() -> None:
            dl.close()
            ds.close()
        return get, close


class TorchPack(PackContender):
    """torch's DataLoader (worker processes, shuffle) packing first-fit in its collate_fn."""

    name = "torch-pack-first-fit"

    def available(self) -> str | None:
        return None if installed("torch") else "not installed (pip install torch)"

    def open(self, cfg: dict[str, Any]) -> Any:
        import torch
        from torch.utils.data import DataLoader

        w = cfg["workers"]
        g = torch.Generator()
        g.manual_seed(0)
        dl = DataLoader(DocumentDataset(cfg["tokens"], cfg["offsets"]), batch_size=FIT_DOCS, shuffle=True,
                        num_workers=w, drop_last=True, persistent_workers=w > 0, generator=g,
                        collate_fn=FirstFitCollate(ROWS, PACK_LEN))

        def endless() -> Iterator[Any]:
            while True:
                yield from dl
        it = endless()

        def get() -> tuple[Any, Any, Any, int]:
            values, seg, _pos, dropped = next(it)
            return values.numpy(), seg.numpy(), None, int(dropped)

        def close() -> None:
            it.close()
            gc.collect()
        return get, close


class GrainPack(PackContender):
    """Grain's FirstFitPackIterDataset over a shuffled, repeated MapDataset,
    batched into rows and prefetched by worker processes."""

    name = "grain-pack-first-fit"

    def available(self) -> str | None:
        return None if installed("grain") else "not installed (pip install grain)"

    def open(self, cfg: dict[str, Any]) -> Any:
        import grain
        from absl import flags
        from grain.experimental import FirstFitPackIterDataset

        if not flags.FLAGS.is_parsed():  # see contenders/grain.py
            flags.FLAGS.mark_as_parsed()
        src = DocumentDataset(cfg["tokens"], cfg["offsets"], as_dict=True)
        ds = grain.MapDataset.source(src).shuffle(seed=0).repeat().to_iter_dataset()
        ds = FirstFitPackIterDataset(ds, length_struct={"tokens": PACK_LEN}, num_packing_bins=ROWS,
                                     shuffle_bins=False)
        ds = ds.batch(ROWS)
        w = cfg["workers"]
        if w > 0:
            ds = ds.mp_prefetch(grain.MultiprocessingOptions(num_workers=w))
        holder = {"it": iter(ds)}

        def get() -> tuple[Any, Any, Any, int]:
            b = next(holder["it"])
            return b["tokens"], b["tokens_segment_ids"], None, 0

        def close() -> None:
            holder.clear()
            gc.collect()
        return get, close


PACK_LOADERS: list[PackContender] = [
    LoaderxPack("loaderx-pack-concat", "concat"),
    LoaderxPack("loaderx-pack-first-fit", "first_fit"),
    GrainPack(),
    TorchPack(),
]
