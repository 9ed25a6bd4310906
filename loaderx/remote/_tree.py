"""A dataset root in object storage and its mirror in the local cache.

:class:`RemoteTree` lists the objects under a URL, keys the mirror by the
listing (every object's name, size and ETag), downloads the small files
whole, checked against their own checksums (``remote._check``) before they
are kept, and makes the chunk files and table segments sparse (a shard of a
sharded dataset when a read first needs it, see :meth:`RemoteTree.materialize`),
numbers their pages (``remote._cache._Layout``) and keeps their page state,
and fetches pages: one range request under the object's ETag, retried
within the client's limits, checked by the caller's check (and fetched
again when it fails), written into the mirror, marked present. At each
open it checks the mirror's small files again (repairing a damaged one in
place) and frees pages a killed reader wrote but never marked.
:func:`open_tree` shares one tree per URL and options in a process among
its holders, and closes it when the last lets go;
:func:`tree_of` finds the tree whose mirror holds a local path, which is how
the streams of a remote multi-stream dataset, opened by path, find their
cache. See ``remote._cache`` for the design.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import shutil
import threading
import time
import weakref
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, cast

import numpy as np

from loaderx.errors import CorruptStoreError, ForkError
from loaderx.remote import _check, _s3
from loaderx.remote._cache import (
    _META,
    _PAGED,
    _STATE_VERSION,
    CHUNK,
    CacheOptions,
    StoreFiles,
    _cache,
    _flock,
    _Layout,
    _ofd,
    _Pages,
    _place_new,
    _punch,
    _safe,
    _write_atomic,
)
from loaderx.remote._guard import Guard

__all__ = ["RemoteTree", "open_tree", "tree_of"]

_MANIFEST = "manifest.json"
#: downloads of a small file whose bytes fail their checks before the open
#: fails: a byte flipped in transit is fetched again, a damaged object is not
_SMALL_TRIES = 3


class RemoteTree:
    """A dataset root in object storage and its mirror in the cache."""

    def __init__(self, url: str, opts: CacheOptions, storage: dict[str, Any]) -> None:
        self.url = url.rstrip("/")
        self.opts = opts
        self.storage = dict(storage)
        self.bucket, self.prefix = _s3.parse_url(self.url)
        self._client = _s3.client(self.url, **self.storage)
        self.limits = _s3.settings(self.storage)
        self._client_pid = os.getpid()
        self.cache = _cache(opts)
        self.fetched_bytes = 0
        self.fetches = 0
        #: small files of the mirror found damaged and downloaded again
        self.repaired_files = 0
        #: fetched pages that failed their checks and were fetched again
        self.refetched_bad = 0
        self._mu = threading.Lock()
        self._guards: weakref.WeakSet[Guard] = weakref.WeakSet()
        #: the datasets (and other owners) that use this tree: once the last
        #: lets go, the tree closes and leaves the process's table, so that
        #: ``loaderx cache clear`` may remove its mirror
        self._holders: set[int] = set()
        self._pool: ThreadPoolExecutor | None = None
        self._fetch_locks = [threading.Lock() for _ in range(64)]
        self._objects = self._list()
        listing = json.dumps([_STATE_VERSION, sorted(self._objects.items())])
        digest = hashlib.sha256(listing.encode()).hexdigest()[:20]
        key = f"{_safe(self.bucket + '_' + self.prefix)}-{hashlib.sha256(self.url.encode()).hexdigest()[:8]}"
        self.tree_dir = os.path.join(self.cache.root, "trees", key)
        self.gen_dir = os.path.join(self.tree_dir, digest)
        self.local = os.path.join(self.gen_dir, "data")
        os.makedirs(self.gen_dir, exist_ok=True)
        with contextlib.suppress(OSError), open(os.path.join(self.tree_dir, "url"), "w") as f:
            f.write(self.url + "\n")
        self._open_fd = os.open(os.path.join(self.gen_dir, ".open"), os.O_RDWR | os.O_CREAT, 0o644)
        fcntl.flock(self._open_fd, fcntl.LOCK_SH)
        self._by_dir: dict[str, list[str]] = {}
        for rel in self._objects:
            self._by_dir.setdefault(os.path.dirname(rel), []).append(rel)
        #: directories that hold a manifest: the store directories below
        #: them are shards, mirrored when a read first needs them
        self._manifest_dirs = {os.path.dirname(r) for r in self._objects if os.path.basename(r) == _MANIFEST}
        self._ready: set[str] = set()
        self._mirror()
        layout = _Layout([(r, size) for r, (size, _) in self._objects.items()], opts.page_size,
                         opts.table_page_size)
        state_dir = os.path.join(self.gen_dir, f"pages-{opts.page_size}-{opts.table_page_size}")
        _Pages.make(state_dir, layout)
        self.pages = self.cache.pages(state_dir, layout)
        self.layout = self.pages.layout
        self._lock_fd = os.open(self.pages.present_path, os.O_RDWR)  # the fetch locks
        #: pages found written but not marked present (a reader killed
        #: between its write and its mark) and freed
        self.reconciled = 0
        self._reconcile([d for d in self._by_dir if not self._is_shard(d)])
        self._drop_old_generations()
        self.cache.trees.add(self)

    @property
    def client(self) -> Any:
        """The S3 client. obstore's runtime does not survive fork(), and a
        request from a forked child of a process that used it hangs: such a
        child gets ForkError instead (pages already cached still read)."""
        if self._client_pid != os.getpid():
            raise ForkError(
                f"{self.url!r}: a forked child process cannot fetch from object storage (the S3 client's "
                "runtime does not survive fork()); what is cached already reads. Start workers with 'spawn' "
                "(torch: DataLoader(..., multiprocessing_context='spawn')), use loaderx's DataLoader, or fill "
                "the cache first (loaderx cache warm)"
            )
        return self._client

    # listing and mirroring

    def object_url(self, rel: str) -> str:
        return f"s3://{self.bucket}/{self._key(rel)}"

    def name_objects(self, text: str) -> str:
        """``text`` (a message from the store layer) with the mirror's paths
        written as the URLs of the objects they mirror."""
        return text.replace(self.local + os.sep, self.url + "/").replace(self.local, self.url)

    def _key(self, rel: str) -> str:
        return f"{self.prefix}/{rel}" if self.prefix else rel

    def _list(self) -> dict[str, tuple[int, str]]:
        """``{relative path: (size, etag)}`` of every object under the URL."""
        import obstore

        want = f"{self.prefix}/" if self.prefix else ""
        try:
            found: dict[str, tuple[int, str]] = {}
            for batch in obstore.list(self.client, prefix=self.prefix or None):
                for meta in batch:
                    path = meta["path"]
                    if want and not path.startswith(want):
                        continue  # "prefix2/..." beside "prefix/..."
                    found[path[len(want):]] = (int(meta["size"]), meta.get("e_tag") or "")
        except Exception as e:
            raise _s3.remote_error(e, self.url, "", "list", self.limits, endpoint=self._endpoint()) from None
        if not found:
            raise FileNotFoundError(f"{self.url!r}: no objects under this URL (nothing was pushed there?)")
        if not any(r == _META or r.endswith("/" + _META) for r in found):
            raise ValueError(f"{self.url!r} holds no loaderx store (no {_META} under it)")
        return found

    def _is_shard(self, d: str) -> bool:
        """Whether directory ``d`` lies below a directory with a manifest
        (in a shard of a sharded dataset)."""
        while d:
            d = os.path.dirname(d)
            if d in self._manifest_dirs:
                return True
        return False

    def _place(self, rel: str) -> None:
        """Put object ``rel`` into the mirror unless it is there: a paged
        file as a sparse file of its size, any other downloaded whole and
        checked (see :meth:`_fetch_small`)."""
        path = os.path.join(self.local, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        if os.path.exists(path):
            return
        if _PAGED.match(os.path.basename(rel)):
            _place_new(path, None, self._objects[rel][0])
        else:
            _place_new(path, self._fetch_small(rel))

    def _fetch_small(self, rel: str) -> bytes:
        """The bytes of the small file ``rel``, downloaded whole and checked
        against their own checksums (``remote._check``) before anything
        keeps them; bytes that fail are downloaded again, up to
        ``_SMALL_TRIES`` times, then CorruptStoreError names the object."""
        header = None
        if os.path.basename(rel) == "dict.zr":
            with contextlib.suppress(OSError), open(os.path.join(self.local, os.path.dirname(rel), _META), "rb") as f:
                header = f.read(32)
        why = None
        for attempt in range(_SMALL_TRIES):
            if attempt:
                time.sleep(0.05 * attempt)
            data = self._get(rel)
            why = _check.small_fault(rel, data, header)
            if why is None:
                return data
        raise CorruptStoreError(
            f"{self.object_url(rel)}: {self.name_objects(str(why))}, in each of {_SMALL_TRIES} downloads: the object "
            "is damaged in storage or was altered after the dataset was written; nothing of it was cached"
        )

    def _check_small(self, rels: list[str]) -> None:
        """Check the mirror's copies of the small files ``rels``; one that is
        missing or fails its checks (damaged on disk since, or cached by an
        earlier version unchecked) is downloaded again and written over in
        place, where processes that hold it open see the repair."""
        for rel in sorted(rels, key=_check.small_order):
            if _PAGED.match(os.path.basename(rel)):
                continue
            path = os.path.join(self.local, rel)
            if not os.path.exists(path):
                self._place(rel)
                continue
            if _check.local_fault(path, rel) is None:
                continue
            data = self._fetch_small(rel)
            with _flock(os.path.join(self.gen_dir, ".build.lock")), open(path, "r+b") as f:
                f.write(data)
                f.truncate(len(data))
            with self._mu:
                self.repaired_files += 1

    def _mirror(self) -> None:
        """Mirror every object but those of shards: the small files whole
        and checked, the chunk files and table segments sparse. A mirror
        made before has its small files checked again (and repaired)."""
        ready = os.path.join(self.gen_dir, ".ready")
        roots = [rel for d, rels in sorted(self._by_dir.items()) if not self._is_shard(d) for rel in rels]
        if os.path.exists(ready):
            self._check_small(roots)
            return
        with _flock(os.path.join(self.gen_dir, ".build.lock")):
            if not os.path.exists(ready):
                for rel in sorted(roots, key=_check.small_order):
                    self._place(rel)
                _write_atomic(ready, b"")
                return
        self._check_small(roots)

    def _reconcile(self, dirs: list[str]) -> None:
        """Free the blocks of every page of the paged files of the store
        directories ``dirs`` that holds bytes but is not marked present and
        that no fetch is writing now: what a process killed between a
        page's write and its mark leaves, outside the limit's count and out
        of eviction's sight."""
        pages, lay = self.pages, self.layout
        for j in (j for d in dirs for j in range(*lay.store(d))):
            try:
                fd = os.open(os.path.join(self.local, lay.rels[j]), os.O_RDWR)
            except OSError:
                continue
            try:
                first, psize, size = int(lay.first[j]), int(lay.psize[j]), int(lay.size[j])
                off = 0
                while off < size:
                    try:
                        start = os.lseek(fd, off, os.SEEK_DATA)
                        end = os.lseek(fd, start, os.SEEK_HOLE)
                    except OSError:  # ENXIO: no data past off (or no SEEK_DATA here)
                        break
                    for p in range(first + start // psize, first + (min(end, size) - 1) // psize + 1):
                        if pages.present[p] == 1:
                            continue
                        if not _ofd(self._lock_fd, fcntl.F_WRLCK, pages.npages + p, 1):
                            continue  # being fetched
                        try:
                            if pages.present[p] != 1:
                                _, lo, hi = lay.span(p)
                                _punch(fd, lo, hi - lo)
                                self.reconciled += 1
                        finally:
                            _ofd(self._lock_fd, fcntl.F_UNLCK, pages.npages + p, 1)
                    off = max(end, start + 1)
            finally:
                os.close(fd)

    def materialize(self, rel: str) -> None:
        """Mirror the store directory ``rel`` if it is a shard not mirrored
        yet (its small files downloaded, its paged files made sparse). Safe
        beside other threads and processes doing the same: a file in place
        is never replaced."""
        if rel in self._ready:
            return
        if self._is_shard(rel):
            marker = os.path.join(self.gen_dir, "ready", hashlib.sha256(rel.encode()).hexdigest()[:24])
            if not os.path.exists(marker):
                for obj in sorted(self._by_dir.get(rel, ()), key=_check.small_order):
                    self._place(obj)
                os.makedirs(os.path.dirname(marker), exist_ok=True)
                _write_atomic(marker, b"")
            else:  # mirrored by another process or an earlier run: checked once in this one
                self._check_small(list(self._by_dir.get(rel, ())))
                self._reconcile([rel])
        with self._mu:
            self._ready.add(rel)

    def store_files(self, rel: str) -> StoreFiles:
        """Where the paged files of the store directory ``rel`` lie."""
        lay = self.layout
        a, b = lay.store(rel)
        kind, num, first = lay.kind[a:b], lay.num[a:b], lay.first[a:b]
        ch = kind == CHUNK
        cnum, tnum = num[ch], num[~ch]
        cbase = np.zeros(int(cnum.max()) + 1 if cnum.size else 1, dtype=np.int64)
        cbase[cnum] = first[ch]
        tbase = None
        if tnum.size:
            tbase = np.zeros(int(tnum.max()) + 1, dtype=np.int64)
            tbase[tnum] = first[~ch]
        files = range(a, b)
        return StoreFiles(
            rel, cbase, tbase, (int(lay.first[a]), int(lay.first[b])),
            {int(lay.num[j]): lay.rels[j] for j in files if lay.kind[j] == CHUNK},
            {int(lay.num[j]): lay.rels[j] for j in files if lay.kind[j] != CHUNK},
        )

    def _endpoint(self) -> str | None:
        """The endpoint the client talks to, for messages (None: AWS's)."""
        try:
            return str(self._client.config.get("endpoint") or "") or None
        except Exception:
            return None

    def _get(self, rel: str, start: int | None = None, end: int | None = None) -> Any:
        """Object ``rel`` whole (bytes), or its bytes ``[start, end)`` (a
        buffer), under the ETag of the listing. The client retries attempts
        that fail before an answer (refused, reset, stalled, 5xx); an answer
        cut off mid-body or shorter than asked for is retried here, within
        the same ``retries`` and the deadline, then reported."""
        import obstore

        size, etag = self._objects[rel]
        options: dict[str, Any] = {"if_match": etag} if etag else {}
        if start is not None:
            options["range"] = (start, end)
        want = size if start is None else cast(int, end) - start  # a range has both ends
        client = self.client  # ForkError in a forked child
        limits = self.limits
        deadline = time.monotonic() + limits.deadline
        for attempt in range(limits.retries + 1):
            last = attempt == limits.retries or time.monotonic() + _s3.backoff(attempt) >= deadline
            try:
                got = obstore.get(client, self._key(rel), options=options).bytes()
            except Exception as e:
                from obstore import exceptions as ox

                if isinstance(e, ox.PreconditionError) or "precondition" in str(e).lower():
                    raise CorruptStoreError(
                        f"{self.object_url(rel)} changed after {self.url!r} was opened (its ETag is no longer "
                        f"{etag}): open the dataset again to read the new version"
                    ) from None
                low = str(e).lower()
                if not last and ("body error" in low or "incompletebody" in low or "unexpectedeof" in low):
                    time.sleep(_s3.backoff(attempt))  # an answer cut off mid-body: asked again
                    continue
                n = attempt + 1 if attempt else None  # else the client's own count in its message
                raise _s3.remote_error(e, self.url, self._key(rel), "read", limits, attempts=n,
                                       endpoint=self._endpoint()) from None
            data = bytes(got) if start is None else memoryview(got)
            if len(data) != want:
                if not last:
                    del data, got
                    time.sleep(_s3.backoff(attempt))
                    continue
                raise CorruptStoreError(
                    f"{self.object_url(rel)}: got {len(data)} bytes where {want} were asked for "
                    f"({'the whole object' if start is None else f'bytes [{start}, {end})'}), "
                    f"{attempt + 1} time(s); the object is {size} bytes in the listing taken at open: it was "
                    "truncated or replaced"
                )
            with self._mu:
                self.fetched_bytes += len(data)
                self.fetches += 1
            return data
        raise AssertionError("unreachable")

    def _drop_old_generations(self) -> None:
        """Remove earlier generations of this URL that no process has open."""
        with contextlib.suppress(OSError):
            for g in os.scandir(self.tree_dir):
                if not g.is_dir() or g.path == self.gen_dir:
                    continue
                try:
                    fd = os.open(os.path.join(g.path, ".open"), os.O_RDWR | os.O_CREAT, 0o644)
                except OSError:
                    continue
                try:
                    try:
                        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    except BlockingIOError:
                        continue
                    shutil.rmtree(g.path, ignore_errors=True)
                finally:
                    os.close(fd)

    def pool(self) -> ThreadPoolExecutor:
        with self._mu:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.opts.threads, thread_name_prefix="loaderx-fetch")
            return self._pool

    # guards

    def guard(self, h: int, stores: list[str], starts: np.ndarray, lazy: bool) -> Guard:
        """The guard of handle ``h`` over the mirror's store directories
        ``stores`` (paths inside the mirror), in the handle's store order,
        store ``k`` holding the handle's records ``[starts[k], starts[k+1])``.
        With ``lazy`` (a set handle of shards) each store is mirrored and
        given its residency map when a read first needs it."""
        rels = []
        for path in stores:
            rel = os.path.relpath(path, self.local)
            rels.append("" if rel == "." else rel)
        g = Guard(self, h, rels, starts, lazy)
        self._guards.add(g)
        return g

    def release_idle(self) -> None:
        for g in list(self._guards):
            g.release_idle()

    def flush_touches(self) -> None:
        """Stamp the pages this process's reads used since the last flush."""
        for g in list(self._guards):
            g.flush_touches()

    def fetch_page(self, p: int, check: Callable[[Any], None] | None = None, force: bool = False) -> int:
        """Bring page ``p`` into the mirror (the caller pins it), after
        ``check(bytes)``, which raises CorruptStoreError for bytes that are
        not the store's; the bytes fetched, 0 when it was there already.
        With ``force`` it is fetched and written over the cache's copy even
        when present (a copy that failed its checks)."""
        pages = self.pages
        j, lo, hi = self.layout.span(p)
        with self._fetch_locks[p % len(self._fetch_locks)]:
            if not force and pages.present[p] == 1:
                return 0
            _ofd(self._lock_fd, fcntl.F_WRLCK, pages.npages + p, 1, wait=True)
            try:
                was = pages.present[p] == 1
                if was and not force:
                    return 0
                data = self._checked(j, lo, hi, check)
                if not was:
                    # counted before it is marked, so that a process dying
                    # in between leaves the count high, never low
                    pages.add_used(hi - lo)
                try:
                    self._write(j, lo, data)
                except BaseException:
                    if not was:
                        pages.add_used(lo - hi)
                    raise
                pages.stamps[p] = pages.now()
                pages.present[p] = 1
                return hi - lo
            finally:
                _ofd(self._lock_fd, fcntl.F_UNLCK, pages.npages + p, 1)

    def _checked(self, j: int, lo: int, hi: int, check: Callable[[Any], None] | None) -> Any:
        """Bytes ``[lo, hi)`` of paged file ``j`` fetched, and passing
        ``check``. Bytes that fail are fetched again (a byte flipped in
        transit: the ETag held, so the object is the one listed), up to
        ``retries`` times and at least once; only a mismatch on every fetch
        says the object was altered."""
        rel = self.layout.rels[j]
        tries = max(2, self.limits.retries + 1)
        for attempt in range(tries):
            data = self._get(rel, lo, hi)
            if check is None:
                return data
            try:
                check(data)
                return data
            except CorruptStoreError as e:
                if attempt + 1 < tries:
                    del data
                    with self._mu:
                        self.refetched_bad += 1
                    time.sleep(_s3.backoff(attempt) / 4)
                    continue
                what = "record bytes" if self.layout.kind[j] == CHUNK else "table entries"
                raise CorruptStoreError(
                    f"{self.object_url(rel)}: bytes [{lo}, {hi}) fail the checks of their {what} in each of "
                    f"{tries} fetches ({self.name_objects(str(e))}); its ETag is unchanged, so the object was "
                    "altered in storage after the dataset was written"
                ) from None
        raise AssertionError("unreachable")

    def read_page(self, p: int, lo: int | None = None, hi: int | None = None) -> bytes:
        """The mirror's bytes of page ``p`` (or of bytes ``[lo, hi)`` of its
        file), as the cache holds them."""
        j, plo, phi = self.layout.span(p)
        lo, hi = (plo, phi) if lo is None else (lo, cast(int, hi))  # both or neither
        fd = os.open(self.pages.path(j), os.O_RDONLY)
        try:
            return os.pread(fd, hi - lo, lo)
        finally:
            os.close(fd)

    def _write(self, j: int, lo: int, data: Any) -> None:
        fd = os.open(self.pages.path(j), os.O_RDWR)
        try:
            self._write_fd(fd, lo, data)
        finally:
            os.close(fd)

    def _write_fd(self, fd: int, lo: int, data: Any) -> None:
        view = memoryview(data)
        for attempt in range(2):
            try:
                # allocating the page's blocks first measured 1.5x faster
                # here than letting the writes allocate them, and makes a
                # full disk fail before any byte is written
                try:
                    os.posix_fallocate(fd, lo, len(view))
                except OSError as e:
                    if e.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
                        raise
                done = 0
                while done < len(view):
                    done += os.pwrite(fd, view[done:], lo + done)
                return
            except OSError as e:
                if e.errno not in (errno.ENOSPC, errno.EDQUOT) or attempt:
                    if e.errno in (errno.ENOSPC, errno.EDQUOT):
                        with contextlib.suppress(OSError):
                            _punch(fd, lo, len(view))
                        raise OSError(
                            e.errno, f"the cache directory {self.cache.root!r} is out of disk space "
                            f"(cache limit {self.cache.limit()} bytes, {self.cache.used()} held): lower "
                            "CacheOptions.limit or LOADERX_CACHE_LIMIT, or free space"
                        ) from None
                    raise
                # the disk filled before the limit did: shrink the cache to
                # what it holds less this page, and try once more
                self.cache.set_limit(max(len(view), self.cache.used() - len(view)))
                self.cache.make_room(len(view))

    def hold(self, owner: object) -> None:
        """Count ``owner`` as a user of the tree (the caller holds _TREES_LOCK)."""
        self._holders.add(id(owner))

    def let_go(self, owner: object) -> None:
        """``owner`` no longer uses the tree; the last one closes it."""
        with _TREES_LOCK:
            if id(owner) not in self._holders:
                return
            self._holders.discard(id(owner))
            if self._holders:
                return
            for key, tree in list(_TREES.items()):
                if tree is self:
                    del _TREES[key]
        self.close()

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False)
        for g in list(self._guards):
            g.close()
        with contextlib.suppress(Exception):
            self.cache.trees.discard(self)  # no longer asked to release or flush
        for name in ("_open_fd", "_lock_fd"):
            fd = getattr(self, name, -1)
            setattr(self, name, -1)  # a second close must not close a descriptor reused since
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)

    def __del__(self) -> None:
        try:  # noqa: SIM105 - contextlib may be gone at interpreter exit
            self.close()
        except Exception:
            pass


_TREES: dict[tuple[str, str, str], RemoteTree] = {}
_TREES_LOCK = threading.Lock()


def open_tree(url: str, cache: CacheOptions | None, storage: dict[str, Any] | None,
              holder: object | None = None) -> tuple[RemoteTree, str]:
    """The mirror of the dataset at ``url`` and the local path that stands
    for ``url`` in it. A URL naming one stream of a sharded multi-stream
    dataset (``root/stream``, with no objects of its own) mirrors the root.
    One process opens each (root, options) once and shares it among its
    holders: ``holder`` (a dataset) counts as one until it calls
    :meth:`RemoteTree.let_go`, and the tree closes when its last one does."""
    opts = cache if cache is not None else CacheOptions()
    if not isinstance(opts, CacheOptions):
        raise TypeError(f"cache must be a loaderx.CacheOptions or None, got {opts!r}")
    storage = dict(storage or {})
    url = url.rstrip("/")
    _s3.parse_url(url)
    key = (url, repr(opts), json.dumps(storage, sort_keys=True, default=str))
    with _TREES_LOCK:
        tree = _TREES.get(key)
        if tree is not None:
            if holder is not None:
                tree.hold(holder)
            return tree, tree.local
    try:
        tree, sub = RemoteTree(url, opts, storage), ""
    except FileNotFoundError:
        root, _, stream = url.rpartition("/")
        if not stream or root.endswith(":/"):
            raise
        try:
            tree, sub = RemoteTree(root, opts, storage), stream
        except (FileNotFoundError, ValueError):
            raise FileNotFoundError(f"{url!r}: no objects under this URL (nothing was pushed there?)") from None
        if "manifest.json" not in tree._objects:
            raise FileNotFoundError(f"{url!r}: no objects under this URL (nothing was pushed there?)") from None
        key = (root, *key[1:])
    with _TREES_LOCK:
        made, tree = tree, _TREES.setdefault(key, tree)
        if holder is not None:
            tree.hold(holder)
    if made is not tree:
        made.close()  # another thread made the same one first
    return tree, os.path.join(tree.local, sub) if sub else tree.local


def tree_of(path: str, holder: object | None = None) -> RemoteTree | None:
    """The open tree whose mirror holds ``path``, if any (held for
    ``holder``, as :func:`open_tree` holds it)."""
    p = os.path.abspath(path)
    with _TREES_LOCK:
        for tree in _TREES.values():
            if p == tree.local or p.startswith(tree.local + os.sep):
                if holder is not None:
                    tree.hold(holder)
                return tree
    return None


def _after_fork_in_child() -> None:
    """A forked child starts with fresh locks and no fetch threads (the
    parent's do not exist in it), and without the parent's guards, whose
    handles it cannot use: a dataset opened lazily in the child makes its
    own."""
    global _TREES_LOCK
    _TREES_LOCK = threading.Lock()
    trees = list(_TREES.values())
    for tree in trees:
        tree._mu = threading.Lock()
        tree._fetch_locks = [threading.Lock() for _ in tree._fetch_locks]
        tree._pool = None
        tree._guards = weakref.WeakSet()
        tree.cache.mu = threading.Lock()
        tree.cache.trees = weakref.WeakSet()
    for tree in trees:
        tree.cache.trees.add(tree)


os.register_at_fork(after_in_child=_after_fork_in_child)
