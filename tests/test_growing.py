"""Growing a store: writable datasets, shared dictionaries, and what is logged."""

from __future__ import annotations

import io
import logging
import os

import numpy as np
import pytest

import loaderx
from loaderx.errors import StoreLockedError
from loaderx.store import _native


def images(n: int, seed: int = 0) -> np.ndarray:
    """Records that share content, so a dictionary helps."""
    base = np.random.default_rng(0).integers(0, 256, size=512, dtype=np.uint8)
    rng = np.random.default_rng(seed)
    out = np.repeat(base[None, :], n, axis=0)
    spots = rng.integers(0, 512, size=(n, 16))
    np.put_along_axis(out, spots, rng.integers(0, 256, size=(n, 16), dtype=np.uint8), axis=1)
    return out


# -- append -------------------------------------------------------------------


def test_dense_append_grows_the_store(tmp_path):
    a = np.arange(24, dtype=np.float32).reshape(8, 3)
    loaderx.from_numpy(tmp_path / "s", a)
    with loaderx.DenseDataset(tmp_path / "s", writable=True) as ds:
        assert ds.writable
        first = ds.append(np.full((5, 3), 7, dtype=np.float32))
        assert first == 8 and len(ds) == 13
        assert ds.append(np.empty((0, 3), dtype=np.float32)) == 13
    with loaderx.DenseDataset(tmp_path / "s") as ds:
        np.testing.assert_array_equal(ds[:8], a)
        assert (ds[8:] == 7).all() and ds.shape == (13, 3)


def test_dense_append_refuses_another_dtype_or_shape(tmp_path):
    loaderx.from_numpy(tmp_path / "s", np.zeros((4, 3), dtype=np.uint8))
    with loaderx.DenseDataset(tmp_path / "s", writable=True) as ds:
        with pytest.raises(TypeError, match=r"int64.*stores uint8"):
            ds.append(np.zeros((2, 3), dtype=np.int64))
        with pytest.raises(ValueError, match=r"shape \(2, 4\).*\(3,\)"):
            ds.append(np.zeros((2, 4), dtype=np.uint8))
        with pytest.raises(ValueError, match="shape"):
            ds.append(np.zeros(3, dtype=np.uint8))
        assert len(ds) == 4  # nothing written


def test_read_only_by_default(tmp_path):
    loaderx.from_numpy(tmp_path / "s", np.zeros((4, 3), dtype=np.uint8))
    with loaderx.DenseDataset(tmp_path / "s") as ds:
        for op, arg in (("append", np.zeros((1, 3), np.uint8)), ("delete", [0])):
            with pytest.raises(io.UnsupportedOperation, match="writable=True"):
                getattr(ds, op)(arg)
        with pytest.raises(io.UnsupportedOperation, match="read-only"):
            ds.compact()


def test_one_writer_at_a_time(tmp_path):
    loaderx.from_numpy(tmp_path / "s", np.zeros((4, 3), dtype=np.uint8))
    with loaderx.DenseDataset(tmp_path / "s", writable=True):
        with pytest.raises(StoreLockedError):
            loaderx.DenseDataset(tmp_path / "s", writable=True)
        loaderx.DenseDataset(tmp_path / "s").close()  # readers are fine


def test_ragged_append(tmp_path):
    loaderx.from_iterator(tmp_path / "r", [np.arange(n, dtype=np.int32) for n in (2, 3)])
    with loaderx.RaggedDataset(tmp_path / "r", writable=True) as rs:
        assert rs.append([np.array([9], np.int32), np.zeros(0, np.int32), np.arange(4, dtype=np.int32)]) == 2
        with pytest.raises(TypeError, match="record 1 has dtype int64"):
            rs.append([np.zeros(1, np.int32), np.zeros(1, np.int64)])
        with pytest.raises(ValueError, match="record 0 has shape"):
            rs.append([np.zeros((1, 2), np.int32)])
        with pytest.raises(TypeError, match="list of arrays"):
            rs.append(np.zeros(3, np.int32))
        assert [r.tolist() for r in rs[:]] == [[0, 1], [0, 1, 2], [9], [], [0, 1, 2, 3]]


def test_delete_and_compact_pass_through(tmp_path):
    a = np.arange(100, dtype=np.int64).reshape(50, 2)
    loaderx.from_numpy(tmp_path / "s", a, codec="raw")
    with loaderx.DenseDataset(tmp_path / "s", writable=True) as ds:
        ds.delete(list(range(10, 40)))
        assert len(ds) == 20
        before = ds.stats()["chunk_bytes"]
        reclaimed = ds.compact(progress=False)
        assert reclaimed == before - ds.stats()["chunk_bytes"] == 30 * 16
        assert sorted(ds[:][:, 0].tolist()) == sorted(a[list(range(10)) + list(range(40, 50)), 0].tolist())


def test_a_writable_dataset_pickles_as_writable(tmp_path):
    import pickle

    loaderx.from_numpy(tmp_path / "s", np.zeros((4, 3), dtype=np.uint8))
    ds = loaderx.DenseDataset(tmp_path / "s", writable=True)
    state = pickle.dumps(ds)
    ds.close()
    with pickle.loads(state) as again:
        assert again.writable and len(again) == 4


# -- shared dictionaries ------------------------------------------------------


def test_train_dict_then_share_it(tmp_path):
    d = loaderx.train_dict(list(images(400)), tier="fast")
    assert isinstance(d, bytes) and d[:4] == b"\x37\xa4\x30\xec"
    for k in range(2):
        part = images(300, seed=k + 1)
        loaderx.from_numpy(tmp_path / f"p{k}", part, codec="zstd_dict", dict_bytes=d)
        with loaderx.DenseDataset(tmp_path / f"p{k}") as ds:
            np.testing.assert_array_equal(ds[:], part)
            st = ds.stats()
            assert st["codec"] == "zstd_dict" and st["dict_bytes"] == len(d)
            assert st["chunk_bytes"] < part.nbytes / 2
        assert (tmp_path / f"p{k}" / "dict.zr").read_bytes() == d
    recs = [r[: 100 + i] for i, r in enumerate(images(20, seed=9))]
    loaderx.from_iterator(tmp_path / "r", recs, codec="zstd_dict", dict_bytes=d)
    assert (tmp_path / "r" / "dict.zr").read_bytes() == d


def test_a_shared_dictionary_even_for_an_empty_store(tmp_path):
    d = loaderx.train_dict(list(images(200)), tier="fast")
    loaderx.from_numpy(tmp_path / "e", np.zeros((0, 512), np.uint8), codec="zstd_dict", dict_bytes=d)
    with loaderx.DenseDataset(tmp_path / "e", writable=True) as ds:
        ds.append(images(5))
        assert len(ds) == 5 and ds.codec == "zstd_dict"


def test_dict_bytes_that_are_not_a_dictionary(tmp_path):
    with pytest.raises(ValueError, match="dict_bytes is not a zstd dictionary"):
        loaderx.from_numpy(tmp_path / "s", images(10), codec="zstd_dict", dict_bytes=b"hello world, not a dict")
    assert not os.path.exists(tmp_path / "s")
    # the right magic, but not a usable dictionary: zstd itself refuses it
    with pytest.raises(ValueError, match="dictionary"):
        loaderx.from_numpy(tmp_path / "s", images(10), codec="zstd_dict", dict_bytes=b"\x37\xa4\x30\xec" + b"\0" * 8)
    assert not os.path.exists(tmp_path / "s") or not os.listdir(tmp_path / "s")


def test_dict_bytes_options_that_contradict(tmp_path):
    d = loaderx.train_dict(list(images(200)), tier="fast")
    with pytest.raises(ValueError, match="zstd_dict"):
        loaderx.from_numpy(tmp_path / "s", images(10), codec="zstd", dict_bytes=d)
    with pytest.raises(ValueError, match="contradict"):
        loaderx.from_numpy(tmp_path / "s", images(10), codec="zstd_dict", dict_bytes=d, dict_size=1000)
    with pytest.raises(TypeError, match="bytes-like"):
        loaderx.from_numpy(tmp_path / "s", images(10), codec="zstd_dict", dict_bytes=12)


def test_train_dict_bad_input():
    with pytest.raises(ValueError, match="tier"):
        loaderx.train_dict(list(images(50)), tier="slow")
    with pytest.raises(ValueError, match="3 samples"):
        loaderx.train_dict([b"abcdefgh"] * 3)
    with pytest.raises(TypeError, match="samples"):
        loaderx.train_dict(b"one record")
    with pytest.raises(TypeError, match=r"samples\[1\]"):
        loaderx.train_dict([b"abcdefgh", 5])


def test_dict_size_bounds_the_dictionary():
    samples = [r.tobytes() for r in images(300)]
    small = _native.dict_train(samples, "fast", 1000)
    assert len(small) < len(_native.dict_train(samples, "fast", 0))
    assert len(loaderx.train_dict(samples, "fast", dict_size=1000)) < 2 * 1000


# -- logging ------------------------------------------------------------------


def test_silent_by_default(tmp_path, capfd):
    loaderx.from_numpy(tmp_path / "s", np.zeros((4, 3), np.uint8), codec="raw")
    with loaderx.DenseDataset(tmp_path / "s", writable=True) as ds:
        ds.delete([0])
        ds.compact(progress=False)
    out, err = capfd.readouterr()
    assert out == "" and err == ""


def test_compaction_and_opening_are_logged(tmp_path, caplog):
    loaderx.from_numpy(tmp_path / "s", np.zeros((40, 3), np.uint8), codec="raw")
    with caplog.at_level(logging.INFO, logger="loaderx"):
        with loaderx.DenseDataset(tmp_path / "s", writable=True) as ds:
            ds.delete(list(range(10)))
            n = ds.compact(progress=False)
    messages = [r.getMessage() for r in caplog.records if r.name == "loaderx"]
    assert any("opened store" in m and "writable" in m for m in messages)
    assert any(f"reclaimed {n} bytes" in m for m in messages) and n == 30


def test_a_recovery_is_logged(tmp_path, caplog):
    loaderx.from_numpy(tmp_path / "s", np.zeros((40, 3), np.uint8), codec="raw")
    chunk = next(p for p in (tmp_path / "s").iterdir() if p.suffix == ".chunk")
    with open(chunk, "ab") as f:  # a crashed writer's bytes past the published tail
        f.write(b"torn" * 10)
    with caplog.at_level(logging.INFO, logger="loaderx"):
        loaderx.DenseDataset(tmp_path / "s", writable=True).close()
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "recovered" in warnings[0] and chunk.name in warnings[0]
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="loaderx"):
        loaderx.DenseDataset(tmp_path / "s", writable=True).close()
    assert not [r for r in caplog.records if r.levelno == logging.WARNING]


def test_progress_lines_for_compaction_and_training(tmp_path, capfd):
    loaderx.from_numpy(tmp_path / "s", np.zeros((40, 3), np.uint8), codec="raw")
    with loaderx.DenseDataset(tmp_path / "s", writable=True) as ds:
        ds.delete([1])
        ds.compact(progress=True)
    loaderx.train_dict(list(images(100)), tier="fast", progress=True)
    err = capfd.readouterr().err
    assert "compact" in err and "train_dict" in err
