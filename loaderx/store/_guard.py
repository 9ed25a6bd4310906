"""Keeping a handle's reads inside the pages its process holds.

A :class:`Guard` is made per native handle of a dataset in object storage
(``store._remote.RemoteTree.guard``). It gives each store behind the handle
its residency map, so a warm read runs as one native call; it pins and
fetches the pages of a read the map refused and runs it again; it fetches
ahead for the loader; it lets go of this process's idle pins when the
cache needs room; and it checks every page for ``verify()``. See
``store._cache`` for the design.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import numpy as np

from loaderx.errors import CorruptStoreError, NotResidentError
from loaderx.store import _native
from loaderx.store._cache import _PIN_DEADLINE, _ofd, _Part

__all__ = ["Guard"]

_T = TypeVar("_T")



class Guard:
    """Keeps the pages of every batch of a handle in the mirror, and pinned,
    while the batch is read."""

    def __init__(self, tree: Any, h: int, parts: list[_Part]) -> None:
        self.tree = tree
        self.h = h
        self.parts = parts
        sizes = [p.files.npages for p in parts]
        self.offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        self.held = np.zeros(int(self.offsets[-1]), dtype=bool)
        for k, p in enumerate(parts):
            p.held = self.held[self.offsets[k] : self.offsets[k + 1]]
        width = max(len(p.base) for p in parts)
        self.base2 = np.zeros((len(parts), width), dtype=np.int64)
        for k, p in enumerate(parts):
            self.base2[k, : len(p.base)] = p.base + self.offsets[k]
        self.page_size = tree.opts.page_size
        self.nonempty = sum(int(np.count_nonzero(p.files.sizes)) for p in parts)
        self.mu = threading.Lock()
        self.idle = threading.Condition(self.mu)  # signalled when no fast-path read is in flight
        self.releasing = False
        #: reads in flight on the fast path (their pages are not registered):
        #: release_idle waits for them to end, and holds new ones back meanwhile
        self.fast = 0
        for k, p in enumerate(parts):
            _native.store_set_residency(h, k, p.held, p.base, self.page_size)
        #: the pages of each batch (and prefetch) in flight in this process,
        #: which release_idle keeps pinned
        self.inflight: dict[object, np.ndarray] = {}
        self.closed = False

    def all_held(self) -> bool:
        """Whether this process holds every page that has records (a warm
        dataset: nothing left to fetch ahead)."""
        return int(np.count_nonzero(self.held)) >= self.nonempty

    def slots(self, idx: np.ndarray) -> np.ndarray:
        """The global page of each record at ``idx`` (of this handle)."""
        s, c, o, _ = _native.store_spans(self.h, idx)
        if len(self.parts) == 1:
            return self.base2[0][c] + o // self.page_size
        return self.base2[s, c] + o // self.page_size

    def read(self, idx: np.ndarray, fn: Callable[[], _T]) -> _T:
        """``fn()``, a native read of the records at ``idx``, with their
        pages in the cache and pinned. First as it is: the store's residency
        map (``lx_store_set_residency``) lets the read through when this
        process holds every page already, which a warm dataset does, at the
        cost of one byte check per record. Else the pages are pinned (and
        fetched) and the read runs again. Bytes that fail their check in the
        cache (a page lost in a crash, or damaged on disk) are fetched again
        and the read retried once; a second failure is raised."""
        with self.mu:
            while self.releasing:
                self.idle.wait()
            self.fast += 1
        damaged = False
        try:
            return fn()
        except NotResidentError:
            pass
        except CorruptStoreError:
            damaged = True
        finally:
            with self.mu:
                self.fast -= 1
                if not self.fast:
                    self.idle.notify_all()
        try:
            for attempt in range(2):
                with self.reading(idx):
                    if damaged:
                        self.refetch(idx)
                    try:
                        return fn()
                    except CorruptStoreError:
                        if attempt or damaged:
                            raise
                        damaged = True
            raise AssertionError("unreachable")
        finally:
            # what this read pinned beyond the limit goes now, not at the
            # next fetch: an idle process keeps no more than the limit
            self.tree.cache.make_room(0)

    @contextlib.contextmanager
    def reading(self, idx: np.ndarray) -> Iterator[None]:
        """Hold every page the records at ``idx`` need while the block runs."""
        if idx.size == 0:
            yield
            return
        slots = self.slots(idx)
        token = object()
        with self.mu:
            self.inflight[token] = slots
            ok = bool(self.held[slots].all())
        try:
            if not ok:
                self._pin(np.unique(slots))
            yield
        finally:
            with self.mu:
                del self.inflight[token]

    def _split(self, slots: np.ndarray) -> Iterator[tuple[_Part, np.ndarray]]:
        if len(self.parts) == 1:
            yield self.parts[0], slots
            return
        k = np.searchsorted(self.offsets, slots, side="right") - 1
        for part in np.unique(k):
            yield self.parts[int(part)], slots[k == part] - self.offsets[int(part)]

    @staticmethod
    def _lock(part: _Part, p: int) -> None:
        """Take this process's pin on page ``p`` (a shared lock; an evictor
        holds its exclusive one only for as long as a punch takes)."""
        deadline = time.monotonic() + _PIN_DEADLINE
        while not _ofd(part.fd, fcntl.F_RDLCK, p, 1):
            if time.monotonic() > deadline:
                raise TimeoutError(f"page {p} of {part.files.store_dir!r} stayed locked for {_PIN_DEADLINE} s")
            time.sleep(0.0005)

    def _pin(self, slots: np.ndarray) -> int:
        """Pin the pages ``slots`` (unique global pages), fetching those not
        in the mirror; the bytes fetched. A page is marked held (which lets
        the native reads through) only once it is pinned and present, so a
        read on another thread never meets a page still being written."""
        missing: list[tuple[_Part, int]] = []
        now = int(time.time())
        for part, local in self._split(slots):
            f = part.files
            for p in local[~part.held[local]].tolist():
                self._lock(part, p)
                if f.present[p] == 1:
                    f.stamps[p] = now
                    part.held[p] = True
                else:
                    missing.append((part, p))
        if not missing:
            return 0
        total = 0
        try:
            for _ in range(3):  # a page evicted between its fetch and the pin is fetched again
                if len(missing) == 1:
                    total += self.tree.fetch_page(missing[0][0], missing[0][1], self)
                else:
                    futures = [self.tree.pool().submit(self.tree.fetch_page, part, p, self) for part, p in missing]
                    first_error = None
                    for fu in futures:
                        try:
                            total += fu.result()
                        except BaseException as e:  # every fetch ends before the error is raised
                            first_error = first_error or e
                    if first_error is not None:
                        raise first_error
                again = []
                for part, p in missing:
                    self._lock(part, p)  # again: a failed read on another thread may have let go of it
                    if part.files.present[p] == 1:
                        part.held[p] = True
                    else:
                        again.append((part, p))
                missing = again
                if not missing:
                    return total
            raise TimeoutError(f"{len(missing)} page(s) were evicted three times between their fetch and their pin")
        except BaseException:
            with self.mu:
                for part, p in missing:
                    if not part.held[p]:
                        _ofd(part.fd, fcntl.F_UNLCK, p, 1)
            raise

    def prefetch(self, idx: np.ndarray) -> int:
        """Fetch and pin the pages the records at ``idx`` need; the bytes
        fetched."""
        if idx.size == 0 or self.closed or self.all_held():
            return 0
        slots = np.unique(self.slots(idx))
        token = object()
        with self.mu:
            slots = slots[~self.held[slots]]
            self.inflight[token] = slots
        try:
            return self._pin(slots) if slots.size else 0
        finally:
            with self.mu:
                del self.inflight[token]
            if slots.size:
                self.tree.cache.make_room(0)

    def verify(self) -> list[tuple[str, str]]:
        """Check every page of every store of the handle: a page in the
        cache is read from the mirror and checked (one that fails is
        evicted and fetched again), a page not in it is fetched, which
        checks it. Returns ``(object URL, what)`` for each page whose bytes
        from the server do not match the table, and carries on past it."""
        faults: list[tuple[str, str]] = []
        todo = [(part, p) for part in self.parts for p in np.flatnonzero(part.files.sizes > 0).tolist()]

        def one(item: tuple[_Part, int]) -> tuple[str, str] | None:
            part, p = item
            f = part.files
            chunk, lo, hi = (int(x) for x in f.pages[p])
            try:
                if f.present[p] == 1:
                    data = os.pread(f.chunk_fd(chunk), hi - lo, lo)
                    recs = np.ascontiguousarray(part.records[part.first[p] : part.first[p + 1]])
                    try:
                        _native.store_check_bytes(self.h, part.store, recs, chunk, lo, data)
                        return None
                    except CorruptStoreError:
                        f.present[p] = 0  # damaged in the cache: fetched again below
                gp = np.array([self.offsets[self.parts.index(part)] + p], dtype=np.int64)
                self._pin(gp)
                if f.present[p] != 1:  # held already, so not fetched by _pin
                    self.tree.fetch_page(part, p, self)
            except CorruptStoreError as e:
                return self.tree.object_url(part.key_of[chunk]), str(e)
            return None

        step = 4 * self.tree.opts.threads
        for a in range(0, len(todo), step):
            block = todo[a : a + step]
            token = object()
            with self.mu:
                self.inflight[token] = np.array([self.offsets[self.parts.index(pt)] + p for pt, p in block])
            try:
                faults += [r for r in self.tree.pool().map(one, block) if r is not None]
            finally:
                with self.mu:
                    del self.inflight[token]
        return faults

    def refetch(self, idx: np.ndarray) -> None:
        """Fetch the pages of ``idx`` again, over what the cache holds (the
        caller pins them, inside :meth:`reading`). Their bytes are written
        over, never punched out, so a reader elsewhere meets the old bytes
        or the fetched ones, and the fetched ones are checked."""
        for part, local in self._split(np.unique(self.slots(idx))):
            for p in local.tolist():
                part.files.present[p] = 0
                self.tree.fetch_page(part, p, self)

    def release_idle(self) -> None:
        """Drop this process's pins on every page no batch in flight needs."""
        with self.mu:
            # a read on the fast path may need any held page: wait for those
            # in flight (each is one native call), holding new ones back
            self.releasing = True
            try:
                while self.fast:
                    self.idle.wait()
                self._release_locked()
            finally:
                self.releasing = False
                self.idle.notify_all()

    def _release_locked(self) -> None:
        """release_idle's work, under ``mu`` with no fast-path read in flight."""
        keep = np.zeros(self.held.size, dtype=bool)
        for slots in self.inflight.values():
            keep[slots] = True
        for k, part in enumerate(self.parts):
            lo = int(self.offsets[k])
            free = np.flatnonzero(part.held & ~keep[lo : lo + part.held.size])
            if not free.size:
                continue
            for run in np.split(free, np.flatnonzero(np.diff(free) != 1) + 1):
                _ofd(part.fd, fcntl.F_UNLCK, int(run[0]), int(run.size))
            part.held[free] = False

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        for k, part in enumerate(self.parts):
            with contextlib.suppress(Exception):  # the handle may be closed already, which removed the map
                _native.store_set_residency(self.h, k, None, None, 0)
            part.close()  # closing the descriptor drops its pins

    def stats(self) -> dict[str, int]:
        held = int(sum(int(np.dot(p.held.astype(np.int64), p.files.sizes)) for p in self.parts))
        present = sum(p.files.used() for p in self.parts)
        return {"fetched_bytes": self.tree.fetched_bytes, "fetches": self.tree.fetches, "cached_bytes": present,
                "pinned_bytes": held, "cache_used_bytes": self.tree.cache.used(),
                "cache_limit_bytes": self.tree.cache.limit(), "evicted_bytes": self.tree.cache.evicted_bytes}

