"""Fetching ahead of the loader, for datasets in object storage.

A loader's sampler is a pure function of the step, so the records of every
coming step are known now. :class:`Lookahead` runs one background thread
per loader that draws the indices of the steps after the one the consumer
is at and asks each stream's cache guard (``remote._guard.Guard``) to fetch
and pin the pages they need, while the workers gather the current steps.
It stays within a byte budget (what it fetched for steps the consumer has
not reached yet) and a step horizon, so it neither floods the cache nor
spins once everything is cached. It never raises: a fetch that fails here
fails again, with its error, in the gather that needs it.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["Lookahead", "guards_of"]

#: the furthest the lookahead runs ahead of the consumer, in steps
HORIZON = 64
_POLL = 0.1


def guards_of(source: Any) -> list[Any]:
    """The cache guards of a loader stream: a dataset in object storage
    (dense or ragged, also through a ragged stream wrapper). Mixtures and
    packed streams draw their records differently and read on demand."""
    for obj in (source, getattr(source, "dataset", None)):
        g = getattr(obj, "_guard", None) if obj is not None else None
        if g is not None:
            return [g]
    return []


class Lookahead:
    """Prefetches the pages of steps ``[consumer, consumer + HORIZON)``
    into the cache, at most ``budget`` bytes ahead of the consumer."""

    def __init__(self, guards: list[Any], draw: Callable[[int, np.ndarray], np.ndarray], batch_size: int,
                 budget: int, start: int, end: int | None) -> None:
        self.guards = guards
        self.draw = draw
        self.buf = np.empty(batch_size, dtype=np.int64)
        self.budget = budget
        self.end = end
        self.consumer = start
        self.next = start
        self.fetched: collections.deque[tuple[int, int]] = collections.deque()  # (step, bytes)
        self.cond = threading.Condition()
        self.stopped = False
        self.prefetched_bytes = 0
        self.idle = False  # waiting for the consumer, every step it may fetch fetched
        self.thread = threading.Thread(target=self._run, name="loaderx-lookahead", daemon=True)
        self.thread.start()

    def _ahead(self) -> int:
        return sum(n for s, n in self.fetched if s >= self.consumer)

    def advance(self, consumer: int) -> None:
        """The consumer's next step is now ``consumer``."""
        with self.cond:
            self.consumer = consumer
            while self.fetched and self.fetched[0][0] < consumer:
                self.fetched.popleft()
            self.next = max(self.next, consumer)
            self.cond.notify()

    def reset(self, step: int) -> None:
        """The loader moved to ``step`` (a seek or a restored state)."""
        with self.cond:
            self.consumer = self.next = step
            self.fetched.clear()
            self.cond.notify()

    def stop(self) -> None:
        with self.cond:
            self.stopped = True
            self.cond.notify()

    def _run(self) -> None:
        while True:
            with self.cond:
                while not self.stopped and (
                    (self.end is not None and self.next >= self.end)
                    or self.next >= self.consumer + HORIZON
                    or self._ahead() >= self.budget
                ):
                    self.idle = True
                    self.cond.wait(_POLL)
                self.idle = False
                if self.stopped:
                    return
                step = self.next
                self.next += 1
            try:
                idx = np.array(self.draw(step, self.buf), dtype=np.int64)
                got = sum(g.prefetch(idx) for g in self.guards)
            except Exception:
                # the gather of this step meets the same failure and reports
                # it; back off instead of spinning on a server that is down
                with self.cond:
                    self.cond.wait(1.0)
                continue
            with self.cond:
                self.prefetched_bytes += got
                if step >= self.consumer and got:
                    self.fetched.append((step, got))
