"""verify() on Zrecord and the datasets: a report of every fault, by file,
record and what failed.

The tests marked ``needs_store_verify`` run against the native full scan
(``_native.store_verify``); the others check the Python side with the
native result stubbed."""

from __future__ import annotations

import os

import numpy as np
import pytest

from loaderx.converter import from_iterator, from_numpy
from loaderx.dataset import DenseDataset, RaggedDataset
from loaderx.store import _native
from loaderx.zrecord import Fault, VerifyReport, Zrecord

needs_store_verify = pytest.mark.skipif(
    not hasattr(_native, "store_verify"), reason="this build's native library has no store_verify (full scan)"
)


def test_report_shape():
    clean = VerifyReport("/s", [])
    assert clean.ok and clean and list(clean) == [] and "no damage" in str(clean)
    faults = [Fault("/s/0.chunk", 3, "checksum mismatch"), Fault("/s/dict.zr", None, "truncated")]
    bad = VerifyReport("/s", faults)
    assert not bad.ok and not bad and list(bad) == faults
    text = str(bad)
    assert "2 faults" in text and "/s/0.chunk, record 3: checksum mismatch" in text
    assert "/s/dict.zr: truncated" in text
    assert Fault("a", 1, "x") == Fault("a", 1, "x") != Fault("a", 2, "x")


def _scan(faults):
    """A full-scan result in the binding's form, holding ``faults``."""
    return {"version": 4, "checksummed": True, "records": 2, "checked": 2, "faults": faults, "more_faults": 0, "pending": []}


def test_wrappers_turn_native_faults_into_a_report(tmp_path, monkeypatch):
    path = str(tmp_path / "z")
    with Zrecord(path, create=True) as zr:
        zr.append([b"a", b"bc"])
    reported = [{"file": os.path.join(path, "0.chunk"), "index": 1, "what": "record checksum mismatch"}]
    monkeypatch.setattr(_native, "store_verify", lambda h: _scan(list(reported)), raising=False)
    with Zrecord(path, readonly=True) as zr:
        report = zr.verify()
    assert not report.ok
    assert report.faults == [Fault(os.path.join(path, "0.chunk"), 1, "record checksum mismatch")]
    reported.clear()
    with Zrecord(path, readonly=True) as zr:
        assert zr.verify().ok


def test_dataset_verify_adds_schema_faults(tmp_path, monkeypatch):
    monkeypatch.setattr(_native, "store_verify", lambda h: _scan([]), raising=False)
    dense = str(tmp_path / "d")
    from_numpy(dense, np.zeros((5, 4), dtype=np.float32), codec="raw")
    with DenseDataset(dense) as ds:
        assert ds.verify().ok
    _native.schema_write(dense, "dense", "<f4", (3,))  # damage: records hold 4 floats
    with DenseDataset(dense) as ds:
        report = ds.verify()
    schema = os.path.join(dense, "schema.msgpack")
    assert [(f.file, f.index) for f in report] == [(schema, i) for i in range(5)]
    assert "16 bytes" in report.faults[0].what and "12 bytes" in report.faults[0].what

    ragged = str(tmp_path / "r")
    from_iterator(ragged, [np.zeros((k, 2), dtype=np.int16) for k in (1, 2, 3)])
    with RaggedDataset(ragged) as rs:
        assert rs.verify().ok
    _native.schema_write(ragged, "ragged", "<i2", (3,))  # a row of 6 bytes: 4 and 8 are not whole rows
    with RaggedDataset(ragged) as rs:
        assert [f.index for f in rs.verify()] == [0, 1]


@needs_store_verify
@pytest.mark.parametrize("codec", ["raw", "zstd"])
def test_verify_finds_a_flipped_record_byte(tmp_path, codec):
    path = str(tmp_path / codec)
    from_numpy(path, np.arange(64 * 256, dtype=np.uint8).reshape(64, 256) % 11, codec=codec)
    with DenseDataset(path) as ds:
        assert ds.verify().ok
    size = os.path.getsize(os.path.join(path, "0.chunk"))
    with open(os.path.join(path, "0.chunk"), "r+b") as f:
        f.seek(size // 2)
        b = f.read(1)
        f.seek(size // 2)
        f.write(bytes([b[0] ^ 0x10]))
    with DenseDataset(path) as ds:
        report = ds.verify()
    assert not report.ok
    assert any(f.file.endswith("0.chunk") and f.index is not None for f in report), str(report)
    with Zrecord(path, readonly=True) as zr:
        assert not zr.verify().ok


@needs_store_verify
def test_verify_reports_every_fault_not_the_first(tmp_path):
    path = str(tmp_path / "z")
    with Zrecord(path, create=True, codec="raw") as zr:
        zr.append([bytes([k]) * 100 for k in range(10)])
    with open(os.path.join(path, "0.chunk"), "r+b") as f:
        for k in (2, 7):
            f.seek(k * 100 + 50)
            f.write(b"\xff")
    with Zrecord(path, readonly=True) as zr:
        report = zr.verify()
    assert sorted({f.index for f in report if f.index is not None}) == [2, 7], str(report)
