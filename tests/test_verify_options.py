"""set_verify and upgrade through the public classes."""

from __future__ import annotations

import io
import os
import shutil

import numpy as np
import pytest

from loaderx import DenseDataset, Zrecord, from_numpy
from loaderx.errors import CorruptStoreError

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "zrecord", "testdata")


def _flip_record_byte(path: str) -> None:
    with open(os.path.join(path, "0.chunk"), "r+b") as f:
        f.seek(5)
        b = f.read(1)
        f.seek(5)
        f.write(bytes([b[0] ^ 0x01]))


def test_raw_payload_damage_is_seen_by_default(tmp_path):
    path = str(tmp_path / "raw")
    a = np.arange(64 * 16, dtype=np.uint8).reshape(64, 16)
    from_numpy(path, a, codec="raw")
    _flip_record_byte(path)
    ds = DenseDataset(path)
    assert ds.stats()["verified"] is True
    with pytest.raises(CorruptStoreError, match=r"record 0 in .*0\.chunk"):
        ds[[0]]
    with pytest.raises(CorruptStoreError, match=r"record 0 in .*0\.chunk"):
        ds[0:64]  # a run of neighbours is checked record by record too
    assert np.array_equal(ds[[1, 63]], a[[1, 63]])
    ds.set_verify(False)  # the opt-out: the flipped byte comes through
    assert ds.stats()["verified"] is False
    got = ds[[0]]
    assert not np.array_equal(got, a[[0]])
    ds.set_verify(True)
    with pytest.raises(CorruptStoreError, match=r"record 0 in .*0\.chunk"):
        ds[[0]]
    with pytest.raises(TypeError, match="True or False"):
        ds.set_verify(1)


def test_upgrade_rewrites_an_old_store_and_keeps_its_records(tmp_path):
    src = os.path.join(FIXTURES, "v1")
    if not os.path.isdir(src):
        pytest.skip("no version-1 fixture stores in zrecord/testdata/v1")
    stores = [d for d in sorted(os.listdir(src)) if os.path.exists(os.path.join(src, d, "meta.zr"))]
    assert stores, "the v1 fixture directory holds no store"
    path = str(tmp_path / "old")
    shutil.copytree(os.path.join(src, stores[0]), path)
    with Zrecord(path, readonly=True) as zr:
        before = zr.gather(list(range(len(zr))))
        assert zr.stats()["checksummed"] is False
        with pytest.raises(io.UnsupportedOperation):
            zr.upgrade()
    with Zrecord(path) as zr:
        zr.upgrade()
        st = zr.stats()
        assert st["checksummed"] is True and st["version"] >= 4
        assert zr.gather(list(range(len(zr)))) == before
        assert zr.verify().ok
