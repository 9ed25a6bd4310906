"""The schema of a dense or ragged store, read without the native library.

capi/schemafile.go writes schema.msgpack as a MessagePack map of
"version" (1), "kind", "dtype" and "shape" (compact integers), and maybe
"codec_choice" (how the converter picked the codec, ignored here). A dataset
made before the library is loaded reads that form here, so dtype and
item_shape need no native call; anything else (a schema written by the
original loaderx, a damaged file) is left to the native reader, which
validates it and reports what is wrong. The handle, opened at the first
gather, reads the schema natively again, so a limit only the native reader
checks (the number of dimensions) still holds before any record is read.
"""

from __future__ import annotations

import os
import struct
from typing import Any

import numpy as np

from loaderx.store._dtypes import from_schema_name, schema_name
from loaderx.store._store import crc32c

_SCHEMA_KEYS = frozenset({"version", "kind", "dtype", "shape"})
#: keys a schema may have besides those: "crc32c" (checked below) and notes
#: that say nothing of the records' layout
_SCHEMA_NOTES = frozenset({"codec_choice", "crc32c"})
_SCALARS = {0xC0: None, 0xC2: False, 0xC3: True}


class _Unreadable(Exception):
    """The bytes are not the plain schema form this reader knows."""


def _unpack(b: bytes, pos: int) -> tuple[Any, int]:
    """One MessagePack value of the kinds a schema uses (maps, arrays, strings,
    integers) at ``pos``; returns it and the position after it."""
    if pos >= len(b):
        raise _Unreadable
    t = b[pos]
    pos += 1
    if t <= 0x7F:
        return t, pos
    if t >= 0xE0:
        return t - 0x100, pos
    if t in _SCALARS:
        return _SCALARS[t], pos
    if t in (0xCA, 0xCB):  # float32, float64
        width = 4 if t == 0xCA else 8
        if pos + width > len(b):
            raise _Unreadable
        return struct.unpack(">f" if width == 4 else ">d", b[pos : pos + width])[0], pos + width
    if 0x80 <= t <= 0x8F or 0x90 <= t <= 0x9F or 0xA0 <= t <= 0xBF:
        size, kind = (t & 0x0F, "map") if t < 0x90 else (t & 0x0F, "array") if t < 0xA0 else (t & 0x1F, "str")
    else:
        widths = {0xCC: ("u", 1), 0xCD: ("u", 2), 0xCE: ("u", 4), 0xCF: ("u", 8),
                  0xD0: ("i", 1), 0xD1: ("i", 2), 0xD2: ("i", 4), 0xD3: ("i", 8),
                  0xD9: ("str", 1), 0xDA: ("str", 2), 0xDC: ("array", 2), 0xDE: ("map", 2)}
        if t not in widths:
            raise _Unreadable
        kind, width = widths[t]
        if pos + width > len(b):
            raise _Unreadable
        raw = b[pos : pos + width]
        pos += width
        if kind in ("u", "i"):
            return int.from_bytes(raw, "big", signed=kind == "i"), pos
        size = int.from_bytes(raw, "big")
    if kind == "str":
        if pos + size > len(b):
            raise _Unreadable
        try:
            return b[pos : pos + size].decode("utf-8"), pos + size
        except UnicodeDecodeError:
            raise _Unreadable from None
    if kind == "array":
        items = []
        for _ in range(size):
            v, pos = _unpack(b, pos)
            items.append(v)
        return items, pos
    fields: dict[Any, Any] = {}
    for _ in range(size):
        k, pos = _unpack(b, pos)
        v, pos = _unpack(b, pos)
        if not isinstance(k, str) or k in fields:
            raise _Unreadable
        fields[k] = v
    return fields, pos


def _schema_sum(fields: dict[str, Any]) -> int:
    """The schema's checksum as capi/schemafile.go's schemaSum takes it: the
    CRC-32C of version, kind, dtype and each dimension as text, each field
    followed by a zero byte."""
    text = b"".join(str(v).encode() + b"\0" for v in (fields["version"], fields["kind"], fields["dtype"]))
    text += b"".join(str(d).encode() + b"\0" for d in fields["shape"])
    return crc32c(text)


def _python_schema(path: str, want: str) -> tuple[np.dtype, tuple[int, ...]] | None:
    """``(dtype, item_shape)`` from ``path``'s schema file when it is the
    plain form of a ``want`` store and names a dtype NumPy knows; None
    otherwise (the native reader decides then)."""
    try:
        with open(os.path.join(path, "schema.msgpack"), "rb") as f:
            b = f.read(1 << 16)
        fields, end = _unpack(b, 0)
    except (OSError, _Unreadable, RecursionError):
        return None
    if end != len(b) or not isinstance(fields, dict) or not _SCHEMA_KEYS <= set(fields) <= _SCHEMA_KEYS | _SCHEMA_NOTES:
        return None
    shape, dtype_str = fields["shape"], fields["dtype"]
    if fields["version"] != 1 or fields["kind"] != want or not isinstance(dtype_str, str):
        return None
    if not isinstance(shape, list) or not all(isinstance(d, int) and d >= 0 for d in shape):
        return None
    if "crc32c" in fields and fields["crc32c"] != _schema_sum(fields):
        return None  # damaged: the native reader says how
    try:
        dtype = from_schema_name(dtype_str, path)
    except (ValueError, ImportError, TypeError):
        return None
    # only the names the converter writes: NumPy also parses strings the
    # native reader refuses (a sub-array "9i4", say)
    if schema_name(dtype) != dtype_str:
        return None
    return dtype, tuple(shape)
