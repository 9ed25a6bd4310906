"""The shared memory of worker processes: named segments, the slots that
receive finished batches, NumPy streams reopened in a worker, and batches
flattened into arrays laid out in a slot plus a picklable skeleton.

Both sides of :mod:`loaderx.loader._procpool` use these: the consumer creates,
sizes and unlinks segments and reads batches back as views; a worker maps
the segments it is told about (:func:`_attach`, :func:`_drop`) and writes its
batches into them. Segments are POSIX shared memory opened by name (a
Windows named mapping elsewhere) and never registered with
multiprocessing's resource tracker: the pool owns their names and unlinks
them itself.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import sys
import uuid
from typing import Any

import numpy as np

#: the first characters of every shared-memory segment a pool creates
SEGMENT_PREFIX = "loaderx-"

_ALIGN = 64  # every array of a slot starts at a multiple of this many bytes
_POSIX = os.name == "posix"

if _POSIX:
    import _posixshmem


# -- shared-memory segments --------------------------------------------------


def _map(name: str, size: int, *, create: bool = False, readonly: bool = False) -> mmap.mmap:
    """Create (``create=True``) or open the named segment and map it."""
    if not _POSIX:  # a Windows named mapping lives while a handle is open
        return mmap.mmap(-1, size, tagname=name)  # type: ignore[call-arg, unused-ignore]  # Windows' mmap
    flags = os.O_CREAT | os.O_EXCL | os.O_RDWR if create else os.O_RDONLY if readonly else os.O_RDWR
    fd = _posixshmem.shm_open("/" + name, flags, 0o600)
    try:
        if create:
            os.ftruncate(fd, size)
        return mmap.mmap(fd, size, access=mmap.ACCESS_READ if readonly else mmap.ACCESS_WRITE)
    finally:
        os.close(fd)


def _unlink(name: str) -> None:
    """Remove the segment's name (its pages go once no process maps them)."""
    if _POSIX:
        with contextlib.suppress(FileNotFoundError):
            _posixshmem.shm_unlink("/" + name)


class _Names:
    """The segment names a pool owns; what its finaliser unlinks."""

    def __init__(self) -> None:
        self.prefix = f"{SEGMENT_PREFIX}{os.getpid()}-{uuid.uuid4().hex[:8]}-"
        self.count = 0
        self.live: set[str] = set()

    def new(self) -> str:
        self.count += 1
        name = f"{self.prefix}{self.count}"
        self.live.add(name)
        return name

    def unlink(self, name: str) -> None:
        self.live.discard(name)
        _unlink(name)

    def unlink_all(self) -> None:
        for name in list(self.live):
            self.unlink(name)


class _Slot:
    """One shared-memory segment that receives finished batches."""

    __slots__ = ("id", "name", "size", "base")

    def __init__(self, slot_id: int, name: str, size: int, base: np.ndarray) -> None:
        self.id = slot_id
        self.name = name
        self.size = size
        self.base = base  # uint8 view of the whole mapping; the consumer's arrays are views of it


def _slot_refs(slot: _Slot) -> int:
    return sys.getrefcount(slot.base)


class _ArraySource:
    """A NumPy stream as the worker reopens it: a memmap from its file, an
    in-memory array from the shared segment it was copied into."""

    def __init__(self, dtype: np.dtype, shape: tuple[int, ...], path: str | None, offset: int,
                 segment: str | None) -> None:
        self.dtype = dtype
        self.shape = shape
        self.path = path
        self.offset = offset
        self.segment = segment

    def open(self) -> tuple[np.ndarray, list[str]]:
        """The array, read-only, and the segment names it maps."""
        nbytes = int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize
        if self.path is not None:
            return np.memmap(self.path, self.dtype, "r", self.offset, self.shape), []
        assert self.segment is not None
        mm = _map(self.segment, max(nbytes, 1), readonly=True)
        arr = np.frombuffer(mm, dtype=np.uint8, count=nbytes).view(self.dtype).reshape(self.shape)
        return arr, [self.segment]


def _memmap_source(array: np.ndarray) -> _ArraySource | None:
    """How a worker reopens a C-contiguous view of a file-backed memmap; None
    when ``array`` is not one."""
    mm = getattr(array, "_mmap", None)
    path = getattr(array, "filename", None)
    if mm is None or path is None or not array.flags.c_contiguous:
        return None
    if getattr(array, "mode", None) == "c":  # copy-on-write: its edits are not in the file
        return None
    # a slice of a memmap keeps its parent's .offset: locate the data instead
    mapped = np.frombuffer(mm, dtype=np.uint8)
    start = int(getattr(array, "offset", 0))
    start -= start % mmap.ALLOCATIONGRANULARITY  # where the mapping begins in the file
    delta = array.ctypes.data - mapped.ctypes.data
    if not 0 <= delta <= mapped.size:
        return None
    return _ArraySource(array.dtype, tuple(array.shape), os.fspath(path), start + delta, None)


# -- batches as flat arrays plus a picklable skeleton ------------------------

_SCALARS = (int, float, bool, complex, str, bytes, type(None))

SUPPORTED = (
    "a NumPy array, or dicts, lists and tuples (named tuples too) of NumPy arrays, "
    "with Python scalars (int, float, bool, str, bytes, None) or NumPy scalars as other leaves"
)


def _flatten(obj: Any, arrays: list[np.ndarray], where: str) -> Any:
    """The skeleton of ``obj``: its arrays replaced by their index in ``arrays``."""
    t = type(obj)
    if isinstance(obj, np.ndarray):
        if obj.dtype.hasobject:
            raise TypeError(
                f"the transform returned an object array at {where}; process workers hand back "
                "arrays of numbers (or fixed-size strings or records) only"
            )
        arrays.append(obj)
        return ("a", len(arrays) - 1)
    if t is dict:
        return ("d", [(k, _flatten(v, arrays, f"{where}[{k!r}]")) for k, v in obj.items()])
    if t is list or t is tuple:
        return ("l" if t is list else "t", [_flatten(v, arrays, f"{where}[{i}]") for i, v in enumerate(obj)])
    if isinstance(obj, tuple) and hasattr(t, "_fields"):
        return ("n", t, [_flatten(v, arrays, f"{where}.{f}") for f, v in zip(t._fields, obj)])
    if t in _SCALARS or (isinstance(obj, np.generic) and not isinstance(obj, np.object_)):
        return ("v", obj)
    raise TypeError(
        f"the transform returned {t.__module__}.{t.__qualname__} at {where}; with "
        f"workers='process' a batch must be {SUPPORTED} (convert tensors in the training step)"
    )


def _unflatten(node: Any, arrays: list[np.ndarray]) -> Any:
    kind = node[0]
    if kind == "a":
        return arrays[node[1]]
    if kind == "d":
        return {k: _unflatten(v, arrays) for k, v in node[1]}
    if kind == "l":
        return [_unflatten(v, arrays) for v in node[1]]
    if kind == "t":
        return tuple(_unflatten(v, arrays) for v in node[1])
    if kind == "n":
        return node[1](*(_unflatten(v, arrays) for v in node[2]))
    return node[1]


def _layout(arrays: list[np.ndarray]) -> tuple[list[tuple[int, np.dtype, tuple[int, ...]]], int]:
    """``(offset, dtype, shape)`` per array, packed with aligned starts, and
    the bytes they need."""
    specs = []
    off = 0
    for a in arrays:
        specs.append((off, a.dtype, a.shape))
        off += -(-a.nbytes // _ALIGN) * _ALIGN
    return specs, off


def _views(base: np.ndarray, specs: list[tuple[int, np.dtype, tuple[int, ...]]]) -> list[np.ndarray]:
    out = []
    for off, dtype, shape in specs:
        n = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        out.append(base[off : off + n].view(dtype).reshape(shape))
    return out


def _attach(maps: dict[str, tuple[mmap.mmap, np.ndarray]], name: str, size: int) -> np.ndarray:
    got = maps.get(name)
    if got is None:
        mm = _map(name, size)
        got = maps[name] = (mm, np.frombuffer(mm, dtype=np.uint8))
    return got[1]


def _drop(maps: dict[str, tuple[mmap.mmap, np.ndarray]], name: str) -> None:
    got = maps.pop(name, None)
    if got is not None:
        mm, base = got
        del got, base
        with contextlib.suppress(BufferError):  # still viewed: unmapped when the last view goes
            mm.close()
