"""Batches of a loaderx loader put onto JAX devices, prefetched.

The user documentation of these names is the docstring of :mod:`loaderx.jax`,
their public face (``help(loaderx.jax)`` and the API reference show it).
"""

from __future__ import annotations

import collections
import json
from collections.abc import Iterator, Mapping
from typing import Any

import jax
import numpy as np

from loaderx.loader.dataloader import DataLoader

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

    :meth:`state_dict` counts only the batches handed out, not the ones in
    flight, so a run restored from it continues exactly where the consumer
    was.

    Raises:
        TypeError: ``loader`` is not a loaderx DataLoader, or ``sharding``
            not a ``jax.sharding.Sharding``.
        ValueError: ``prefetch`` is negative.
    """

    def __init__(self, loader: DataLoader, sharding: jax.sharding.Sharding, *, prefetch: int = 2) -> None:
        if not isinstance(loader, DataLoader):
            raise TypeError(f"loader must be a loaderx DataLoader, got {type(loader).__name__}")
        if not isinstance(sharding, jax.sharding.Sharding):
            raise TypeError(f"sharding must be a jax.sharding.Sharding, got {sharding!r}")
        if isinstance(prefetch, bool) or not isinstance(prefetch, int) or prefetch < 0:
            raise ValueError(f"prefetch must be an int of 0 or more, got {prefetch!r}")
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
        return jax.tree_util.tree_map(
            lambda a: jax.make_array_from_process_local_data(sharding, np.array(a, copy=True)), batch
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
