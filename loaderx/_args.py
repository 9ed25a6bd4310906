"""Argument checking shared by the public modules.

Every check raises the built-in exception that fits (``TypeError`` for a wrong
type, ``ValueError`` for a bad value, ``IndexError`` for an index out of
range) with a message that quotes the value at fault. Nothing here touches the
native library: this module sits at the bottom of the package, beside
:mod:`loaderx.errors`.
"""

from __future__ import annotations

import operator
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TypeGuard

import numpy as np

if TYPE_CHECKING:  # annotation-only aliases: ``X | Y`` is not a runtime type on 3.9
    PathLike = str | os.PathLike[str]
    IndexLike = int | Sequence[int] | np.ndarray | slice

#: The codecs a store can be created with. ``"narrow"`` is for records that
#: are arrays of one integer type (see loaderx.store._autocodec).
CODECS = ("raw", "zstd", "zstd_dict", "narrow")

#: What the converters take: a codec, or "auto" to choose one by measuring a
#: sample of the data (see loaderx.store._autocodec).
CONVERT_CODECS = ("auto", *CODECS)

#: The sampling modes.
MODES = ("sequential", "iid", "cyclic")

INT64_MAX = (1 << 63) - 1
UINT64_MAX = (1 << 64) - 1


# ---------------------------------------------------------------------------
# integers and indices


def as_int(value: Any, name: str) -> int:
    """``operator.index(value)`` with a TypeError that quotes the value."""
    if isinstance(value, bool):
        raise TypeError(f"{name} must be an integer, got {value!r}")
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an integer, got {value!r}") from None


def is_scalar_index(key: Any) -> TypeGuard[int | np.integer]:
    """Whether ``key`` picks one record (an int, not a bool) rather than a batch."""
    return isinstance(key, (int, np.integer)) and not isinstance(key, (bool, np.bool_))


def index_error(index: Any, n: int, what: str) -> IndexError:
    return IndexError(f"index {index} is out of range for {what} of length {n}")


def normalize_index(index: int, n: int, what: str) -> int:
    """One Python-style index (negatives count from the end) into ``[0, n)``."""
    i = index + n if index < 0 else index
    if not 0 <= i < n:
        raise index_error(index, n, what)
    return i


def as_indices(key: Any, n: int, what: str) -> tuple[np.ndarray, tuple[int, ...]]:
    """Turn a batch key into a C-contiguous int64 array of indices in ``[0, n)``.

    Accepts a slice, a sequence or array of integers (negative ones count from
    the end) or a boolean mask of length ``n``. Returns the flat indices and
    the shape of the key, so a 2-D index array gives a 2-D batch.
    """
    if isinstance(key, slice):
        return np.arange(*key.indices(n), dtype=np.int64), (len(range(*key.indices(n))),)
    if isinstance(key, (str, bytes)):
        raise TypeError(f"indices must be integers, got {key!r}")
    arr = key if isinstance(key, np.ndarray) else np.asarray(key)
    kind = arr.dtype.kind
    if kind == "O":
        arr = _object_indices(arr, n, what)
        kind = arr.dtype.kind
    if kind == "b":
        if arr.shape != (n,):
            raise IndexError(f"boolean mask of shape {arr.shape} does not match {what} of length {n}")
        flat = np.flatnonzero(arr).astype(np.int64, copy=False)
        return flat, flat.shape
    if kind not in "iu":
        if arr.size == 0:  # [] and np.array([]) are float64 by default
            return np.empty(0, dtype=np.int64), arr.shape
        raise TypeError(f"indices must be integers, got an array of dtype {arr.dtype}")
    shape = arr.shape
    if arr.ndim != 1:
        arr = arr.reshape(-1)
    if arr.size == 0:
        return np.empty(0, dtype=np.int64), shape
    lo = arr.min()
    hi = arr.max()
    if kind == "u":
        if hi >= n:
            raise index_error(arr[np.argmax(arr >= n)], n, what)
        return np.ascontiguousarray(arr, dtype=np.int64), shape
    if lo < 0:
        if lo < -n:
            raise index_error(arr[np.argmax(arr < -n)], n, what)
        if hi >= n:
            raise index_error(arr[np.argmax(arr >= n)], n, what)
        fixed = arr.astype(np.int64)  # a copy: the caller's array is left alone
        fixed[fixed < 0] += n
        return fixed, shape
    if hi >= n:
        raise index_error(arr[np.argmax(arr >= n)], n, what)
    return np.ascontiguousarray(arr, dtype=np.int64), shape


def _object_indices(arr: np.ndarray, n: int, what: str) -> np.ndarray:
    """An object array of Python integers as int64 (NumPy makes one of a list
    holding an integer past int64, such as ``[1, 2**64]``): such an integer
    is out of range of any store, so it is an IndexError naming it, and a
    non-integer element is a TypeError."""
    out = np.empty(arr.shape, dtype=np.int64)
    flat = out.reshape(-1)
    for k, v in enumerate(arr.reshape(-1).tolist()):
        if isinstance(v, bool) or not hasattr(v, "__index__"):
            raise TypeError(f"indices must be integers, got {v!r} ({type(v).__name__})")
        i = operator.index(v)
        if not -n <= i < n:
            raise index_error(i, n, what)
        flat[k] = i
    return out


# ---------------------------------------------------------------------------
# stores


def check_codec(codec: Any, allowed: tuple[str, ...] = CODECS) -> str:
    """``codec`` if it is one of ``allowed``, else a ValueError listing them."""
    if not isinstance(codec, str) or codec not in allowed:
        raise ValueError(f"codec must be one of {', '.join(map(repr, allowed))}; got {codec!r}")
    return codec


# ---------------------------------------------------------------------------
# sampling


def check_mode(mode: Any) -> str:
    if mode not in MODES:
        raise ValueError(f"sampler mode must be one of {', '.join(map(repr, MODES))}; got {mode!r}")
    return mode


def check_positive(value: Any, name: str) -> int:
    v = as_int(value, name)
    if not 1 <= v <= INT64_MAX:
        raise ValueError(f"{name} must be a positive int64, got {value!r}")
    return v


def check_seed(seed: Any) -> int:
    v = as_int(seed, "seed")
    if not 0 <= v <= UINT64_MAX:
        raise ValueError(f"seed must be in [0, 2**64), got {seed!r}")
    return v


def check_step(step: Any) -> int:
    v = step if type(step) is int else as_int(step, "step")
    if not 0 <= v <= INT64_MAX:
        raise ValueError(f"step must be a non-negative int64, got {step!r}")
    return v


def check_shard(shard: Any) -> tuple[int, int]:
    try:
        rank, world = shard
    except (TypeError, ValueError):
        raise TypeError(f"shard must be a (rank, world) pair, got {shard!r}") from None
    rank = as_int(rank, "shard rank")
    world = as_int(world, "shard world")
    if world < 1:
        raise ValueError(f"shard world must be at least 1, got shard={shard!r}")
    if not 0 <= rank < world:
        raise ValueError(f"shard rank must be in [0, {world}), got shard={shard!r}")
    return rank, world


def check_global(mode: str, n: int, batch_size: int, world: int) -> None:
    g = batch_size * world
    if g > INT64_MAX:
        raise ValueError(f"global batch {batch_size} * {world} overflows int64")
    if mode == "cyclic" and g > n:
        raise ValueError(
            f"cyclic mode needs the global batch (batch_size * world = {batch_size} * {world} "
            f"= {g}) to be at most n = {n}"
        )


def check_sample_out(out: Any, batch_size: int) -> np.ndarray:
    """A caller's index buffer: an int64 ndarray of shape ``(batch_size,)``,
    C-contiguous and writable."""
    if not isinstance(out, np.ndarray):
        raise TypeError(f"out must be a numpy.ndarray, got {type(out).__name__}")
    if out.dtype != np.int64:
        raise TypeError(f"out must have dtype int64, got {out.dtype}")
    if out.shape != (batch_size,):
        raise ValueError(f"out must have shape ({batch_size},), got {out.shape}")
    if not out.flags.c_contiguous:
        raise ValueError("out must be C-contiguous")
    if not out.flags.writeable:
        raise ValueError("out is read-only")
    return out
