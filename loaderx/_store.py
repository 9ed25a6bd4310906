"""The one owner of a native store handle.

:class:`StoreHandle` holds the integer handle that the native library hands
out for an open store and everything tied to its lifetime: the closed check,
``len``, ``stats``, ``close``, the context manager and the finaliser. It also
holds the one packed read (records back to back into one buffer) that both
:class:`loaderx.zrecord.Zrecord` and :class:`loaderx.dataset.RaggedDataset`
turn into their own result type. The public store classes derive from it.
"""

from __future__ import annotations

import contextlib
import logging
import os
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from loaderx import _native
from loaderx._args import as_indices
from loaderx._progress import Progress
from loaderx.errors import ClosedError

if TYPE_CHECKING:
    from loaderx._args import PathLike

_S = TypeVar("_S", bound="StoreHandle")


def packed_offsets(sizes: np.ndarray) -> np.ndarray:
    """``len(sizes) + 1`` int64 offsets of records packed back to back."""
    offsets = np.empty(len(sizes) + 1, dtype=np.int64)
    offsets[0] = 0
    np.cumsum(sizes, out=offsets[1:])
    return offsets


class StoreHandle:
    """A store at ``path``, closed until a subclass opens it and hands the
    handle to :meth:`_adopt`. Messages name the store by its class name and
    path."""

    _handle: int | None = None  # also what a half-built instance's finaliser sees

    def __init__(self, path: PathLike) -> None:
        self._handle = None
        self._path = os.fspath(path)

    def _adopt(self, handle: int) -> None:
        """Take ownership of an open native handle."""
        self._handle = handle
        self._codec = str(_native.store_codec(handle))

    @property
    def _h(self) -> int:
        """The open handle; raises :class:`ClosedError` once closed."""
        h = self._handle
        if h is None:
            raise ClosedError(f"{type(self).__name__}({self._path!r}) is closed")
        return h

    def _indices(self, key: Any) -> tuple[np.ndarray, tuple[int, ...]]:
        """A batch key as int64 indices into the store, and the key's shape."""
        return as_indices(key, int(_native.store_len(self._h)), type(self).__name__)

    def _sizes(self, idx: np.ndarray) -> np.ndarray:
        """The byte size of each of the (valid, non-empty) records ``idx``."""
        return np.asarray(_native.store_sizes(self._h, idx), dtype=np.int64)

    def _read_packed(self, idx: np.ndarray, sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Read the records ``idx`` (of byte ``sizes``) back to back with one
        native call: a uint8 buffer and the ``len(idx) + 1`` offsets of each
        record in it."""
        offsets = packed_offsets(sizes)
        buf = np.empty(int(offsets[-1]), dtype=np.uint8)
        if buf.size:
            _native.store_gather_packed(self._h, idx, buf, offsets)
        return buf, offsets

    # -- what every store shares -------------------------------------------

    @property
    def path(self) -> str:
        """The store directory."""
        return self._path

    @property
    def codec(self) -> str:
        """The codec the store was created with: "raw", "zstd" or "zstd_dict"."""
        return self._codec

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` has been called."""
        return self._handle is None

    def __len__(self) -> int:
        return int(_native.store_len(self._h))

    def stats(self) -> dict[str, Any]:
        """Storage figures: ``length``, ``live_bytes`` (stored bytes of live
        records), ``chunk_bytes`` (bytes in chunk files, garbage included),
        ``logical_bytes`` (uncompressed size), ``codec``, ``dict_bytes`` and
        ``chunks``. ``chunk_bytes - live_bytes`` bounds what compaction can
        reclaim."""
        return dict(_native.store_stats(self._h))

    def close(self) -> None:
        """Close the store, syncing pending writes. Safe to call twice; any
        later use raises :class:`loaderx.errors.ClosedError`."""
        h, self._handle = self._handle, None
        if h is not None:
            _native.store_close(h)

    def __enter__(self: _S) -> _S:
        _ = self._h  # raises if closed
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()


# -- logged operations ------------------------------------------------------
#
# What a long-running job should find in its logs goes to the "loaderx"
# logger (silent unless the application configures logging).

log = logging.getLogger("loaderx")


def _dir_sizes(path: str) -> dict[str, int]:
    try:
        with os.scandir(path) as it:
            return {e.name: e.stat().st_size for e in it if e.is_file()}
    except OSError:
        return {}


def open_logged(path: str, readonly: bool) -> int:
    """Open the store at ``path`` and log it. A writable open settles what an
    interrupted writer left (a journal replayed, a torn tail cut off); when
    it changed the directory, that is logged as a recovery, naming the files."""
    before = None if readonly else _dir_sizes(path)
    h = _native.store_open(path, readonly=readonly)
    if before is not None:
        after = _dir_sizes(path)
        changed = sorted(n for n in set(before) | set(after) if before.get(n) != after.get(n))
        if changed:
            log.warning(
                "recovered store %r after an interrupted write (%d records now); changed: %s",
                path, int(_native.store_len(h)), ", ".join(changed),
            )
    log.info("opened store %r (%s)", path, "read-only" if readonly else "writable")
    return h


def compact_handle(h: int, path: str, progress: bool | None = None) -> int:
    """Compact the open, writable store ``h`` (at ``path``), show a progress
    line while it runs (on a terminal), log and return the bytes reclaimed."""
    before = int(_native.store_stats(h)["chunk_bytes"])
    bar = Progress(f"compact {path}", None, None, enabled=progress)
    try:
        _native.store_compact(h)
    finally:
        bar.close()
    reclaimed = max(0, before - int(_native.store_stats(h)["chunk_bytes"]))
    log.info("compacted store %r: reclaimed %d bytes", path, reclaimed)
    return reclaimed
