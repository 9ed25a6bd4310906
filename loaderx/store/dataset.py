"""Typed views of a store: :class:`DenseDataset` and :class:`RaggedDataset`.

A dense store (written by :func:`loaderx.converter.from_numpy`) holds records
of one fixed item shape, so a batch is a single fixed-stride gather into an
array of shape ``(B, *item_shape)``. A ragged store (written by
:func:`loaderx.converter.from_iterator`) holds records whose first axis
varies; a batch comes back as a list of arrays, and :func:`pad` turns such a
list into a dense array when needed.

Both open the store read-only by default; gathers from many threads at once
are safe and release the GIL for the copy. Opened with ``writable=True`` they
grow: :meth:`DenseDataset.append` / :meth:`RaggedDataset.append` add records
of the store's own dtype and shape (the schema never changes), and
``delete`` / ``compact`` pass through to the store.

Both classes stay in one module with the native schema reader they share:
what one of them reads of a store, the other reads the same way. Reading
``schema.msgpack`` without loading the library is :mod:`loaderx.store._schema`.
"""

from __future__ import annotations

import errno
import io
import os
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from loaderx._args import is_scalar_index, normalize_index
from loaderx.errors import ClosedError, CorruptStoreError
from loaderx.remote import _cache, _tree
from loaderx.remote._cache import CacheOptions
from loaderx.store import _native, shards
from loaderx.store._dtypes import from_schema_name
from loaderx.store._schema import _python_schema
from loaderx.store._store import (
    Fault,
    StoreHandle,
    VerifyReport,
    _fault,
    compact_handle,
    header_length,
    open_logged,
    packed_offsets,
)

#: The index dtype the native gather reads in place (int64, native byte order).
_INT64 = np.dtype(np.int64)

if TYPE_CHECKING:
    from numpy.typing import NDArray

    from loaderx._args import IndexLike, PathLike

__all__ = ["DenseDataset", "RaggedDataset", "VerifyReport", "pad", "verify_sharded", "CacheOptions"]

_ITER_BYTES = 4 << 20  # iteration reads this much per native call

_VERIFY_BLOCK = 1 << 16  # records per size check in verify()

#: What opening a dataset sets besides the handle.
_SCHEMA_ATTRS = frozenset({"_dtype", "_item_shape", "_stride", "_codec"})


def _check_dir(path: str) -> None:
    """Refuse a ``path`` that is not a directory, with a hint for a file."""
    if not os.path.isdir(path):
        hint = ""
        if os.path.isfile(path):  # a store is a directory; this is likely a .npy or similar
            hint = (
                " (it is a file; a store is a directory: convert an array once with "
                "loaderx.from_numpy(store_dir, np.load(file)), or pass the array itself "
                "as a DataLoader stream)"
            )
        raise FileNotFoundError(errno.ENOENT, f"no loaderx store at {path!r}{hint}", path)


def _read_schema(path: str, want: str) -> tuple[np.dtype, tuple[int, ...]]:
    _check_dir(path)
    try:
        kind, dtype_str, shape = _native.schema_read(path)
    except FileNotFoundError:
        if os.path.exists(os.path.join(path, "meta.zr")):
            raise ValueError(
                f"{path!r} is a record store without a schema.msgpack, so it holds raw "
                "bytes rather than arrays; open it with loaderx.zrecord.Zrecord"
            ) from None
        raise FileNotFoundError(
            errno.ENOENT, f"{path!r} is not a loaderx store (no meta.zr)", path
        ) from None
    if kind != want:
        other = {"dense": "DenseDataset", "ragged": "RaggedDataset"}.get(kind)
        hint = f"; open it with {other}" if other else ""
        raise ValueError(f"{path!r} is a {kind!r} store, not a {want!r} one{hint}")
    try:
        dtype = from_schema_name(dtype_str, path)
    except ValueError as e:
        raise CorruptStoreError(str(e)) from None
    return dtype, tuple(int(d) for d in shape)


def _manifest_schema(path: str, want: str, m: shards.Manifest, stream: str) -> tuple[np.dtype, tuple[int, ...]]:
    info = m.streams.get(stream)
    if info is None:  # the root of a sharded multi-stream dataset
        cls = {"dense": "DenseDataset", "ragged": "RaggedDataset"}.get(want, "a dataset")
        raise ValueError(
            f"{path!r} is a sharded multi-stream dataset of streams {sorted(m.streams)}: open it with "
            f"MSDataset, or one stream with {cls}(os.path.join(path, stream))"
        )
    if info.kind != want:
        other = {"dense": "DenseDataset", "ragged": "RaggedDataset"}.get(info.kind)
        hint = f"; open it with {other}" if other else ""
        raise ValueError(f"{path!r} is a sharded {info.kind!r} dataset, not a {want!r} one{hint}")
    try:
        dtype = from_schema_name(info.dtype, path)
    except ValueError as e:
        raise CorruptStoreError(str(e)) from None
    return dtype, info.item_shape


def _open_shards(resolved: tuple[str, str, shards.Manifest], max_open: int | None) -> int:
    """One set handle of the shards of a sharded dataset (or of one stream
    of it), opening none of them: each opens when a read first needs it,
    and is checked then against the manifest (missing, another schema or
    length, replaced since: CorruptStoreError naming it), and at most
    ``max_open`` stay open (None: the library's process-wide default)."""
    root, stream, m = resolved
    if not m.shards:
        raise CorruptStoreError(f"sharded dataset {root!r}: its manifest names no shards")
    info = m.streams[stream]
    lengths = np.fromiter((s.length for s in m.shards), dtype=np.int64, count=len(m.shards))
    return _native.set_open_shards(
        root, stream, [s.name for s in m.shards], lengths, (info.kind, info.dtype, info.item_shape), max_open or 0
    )


def check_max_open_shards(value: Any) -> int | None:
    """``max_open_shards`` as given, or ValueError (TypeError for a value
    that is not an int) quoting it."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(
            f"max_open_shards={value!r}: want a positive int (the most shards kept open at once) or None "
            "for the default"
        )
    if value < 1:
        raise ValueError(
            f"max_open_shards={value!r}: want a positive int (the most shards kept open at once) or None "
            "for the default"
        )
    return int(value)


def _size_faults(h: int, want: str, stride: int, start: int, schema_file: str, damaged: set[int]) -> list[Fault]:
    """Records of the open store ``h`` whose size the schema rules out (a
    dense record not of ``stride`` bytes, a ragged one not a whole number of
    ``stride``-byte rows), as faults at global index ``start + local``; the
    records in ``damaged`` (global indices the store's scan already
    reported) are left out."""
    n = int(_native.store_len(h))
    out: list[Fault] = []
    if want == "ragged" and not stride:
        return out
    for lo in range(0, n, _VERIFY_BLOCK):
        idx = np.arange(lo, min(n, lo + _VERIFY_BLOCK), dtype=np.int64)
        try:
            sizes = _native.store_sizes(h, idx)
        except CorruptStoreError:  # the store's own faults cover it
            continue
        if want == "dense":
            bad = np.flatnonzero(sizes != stride)
            need = f"{stride} bytes"
        else:
            bad = np.flatnonzero(sizes % stride)
            need = f"a multiple of one row ({stride} bytes)"
        for k in bad.tolist():
            i = start + lo + k
            if i not in damaged:
                out.append(Fault(schema_file, i, f"record {i} is {int(sizes[k])} bytes, the schema needs {need}"))
    return out


def verify_sharded(path: PathLike, kind: str | None = None) -> VerifyReport:
    """Verify every shard of the sharded dataset at ``path`` (or of one
    stream of a sharded multi-stream dataset, ``root/stream``) and return one
    :class:`VerifyReport` for all of them.

    Each shard's store gets the store's own full scan
    (``_native.verify_dir``, which reads a store that does not open, too),
    so a damaged shard is listed rather than stopping the scan. A fault
    keeps the file the scan named (inside the shard's directory) and gets
    its global index, the shard's own index added to its text; a record
    whose size the schema rules out is a fault of the shard's
    ``schema.msgpack``; a shard that is missing, or whose store disagrees
    with the manifest (kind, dtype, item shape, length), is a fault naming
    the shard. ``kind`` (``"dense"`` or ``"ragged"``), when given, must be
    the manifest's.

    Raises:
        ValueError: ``path`` is not a sharded dataset (or stream of one), or
            not of ``kind``.
        loaderx.errors.CorruptStoreError: the manifest itself is damaged.
    """
    p = os.fspath(path)
    resolved = shards.resolve(p)
    if resolved is None:
        raise ValueError(f"{p!r} is not a sharded dataset (no {shards.MANIFEST_FILE})")
    return _verify_resolved(p, resolved, kind)


def _verify_resolved(p: str, resolved: tuple[str, str, shards.Manifest], kind: str | None) -> VerifyReport:
    """:func:`verify_sharded` of the shards ``resolved`` names."""
    root, stream, m = resolved
    info = m.streams.get(stream)
    if info is None:
        raise ValueError(f"{p!r} is a sharded dataset of streams {sorted(m.streams)}: verify one of them")
    if kind is not None and info.kind != kind:
        raise ValueError(f"{p!r} is a sharded {info.kind!r} dataset, not a {kind!r} one")
    dtype = from_schema_name(info.dtype, p)
    stride = int(np.prod(info.item_shape, dtype=np.int64)) * dtype.itemsize
    faults: list[Fault] = []
    versions: list[int] = []
    checksummed, records, checked, more, pending = True, 0, 0, 0, []
    start = 0
    for shard, sub in zip(m.shards, m.shard_paths(root, stream), strict=True):
        first, start = start, start + shard.length
        if not os.path.isdir(sub):
            faults.append(Fault(sub, None, f"shard {shard.name!r} is missing"))
            continue
        try:
            scan = _native.verify_dir(sub)
        except (OSError, ValueError) as e:
            faults.append(Fault(sub, None, f"shard {shard.name!r} cannot be scanned: {e}"))
            continue
        versions.append(int(scan["version"]))
        checksummed = checksummed and bool(scan["checksummed"])
        records += int(scan["records"])
        checked += int(scan["checked"])
        more += int(scan.get("more_faults") or 0)
        pending += [f"{shard.name}: {x}" for x in scan.get("pending") or ()]
        own = [_fault(f) for f in scan["faults"]]
        for f in own:
            if f.index is None:
                faults.append(Fault(f.file, None, f"{f.what} (shard {shard.name!r})"))
            else:
                faults.append(Fault(f.file, first + f.index, f"{f.what} (shard {shard.name!r}, its record {f.index})"))
        try:
            kind_s, dtype_s, shape_s = _native.schema_read(sub)
            shards.check_shard(root, m, shard, stream, kind_s, dtype_s, tuple(shape_s), int(scan["records"]))
        except (FileNotFoundError, ValueError, CorruptStoreError) as e:
            faults.append(Fault(os.path.join(sub, "schema.msgpack"), None, f"shard {shard.name!r}: {e}"))
            continue
        if own and any(f.index is None for f in own):
            continue  # the header, table or dictionary is damaged: the store may not open
        try:
            h = _native.store_open(sub, readonly=True)
        except (OSError, ValueError):
            continue  # what keeps it from opening is among its faults
        try:
            damaged = {first + f.index for f in own if f.index is not None}
            faults += _size_faults(h, info.kind, stride, first, os.path.join(sub, "schema.msgpack"), damaged)
        finally:
            _native.store_close(h)
    return VerifyReport(
        p,
        faults,
        version=min(versions) if versions else 0,
        checksummed=checksummed,
        records=records,
        checked=checked,
        more_faults=more,
        pending=pending,
    )


class _StoreView(StoreHandle):
    """What both dataset kinds add to a store handle: the schema."""

    _kind = ""

    _writable = False  # what a deferred (unpickled) instance is
    #: (root, stream, manifest) of a sharded dataset, else None
    _sharded: tuple[str, str, shards.Manifest] | None = None

    #: the mirror in the local cache of a dataset in object storage, else None
    _tree: _tree.RemoteTree | None = None

    #: whether close() has let go of the tree
    _let_go = False

    #: the most shards of a sharded dataset kept open at once (None: the default)
    _max_open: int | None = None

    def __init__(
        self,
        path: PathLike,
        *,
        writable: bool = False,
        cache: CacheOptions | None = None,
        storage_options: dict[str, Any] | None = None,
        max_open_shards: int | None = None,
    ) -> None:
        max_open = check_max_open_shards(max_open_shards)
        tree = None
        if _cache.is_url(path):
            if writable:
                raise ValueError(
                    f"{path!r} is in object storage, which loaderx reads but does not write in place: write "
                    "the dataset locally and publish it with loaderx.io.remote.push (or a converter's url=)"
                )
            tree, path = _tree.open_tree(str(path), cache, storage_options, holder=self)
        elif cache is not None or storage_options:
            raise ValueError(
                f"cache= and storage_options= are for datasets in object storage (s3:// URLs), not {path!r}"
            )
        else:
            tree = _tree.tree_of(os.fspath(path), holder=self)  # inside a mirror (a stream of a remote MSDataset)
        super().__init__(path)
        self._max_open = max_open
        self._tree = tree  # the mirror is on disk now; _load makes the handle's guard
        self._writable = bool(writable)
        resolved = shards.resolve(self._path)
        if resolved is not None:
            if self._writable:
                raise ValueError(
                    f"{self._path!r} is a sharded dataset, which is read-only: grow it with new shards "
                    "(loaderx.store.shards.ShardWriter and commit(..., append=True))"
                )
            self._sharded = resolved
            if not _native.loaded():  # as below: len, dtype and item_shape from the manifest
                self._header_length = resolved[2].length
                self._deferred_open = True
                self._dtype, self._item_shape = _manifest_schema(self._path, self._kind, resolved[2], resolved[1])
                self._stride = int(np.prod(self._item_shape, dtype=np.int64)) * self._dtype.itemsize
                return
        if self._writable or _native.loaded():
            self._load()
            return
        # The library is not loaded in this process: keep it that way, so a
        # process that only builds datasets can still fork workers that use
        # them. len() comes from the header; the schema (dtype, item_shape)
        # and the handle come with the first use that needs them, in the
        # process that makes it.
        _check_dir(self._path)
        self._header_length = header_length(self._path)
        self._deferred_open = True
        schema = _python_schema(self._path, self._kind)
        if schema is not None:  # dtype and item_shape without the library
            self._dtype, self._item_shape = schema
            self._stride = int(np.prod(self._item_shape, dtype=np.int64)) * self._dtype.itemsize

    def _load(self) -> None:
        resolved = self._sharded
        if resolved is None and not self._writable:
            resolved = shards.resolve(self._path)  # an unpickled instance
        if resolved is not None:
            dtype, item_shape = _manifest_schema(self._path, self._kind, resolved[2], resolved[1])
            try:
                handle = _open_shards(resolved, self._max_open)
            except CorruptStoreError as e:
                if self._sharded is not None and _replaced_since(resolved):
                    raise CorruptStoreError(
                        f"{e}; {self._path!r} was opened (or pickled) at an earlier commit, and a commit since "
                        "replaced its shards: open it again"
                    ) from None
                raise
            self._sharded = resolved
        else:
            dtype, item_shape = _read_schema(self._path, self._kind)
            handle = open_logged(self._path, readonly=not self._writable)
        self._dtype, self._item_shape = dtype, item_shape
        # bytes of one item (dense) or of one row along axis 0 (ragged)
        self._stride = int(np.prod(item_shape, dtype=np.int64)) * dtype.itemsize
        guard = None
        if self._tree is not None:
            # the guard is made before the handle is published: a thread
            # that finds the handle (without the lock) must find its guard,
            # or it would read the mirror's holes
            try:
                stores, starts = self._mirror_stores(handle)
                guard = self._tree.guard(handle, stores, starts, lazy=self._sharded is not None)
                _native.store_set_verify(handle, True)
            except BaseException:
                if guard is not None:
                    guard.close()
                _native.store_close(handle)
                raise
        self._guard = guard
        self._adopt(handle)

    def close(self) -> None:
        """Close the dataset; the last dataset of a URL in this process to
        close lets go of its mirror (which ``loaderx cache clear`` may then
        remove)."""
        try:
            super().close()
        finally:
            tree = self._tree
            if tree is not None and not self._let_go:
                self._let_go = True
                tree.let_go(self)

    def _adopt(self, handle: int) -> None:
        if self._sharded is None:
            super()._adopt(handle)
            return
        # A sharded dataset's codec is that of every shard, which would open
        # them all: it is learned when first asked for (__getattr__).
        self._handle = handle

    def _mirror_stores(self, h: int) -> tuple[list[str], np.ndarray]:
        """The store directory of each store behind handle ``h``, in the
        handle's order, and where each one's records start (``len + 1``
        values), from the manifest for a sharded dataset: no shard is
        opened."""
        if self._sharded is None:
            return [self._path], np.array([0, int(_native.store_len(h))], dtype=np.int64)
        root, stream, m = self._sharded
        lengths = np.fromiter((s.length for s in m.shards), dtype=np.int64, count=len(m.shards))
        return m.shard_paths(root, stream), np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)

    @property
    def url(self) -> str | None:
        """The ``s3://`` URL of a dataset in object storage; None for a local one."""
        if self._tree is None:
            return None
        rel = os.path.relpath(self._path, self._tree.local)
        return self._tree.url if rel == "." else f"{self._tree.url}/{rel}"

    def cache_stats(self) -> dict[str, int]:
        """For a dataset in object storage: ``fetched_bytes`` and
        ``fetches`` (what this process has fetched for the dataset's URL),
        ``cached_bytes`` (this dataset's pages in the cache),
        ``pinned_bytes`` (what this process holds pinned), ``cache_used_bytes``
        and ``cache_limit_bytes`` (the whole cache directory),
        ``evicted_bytes`` (what this process evicted from it), ``repairs``
        (reads that met cached bytes failing their checks, whose pages were
        checked again and fetched again where they failed),
        ``refetched_pages`` (fetched pages that failed their checks, a byte
        flipped in transit, and were fetched again) and ``repaired_files``
        (small files of the mirror found damaged at an open and downloaded
        again). The bytes count
        record pages and record-table pages alike. ValueError for a local
        dataset."""
        _ = self._h
        if self._guard is None:
            raise ValueError(f"{self!r} is a local dataset; cache_stats() is for datasets in object storage")
        return self._guard.stats()

    def warm(self) -> int:
        """Fetch every page of a dataset in object storage into the local
        cache, checking each, and return the bytes fetched (0 when it was
        all there). A dataset larger than the cache's limit fills it and the
        rest streams through. ValueError for a local dataset."""
        h = self._h
        if self._guard is None:
            raise ValueError(f"{self!r} is a local dataset; warm() is for datasets in object storage")
        n = int(_native.store_len(h))
        total = 0
        for a in range(0, n, 1 << 16):
            total += self._guard.prefetch(np.arange(a, min(n, a + (1 << 16)), dtype=np.int64))
        return total

    @property
    def writable(self) -> bool:
        """Whether the dataset was opened with ``writable=True``."""
        return self._writable

    def _writer(self, op: str) -> int:
        h = self._h
        if not self._writable:
            raise io.UnsupportedOperation(
                f"{op}: {type(self).__name__}({self._path!r}) is open read-only; "
                f"open it with {type(self).__name__}(path, writable=True)"
            )
        return h

    def _check_batch(self, batch: Any, what: str) -> np.ndarray:
        """``batch`` as an array of the store's dtype, refusing any other dtype."""
        a = batch if isinstance(batch, np.ndarray) else np.asarray(batch)
        if a.dtype != self._dtype:
            raise TypeError(
                f"{what} has dtype {a.dtype}, but {self._path!r} stores {self._dtype}; "
                "convert it first (an append never changes a store's schema)"
            )
        return a

    def delete(self, indices: IndexLike) -> None:
        """Delete records; the last records move into the holes, so other
        indices may change. Needs ``writable=True`` and the store to itself."""
        h = self._writer("delete")
        idx, _ = self._indices(indices)
        if idx.size:
            _native.store_delete(h, np.unique(idx))

    def compact(self, *, progress: bool | None = None) -> int:
        """Reclaim the space of deleted records and return the bytes reclaimed.
        Needs ``writable=True`` and the store to itself."""
        return compact_handle(self._writer("compact"), self._path, progress)

    def stats(self) -> dict[str, Any]:
        """The store's figures (see :meth:`loaderx.zrecord.Zrecord.stats`) and
        ``codec_choice``: how ``codec="auto"`` chose the codec when the store
        was converted (the codec, the reason, the sample's size and each
        candidate's ``ratio`` and ``decode_mib_s``), or None for a store
        converted with an explicit codec."""
        st = super().stats()
        if self._sharded is not None:
            root, stream, m = self._sharded
            st["shards"] = len(m.shards)
            st["codec_choice"] = _native.schema_codec_choice(m.shard_paths(root, stream)[0])
        else:
            st["codec_choice"] = _native.schema_codec_choice(self._path)
        return st

    @property
    def shards(self) -> list[str] | None:
        """The store directory of every shard, in order, for a sharded
        dataset; None for a single store."""
        if self._sharded is None and self._deferred_open:
            self._open_deferred()
        if self._sharded is None:
            return None
        root, stream, m = self._sharded
        return m.shard_paths(root, stream)

    def sync(self) -> None:
        """Make every append, delete and compaction so far durable."""
        _native.store_sync(self._writer("sync"))

    def upgrade(self) -> None:
        """Rewrite a store of an earlier format version (such as one the
        original loaderx 1.5.2 wrote) to the current, checksummed one; see
        :meth:`loaderx.zrecord.Zrecord.upgrade`. Needs ``writable=True``."""
        _native.store_upgrade(self._writer("upgrade"))

    def __getattr__(self, name: str) -> Any:
        # Reached only for attributes not set yet: the schema's, on an
        # unpickled dataset that has not been used (see StoreHandle), and
        # a sharded dataset's codec, which takes opening every shard.
        d = self.__dict__
        if name in _SCHEMA_ATTRS:
            if d.get("_deferred_open"):
                self._open_deferred()
                if name in d:
                    return d[name]
            if name == "_codec" and d.get("_sharded") is not None:
                h = self._h
                if d.get("_guard") is not None:  # in object storage: every shard mirrored and given its map
                    d["_guard"].register_all()
                codec = d["_codec"] = str(_native.store_codec(h))
                return codec
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    @property
    def dtype(self) -> np.dtype:
        """The dtype of every element."""
        return self._dtype

    def verify(self) -> VerifyReport:
        """Read the whole store and check every checksum; see
        :meth:`loaderx.zrecord.Zrecord.verify`. A sharded dataset verifies
        every shard (:func:`verify_sharded`): one report, faults at global
        indices, files named inside their shards."""
        h = self._h  # raises once closed; opens a deferred instance
        if self._guard is not None:
            return self._verify_remote(h)
        if self._sharded is not None:  # the generation this dataset opened
            return _verify_resolved(self._path, self._sharded, self._kind)
        return super().verify()

    def _verify_remote(self, h: int) -> VerifyReport:
        """verify() of a dataset in object storage: every table page, every
        record and the chunk pages that hold them are checked, each fetched
        where it is not cached (the header and dictionary were checked when
        the store opened)."""
        faults = [Fault(url, None, what) for url, what in self._guard.verify()]
        version = min(self._guard.versions(), default=0)  # every store is mirrored now
        n = int(_native.store_len(h))
        return VerifyReport(self.url or self._path, faults, version=version, checksummed=version >= 4,
                            records=n, checked=n)

    def _verify_more(self, faults: list[Fault]) -> list[Fault]:
        """Records whose size the schema rules out (a dense record not of the
        item size, a ragged one not a whole number of rows), in records the
        store itself found sound."""
        damaged = {f.index for f in faults if f.index is not None}
        schema_file = os.path.join(self._path, "schema.msgpack")
        return _size_faults(self._h, self._kind, self._stride, 0, schema_file, damaged)

    def __repr__(self) -> str:
        name = type(self).__name__
        where = self.url or self._path
        if self._deferred_open:
            return f"{name}({where!r}, not opened yet)"
        if self._handle is None:
            return f"{name}({where!r}, closed)"
        # a sharded dataset's codec would take opening every shard
        sharded = self._sharded
        last = f"shards={len(sharded[2].shards)}" if sharded is not None else f"codec={self._codec!r}"
        return f"{name}({where!r}, len={len(self)}, dtype={self._dtype}, item_shape={self._item_shape}, {last})"

    def __reduce__(self) -> tuple[Any, ...]:
        # Only the path: handles do not survive a process boundary, and
        # unpickling a read-only dataset must not call the native library (in
        # a forked worker that raises where a pool cannot report it), so the
        # copy opens the store at its first use. A writer reopens at once.
        # A sharded dataset's copy takes the manifest along and opens the
        # shards this one has, so a worker reads the records its loader was
        # sized by even after a commit (or fails naming a shard now gone).
        if self._writable:
            return (_reopen_writable, (type(self), self._path))
        if self._tree is not None:
            t = self._tree
            return (_reopen_remote, (type(self), t.url, os.path.relpath(self._path, t.local), t.opts, t.storage,
                                     t.gen_dir, self._max_open))
        if self._sharded is not None:
            return (_reopen_sharded, (type(self), self._path, self._sharded, self._max_open))
        return (type(self)._deferred, (self._path,))


def _reopen_remote(cls: type, url: str, rel: str, opts: CacheOptions, storage: dict[str, Any], gen: str,
                   max_open: int | None = None) -> Any:
    tree, local = _tree.open_tree(url, opts, storage)
    if tree.gen_dir != gen:
        raise CorruptStoreError(
            f"the objects under {url!r} changed after the dataset was opened (and pickled): open it again"
        )
    return cls(local if rel == "." else os.path.join(local, rel), max_open_shards=max_open)


def _reopen_writable(cls: type, path: str) -> Any:
    return cls(path, writable=True)


def _reopen_sharded(cls: type[DenseDataset] | type[RaggedDataset], path: str,
                    resolved: tuple[str, str, shards.Manifest], max_open: int | None = None) -> Any:
    obj = cls._deferred(path)
    obj._sharded = resolved
    obj._max_open = max_open
    obj._header_length = resolved[2].length
    return obj


def _replaced_since(resolved: tuple[str, str, shards.Manifest]) -> bool:
    """Whether the manifest at ``resolved``'s root no longer names every
    shard of ``resolved``'s manifest."""
    try:
        now = shards.read_manifest(resolved[0])
    except (OSError, CorruptStoreError):
        return False
    return not {s.name for s in resolved[2].shards} <= {s.name for s in now.shards}


class DenseDataset(_StoreView):
    """A dense store: every record is one array of :attr:`item_shape`.

    Indexing reads from the store; nothing is cached::

        ds = DenseDataset("train_data")
        ds[3]            # one record, shape item_shape
        ds[-1]           # negative indices count from the end
        ds[[0, 5, 2]]    # (3, *item_shape), one native gather
        ds[10:20]        # slices too
        ds.gather(idx, out=buf)   # fill a caller array, no allocation

    Args:
        path: a store written by :func:`loaderx.converter.from_numpy` (or a
            sharded dataset), or its ``s3://bucket/prefix`` URL in object
            storage, read through a local cache (see :mod:`loaderx.remote._cache`).
        writable: open for :meth:`append`, :meth:`delete` and
            :meth:`compact` (one writer per store at a time; local stores only).
        cache: for a URL, the cache's :class:`CacheOptions` (directory,
            limit, page size, prefetch, threads); defaults for None.
        storage_options: for a URL, the S3 client's options
            (``endpoint_url``, ``access_key_id``, ``secret_access_key``,
            ``session_token``, ``region``, ``profile``, ``allow_http``,
            ``timeout``, ``retries``); the ``AWS_*`` environment and the AWS
            shared files otherwise.
        max_open_shards: for a sharded dataset, the most shards kept open
            at once (a positive int). None, the default, shares the
            library's process-wide limit with every sharded dataset opened
            without one: a fifth of ``vm.max_map_count``, 13,106 shards at
            Linux's default of 65,530 (``zrecord.DefaultMaxOpen``), so a
            dataset of 10,000 shards stays open whole. An open shard holds
            one memory mapping per chunk file and table segment and no file
            descriptor; a lower cap bounds the mappings, at the cost of
            opening shards again as reads come back to them. A single store
            ignores it.

    A sharded dataset opens no shard when it is made: a shard opens at the
    first read that needs it and is checked then against the manifest (its
    schema and length), and each read costs in proportion to its batch,
    whatever the number of shards. The least recently used shards are
    closed when more than the cap would be open, and a shard opened again
    must be the one first opened: a shard missing, replaced or rewritten
    while the dataset is open (a commit that replaced the dataset's shards,
    say) fails the read that needs it with CorruptStoreError naming it,
    never other records.

    A dataset at a URL fetches its headers and tables when it is made;
    its record bytes come page by page as reads need them, each page
    checked against the table before use. The native handle and its guard
    come with the first use, as for a local store (below), so a process
    that has not loaded the library may fork workers that read it. It
    pickles as its URL and options; the copy opens the same version of the
    objects, or raises CorruptStoreError if they changed since.

    A pickled dataset carries only its path; the copy opens the store at its
    first use, in whichever process uses it. Likewise a read-only dataset
    built in a process that has not loaded the native library yet reads only
    the store's header (so ``len`` works) and leaves the library unloaded:
    the schema (``dtype``, ``item_shape``) and the handle come with the first
    use that needs them, in whichever process makes it. Such a process can
    hand the dataset to ``torch.utils.data.DataLoader(ds, num_workers=...)``
    with the default ``fork`` start method. Errors in the schema or the store
    are then raised at that first use rather than here.

    Raises:
        FileNotFoundError: nothing (or no store) at ``path``.
        ValueError: the store is ragged, or has no schema (a raw Zrecord),
            or ``max_open_shards`` is below 1.
        TypeError: ``max_open_shards`` is not an int.
        loaderx.errors.CorruptStoreError: the store or its schema is damaged
            (also raised by a read that finds a record of the wrong size).
    """

    _kind = "dense"

    @property
    def item_shape(self) -> tuple[int, ...]:
        """The shape of one record."""
        return self._item_shape

    @property
    def shape(self) -> tuple[int, ...]:
        """``(len(self), *item_shape)``: the shape of the whole dataset."""
        return (len(self), *self._item_shape)

    @property
    def ndim(self) -> int:
        """``len(self.shape)``."""
        return 1 + len(self._item_shape)

    @property
    def nbytes_per_item(self) -> int:
        """The size of one record in bytes."""
        return self._stride

    def append(self, batch: Any) -> int:
        """Append the records of ``batch``, an array of shape
        ``(k, *item_shape)`` and exactly this dataset's dtype, and return the
        index of the first. Needs ``writable=True``.

        Raises:
            TypeError: the batch's dtype is not the store's.
            ValueError: its shape is not ``(k, *item_shape)``.
        """
        h = self._writer("append")
        a = self._check_batch(batch, "the batch")
        if a.ndim != 1 + len(self._item_shape) or a.shape[1:] != self._item_shape:
            raise ValueError(
                f"the batch has shape {a.shape}, but {self._path!r} holds records of shape "
                f"{self._item_shape}: append an array of shape (k, *{self._item_shape})"
            )
        k = int(a.shape[0])
        if k == 0:
            return int(_native.store_len(h))
        data = np.ascontiguousarray(a).reshape(-1).view(np.uint8)
        offsets = np.arange(k + 1, dtype=np.int64) * self._stride
        return int(_native.store_append_packed(h, data, offsets))

    def _gather_unchecked(self, indices: np.ndarray, out: np.ndarray) -> None:
        """Fill ``out`` from valid, C-contiguous int64 ``indices``: the loader's
        path, one native call with the GIL released."""
        if self._stride and indices.size:
            h = self._h
            try:
                if self._guard is None:
                    _native.store_gather(h, indices, out, self._stride)
                else:
                    self._guarded(indices, lambda: _native.store_gather(h, indices, out, self._stride))
            except ValueError as e:
                if isinstance(e, ClosedError):
                    raise
                self._size_damage(h, indices, e)
                raise

    def _size_damage(self, h: int, indices: np.ndarray, cause: ValueError) -> None:
        """Raise CorruptStoreError if a record at ``indices`` is not the item
        size the schema gives: the indices and the buffer were checked, so a
        record of another size can only be damage (to the record table or to
        schema.msgpack). Returns when every record has the right size."""
        sizes = self._sizes(indices.reshape(-1))
        bad = np.flatnonzero(sizes != self._stride)
        if bad.size:
            k = int(bad[0])
            raise CorruptStoreError(
                f"{self._path!r}: record {int(indices.reshape(-1)[k])} is {int(sizes[k])} bytes, but "
                f"{os.path.join(self._path, 'schema.msgpack')} gives every item {self._stride} bytes "
                f"(shape {self._item_shape}, dtype {self._dtype.str}): the record table or the "
                "schema is damaged"
            ) from cause

    def __getitem__(self, key: IndexLike) -> np.ndarray:
        h = self._h
        if is_scalar_index(key):
            i = normalize_index(int(key), int(_native.store_len(h)), "DenseDataset")
            out = np.empty(self._item_shape, dtype=self._dtype)
            self._gather_unchecked(np.array([i], dtype=np.int64), out)
            return out
        if isinstance(key, tuple):
            raise TypeError(
                "DenseDataset indexes records along axis 0 only; got a tuple key "
                f"{key!r}: index the records first, then slice the returned array"
            )
        idx, shape = self._indices(key)
        out = np.empty(shape + self._item_shape, dtype=self._dtype)
        self._gather_unchecked(idx, out)
        return out

    def __getitems__(self, indices: Sequence[int]) -> list[np.ndarray]:
        """The records at ``indices`` as a list, read with one native gather:
        the batched fetch of torch's map-style dataset protocol, which
        ``torch.utils.data.DataLoader`` calls with a batch's indices and
        whose result its default collate stacks. The records are rows of one
        array.

        Raises:
            IndexError: an index is out of range (the message names it).
        """
        idx, _ = self._indices(indices if isinstance(indices, np.ndarray) else list(indices))
        out = np.empty((idx.shape[0], *self._item_shape), dtype=self._dtype)
        self._gather_unchecked(idx, out)
        return list(out)

    def gather(self, indices: IndexLike, out: np.ndarray | None = None) -> np.ndarray:
        """Read the records at ``indices`` into ``out`` (allocated if None).

        Args:
            indices: integers (negative ones count from the end), an int
                array, a slice or a boolean mask.
            out: an array of shape ``(len(indices), *item_shape)`` and this
                dataset's dtype, C-contiguous and writable. It is filled in
                place with one native call and returned.

        Raises:
            IndexError: an index is out of range (the message names it).
            TypeError: ``out`` is not an array or has the wrong dtype.
            ValueError: ``out`` has the wrong shape, is not C-contiguous or is
                read-only.
        """
        if type(indices) is np.ndarray and self._guard is None and self._stride:
            # A 1-D int64 index array, as a loader's sampler makes, into a
            # fitting ``out``: the shape and dtype checked here, in one
            # expression, and the rest (int64 indices, both buffers
            # C-contiguous, ``out`` writable, every index in range) by one
            # native call, which checks them all before it writes a byte.
            # Anything else takes the general path below, which reports
            # what is wrong or reads negative indices from the end. In a
            # loop of calls for one record this path cost 1.8-2.0 us a call
            # where checking every flag here first cost 2.2-2.3 us (np.take
            # 1.5-1.7 us).
            h = self._handle
            if type(out) is np.ndarray:
                shape = out.shape
                if (
                    h is not None
                    and indices.ndim == 1
                    and out.dtype is self._dtype
                    and shape[:1] == indices.shape
                    and indices.size
                    and shape[1:] == self._item_shape
                ):
                    try:
                        if _native.store_gather_into(h, indices, out, self._stride):
                            return out
                    except ValueError as e:
                        if isinstance(e, ClosedError):
                            raise
                        self._size_damage(h, indices, e)
                        raise
            elif (
                out is None
                and indices.ndim == 1
                and indices.dtype == _INT64
                and indices.flags.c_contiguous
                and indices.size
            ):
                fast = self._gather_fast(indices, out)
                if fast is not None:
                    return fast
        idx, shape = self._indices(indices)
        want = shape + self._item_shape
        if out is None:
            out = np.empty(want, dtype=self._dtype)
        else:
            if not isinstance(out, np.ndarray):
                raise TypeError(f"out must be a numpy.ndarray, got {type(out).__name__}")
            if out.dtype != self._dtype:
                raise TypeError(f"out has dtype {out.dtype}, but the dataset's dtype is {self._dtype}")
            if out.shape != want:
                raise ValueError(f"out has shape {out.shape}, but the batch needs shape {want}")
            if not out.flags.c_contiguous:
                raise ValueError("out must be C-contiguous")
            if not out.flags.writeable:
                raise ValueError("out is read-only")
        self._gather_unchecked(idx, out)
        return out

    def _gather_fast(self, indices: np.ndarray, out: np.ndarray | None) -> np.ndarray | None:
        """:meth:`gather` for a non-empty 1-D C-contiguous int64 index array:
        the native call checks the indices against the store's length
        (every index before any byte is written), so the range check and
        the copy of the indices that :meth:`gather` makes otherwise are left
        out. Returns None, with ``out`` untouched, where :meth:`gather` must
        take its general path: ``out`` is not a fitting array (the general
        path raises the error it always raised) or an index is out of range
        or negative (the general path reports it, or turns negative indices
        into positions from the end)."""
        want = (indices.shape[0], *self._item_shape)
        if out is None:
            out = np.empty(want, dtype=self._dtype)
        elif not (
            isinstance(out, np.ndarray)
            and out.dtype == self._dtype
            and out.shape == want
            and out.flags.c_contiguous
            and out.flags.writeable
        ):
            return None
        try:
            self._gather_unchecked(indices, out)
        except IndexError:
            return None
        return out

    def __iter__(self) -> Iterator[np.ndarray]:
        """Yield the records in order, reading a few MiB per native call."""
        n = len(self)
        block = max(1, _ITER_BYTES // max(self._stride, 1))
        for start in range(0, n, block):
            batch = self[start : min(n, start + block)]
            yield from batch


def whole_rows(sizes: np.ndarray, idx: np.ndarray, row_bytes: int, where: str) -> np.ndarray:
    """The rows of records of ``sizes`` bytes, rows of ``row_bytes`` each
    (none when 0); a record that is not whole rows is
    :class:`CorruptStoreError` naming ``where`` and its index in ``idx``."""
    if row_bytes == 0:
        return np.zeros_like(sizes)
    rows, rem = np.divmod(sizes, row_bytes)
    if rem.any():
        k = int(np.argmax(rem != 0))
        raise CorruptStoreError(
            f"{where}: record {int(idx[k])} is {int(sizes[k])} bytes, not a multiple of one row ({row_bytes} bytes)"
        )
    return rows


class RaggedDataset(_StoreView):
    """A ragged store: record ``i`` is an array of shape ``(L_i, *item_shape)``
    where the first axis ``L_i`` varies from record to record.

    ::

        rs = RaggedDataset("tokens")
        rs[2]                # one array
        rs[[0, 2, 4]]        # a list of arrays, one packed native gather
        padded, lengths = pad(rs[[0, 2, 4]])

    The arrays of one batch are views into a single buffer read in one call.

    Args:
        path: a store written by :func:`loaderx.converter.from_iterator`, or
            its ``s3://`` URL (see :class:`DenseDataset`).
        writable: open for :meth:`append`, :meth:`delete` and
            :meth:`compact` (one writer per store at a time).
        cache: for a URL, as for :class:`DenseDataset`.
        storage_options: for a URL, as for :class:`DenseDataset`.
        max_open_shards: for a sharded dataset, the most shards kept open at
            once, as for :class:`DenseDataset`.

    Raises:
        FileNotFoundError: nothing (or no store) at ``path``.
        ValueError: the store is dense, or has no schema (a raw Zrecord),
            or ``max_open_shards`` is below 1.
        TypeError: ``max_open_shards`` is not an int.
    """

    _kind = "ragged"

    @property
    def item_shape(self) -> tuple[int, ...]:
        """The trailing shape shared by every record (everything but axis 0)."""
        return self._item_shape

    def append(self, records: Sequence[Any]) -> int:
        """Append a list of arrays, each of shape ``(L_i, *item_shape)`` and
        exactly this dataset's dtype, and return the index of the first.
        Needs ``writable=True``.

        Raises:
            TypeError: a record's dtype is not the store's.
            ValueError: a record's trailing shape is not ``item_shape``.
        """
        h = self._writer("append")
        if isinstance(records, np.ndarray):
            raise TypeError("append takes a list of arrays (one per record), not one array")
        arrays = []
        for k, r in enumerate(records):
            a = self._check_batch(r, f"record {k}")
            if a.ndim != 1 + len(self._item_shape) or a.shape[1:] != self._item_shape:
                raise ValueError(
                    f"record {k} has shape {a.shape}, but {self._path!r} holds records of shape "
                    f"(L, *{self._item_shape})"
                )
            arrays.append(np.ascontiguousarray(a).reshape(-1).view(np.uint8))
        if not arrays:
            return int(_native.store_len(h))
        sizes = np.fromiter((a.nbytes for a in arrays), dtype=np.int64, count=len(arrays))
        offsets = packed_offsets(sizes)
        data = np.concatenate(arrays) if len(arrays) > 1 else arrays[0]
        return int(_native.store_append_packed(h, data, offsets))

    def _rows(self, sizes: np.ndarray, idx: np.ndarray) -> np.ndarray:
        return whole_rows(sizes, idx, self._stride, repr(self._path))

    def lengths(self, indices: IndexLike | None = None) -> NDArray[np.int64]:
        """The first-axis length of each record (all records if ``indices`` is
        None), as int64, without reading the records."""
        idx, shape = self._indices(slice(None) if indices is None else indices)
        if not idx.size:
            return np.zeros(shape, dtype=np.int64)
        return self._rows(self._sizes(idx), idx).reshape(shape)

    def _read(self, idx: np.ndarray) -> list[np.ndarray]:
        if not idx.size:
            return []
        buf, offsets, sizes = self._read_packed(idx)
        rows = self._rows(sizes, idx)
        flat = buf.view(self._dtype)
        bounds = (offsets // self._dtype.itemsize).tolist()
        tail = self._item_shape
        return [
            flat[bounds[k] : bounds[k + 1]].reshape((r, *tail))
            for k, r in enumerate(rows.tolist())
        ]

    def __getitem__(self, key: IndexLike) -> np.ndarray | list[np.ndarray]:
        """``rs[i]`` is one array; a list, array, slice or mask gives a list."""
        h = self._h
        if is_scalar_index(key):
            i = normalize_index(int(key), int(_native.store_len(h)), "RaggedDataset")
            return self._read(np.array([i], dtype=np.int64))[0]
        if isinstance(key, tuple):
            raise TypeError(f"RaggedDataset indexes records only; got a tuple key {key!r}")
        idx, _ = self._indices(key)
        return self._read(idx)

    def __iter__(self) -> Iterator[np.ndarray]:
        """Yield the records in order, reading batches of records per call."""
        n = len(self)
        for start in range(0, n, 256):
            yield from self[start : min(n, start + 256)]


def pad(records: Sequence[Any], value: Any = 0, dtype: Any = None) -> tuple[np.ndarray, np.ndarray]:
    """Stack arrays of varying first-axis length into one padded array.

    Args:
        records: arrays of shape ``(L_i, *trailing)`` sharing ``trailing``
            (as returned by :class:`RaggedDataset`).
        value: the fill for positions past each record's end.
        dtype: the output dtype; by default the records' common dtype.

    Returns:
        ``(padded, lengths)``: ``padded`` has shape ``(B, max(L_i), *trailing)``
        and ``lengths`` is the int64 array of the ``L_i``.

    Raises:
        ValueError: a record is 0-d, or the trailing shapes differ.

    Example::

        padded, lengths = pad([np.array([1, 2, 3]), np.array([4])])
        # padded = [[1, 2, 3], [4, 0, 0]], lengths = [3, 1]
    """
    arrays = [r if isinstance(r, np.ndarray) else np.asarray(r) for r in records]
    if not arrays:
        return np.zeros((0, 0), dtype=np.float64 if dtype is None else dtype), np.zeros(
            0, dtype=np.int64
        )
    trailing = arrays[0].shape[1:]
    for k, a in enumerate(arrays):
        if a.ndim == 0:
            raise ValueError(f"record {k} is 0-d; pad needs arrays with a first axis to pad")
        if a.shape[1:] != trailing:
            raise ValueError(
                f"record {k} has shape {a.shape}, whose trailing shape {a.shape[1:]} differs "
                f"from record 0's {trailing}"
            )
    out_dtype = np.result_type(*{a.dtype for a in arrays}) if dtype is None else np.dtype(dtype)
    lengths = np.fromiter((a.shape[0] for a in arrays), dtype=np.int64, count=len(arrays))
    out = np.full((len(arrays), int(lengths.max()), *trailing), value, dtype=out_dtype)
    for k, a in enumerate(arrays):
        out[k, : a.shape[0]] = a
    return out, lengths
