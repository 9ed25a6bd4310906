"""A loaderx loader as a PyTorch ``IterableDataset``: :class:`LoaderIterable`.
Importing this module imports torch.

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

The code lives in :mod:`loaderx.integrations.torch`; import the names from here.
"""

from __future__ import annotations

from loaderx.integrations.torch import LoaderIterable

__all__ = ["LoaderIterable"]
