"""Checks of the small files a mirror downloads whole, before they are
cached.

A store's header (``meta.zr``) carries the CRC-32C of its own bytes and of
the dictionary (``dict.zr``), the schema (``schema.msgpack``) a CRC-32C of
its fields, and a sharded dataset's ``manifest.json`` a CRC-32C of its
body. :func:`small_fault` checks a download against these before the
mirror keeps it, so a byte flipped in transit is fetched again rather than
cached, and :func:`local_fault` checks what a mirror holds, so a file
damaged on disk later is fetched again in place. Files of formats that
carry no checksum (headers before version 4, schemas without one) pass.
"""

from __future__ import annotations

import os

from loaderx.errors import CorruptStoreError
from loaderx.store import shards
from loaderx.store._schema import _schema_sum, _unpack, _Unreadable
from loaderx.store._store import crc32c

__all__ = ["small_fault", "local_fault", "small_order"]

_MAGIC = b"ZREC"
_HEADER = 32
#: the first format version whose header has a checksum
_SUMMED = 4


def small_order(rel: str) -> tuple[int, str]:
    """Sort key: a store's header before its other files (the dictionary is
    checked against the header)."""
    return (0 if os.path.basename(rel) == "meta.zr" else 1, rel)


def _header_fault(b: bytes) -> str | None:
    if len(b) < len(_MAGIC) or b[:4] != _MAGIC:
        return "the header has no ZREC magic"
    if len(b) < _HEADER:
        return f"the header is {len(b)} bytes, not {_HEADER}"
    if b[4] < _SUMMED:
        return None
    stored = int.from_bytes(b[22:26], "little")
    got = crc32c(b[26:_HEADER], crc32c(b[0:22]))
    if stored != got:
        return f"header checksum {stored:#010x}, its bytes give {got:#010x}"
    return None


def _dict_fault(b: bytes, header: bytes | None) -> str | None:
    if header is None or len(header) < _HEADER or header[:4] != _MAGIC or header[4] < _SUMMED:
        return None
    want = int.from_bytes(header[26:30], "little")
    got = crc32c(b)
    if want != got:
        return f"dictionary checksum {got:#010x}, the header says {want:#010x}"
    return None


def _schema_fault(b: bytes) -> str | None:
    try:
        fields, end = _unpack(b, 0)
    except (_Unreadable, RecursionError):
        fields, end = None, -1
    if not isinstance(fields, dict) or end != len(b):
        # a schema of another writer this reader does not parse is left to
        # the native reader; one of this library's always has a checksum
        return "the schema does not parse" if b"crc32c" in b else None
    if "crc32c" not in fields:
        return "the schema has lost its checksum" if b"crc32c" in b else None
    try:
        got = _schema_sum(fields)
    except (KeyError, TypeError):
        return "the schema lacks a field its checksum covers"
    if fields["crc32c"] != got:
        return f"schema checksum {fields['crc32c']!r}, its fields give {got}"
    return None


def small_fault(rel: str, data: bytes, header: bytes | None = None) -> str | None:
    """What is wrong with ``data``, the bytes of the small file ``rel`` of
    a dataset (``header``: the bytes of its store's ``meta.zr``, which a
    dictionary is checked against); None when they pass."""
    name = os.path.basename(rel)
    if name == "meta.zr":
        return _header_fault(data)
    if name == "dict.zr":
        return _dict_fault(data, header)
    if name == "schema.msgpack":
        return _schema_fault(data)
    if name == shards.MANIFEST_FILE:
        try:
            shards.parse_manifest(data, rel)
        except CorruptStoreError as e:
            return str(e)
    return None


def local_fault(path: str, rel: str) -> str | None:
    """:func:`small_fault` of the file at ``path`` (object ``rel``); a file
    that cannot be read is a fault too."""
    try:
        with open(path, "rb") as f:
            data = f.read()
        header = None
        if os.path.basename(rel) == "dict.zr":
            with open(os.path.join(os.path.dirname(path), "meta.zr"), "rb") as f:
                header = f.read(_HEADER)
    except OSError as e:
        return f"unreadable ({e.strerror})"
    return small_fault(rel, data, header)
