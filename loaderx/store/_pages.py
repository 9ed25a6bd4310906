"""Releasing the pages of a memory-mapped source as a conversion goes."""

from __future__ import annotations

import mmap

import numpy as np


class PageReleaser:
    """Drops the pages of an ``np.memmap`` source once a piece is written.

    Pages of a file mapping count towards the resident set as long as they
    stay mapped, so reading a large ``.npy`` through ``mmap_mode='r'`` would
    grow the process to the file's size. ``MADV_DONTNEED`` unmaps them again
    (the data stays in the page cache). Only shared mappings are touched:
    on a copy-on-write mapping (mode 'c') it would discard the caller's edits.
    """

    def __init__(self, array: np.ndarray) -> None:
        self._mm = None
        mm = getattr(array, "_mmap", None)
        if (
            isinstance(array, np.memmap)
            and mm is not None
            and getattr(array, "mode", None) in ("r", "r+", "w+")
            and hasattr(mm, "madvise")
            and hasattr(mmap, "MADV_DONTNEED")
        ):
            try:
                probe = np.frombuffer(mm, dtype=np.uint8)
                self._base = int(probe.__array_interface__["data"][0])
                self._size = len(mm)
                del probe
                self._mm = mm
            except (TypeError, ValueError, BufferError):
                self._mm = None

    def release(self, piece: np.ndarray) -> None:
        """Drop the pages of ``piece``, a part of the source array."""
        if self._mm is None or piece.size == 0:
            return
        self._release(int(piece.__array_interface__["data"][0]), piece.shape, piece.strides, piece.itemsize)

    def release_rows(self, array: np.ndarray, rows: np.ndarray) -> None:
        """Drop the pages of the rows ``rows`` of the source ``array``
        (positions along axis 0), found from its strides: the array is not
        indexed again, so a source that watches its reads (an array
        subclass, a Ctrl-C test) sees none."""
        if self._mm is None or array.size == 0:
            return
        base = int(array.__array_interface__["data"][0])
        step, shape, strides = array.strides[0], array.shape[1:], array.strides[1:]
        for i in rows.tolist():
            self._release(base + int(i) * step, shape, strides, array.itemsize)
            if self._mm is None:
                return

    def _release(self, addr: int, shape: tuple[int, ...], strides: tuple[int, ...], itemsize: int) -> None:
        """Drop the pages of the array of ``shape`` and ``strides`` at ``addr``."""
        mm = self._mm
        if mm is None:
            return
        lo = hi = addr
        for extent, stride in zip(shape, strides):
            if stride < 0:
                lo += stride * (extent - 1)
            else:
                hi += stride * (extent - 1)
        hi += itemsize
        start, stop = lo - self._base, hi - self._base
        if start < 0 or stop > self._size:
            return
        page = mmap.PAGESIZE
        start -= start % page
        stop = min(-(-stop // page) * page, self._size)
        try:
            mm.madvise(mmap.MADV_DONTNEED, start, stop - start)
        except (OSError, ValueError):
            self._mm = None
