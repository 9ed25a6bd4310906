"""Smaller promises: the schema file's mode, a transform's StopIteration, and
one consistent view per Zrecord.gather."""

from __future__ import annotations

import os
import stat
import threading

import numpy as np
import pytest

from loaderx.converter import from_iterator, from_numpy
from loaderx.dataloader import DataLoader
from loaderx.dataset import DenseDataset
from loaderx.store import _native
from loaderx.zrecord import Zrecord


def test_schema_file_has_the_mode_of_the_store_files(tmp_path):
    old = os.umask(0o022)
    try:
        from_numpy(tmp_path / "d", np.zeros((3, 2), dtype=np.uint8))
        from_iterator(tmp_path / "r", [np.zeros(2, dtype=np.uint8)])
        _native.schema_write(str(tmp_path / "r"), "ragged", "|u1", ())  # replacing a schema
    finally:
        os.umask(old)
    for store in ("d", "r"):
        modes = {
            name: stat.S_IMODE(os.stat(tmp_path / store / name).st_mode)
            for name in os.listdir(tmp_path / store)
        }
        assert modes["schema.msgpack"] == modes["meta.zr"] == 0o644, modes


@pytest.mark.parametrize("workers", [0, 2])
def test_transform_stop_iteration_is_an_error(tmp_path, workers):
    from_numpy(tmp_path / "d", np.arange(32, dtype=np.int64).reshape(16, 2), codec="raw")

    def transform(batch):
        if batch["x"][0, 0] >= 0:  # always: the third step raises
            transform.calls += 1
            if transform.calls >= 3:
                raise StopIteration("from the transform")
        return batch

    transform.calls = 0
    loader = DataLoader({"x": DenseDataset(tmp_path / "d")}, batch_size=4, num_workers=workers,
                        sampler="sequential", transform=transform)
    seen = 0
    with pytest.raises(RuntimeError, match="StopIteration at step") as info:
        for _ in loader:
            seen += 1
            if seen > 50:
                break
    assert isinstance(info.value.__cause__, StopIteration)
    assert seen < 3
    loader.close()


def test_gather_sees_one_consistent_view_under_concurrent_deletes(tmp_path):
    # Record k is k % 200 + 1 bytes of value k % 200. A delete swaps the tail
    # record (of another size) into the hole, so sizes read before the swap
    # and bytes read after it disagree; one consistent view never does.
    n = 2500
    floor = 500  # readers read below it, deletes never shrink the store to it
    zr = Zrecord(str(tmp_path / "z"), create=True, codec="raw")
    zr.append([bytes([k % 200]) * (k % 200 + 1) for k in range(n)])
    stop = threading.Event()
    failures: list[BaseException] = []
    reads = [0]

    def read() -> None:
        rng = np.random.default_rng(0)
        while not stop.is_set():
            idx = rng.integers(0, floor, size=64)
            try:
                recs = zr.gather(idx)
            except BaseException as e:  # an IndexError or size mismatch on a valid index
                failures.append(e)
                return
            for r in recs:
                if len(r) != r[0] + 1 or r.count(r[:1]) != len(r):
                    failures.append(AssertionError(f"torn record of {len(r)} bytes: {r[:8]!r}..."))
                    return
            reads[0] += 1

    threads = [threading.Thread(target=read) for _ in range(2)]
    for t in threads:
        t.start()
    rng = np.random.default_rng(1)
    try:
        while len(zr) > floor + 50 and not failures:
            zr.delete(rng.choice(floor, size=25, replace=False))
    finally:
        stop.set()
        for t in threads:
            t.join(10)
        zr.close()
    assert not failures, repr(failures[0])
    assert reads[0] > 0
