"""A directory of aligned stores opened as one multi-stream dataset.

:func:`loaderx.arrow.from_arrow` writes one store per column under a
directory, every store with the same number of records; :class:`MSDataset`
opens such a directory as a read-only mapping ``{column: DenseDataset |
RaggedDataset}`` (or a writable one, whose deletes keep the streams aligned)
that a :class:`loaderx.DataLoader` takes directly when every stream is
dense. It needs neither pyarrow nor datasets: a directory written on one
machine is read on another that has only loaderx.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from loaderx.remote import _cache, _tree
from loaderx.remote._cache import CacheOptions
from loaderx.store import _native, shards
from loaderx.store.dataset import DenseDataset, RaggedDataset, check_max_open_shards

if TYPE_CHECKING:
    from loaderx._args import IndexLike, PathLike

__all__ = ["MSDataset", "is_multistream", "META_FILE", "SCHEMA_FILE"]

#: The files that make a directory a store: a stream directory holds both.
SCHEMA_FILE = "schema.msgpack"
META_FILE = "meta.zr"



def _sharded_streams(path: str) -> list[str] | None:
    """The streams of a sharded multi-stream dataset at ``path``, else None."""
    if not shards.is_sharded(path):
        return None
    m = shards.read_manifest(path)
    return sorted(m.streams) if m.layout == "streams" else None


def _stream_dirs(path: str) -> list[str]:
    sharded = _sharded_streams(path)
    if sharded is not None:
        return sharded
    try:
        entries = sorted(os.listdir(path))
    except OSError:
        return []
    return [
        e
        for e in entries
        if not e.startswith(".")
        and os.path.isfile(os.path.join(path, e, META_FILE))
        and os.path.isfile(os.path.join(path, e, SCHEMA_FILE))
    ]


def is_multistream(path: PathLike) -> bool:
    """Whether ``path`` is a directory of stores (and not a store itself)."""
    p = os.fspath(path)
    if shards.is_sharded(p):
        return _sharded_streams(p) is not None
    return os.path.isdir(p) and not os.path.exists(os.path.join(p, META_FILE)) and bool(_stream_dirs(p))


class MSDataset(Mapping):
    """A directory of aligned stores opened as one dataset: a mapping
    ``{name: DenseDataset | RaggedDataset}`` whose streams all have the same
    length, record ``i`` of each being row ``i`` of the source.

    A :class:`loaderx.DataLoader` takes it directly when every stream is
    dense (pick dense ones with ``columns=``)::

        ms = MSDataset("mnist_train")
        ms["label"][:10]
        ms.num_records                   # records per stream (len(ms) counts streams)
        ms.row(3)                        # {"image": ..., "label": ...}
        loader = DataLoader(ms, batch_size=256)

    Args:
        path: a directory written by :func:`from_arrow` (or any directory
            whose subdirectories are stores of equal length).
        columns: the streams to open, in this order; all (sorted by name)
            by default.
        writable: open every stream writable, for :meth:`delete`.
        max_open_shards: for a sharded multi-stream dataset, the most
            shards of each stream kept open at once (see
            :class:`DenseDataset`); None for the default, a limit shared by
            every stream and sharded dataset of the process. A directory of
            single stores ignores it.

    Raises:
        FileNotFoundError: ``path`` holds no stores.
        KeyError: a requested stream does not exist.
        ValueError: the streams differ in length (naming each length), or
            ``max_open_shards`` is below 1 (TypeError: not an int).
    """

    #: the mirror of a dataset in object storage (held until close), else None
    _tree: Any = None

    def __init__(
        self,
        path: PathLike,
        columns: Iterable[str] | None = None,
        *,
        writable: bool = False,
        cache: CacheOptions | None = None,
        storage_options: dict[str, Any] | None = None,
        max_open_shards: int | None = None,
    ) -> None:
        self._max_open = check_max_open_shards(max_open_shards)
        self._url: str | None = None
        self._remote: tuple[CacheOptions | None, dict[str, Any] | None] = (cache, storage_options)
        if _cache.is_url(path):
            if writable:
                raise ValueError(f"{path!r} is in object storage, which loaderx reads but does not write in place")
            self._url = str(path).rstrip("/")
            self._tree, path = _tree.open_tree(self._url, cache, storage_options, holder=self)
        elif cache is not None or storage_options:
            raise ValueError(
                f"cache= and storage_options= are for datasets in object storage (s3:// URLs), not {path!r}"
            )
        self._path = os.fspath(path)
        self._streams: dict[str, DenseDataset | RaggedDataset] = {}
        sharded = _sharded_streams(self._path)
        if sharded is not None and writable:
            raise ValueError(f"{self._path!r} is a sharded dataset, which is read-only")
        kinds = {k: v.kind for k, v in shards.read_manifest(self._path).streams.items()} if sharded else {}
        available = sharded if sharded is not None else _stream_dirs(self._path)
        if not available:
            raise FileNotFoundError(f"{self._path!r} holds no loaderx stores")
        names = available if columns is None else list(columns)
        missing = [c for c in names if c not in available]
        if missing:
            raise KeyError(f"{self._path!r} has no stream {', '.join(map(repr, missing))}; it has {available}")
        try:
            for name in names:
                sub = os.path.join(self._path, name)
                kind = kinds[name] if sharded else _native.schema_read(sub)[0]
                cls = RaggedDataset if kind == "ragged" else DenseDataset
                self._streams[name] = cls(sub, writable=writable, max_open_shards=self._max_open)
            lengths = {name: len(s) for name, s in self._streams.items()}  # records per stream
            if len(set(lengths.values())) > 1:
                raise ValueError(
                    f"{self._path!r}: the streams are not aligned (lengths {lengths}); a conversion may have "
                    "been interrupted: convert again with overwrite=True"
                )
        except BaseException:
            self.close()
            raise

    @property
    def path(self) -> str:
        """The directory (for a dataset in object storage, its mirror in the
        local cache; :attr:`url` is the URL)."""
        return self._path

    @property
    def url(self) -> str | None:
        """The ``s3://`` URL of a dataset in object storage, else None."""
        return self._url

    def __getitem__(self, name: str) -> DenseDataset | RaggedDataset:
        return self._streams[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._streams)

    def __len__(self) -> int:
        """The number of streams, as for any mapping; :attr:`num_records`
        is the number of records."""
        return len(self._streams)

    @property
    def num_records(self) -> int:
        """The number of records in each stream."""
        first = next(iter(self._streams.values()), None)
        return 0 if first is None else len(first)

    def row(self, i: int) -> dict[str, Any]:
        """Record ``i`` of every stream."""
        return {name: s[i] for name, s in self._streams.items()}

    def delete(self, indices: IndexLike) -> None:
        """Delete the same records from every stream (opened writable); the
        streams stay aligned, as each moves the same tail records into the
        same holes."""
        for s in self._streams.values():
            s.delete(indices)

    def close(self) -> None:
        """Close every stream (and, for the last user of a URL in this
        process, let go of its mirror)."""
        for s in self._streams.values():
            s.close()
        tree, self._tree = self._tree, None
        if tree is not None:
            tree.let_go(self)

    def __enter__(self) -> MSDataset:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        inner = ", ".join(f"{n}: {type(s).__name__}" for n, s in self._streams.items())
        return f"MSDataset({self._url or self._path!r}, num_records={self.num_records}, {{{inner}}})"

    def __reduce__(self) -> tuple[Any, ...]:
        if self._url is not None:
            return (_reopen_remote, (self._url, list(self._streams), *self._remote, self._max_open))
        writable = any(getattr(s, "writable", False) for s in self._streams.values())
        return (_reopen, (self._path, list(self._streams), writable, self._max_open))

    # Mapping's equality compares contents; identity is what a dataset means.
    __eq__ = object.__eq__
    __hash__ = object.__hash__


def _reopen(path: str, columns: list[str], writable: bool, max_open: int | None = None) -> MSDataset:
    return MSDataset(path, columns, writable=writable, max_open_shards=max_open)


def _reopen_remote(url: str, columns: list[str], cache: CacheOptions | None,
                   storage: dict[str, Any] | None, max_open: int | None = None) -> MSDataset:
    return MSDataset(url, columns, cache=cache, storage_options=storage, max_open_shards=max_open)
