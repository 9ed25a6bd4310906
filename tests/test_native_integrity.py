"""Tests of the binding's integrity calls: verify, upgrade and raw verification."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from loaderx.errors import CorruptStoreError
from loaderx.store import _native as native

FIXTURES = Path(__file__).resolve().parent.parent / "zrecord" / "testdata"


def _flip(path: Path, offset: int) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ 0x10]))


def test_verify_reports_every_fault(tmp_path: Path) -> None:
    path = tmp_path / "s"
    h = native.store_create(path, "raw")
    native.store_append(h, [bytes([i]) * 100 for i in range(5)])
    report = native.store_verify(h)
    assert report["faults"] == [] and report["checked"] == 5 and report["version"] == 4
    native.store_close(h)
    _flip(path / "0.chunk", 150)  # record 1
    _flip(path / "0.chunk", 350)  # record 3
    report = native.verify_dir(path)
    assert [(Path(f["file"]).name, f["index"]) for f in report["faults"]] == [("0.chunk", 1), ("0.chunk", 3)]
    h = native.store_open(path, readonly=True)
    try:
        out = np.zeros(100, dtype=np.uint8)
        assert native.store_stats(h)["verified"] is True  # raw records too, by default
        with pytest.raises(CorruptStoreError, match=r"record 1 in .*0\.chunk: stored bytes checksum"):
            native.store_gather(h, np.array([1], dtype=np.int64), out, 100)
        native.store_set_verify(h, False)  # the opt-out: the damaged byte comes through
        native.store_gather(h, np.array([1], dtype=np.int64), out, 100)
        assert bytes(out) != bytes([1]) * 100
        assert native.store_stats(h)["verified"] is False
    finally:
        native.store_close(h)


def test_upgrade_original_store(tmp_path: Path) -> None:
    path = tmp_path / "s"
    shutil.copytree(FIXTURES / "v3" / "ragged_zstd", path)
    h = native.store_open(path)
    try:
        before = native.store_stats(h)
        assert (before["version"], before["checksummed"], before["verified"]) == (3, False, False)
        native.store_upgrade(h)
        after = native.store_stats(h)
        assert (after["version"], after["checksummed"], after["verified"]) == (4, True, True)
        assert after["length"] == before["length"]
        assert native.store_verify(h)["faults"] == []
    finally:
        native.store_close(h)
    assert not any(name.endswith(".loc") for name in os.listdir(path))
