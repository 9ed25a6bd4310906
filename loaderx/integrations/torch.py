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

Every setting of the loader carries over: custom samplers, ``epoch=True``
passes with ``drop_last``, ragged streams with ``pad`` or ``pack`` (a
packed stream's :class:`loaderx.packing.PackedRows` reaches the consumer with
its arrays as tensors, as torch's DataLoader converts every batch), a
:class:`loaderx.mixture.Mixture` in place of the streams. To resume, save
``it.state_dict(batches_seen)`` with the training state and call
``it.load_state_dict(state)`` before iterating again; the state is the one a
loaderx ``DataLoader`` with the same settings saves, checked the same way.
Inside torchdata's ``StatefulDataLoader`` nothing needs counting: each
iteration is a ``Stateful`` iterator whose state is its worker's next step
(with the resume cursor there, when the loader has one: see
:meth:`loaderx.dataloader.DataLoader.state_dict`), so
``StatefulDataLoader.state_dict()`` and ``load_state_dict()`` resume
exactly, without replaying batches. Each torch worker seeks to the cursor
of the state it was given.

Streams may be given as store paths, :class:`loaderx.dataset.DenseDataset`
or :class:`loaderx.dataset.RaggedDataset` objects, or NumPy arrays. A dataset pickles as its path and opens in the
process that reads it, and one built in a process that never loaded the
native library leaves it unloaded, so both the ``fork`` and the ``spawn``
start methods work.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Union

import numpy as np
import torch.utils.data

from loaderx._args import check_step
from loaderx.loader._state import CURSOR, check_state, epoch_steps, make_state
from loaderx.loader.dataloader import DataLoader, LoaderOptions
from loaderx.loader.mixture import Mixture
from loaderx.loader.packing import check_pack
from loaderx.loader.sampler import IndexSampler
from loaderx.store.dataset import DenseDataset, RaggedDataset

__all__ = ["LoaderIterable"]


class _EveryKth:
    """The steps ``offset, offset + stride, ...`` of ``base`` as steps 0, 1,
    ...: the sampler of one torch worker. Pure in the step, like ``base``."""

    #: it draws the steps of a loader over the same streams, a mixture's
    #: weights included, so a loader over a Mixture takes it
    keeps_mixture_weights = True

    def __init__(self, base: DataLoader, offset: int, stride: int, n: int) -> None:
        self.base = base
        self.offset = offset
        self.stride = stride
        self.batch_size = base.batch_size
        self.n = n

    def indices(self, step: int) -> np.ndarray:
        return self.base.indices(self.offset + step * self.stride)


Stream = Union[str, "os.PathLike[str]", DenseDataset, RaggedDataset, np.ndarray]


class LoaderIterable(torch.utils.data.IterableDataset):
    """Batches of a loaderx loader, split across torch's worker processes.

    The arguments are those of :class:`loaderx.dataloader.DataLoader`, and
    the batches are the ones such a loader yields, in the same order, however
    many torch workers share the work.

    Args:
        streams: ``{name: store path, DenseDataset, RaggedDataset or NumPy
            array}``; a path opens a :class:`~loaderx.dataset.DenseDataset`.
        batch_size: records per batch (per rank when sharded).
        sampler: ``"cyclic"``, ``"iid"``, ``"sequential"`` or an object with
            ``indices(step) -> int64 array`` (picklable when torch starts its
            workers with ``spawn``).
        seed: keys the random samplers.
        shard: ``(rank, world)``: this rank's part of a data-parallel run.
        start_step: the first step to yield; :meth:`load_state_dict` sets it.
        steps: stop before step ``steps`` (the total, counted from step 0);
            None for endless.
        epoch: one pass over the records, each exactly once (see
            :class:`~loaderx.dataloader.DataLoader`).
        drop_last: with ``epoch=True``, drop the short last batch.
        transform: called on each batch dict in the worker that made it.
        num_workers: loaderx gather threads inside each torch worker (the
            loader's ``num_workers``, one per torch worker by default).
        num_threads: the former name of ``num_workers``, deprecated.
        pad: ``{ragged stream name: length}``, as the loader's ``pad=``.
        pack: ``{ragged stream name: L or loaderx.Pack}``, as the loader's
            ``pack=``. With several torch workers, each makes its steps one
            at a time (a packed step is placed from its own step number, so
            a worker seeks to each of its steps rather than drawing them
            through a custom sampler as unpacked streams do).
        offsets_dtype: the dtype of a packed ragged batch's offsets.

    Raises:
        ValueError, TypeError: a bad argument, with the same messages as
            :class:`~loaderx.dataloader.DataLoader`; the checks that need the
            stores' contents run when iteration starts.
    """

    def __init__(
        self,
        streams: Mapping[str, Stream],
        batch_size: int,
        *,
        sampler: str | IndexSampler = "cyclic",
        seed: int = 0,
        shard: tuple[int, int] = (0, 1),
        start_step: int = 0,
        steps: int | None = None,
        epoch: bool = False,
        drop_last: bool = False,
        transform: Callable[[dict[str, np.ndarray]], Any] | None = None,
        num_workers: int = 1,
        num_threads: int | None = None,
        pad: Mapping[str, Any] | None = None,
        pack: Mapping[str, Any] | None = None,
        offsets_dtype: Any = np.int64,
    ) -> None:
        super().__init__()
        if num_threads is not None:
            if num_workers != 1:
                raise TypeError(
                    f"num_workers={num_workers!r} and num_threads={num_threads!r}: num_threads is the former "
                    "name of num_workers; give num_workers only"
                )
            warnings.warn("LoaderIterable(num_threads=) is now num_workers=, as in DataLoader",
                          DeprecationWarning, stacklevel=2)
            num_workers = num_threads
        self.mixture = streams if isinstance(streams, Mixture) else None
        if self.mixture is None and (not isinstance(streams, Mapping) or not streams):
            raise TypeError(f"streams must be a non-empty dict of name -> store path or dataset, got {streams!r}")
        # the argument checks of the loader, without opening anything
        self.options = LoaderOptions(
            batch_size=batch_size, num_workers=num_workers, sampler=sampler, seed=seed, shard=shard,
            start_step=start_step, steps=steps, epoch=epoch, drop_last=drop_last,
        )
        if transform is not None and not callable(transform):
            raise TypeError(f"transform must be callable or None, got {transform!r}")
        self.streams: Any = self.mixture or {
            name: DenseDataset(s) if isinstance(s, (str, os.PathLike)) else s for name, s in streams.items()
        }
        self.transform = transform
        self.pad = dict(pad) if pad is not None else None
        if pack is not None and not isinstance(pack, Mapping):
            raise TypeError(
                f"pack must be None or a dict of ragged stream name -> length, got {pack!r} "
                "(e.g. pack={'tokens': 2048})"
            )
        # checked against the streams when iteration opens them, as the loader does
        self.pack = {name: check_pack(spec, name) for name, spec in (pack or {}).items()}
        self.offsets_dtype = offsets_dtype
        self._check_start(self.options.start_step)
        self.start_step = self.options.start_step
        #: the cursor of the last state loaded (see load_state_dict), or None
        self.cursor: dict[str, Any] | None = None

    def _lengths(self) -> dict[str, int]:
        mix = self.mixture
        if mix is not None:  # every stream of a mixture spans all its sources, as in the loader
            concat = any(p.mode == "concat" for p in self.pack.values())  # no per-row source stream then
            return {name: len(mix) for name in (*mix.stream_names, *(() if concat else (mix.source_key,)))}
        return {name: len(s) for name, s in self.streams.items()}

    def _end(self) -> int | None:
        """The step the iteration stops before, or None when endless."""
        o = self.options
        end = o.steps
        if o.epoch:
            n = next(iter(self._lengths().values()))
            passes = epoch_steps(n, o.batch_size * o.shard[1], o.drop_last)
            end = passes if end is None else min(end, passes)
        return end

    def _check_start(self, start: int) -> None:
        end = self._end()
        if end is not None and start > end:
            raise ValueError(f"start_step={start} is past the end of this {end}-step pass")

    def __len__(self) -> int:
        """The batches one iteration yields (from :attr:`start_step` on).

        Raises:
            TypeError: the iterable is endless.
        """
        end = self._end()
        if end is None:
            raise TypeError("an endless LoaderIterable has no len(); give steps= or epoch=True")
        return end - self.start_step

    def state_dict(self, batches_seen: int = 0) -> dict[str, Any]:
        """The state after ``batches_seen`` batches of an iteration that began
        at :attr:`start_step`: a JSON-serialisable dict that a
        :class:`~loaderx.dataloader.DataLoader` with these settings loads,
        and the reverse. Reads only the stores' headers. (With no argument it
        is the state at :attr:`start_step`: what torchdata's
        ``StatefulDataLoader`` saves of the dataset; the iterator's state
        holds the position.)

        The torch workers make the batches, so this process never reads the
        stores' tables (a process that forks torch's workers must not load
        the native library): it cannot take a resume cursor at the step, and
        passes on the cursor of the state it was loaded from, if any (see
        :meth:`DataLoader.state_dict`). The workers of a resumed iteration
        seek to that cursor and count forward from it the steps since; a
        ``StatefulDataLoader``'s state holds each worker's own cursor at its
        next step instead, as a DataLoader's does.
        """
        return self._state_at(self.start_step + check_step(batches_seen), self.cursor)

    def _state_at(self, step: int, cursor: Mapping[str, Any] | None = None) -> dict[str, Any]:
        o = self.options
        return make_state(
            step, sampler=o.sampler, seed=o.seed, shard=o.shard,
            batch_size=o.batch_size, lengths=self._lengths(), end=self._end(), epoch=o.epoch,
            drop_last=o.drop_last, pack={name: p.state() for name, p in self.pack.items()},
            mixture=None if self.mixture is None else self.mixture.identity(), cursor=cursor,
        )

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Start the next iteration at the step of a saved state. Its cursor,
        when it has one at or before the step, is kept for the torch workers
        to seek to (checked here for its digest, there against the data).

        Raises:
            TypeError, ValueError: as
                :meth:`loaderx.dataloader.DataLoader.load_state_dict`, when the
                state is from other data or settings (the message says what).
        """
        self.start_step = check_state(state, self._state_at(self.start_step), self._end())
        self.cursor = _usable_cursor(state, self.start_step)

    def __repr__(self) -> str:
        o = self.options
        return (
            f"LoaderIterable(streams={list(self.streams)}, batch_size={o.batch_size}, "
            f"sampler={o.sampler!r}, seed={o.seed}, shard={o.shard}, start_step={self.start_step}, "
            f"steps={o.steps}, epoch={o.epoch})"
        )

    def __iter__(self) -> Iterator[Any]:
        info = torch.utils.data.get_worker_info()
        worker, workers = (0, 1) if info is None else (info.id, info.num_workers)
        return _Iteration(self, worker, workers)

    def _batches(self, run: _Iteration) -> Iterator[Any]:
        """The batches of the steps ``first, first + W, ...`` of one
        iteration (``first``: its next step, ``W``: its workers), the loader
        it draws from given to it (its cursor seeks there first)."""
        o = self.options
        first, workers = run.next_step, run.workers
        common = {"batch_size": o.batch_size, "pad": self.pad, "offsets_dtype": self.offsets_dtype}
        if self.pack:
            yield from self._packed_batches(run, common)
            return
        # every step's indices, as one loader with these settings draws them
        full = DataLoader(
            self.streams, sampler=o.sampler, seed=o.seed, shard=o.shard, steps=o.steps,
            epoch=o.epoch, drop_last=o.drop_last, num_workers=0, workers="thread", **common,
        )
        if run.cursor is not None:  # a mixture's schedule: from the cursor, not from step 0
            full.load_state_dict(self._state_at(first, run.cursor))
        run.loader = full
        end = self._end()
        mine = None
        if end is not None:
            mine = max(0, -(-(end - first) // workers))  # steps first, first + W, ... below end
            if mine == 0:
                return
        loader = DataLoader(
            self.streams, sampler=_EveryKth(full, first, workers, self._records()),
            num_workers=o.num_workers,
            transform=self.transform, steps=mine, **common,
            workers="thread",  # torch's worker processes are the parallelism already
        )
        with loader:
            yield from loader

    def _packed_batches(self, run: _Iteration, common: dict[str, Any]) -> Iterator[Any]:
        """The packed batches of steps ``first, first + W, ...``: one
        loader with every setting, seeking to each step when the steps are
        shared among several torch workers."""
        o = self.options
        end = self._end()
        first, workers = run.next_step, run.workers
        alone = workers == 1
        loader = DataLoader(
            self.streams, sampler=o.sampler, seed=o.seed, shard=o.shard, steps=o.steps, epoch=o.epoch,
            drop_last=o.drop_last, transform=self.transform, start_step=first, pack=self.pack,
            num_workers=o.num_workers if alone else 0, workers="thread", **common,
        )
        run.loader = loader
        with loader:
            if run.cursor is not None:
                loader.load_state_dict(self._state_at(first, run.cursor))
            if alone:
                yield from loader
                return
            step = first
            while end is None or step < end:
                if step != loader.step:  # the loader counted the steps between: no cursor needed
                    loader.load_state_dict(self._state_at(step))
                yield next(loader)
                step += workers

    def _records(self) -> int:
        if self.mixture is not None:
            return len(self.mixture)
        return len(next(iter(self.streams.values())))


def _usable_cursor(state: Mapping[str, Any], step: int) -> dict[str, Any] | None:
    """A checked state's cursor, when a loader seeking to ``step`` can use
    it (one taken at a later step cannot help)."""
    cursor = state.get(CURSOR)
    if cursor is None or cursor["step"] > step:
        return None
    return dict(cursor)


class _Iteration:
    """One iteration of a :class:`LoaderIterable` in one torch worker (or the
    main process): the steps ``first, first + W, ...`` of the worker ``w`` of
    ``W``. It is a torchdata ``Stateful`` iterator: ``state_dict()`` is the
    loader state at this worker's next step, tagged with the worker, with
    the cursor there once the worker's loader is open, and
    ``load_state_dict()`` (which ``StatefulDataLoader`` calls before the
    first batch) moves the worker there, so a resumed run continues exactly
    without replaying batches."""

    def __init__(self, owner: LoaderIterable, worker: int, workers: int) -> None:
        self.owner = owner
        self.worker = worker
        self.workers = workers
        self.next_step = owner.start_step + worker
        #: the cursor the worker's loader seeks to first (a loaded state's)
        self.cursor = owner.cursor
        #: the loader the worker's steps are drawn from, once open
        self.loader: DataLoader | None = None
        self._it: Iterator[Any] | None = None

    def __iter__(self) -> _Iteration:
        return self

    def __next__(self) -> Any:
        if self._it is None:
            self._it = self.owner._batches(self)
        item = next(self._it)
        self.next_step += self.workers
        return item

    def state_dict(self) -> dict[str, Any]:
        cursor = self.cursor
        if self.loader is not None:
            cursor = self.loader._cursor(self.next_step)
        return {"loader": self.owner._state_at(self.next_step, cursor), "worker": [self.worker, self.workers]}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        if not isinstance(state, Mapping) or set(state) != {"loader", "worker"}:
            raise ValueError(f"not the state of a LoaderIterable iteration: {state!r}")
        if list(state["worker"]) != [self.worker, self.workers]:
            raise ValueError(
                f"the state is of worker {state['worker'][0]} of {state['worker'][1]}, this iteration is "
                f"worker {self.worker} of {self.workers}: resume with the same num_workers"
            )
        owner = self.owner
        self.next_step = check_state(state["loader"], owner._state_at(0), owner._end())
        self.cursor = _usable_cursor(state["loader"], self.next_step)
        if self._it is not None:
            close = getattr(self._it, "close", None)
            if close is not None:
                close()
            self._it = None
            self.loader = None
