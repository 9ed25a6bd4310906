"""The step-based data loader: :class:`DataLoader`, its :class:`LoaderOptions`,
and the :class:`PackedBatch` / :class:`PaddedBatch` of a ragged stream.

The tunables (``PREFETCH_BYTES``, ``SHARED_GATHER_BYTES``, ``READY_TIMEOUT``)
are copies for reference: the loader reads ``PREFETCH_BYTES`` from
:mod:`loaderx.loader.options` and the other two from
:mod:`loaderx.loader.dataloader`, so those are the modules to change them in.

A :class:`DataLoader` yields one batch per step, forever (or for ``steps``
steps, or for one ``epoch=True`` pass over the records): a dict
``{name: array}`` where each array is the ``(batch_size, *item_shape)`` batch
of one dense stream (a store or a NumPy array), or the packed (or padded)
batch of a ragged store, all streams gathered at the same indices. The
indices of step ``s`` come from the sampler as a pure function of
``(seed, s)``, so the loader's position is the step number:
:meth:`DataLoader.state_dict` saves it and :meth:`DataLoader.load_state_dict`
seeks back to it. Where a step also depends on the ones before it (a stream
packed in concat mode starts where the last step's tokens ended; an exact
mixture's counts follow a schedule), the state adds a cursor at the step
(:mod:`loaderx.loader._cursor`), so seeking costs the same at any step.

Work runs on threads: each worker claims the next step, draws its indices,
gathers every stream (the copy runs natively with the GIL released) and runs
the ``transform`` callback; batches are handed out strictly in step order, so
the output is the same whatever ``num_workers`` is. The threads, the step
window and the recycled batch buffers live in :mod:`loaderx.loader._pipeline`. With
``workers="process"`` the same steps are made in spawned worker processes
that hand finished batches back through shared memory
(:mod:`loaderx.loader._procpool`), for transforms whose Python code the GIL would
serialise. The default, ``workers="auto"``, starts on threads, measures the
first steps (:mod:`loaderx.loader._autoworkers`) and moves to worker processes at a
step boundary when the transform holds the GIL and the move is safe; the
batches are the same either way.

The code lives in :mod:`loaderx.loader.dataloader`; import the names from here.
"""

from __future__ import annotations

from loaderx.loader.dataloader import (
    READY_TIMEOUT,
    SHARED_GATHER_BYTES,
    DataLoader,
    LoaderOptions,
    PackedBatch,
    PaddedBatch,
)
from loaderx.loader.options import PREFETCH_BYTES

__all__ = [
    "PREFETCH_BYTES",
    "READY_TIMEOUT",
    "SHARED_GATHER_BYTES",
    "DataLoader",
    "LoaderOptions",
    "PackedBatch",
    "PaddedBatch",
]
