"""Keeping a handle's reads inside the pages its process holds.

A :class:`Guard` is made per native handle of a dataset in object storage
(``remote._tree.RemoteTree.guard``). It gives each store behind the handle
its residency map (a sharded dataset's stores when a read first touches
them), so a warm read runs as one native call; for a read the maps refused
it works out the batch's table pages from its indices (global index, shard,
local index, entry offset), pins and fetches them, then the chunk pages the
entries name, and runs the read again; it checks the pages of a read that
met damaged bytes again and fetches those that fail; it fetches ahead for
the loader; it lets go of this process's idle pins when the cache needs
room; and it checks every page and record for ``verify()``. See
``remote._cache`` for the design. It stays one file past 700 lines: the pins,
the pages of the batches in flight and the fast-path count it keeps are what
every one of those steps must agree on to be right.
"""

from __future__ import annotations

import collections
import contextlib
import fcntl
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

import numpy as np

from loaderx.errors import CorruptStoreError, NotResidentError
from loaderx.remote._cache import _PIN_DEADLINE, ENTRY, SEG_SHIFT, StoreFiles, _ofd
from loaderx.store import _native

__all__ = ["Guard"]

_T = TypeVar("_T")
_MASK = (1 << SEG_SHIFT) - 1
#: records whose table pages verify() checks at once, and the most stored
#: bytes whose chunk pages it holds at once
_VERIFY_RECORDS = 1 << 14
_VERIFY_BYTES = 256 << 20

#: the reads the touch table keeps: the last ones before an eviction pass
#: are what it refreshes (older ones keep the stamps of their fetch or pin)
_TOUCH_READS = 1024

#: a check of a fetched page's bytes (raises CorruptStoreError), or None
_Check = Callable[[Any], None] | None


def _cat(parts: list[np.ndarray]) -> np.ndarray:
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)


class _TableNeed:
    """The table pages some records need: ``pages`` (with repeats), the
    store and segment of each (``owner``, ``seg``), and the entries a page
    boundary cuts (``cut``: store, segment, byte offset in the segment, the
    first of its two pages)."""

    def __init__(self, pages: np.ndarray, owner: np.ndarray, seg: np.ndarray,
                 cut: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]) -> None:
        self.pages, self.owner, self.seg, self.cut = pages, owner, seg, cut
        self._unique: tuple[np.ndarray, np.ndarray] | None = None

    def where(self, p: int) -> tuple[int, int]:
        """The store and segment of page ``p``, one of ``pages``."""
        if self._unique is None:
            self._unique = np.unique(self.pages, return_index=True)
        u, first = self._unique
        j = int(first[np.searchsorted(u, p)])
        return int(self.owner[j]), int(self.seg[j])


class _ChunkNeed:
    """The chunk pages some records need: ``pages`` (with repeats); the
    records that lie in one page (``one``: page, store, chunk, local index,
    sorted by page) and those over several (``more``: store, chunk, offset,
    length, local index, first page, last page)."""

    def __init__(self, pages: np.ndarray, one: tuple[np.ndarray, ...], more: tuple[np.ndarray, ...]) -> None:
        self.pages, self.one, self.more = pages, one, more

    def in_page(self, p: int) -> tuple[int, int, np.ndarray] | None:
        """``(store, chunk, local indices)`` of the records wholly in page
        ``p``; None when there are none."""
        pg = self.one[0]
        a, b = np.searchsorted(pg, p, side="left"), np.searchsorted(pg, p, side="right")
        if a == b:
            return None
        return int(self.one[1][a]), int(self.one[2][a]), np.ascontiguousarray(self.one[3][a:b])


class Guard:
    """Keeps the pages of every batch of a handle in the mirror, and pinned,
    while the batch is read."""

    def __init__(self, tree: Any, h: int, rels: list[str], starts: np.ndarray, lazy: bool) -> None:
        self.tree = tree
        self.h = h
        self.pages = tree.pages
        self.layout = tree.layout
        self.rels = rels
        self.starts = np.asarray(starts, dtype=np.int64)
        self.cpage = tree.opts.page_size
        self.tpage = tree.opts.table_page_size
        #: this process's pins: shared OFD locks through this descriptor,
        #: one for the handle whatever its number of stores
        self.fd = os.open(self.pages.present_path, os.O_RDWR)
        self.held = np.zeros(max(1, self.pages.npages), dtype=bool)
        #: the stores given their residency maps, by position
        self.files: dict[int, StoreFiles] = {}
        self._reg = threading.Lock()
        self.mu = threading.Lock()
        self.idle = threading.Condition(self.mu)  # signalled when no fast-path read is in flight
        self.releasing = False
        #: reads in flight on the fast path (their pages are not registered):
        #: release_idle waits for them to end, and holds new ones back meanwhile
        self.fast = 0
        #: the pages of each batch (and prefetch) in flight in this process,
        #: which release_idle keeps pinned
        self.inflight: dict[object, np.ndarray] = {}
        self.closed = False
        self._total: int | None = None
        #: reads that met bytes failing their checks, whose pages were then
        #: checked from the mirror (and fetched again where they failed)
        self.repairs = 0
        #: the touch table: the indices of the reads since the last flush,
        #: whose pages get this moment's stamp when eviction next looks
        #: (a warm read pays one list append, not a write per page)
        self._touched: collections.deque[np.ndarray] = collections.deque(maxlen=_TOUCH_READS)
        try:
            if lazy:
                _native.set_require_residency(h)
            else:
                self._register(range(len(rels)))
        except BaseException:
            os.close(self.fd)
            raise

    # the stores' maps

    def _register(self, ks: Iterable[int]) -> None:
        """Mirror the stores at positions ``ks`` not registered yet and give
        each its residency map."""
        todo = [int(k) for k in ks if int(k) not in self.files]
        if not todo:
            return
        with self._reg:
            todo = [k for k in todo if k not in self.files]
            if not todo:
                return
            rels = [self.rels[k] for k in todo]
            if len(rels) > 1:
                list(self.tree.pool().map(self.tree.materialize, rels))
            else:
                self.tree.materialize(rels[0])
            for k in todo:
                f = self.tree.store_files(self.rels[k])
                if f.table_base is None and self.starts[k + 1] > self.starts[k]:
                    raise ValueError(
                        f"{self.tree.object_url(self.rels[k] or '.')}: the store has no record table segments "
                        "(*.tab): a store of a format before version 4 has no checksums, so it cannot be "
                        "read from object storage, whose cached bytes are trusted only through them; upgrade "
                        "it (Zrecord(path, readonly=False).upgrade()) and push it again"
                    )
                _native.store_set_residency(self.h, k, self.held, f.chunk_base, self.cpage, f.table_base, self.tpage)
                self.files[k] = f

    def register_all(self) -> None:
        """Mirror every store of the handle and give each its map (for a
        call that opens every store, such as a sharded dataset's codec)."""
        for a in range(0, len(self.rels), 256):
            self._register(range(a, min(len(self.rels), a + 256)))

    def versions(self) -> list[int]:
        """The format version of each mirrored store (byte 4 of its header)."""
        out = []
        for k in sorted(self.files):
            with open(os.path.join(self.tree.local, self.rels[k], "meta.zr"), "rb") as f:
                head = f.read(5)
            out.append(head[4] if len(head) == 5 else 0)
        return out

    def _route(self, idx: np.ndarray) -> tuple[np.ndarray | None, np.ndarray]:
        """The store of each of the handle's indices ``idx`` (None: all in
        store 0) and its index in that store."""
        if len(self.rels) == 1:
            return None, idx
        k = np.searchsorted(self.starts, idx, side="right") - 1
        return k, idx - self.starts[k]

    def _groups(self, idx: np.ndarray) -> list[tuple[int, np.ndarray, np.ndarray]]:
        """``(store, positions in idx, local indices)`` per store the
        indices touch, each store registered."""
        ks, local = self._route(idx)
        if ks is None:
            out = [(0, np.arange(idx.size), local)]
        else:
            out = []
            for k in np.unique(ks).tolist():
                at = np.flatnonzero(ks == k)
                out.append((k, at, local[at]))
        self._register(k for k, _, _ in out)
        return out

    # which pages records need

    def _table_need(self, idx: np.ndarray) -> _TableNeed:
        """The table pages of the records at ``idx``, by arithmetic."""
        tp = self.tpage
        pages, owner, segs = [], [], []
        cut: list[list[np.ndarray]] = [[], [], [], []]
        for k, _, local in self._groups(idx):
            base = self.files[k].table_base
            if base is None:
                continue
            seg = local >> SEG_SHIFT
            off = (local & _MASK) * ENTRY
            p0 = base[seg] + off // tp
            p1 = base[seg] + (off + ENTRY - 1) // tp
            pages += [p0, p1]
            owner += [np.full(2 * local.size, k, dtype=np.int64)]
            segs += [seg, seg]
            two = p0 != p1
            if two.any():
                for part, v in zip(cut, (np.full(int(two.sum()), k, dtype=np.int64), seg[two], off[two], p0[two]),
                                   strict=True):
                    part.append(v)
        return _TableNeed(_cat(pages), _cat(owner), _cat(segs), tuple(_cat(c) for c in cut))  # type: ignore[arg-type]

    def _table_need_all(self, ks: Iterable[int]) -> _TableNeed:
        """Every table page of the stores ``ks`` (registered)."""
        tp = self.tpage
        pages, owner, segs = [], [], []
        cut: list[list[np.ndarray]] = [[], [], [], []]
        for k in ks:
            base = self.files[k].table_base
            n = int(self.starts[k + 1] - self.starts[k])
            if base is None:
                continue
            for s in range(-(-n >> SEG_SHIFT) if n else 0):
                nbytes = min(n - (s << SEG_SHIFT), 1 << SEG_SHIFT) * ENTRY
                count = -(-nbytes // tp)
                pages.append(int(base[s]) + np.arange(count, dtype=np.int64))
                owner.append(np.full(count, k, dtype=np.int64))
                segs.append(np.full(count, s, dtype=np.int64))
                bound = np.arange(1, count, dtype=np.int64) * tp  # page boundaries inside the entries
                bound = bound[bound % ENTRY != 0]
                off = bound // ENTRY * ENTRY
                for part, v in zip(cut, (np.full(off.size, k, dtype=np.int64), np.full(off.size, s, dtype=np.int64),
                                         off, int(base[s]) + off // tp), strict=True):
                    part.append(v)
        return _TableNeed(_cat(pages), _cat(owner), _cat(segs), tuple(_cat(c) for c in cut))  # type: ignore[arg-type]

    def _chunk_pages(self, idx: np.ndarray, spans: tuple[np.ndarray, ...] | None = None
                     ) -> tuple[np.ndarray, np.ndarray, tuple[np.ndarray, ...]]:
        """The chunk pages of the records at ``idx`` (record after record)
        and how many each record has, from their entries (whose table pages
        the caller holds); then the spans and each record's first and last
        page."""
        if spans is None:
            spans = _native.store_spans(self.h, idx)
        s, c, o, ln = (a.astype(np.int64) for a in spans)
        cp = self.cpage
        if len(self.rels) == 1:
            first = self.files[0].chunk_base[c]
        else:
            first = np.empty(idx.size, dtype=np.int64)
            for k in np.unique(s).tolist():
                at = s == k
                first[at] = self.files[k].chunk_base[c[at]]
        last = first + (o + np.maximum(ln, 1) - 1) // cp
        first += o // cp
        count = np.where(ln > 0, last - first + 1, 0)
        total = int(count.sum())
        starts = np.cumsum(count) - count
        pages = np.repeat(first, count) + (np.arange(total, dtype=np.int64) - np.repeat(starts, count))
        return pages, count, (s, c, o, ln, first, last)

    def _chunk_need(self, idx: np.ndarray,
                    spans: tuple[np.ndarray, ...] | None = None) -> _ChunkNeed:
        """The chunk pages of the records at ``idx``, from their entries
        (whose table pages the caller holds)."""
        pages, _, (s, c, o, ln, first, last) = self._chunk_pages(idx, spans)
        _, local = self._route(idx)
        one = (ln > 0) & (first == last)
        order = np.argsort(first[one], kind="stable")
        ones = tuple(a[one][order] for a in (first, s, c, local))
        more = (ln > 0) & (first < last)
        mores = tuple(a[more] for a in (s, c, o, ln, local, first, last))
        return _ChunkNeed(pages, ones, mores)

    # checks of fetched bytes

    def _table_check(self, k: int, seg: int, p: int) -> Callable[[Any], None]:
        _, lo, _ = self.layout.span(p)
        return lambda data: _native.store_check_table(self.h, k, seg, lo, data)

    def _chunk_check(self, need: _ChunkNeed, p: int) -> _Check:
        got = need.in_page(p)
        if got is None:
            return None
        k, chunk, recs = got
        _, lo, _ = self.layout.span(p)
        return lambda data: _native.store_check_bytes(self.h, k, recs, chunk, lo, data)

    def _url(self, p: int) -> str:
        return self.tree.object_url(self.layout.rels[self.layout.file_of(p)])

    # reads

    def all_held(self) -> bool:
        """Whether this process holds every page of the handle's stores (a
        warm dataset: nothing left to fetch ahead)."""
        if self._total is None:
            total = 0
            for rel in self.rels:
                a, b = self.layout.store(rel)
                total += int(self.layout.first[b] - self.layout.first[a])
            self._total = total
        return int(np.count_nonzero(self.held)) >= self._total

    def read(self, idx: np.ndarray, fn: Callable[[], _T], chunks: bool = True) -> _T:
        """``fn()``, a native call that reads the records at ``idx`` (their
        table entries, and with ``chunks`` their bytes), with their pages in
        the cache and pinned. First as it is: the stores' residency maps
        let it through when this process holds every page already, which a
        warm dataset does. Else the pages are pinned (and fetched) and the
        call runs again. Bytes that fail their checks (a page lost in a
        crash, or damaged on disk) have the call's pages checked from the
        mirror and those that fail fetched again, and the call is retried
        once; a second failure is raised, naming the object."""
        with self.mu:
            while self.releasing:
                self.idle.wait()
            self.fast += 1
        damaged = False
        try:
            out = fn()
            self._touch(idx)
            return out
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
                try:
                    with self.reading(idx, chunks, repair=damaged):
                        out = fn()
                    self._touch(idx)
                    return out
                except CorruptStoreError as e:
                    if attempt or damaged:
                        raise self._named(e) from None
                    damaged = True
            raise AssertionError("unreachable")
        finally:
            # what this read pinned beyond the limit goes now, not at the
            # next fetch: an idle process keeps no more than the limit
            self.tree.cache.make_room(0)

    def _touch(self, idx: np.ndarray) -> None:
        """Note that the records at ``idx`` were read (for the LRU stamps)."""
        self._touched.append(idx)  # a bounded deque: the oldest drop off

    def flush_touches(self) -> None:
        """Give the pages of the reads noted since the last flush stamps in
        the order of the reads (a page gets the stamp of the last read that
        used it, so eviction's order among them is the reads'): their table
        pages by arithmetic, their chunk pages from their entries (left
        alone for entries no longer held). One native call for them all."""
        with self.mu:
            items = list(self._touched)
            self._touched.clear()
        if not items or self.closed:
            return
        st = self.pages
        # best effort: a handle closed meanwhile, or entries no longer held,
        # leave those pages' stamps as they were
        try:
            idx = np.concatenate(items).astype(np.int64, copy=False)
            if idx.size == 0:
                return
            rank = np.repeat(np.arange(len(items), dtype=np.int32), [a.size for a in items])
            # each page gets the rank of the last read that used it: a dense
            # array over the pages, no sort
            newest = np.full(st.npages, -1, dtype=np.int32)
            pages, ranks = self._table_pages_of(idx, rank)
            np.maximum.at(newest, pages, ranks)
            with contextlib.suppress(Exception):
                pages, count, _ = self._chunk_pages(idx)
                np.maximum.at(newest, pages, np.repeat(rank, count))
        except Exception:
            return
        p = np.flatnonzero(newest >= 0)
        now = time.time_ns()
        st.stamps[p] = (now - (len(items) - newest[p].astype(np.int64))) // st.stamp_scale

    def _table_pages_of(self, u: np.ndarray, rank: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The table pages of the (unique, registered) records ``u`` and the
        rank of each: one or two a record, in no particular order."""
        ks, local = self._route(u)
        tp = self.tpage
        pages, ranks = [], []
        for k in np.unique(ks).tolist() if ks is not None else [0]:
            f = self.files.get(k)
            if f is None or f.table_base is None:
                continue
            at = ks == k if ks is not None else slice(None)
            loc = local[at]
            off = (loc & _MASK) * ENTRY
            base = f.table_base[loc >> SEG_SHIFT]
            pages += [base + off // tp, base + (off + ENTRY - 1) // tp]
            ranks += [rank[at], rank[at]]
        return _cat(pages), _cat(ranks)

    def whole(self, fn: Callable[[], _T]) -> _T:
        """``fn()``, a native call that reads every table entry of the
        handle (the first stats()), with every table page pinned."""
        ks = range(len(self.rels))
        self.register_all()
        for attempt in range(2):
            need = self._table_need_all(ks)
            token = object()
            with self.mu:
                self.inflight[token] = need.pages
            try:
                self._hold(need.pages, lambda p, n=need: self._table_check(*n.where(p), p))  # type: ignore[misc, call-arg]  # a lambda with a default
                if attempt:
                    self._count_repair()
                    self._repair_table(need, self._raise)
                return fn()
            except CorruptStoreError as e:
                if attempt:
                    raise self._named(e) from None
            finally:
                with self.mu:
                    del self.inflight[token]
                self.tree.cache.make_room(0)
        raise AssertionError("unreachable")

    def _count_repair(self) -> None:
        with self.mu:
            self.repairs += 1

    def _name(self, text: str) -> str:
        """``text`` with the mirror's paths written as the objects' URLs."""
        return self.tree.name_objects(text)

    def _named(self, e: CorruptStoreError) -> CorruptStoreError:
        """``e`` with the mirror's paths written as the objects' URLs."""
        return type(e)(self._name(str(e)))

    def _raise(self, url: str, what: str) -> None:
        what = self._name(what)
        raise CorruptStoreError(what if url in what else f"{url}: {what}")

    @contextlib.contextmanager
    def reading(self, idx: np.ndarray, chunks: bool = True, repair: bool = False) -> Iterator[None]:
        """Hold every page the records at ``idx`` need while the block runs:
        their table pages, then (with ``chunks``) the chunk pages their
        entries name. With ``repair`` each is checked from the mirror first,
        and those that fail are fetched again."""
        if idx.size == 0:
            yield
            return
        token = object()
        need = self._table_need(idx)
        with self.mu:
            self.inflight[token] = need.pages
        try:
            self._hold(need.pages, lambda p: self._table_check(*need.where(p), p))
            if repair:
                self._count_repair()
                self._repair_table(need, self._raise)
            if chunks:
                cneed = self._chunk_need(idx)
                with self.mu:
                    self.inflight[token] = np.concatenate([need.pages, cneed.pages])
                self._hold(cneed.pages, lambda p: self._chunk_check(cneed, p))
                if repair:
                    self._repair_chunks(cneed, self._raise)
            yield
        finally:
            with self.mu:
                del self.inflight[token]

    def _hold(self, pages: np.ndarray, check: Callable[[int], _Check]) -> int:
        with self.mu:
            ok = bool(self.held[pages].all())
        return 0 if ok else self._pin(np.unique(pages), check)

    def _lock(self, p: int) -> None:
        """Take this process's pin on page ``p`` (a shared lock; an evictor
        holds its exclusive one only for as long as a punch takes)."""
        deadline = time.monotonic() + _PIN_DEADLINE
        while not _ofd(self.fd, fcntl.F_RDLCK, p, 1):
            if time.monotonic() > deadline:
                j = self.layout.file_of(p)
                raise TimeoutError(f"page {p} ({self.layout.rels[j]}) of {self.tree.url!r} stayed locked for "
                                   f"{_PIN_DEADLINE} s")
            time.sleep(0.0005)

    def _pin(self, slots: np.ndarray, check: Callable[[int], _Check] | None = None,
             failures: list[tuple[int, CorruptStoreError]] | None = None) -> int:
        """Pin the pages ``slots`` (unique), fetching those not in the
        mirror after ``check(page)``'s check of their bytes; the bytes
        fetched. A page is marked held (which lets the native reads
        through) only once it is pinned and present, so a read on another
        thread never meets a page still being written. With ``failures``, a
        page whose fetched bytes fail their check is listed there, unpinned,
        instead of raised."""
        present, held = self.pages.present, self.held
        missing: list[int] = []
        now = self.pages.now()
        for p in slots[~held[slots]].tolist():
            self._lock(p)
            if present[p] == 1:
                self.pages.stamps[p] = now
                held[p] = True
            else:
                missing.append(p)
        if not missing:
            return 0
        try:
            _ = self.tree.client  # a forked child fails here, before it starts a fetch
        except BaseException:
            with self.mu:
                for p in missing if not self.closed else ():
                    _ofd(self.fd, fcntl.F_UNLCK, p, 1)
            raise
        self.tree.cache.make_room(int(self.layout.page_sizes()[missing].sum()))
        total = 0
        failed: set[int] = set()

        def fetch(p: int) -> int:
            return self.tree.fetch_page(p, check(p) if check is not None else None)

        try:
            for _ in range(3):  # a page evicted between its fetch and the pin is fetched again
                if len(missing) == 1:
                    outcomes: list[Any] = []
                    try:
                        outcomes.append(fetch(missing[0]))
                    except BaseException as e:
                        outcomes.append(e)
                else:
                    futures = [self.tree.pool().submit(fetch, p) for p in missing]
                    outcomes = []
                    for fu in futures:  # every fetch ends before an error is raised
                        try:
                            outcomes.append(fu.result())
                        except BaseException as e:
                            outcomes.append(e)
                first_error = None
                for p, got in zip(missing, outcomes, strict=True):
                    if not isinstance(got, BaseException):
                        total += got
                    elif failures is not None and isinstance(got, CorruptStoreError):
                        failures.append((p, got.with_traceback(None)))
                        failed.add(p)
                    else:
                        first_error = first_error or got
                del got, outcomes
                if first_error is not None:
                    # raised with no local left naming it, so that its
                    # traceback (which holds this frame) makes no cycle
                    try:
                        raise first_error
                    finally:
                        first_error = None
                again = []
                for p in missing:
                    if p in failed:
                        continue
                    self._lock(p)  # again: a failed read on another thread may have let go of it
                    if present[p] == 1:
                        held[p] = True
                    else:
                        again.append(p)
                missing = again
                if not missing:
                    return total
            raise TimeoutError(f"{len(missing)} page(s) were evicted three times between their fetch and their pin")
        except BaseException:
            failed.update(missing)
            raise
        finally:
            with self.mu:
                for p in failed if not self.closed else ():
                    if not held[p]:
                        _ofd(self.fd, fcntl.F_UNLCK, p, 1)

    # checks of what the cache holds

    def _refetch(self, p: int, check: _Check, fault: Callable[[str, str], None]) -> bool:
        """Fetch page ``p`` again over the cache's copy (the caller pins
        it); False, reported to ``fault``, when the fresh bytes fail too."""
        try:
            self.tree.fetch_page(p, check, force=True)
            return True
        except CorruptStoreError as e:
            fault(self._url(p), str(e))
            return False

    def _repair_table(self, need: _TableNeed, fault: Callable[[str, str], None],
                      skip: set[int] = frozenset()) -> None:  # type: ignore[assignment]
        """Check the table pages of ``need`` as the cache holds them (the
        caller pins them): each page's whole entries, then each entry a page
        boundary cuts; fetch again what fails, and report to ``fault`` what
        fails once fetched again."""
        bad = set(skip)
        for p in np.unique(need.pages).tolist():
            if p in bad:
                continue
            k, seg = need.where(p)
            _, lo, _ = self.layout.span(p)
            try:
                _native.store_check_table(self.h, k, seg, lo, self.tree.read_page(p))
            except CorruptStoreError:
                if not self._refetch(p, self._table_check(k, seg, p), fault):
                    bad.add(p)
        ks, segs, offs, p0s = need.cut
        for k, seg, off, p0 in zip(ks.tolist(), segs.tolist(), offs.tolist(), p0s.tolist(), strict=True):
            if p0 in bad or p0 + 1 in bad:
                continue
            try:
                _native.store_check_table(self.h, k, seg, off, self.tree.read_page(p0, off, off + ENTRY))
                continue
            except CorruptStoreError:
                pass
            if not all(self._refetch(p, self._table_check(k, seg, p), fault) for p in (p0, p0 + 1)):
                bad.update((p0, p0 + 1))
                continue
            try:
                _native.store_check_table(self.h, k, seg, off, self.tree.read_page(p0, off, off + ENTRY))
            except CorruptStoreError as e:
                fault(self._url(p0), f"{self._url(p0)}: the entry at bytes [{off}, {off + ENTRY}), across two "
                      f"pages, fails its checksum once both were fetched again ({e}); the object was altered "
                      "after the dataset was written")
                bad.update((p0, p0 + 1))

    def _repair_chunks(self, need: _ChunkNeed, fault: Callable[[str, str], None],
                       skip: set[int] = frozenset()) -> None:  # type: ignore[assignment]
        """Check the records of ``need`` against the cache's bytes (the
        caller pins their pages): page by page those that lie in one page,
        then one by one those over several; fetch again the pages of what
        fails, and report to ``fault`` what fails once fetched again."""
        bad = set(skip)
        for p in np.unique(need.one[0]).tolist():
            if p in bad:
                continue
            check = self._chunk_check(need, p)
            assert check is not None
            try:
                check(self.tree.read_page(p))
            except CorruptStoreError:
                if not self._refetch(p, check, fault):
                    bad.add(p)
        for k, chunk, off, ln, local, p0, p1 in zip(*(a.tolist() for a in need.more), strict=True):
            span = range(p0, p1 + 1)
            if any(p in bad for p in span):
                continue
            recs = np.array([local], dtype=np.int64)

            def check_record(k: int = k, recs: np.ndarray = recs, chunk: int = chunk, off: int = off,
                             ln: int = ln, p0: int = p0) -> None:
                _native.store_check_bytes(self.h, k, recs, chunk, off, self.tree.read_page(p0, off, off + ln))

            try:
                check_record()
                continue
            except CorruptStoreError:
                pass
            if not all(self._refetch(p, self._chunk_check(need, p), fault) for p in span):
                bad.update(span)
                continue
            try:
                check_record()
            except CorruptStoreError as e:
                fault(self._url(p0), f"{self._url(p0)}: record {local}, bytes [{off}, {off + ln}) over "
                      f"{p1 - p0 + 1} pages, fails its checksum once its pages were fetched again ({e}); the "
                      "object was altered after the dataset was written")
                bad.update(span)

    def prefetch(self, idx: np.ndarray) -> int:
        """Fetch and pin the pages the records at ``idx`` need (table pages,
        then chunk pages); the bytes fetched."""
        if idx.size == 0 or self.closed or self.all_held():
            return 0
        token = object()
        total = 0
        try:
            need = self._table_need(idx)
            with self.mu:
                self.inflight[token] = need.pages
            total += self._hold(need.pages, lambda p: self._table_check(*need.where(p), p))
            cneed = self._chunk_need(idx)
            with self.mu:
                self.inflight[token] = np.concatenate([need.pages, cneed.pages])
            total += self._hold(cneed.pages, lambda p: self._chunk_check(cneed, p))
            return total
        finally:
            with self.mu:
                self.inflight.pop(token, None)
            if total:
                self.tree.cache.make_room(0)

    def verify(self) -> list[tuple[str, str]]:
        """Check every table page and every record of every store of the
        handle, and the chunk pages that hold them: a page in the cache is
        read from the mirror and checked (one that fails is fetched again),
        a page not in it is fetched, which checks it. Returns ``(object URL,
        what)`` for each page or record whose bytes from the server fail
        their checks, and carries on past it."""
        faults: list[tuple[str, str]] = []
        for k in range(len(self.rels)):
            self._register([k])
            lo, hi = int(self.starts[k]), int(self.starts[k + 1])
            for a in range(lo, hi, _VERIFY_RECORDS):
                self._verify_block(np.arange(a, min(hi, a + _VERIFY_RECORDS), dtype=np.int64), faults)
        return faults

    def _verify_block(self, idx: np.ndarray, faults: list[tuple[str, str]]) -> None:
        """verify()'s check of the records at ``idx``, of one store."""

        def fault(url: str, what: str) -> None:
            faults.append((url, self._name(what)))

        token = object()
        try:
            need = self._table_need(idx)
            with self.mu:
                self.inflight[token] = need.pages
            failed: list[tuple[int, CorruptStoreError]] = []
            self._pin(np.unique(need.pages), lambda p: self._table_check(*need.where(p), p), failed)
            for p, e in failed:
                fault(self._url(p), str(e))
            before = len(faults)
            self._repair_table(need, fault, {p for p, _ in failed})
            if failed or len(faults) > before:
                return  # the entries of these records are not the store's: nothing more to check of them
            try:
                spans = _native.store_spans(self.h, idx)
            except CorruptStoreError as e:  # entries that passed their checks, yet not the store's
                fault(self._url(int(need.pages[0])), str(e))
                return
            ln = spans[3].astype(np.int64)
            cut = np.searchsorted(np.cumsum(ln), np.arange(_VERIFY_BYTES, int(ln.sum()), _VERIFY_BYTES))
            for part in np.split(np.arange(idx.size), np.unique(cut)):
                if not part.size:
                    continue
                sub = tuple(a[part] for a in spans)
                cneed = self._chunk_need(idx[part], sub)
                with self.mu:
                    self.inflight[token] = np.concatenate([need.pages, cneed.pages])
                cfailed: list[tuple[int, CorruptStoreError]] = []
                self._pin(np.unique(cneed.pages), lambda p, n=cneed: self._chunk_check(n, p), cfailed)  # type: ignore[misc]  # mypy infers no lambda with a default argument
                for p, exc in cfailed:
                    fault(self._url(p), str(exc))
                self._repair_chunks(cneed, fault, {p for p, _ in cfailed})
                with self.mu:
                    self.inflight[token] = need.pages
                self.tree.cache.make_room(0)
        finally:
            with self.mu:
                self.inflight.pop(token, None)
            self.tree.cache.make_room(0)

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
        if self.closed:
            return
        keep = np.zeros(self.held.size, dtype=bool)
        for slots in self.inflight.values():
            keep[slots] = True
        free = np.flatnonzero(self.held & ~keep)
        if not free.size:
            return
        for run in np.split(free, np.flatnonzero(np.diff(free) != 1) + 1):
            _ofd(self.fd, fcntl.F_UNLCK, int(run[0]), int(run.size))
        self.held[free] = False

    def close(self) -> None:
        with self.mu:
            if self.closed:
                return
            self.closed = True
            # nothing is held once the descriptor goes: a release after this
            # must not unlock through a descriptor number reused since
            self.held[:] = False
            fd, self.fd = self.fd, -1
        for k in list(self.files):
            with contextlib.suppress(Exception):  # the handle may be closed already, which removed the maps
                _native.store_set_residency(self.h, k, None, None, 0)
        with contextlib.suppress(OSError):
            os.close(fd)  # closing the descriptor drops its pins

    def stats(self) -> dict[str, int]:
        sizes = self.layout.page_sizes()
        n = self.pages.npages
        held = int(np.dot(self.held[:n].astype(np.int64), sizes)) if n else 0
        present = 0
        for rel in self.rels:
            a, b = self.layout.store(rel)
            present += self.pages.bytes_present(int(self.layout.first[a]), int(self.layout.first[b]))
        return {"fetched_bytes": self.tree.fetched_bytes, "fetches": self.tree.fetches, "cached_bytes": present,
                "pinned_bytes": held, "cache_used_bytes": self.tree.cache.used(),
                "cache_limit_bytes": self.tree.cache.limit(), "evicted_bytes": self.tree.cache.evicted_bytes,
                "repairs": self.repairs, "refetched_pages": self.tree.refetched_bad,
                "repaired_files": self.tree.repaired_files}
