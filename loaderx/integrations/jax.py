"""Batches of a loaderx loader put onto JAX devices, prefetched.

Import it only where JAX is installed (``import loaderx`` never imports
jax)::

    import jax, numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
    from loaderx.jax import DeviceLoader

    mesh = Mesh(np.array(jax.local_devices()), ("data",))
    batches = DeviceLoader(loader, NamedSharding(mesh, P("data")), prefetch=2)
    for batch in batches:                 # dicts of jax.Array, split over the devices
        state = train_step(state, batch)
    checkpoint = {"params": ..., "loader": batches.state_dict()}   # JSON-ready

One process feeds its local devices: the loader's batch (this process's part
of the global batch, ``shard=(jax.process_index(), jax.process_count())``
when there are several processes) is laid out by ``sharding``, each device
getting its slice. Device transfers are asynchronous, so keeping
``prefetch`` batches on their way overlaps the copy with the training step.

Packed batches (``DataLoader(pack=...)``, a :class:`loaderx.packing.PackedRows`
per packed stream) come out as a ``PackedRows`` too. Its fixed-shape fields,
whose leading axis is the batch's rows (``values``, ``segment_ids``,
``positions``, ``num_segments``), are ``jax.Array`` laid out by ``sharding``
like any other leaf. The fields of one entry per segment (``cu_seqlens``,
``records``, ``starts``, ``sources``), whose length changes from batch to
batch, and the count ``dropped`` stay on the host as NumPy arrays (and an
int), copied out of the loader's buffers: a jitted step that takes only the
fixed-shape fields compiles once. With ``max_segments=N`` they are padded to
a fixed length instead (``cu_seqlens`` to ``N + 1`` entries, repeating its
last value, so the extra segments are empty; ``records`` and ``sources`` with
-1, ``starts`` with 0), still on the host; a batch of more than ``N``
segments raises, naming both counts. The attention mask of a packed row is
``segment_ids[:, :, None] == segment_ids[:, None, :]`` (and ``!= 0``), which
needs nothing but the fields on the devices.
"""

from __future__ import annotations

import collections
import json
from collections.abc import Iterator, Mapping
from typing import Any

import jax
import numpy as np

from loaderx.loader.dataloader import DataLoader
from loaderx.loader.packing import PackedRows

__all__ = ["DeviceLoader"]


class DeviceLoader:
    """Iterate ``loader``'s batches as ``jax.Array`` pytrees laid out by
    ``sharding``, keeping ``prefetch`` batches ahead on the devices.

    Args:
        loader: a :class:`loaderx.dataloader.DataLoader`; its batches (a dict
            of arrays, or whatever its ``transform`` returns: any pytree of
            arrays) are this process's part of the global batch.
        sharding: a ``jax.sharding.Sharding`` for every leaf, such as
            ``NamedSharding(mesh, PartitionSpec("data"))``; the leading axis
            must divide among the devices it names.
        prefetch: batches transferred ahead of the one being consumed (0:
            transfer each batch when it is asked for).
        max_segments: None to hand a packed batch's per-segment fields
            over as they are (host NumPy arrays of varying length), or the
            length to pad them to (see the module docs).

    :meth:`state_dict` counts only the batches handed out, not the ones in
    flight, so a run restored from it continues exactly where the consumer
    was.

    Raises:
        TypeError: ``loader`` is not a loaderx DataLoader, or ``sharding``
            not a ``jax.sharding.Sharding``.
        ValueError: ``prefetch`` is negative.
    """

    def __init__(
        self, loader: DataLoader, sharding: jax.sharding.Sharding, *, prefetch: int = 2,
        max_segments: int | None = None,
    ) -> None:
        if not isinstance(loader, DataLoader):
            raise TypeError(f"loader must be a loaderx DataLoader, got {type(loader).__name__}")
        if not isinstance(sharding, jax.sharding.Sharding):
            raise TypeError(f"sharding must be a jax.sharding.Sharding, got {sharding!r}")
        if isinstance(prefetch, bool) or not isinstance(prefetch, int) or prefetch < 0:
            raise ValueError(f"prefetch must be an int of 0 or more, got {prefetch!r}")
        if max_segments is not None and (
            isinstance(max_segments, bool) or not isinstance(max_segments, int) or max_segments < 1
        ):
            raise ValueError(f"max_segments must be None or a positive int, got {max_segments!r}")
        self.max_segments = max_segments
        self.loader = loader
        self.sharding = sharding
        self.prefetch = prefetch
        self._queue: collections.deque[Any] = collections.deque()
        self._exhausted = False

    def _put(self, batch: Any) -> Any:
        # The loader refills a batch's buffers once nothing references them,
        # and a transfer may read the host memory after device_put returns
        # (or keep using it, on the CPU backend), which showed as batches of
        # mixed steps; so each leaf is copied into an array of its own first.
        sharding = self.sharding

        def put(a: Any) -> Any:
            return jax.make_array_from_process_local_data(sharding, np.array(a, copy=True))

        def leaf(x: Any) -> Any:
            if isinstance(x, PackedRows):
                return self._packed(x, put)
            return jax.tree_util.tree_map(put, x)

        return jax.tree_util.tree_map(leaf, batch, is_leaf=lambda x: isinstance(x, PackedRows))

    def _packed(self, rows: PackedRows, put: Any) -> PackedRows:
        """A packed batch with its fixed-shape fields on the devices and its
        per-segment fields on the host (padded to ``max_segments``)."""
        n = rows.records.shape[0]
        bound = self.max_segments
        if bound is not None and n > bound:
            raise ValueError(
                f"a packed batch has {n} segments, more than max_segments={bound}: raise max_segments "
                "(a packed row of L tokens can hold up to L segments)"
            )

        def host(a: np.ndarray, fill: Any, extra: int = 0) -> np.ndarray:
            if bound is None:
                return np.array(a, copy=True)
            out = np.full(bound + extra, fill, dtype=a.dtype)
            out[: a.shape[0]] = a
            return out

        cu = rows.cu_seqlens
        return PackedRows(
            put(rows.values), put(rows.segment_ids), put(rows.positions),
            host(cu, cu[-1], 1), put(rows.num_segments), host(rows.records, -1), host(rows.starts, 0),
            int(rows.dropped), host(rows.sources, -1),
        )

    def _fill(self, count: int) -> None:
        while not self._exhausted and len(self._queue) < count:
            try:
                batch = next(self.loader)
            except StopIteration:
                self._exhausted = True
                return
            self._queue.append(self._put(batch))

    def __iter__(self) -> Iterator[Any]:
        return self

    def __next__(self) -> Any:
        self._fill(self.prefetch + 1)
        if not self._queue:
            raise StopIteration
        out = self._queue.popleft()
        self._fill(self.prefetch)  # the next transfers start before the caller's step runs
        return out

    def __len__(self) -> int:
        return len(self.loader)

    def state_dict(self) -> dict[str, Any]:
        """The loader's state as of the batches handed out (JSON-serialisable)."""
        # the state (and its resume cursor) at the first step not handed out
        return self.loader._state(self.loader.step - len(self._queue), cursor=True)

    def load_state_dict(self, state: Mapping[str, Any] | str) -> None:
        """Continue from ``state`` (a dict from :meth:`state_dict`, or its JSON
        text); batches already in flight are dropped."""
        loaded: Mapping[str, Any] = json.loads(state) if isinstance(state, str) else state
        self._queue.clear()
        self._exhausted = False
        self.loader.load_state_dict(loaded)

    def close(self) -> None:
        """Drop the batches in flight and close the loader."""
        self._queue.clear()
        self.loader.close()

    def __enter__(self) -> DeviceLoader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
