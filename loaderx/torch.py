"""A loaderx loader as a PyTorch ``IterableDataset``.

Import it only where PyTorch is installed (``import loaderx`` never imports
torch)::

    from loaderx.torch import LoaderIterable

    it = LoaderIterable({"x": "train_x", "y": "train_y"}, batch_size=256, seed=0,
                        shard=(rank, world), steps=10_000)
    for batch in torch.utils.data.DataLoader(it, batch_size=None, num_workers=2):
        ...   # batch["x"], batch["y"]: tensors of step 0, 1, 2 ... in order

Each yielded item is a whole batch (a dict of arrays), so torch's DataLoader
takes it with ``batch_size=None``. The steps are split across torch's
workers round-robin: worker ``w`` of ``W`` produces steps ``w, w + W, ...``
and torch's DataLoader takes one item from each worker in turn, so the
consumer sees the steps in order, exactly as one loaderx DataLoader would
yield them. Ranks are split by ``shard=(rank, world)`` as in
:class:`loaderx.dataloader.DataLoader`: every rank sees the same steps, each
its own part of the global batch.

Streams may be given as store paths, :class:`loaderx.dataset.DenseDataset`
objects or NumPy arrays. A dataset pickles as its path and opens in the
process that reads it, and one built in a process that never loaded the
native library leaves it unloaded, so both the ``fork`` and the ``spawn``
start methods work.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np
import torch.utils.data

from loaderx.dataloader import DataLoader
from loaderx.dataset import DenseDataset
from loaderx.sampler import Sampler

__all__ = ["LoaderIterable"]


class _EveryKth:
    """The steps ``offset, offset + stride, ...`` of ``base`` as steps 0, 1,
    ...: the sampler of one torch worker. Pure in the step, like ``base``."""

    def __init__(self, base: Sampler, offset: int, stride: int) -> None:
        self.base = base
        self.offset = offset
        self.stride = stride
        self.batch_size = base.batch_size
        self.n = base.n

    def indices(self, step: int) -> np.ndarray:
        return self.base(self.offset + step * self.stride)


class LoaderIterable(torch.utils.data.IterableDataset):
    """Batches of a loaderx loader, split across torch's worker processes.

    Args:
        streams: ``{name: store path, DenseDataset or NumPy array}``.
        batch_size: records per batch (per rank when sharded).
        sampler: ``"cyclic"``, ``"iid"`` or ``"sequential"``.
        seed: keys the random samplers.
        shard: ``(rank, world)``: this rank's part of a data-parallel run.
        start_step: the first step to yield; to resume, set it to the number
            of batches consumed so far (``start_step + batches seen``).
        steps: stop before step ``steps`` (the total, counted from step 0);
            None for endless.
        transform: called on each batch dict in the worker that made it.
        num_threads: loaderx gather threads inside each torch worker.

    Raises:
        ValueError, TypeError: as :class:`loaderx.dataloader.DataLoader` and
            :class:`loaderx.sampler.Sampler` do for the same arguments, when
            iteration starts; ``steps`` below ``start_step`` at once.
    """

    def __init__(
        self,
        streams: Mapping[str, str | os.PathLike[str] | DenseDataset | np.ndarray],
        batch_size: int,
        *,
        sampler: str = "cyclic",
        seed: int = 0,
        shard: tuple[int, int] = (0, 1),
        start_step: int = 0,
        steps: int | None = None,
        transform: Callable[[dict[str, np.ndarray]], Any] | None = None,
        num_threads: int = 1,
    ) -> None:
        super().__init__()
        if not isinstance(streams, Mapping) or not streams:
            raise TypeError(f"streams must be a non-empty dict of name -> store path or dataset, got {streams!r}")
        if not isinstance(sampler, str):
            raise TypeError(
                f"sampler must be 'cyclic', 'iid' or 'sequential' here, got {sampler!r} "
                "(a custom sampler: wrap your own loaderx DataLoader)"
            )
        if steps is not None and steps < start_step:
            raise ValueError(f"steps={steps} is below start_step={start_step}")
        self.streams = {
            name: DenseDataset(s) if isinstance(s, (str, os.PathLike)) else s for name, s in streams.items()
        }
        self.batch_size = batch_size
        self.sampler = sampler
        self.seed = seed
        self.shard = shard
        self.start_step = start_step
        self.steps = steps
        self.transform = transform
        self.num_threads = num_threads

    def __len__(self) -> int:
        if self.steps is None:
            raise TypeError("an endless LoaderIterable has no len(); give steps=")
        return self.steps - self.start_step

    def __iter__(self) -> Iterator[Any]:
        info = torch.utils.data.get_worker_info()
        worker, workers = (0, 1) if info is None else (info.id, info.num_workers)
        n = len(next(iter(self.streams.values())))
        base = Sampler(self.sampler, n, self.batch_size, seed=self.seed, shard=self.shard)
        first = self.start_step + worker  # this worker's first global step
        mine = None
        if self.steps is not None:
            mine = max(0, -(-(self.steps - first) // workers))  # steps first, first + W, ... below steps
            if mine == 0:
                return
        loader = DataLoader(
            self.streams,
            batch_size=self.batch_size,
            sampler=_EveryKth(base, first, workers),
            num_workers=self.num_threads,
            transform=self.transform,
            steps=mine,
        )
        with loader:
            yield from loader
