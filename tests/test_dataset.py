"""DenseDataset, RaggedDataset and pad."""

from __future__ import annotations

import pickle
import threading

import numpy as np
import pytest

from loaderx.converter import from_iterator, from_numpy
from loaderx.dataset import DenseDataset, RaggedDataset, pad
from loaderx.errors import ClosedError
from loaderx.zrecord import Zrecord

SRC = np.arange(64, dtype=np.float32).reshape(8, 2, 4)


@pytest.fixture
def dense(tmp_path):
    from_numpy(tmp_path / "data", SRC, codec="zstd")
    with DenseDataset(tmp_path / "data") as ds:
        yield ds


@pytest.fixture
def ragged_records():
    return [np.arange(n, dtype=np.int32) * (k + 1) for k, n in enumerate((3, 1, 4, 0, 5))]


@pytest.fixture
def ragged(tmp_path, ragged_records):
    from_iterator(tmp_path / "tokens", ragged_records, codec="zstd")
    with RaggedDataset(tmp_path / "tokens") as rs:
        yield rs


# -- DenseDataset ---------------------------------------------------------------


def test_dense_properties_and_repr(dense, tmp_path):
    assert len(dense) == 8
    assert dense.dtype == np.float32
    assert dense.item_shape == (2, 4)
    assert dense.shape == (8, 2, 4)
    assert dense.ndim == 3
    assert dense.nbytes_per_item == 32
    assert dense.codec == "zstd"
    assert dense.path == str(tmp_path / "data")
    assert repr(dense) == (
        f"DenseDataset({str(tmp_path / 'data')!r}, len=8, dtype=float32, "
        "item_shape=(2, 4), codec='zstd')"
    )


def test_dense_indexing(dense):
    np.testing.assert_array_equal(dense[3], SRC[3])
    assert dense[3].shape == (2, 4)
    np.testing.assert_array_equal(dense[-1], SRC[-1])
    np.testing.assert_array_equal(dense[np.int64(-8)], SRC[0])
    np.testing.assert_array_equal(dense[[0, 5, 2]], SRC[[0, 5, 2]])
    assert dense[[0, 5, 2]].shape == (3, 2, 4)
    np.testing.assert_array_equal(dense[[-1, -2, 0, 0]], SRC[[-1, -2, 0, 0]])
    np.testing.assert_array_equal(dense[np.array([7, 1], dtype=np.int32)], SRC[[7, 1]])
    np.testing.assert_array_equal(dense[np.array([7, 1], dtype=np.uint16)], SRC[[7, 1]])
    for sl in (slice(None), slice(2, 5), slice(None, None, 3), slice(None, None, -2), slice(-3, None),
               slice(6, 2)):
        np.testing.assert_array_equal(dense[sl], SRC[sl])
    mask = np.zeros(8, dtype=bool)
    mask[[1, 6]] = True
    np.testing.assert_array_equal(dense[mask], SRC[mask])
    grid = np.array([[0, 1], [2, 3], [4, 5]])
    assert dense[grid].shape == (3, 2, 2, 4)
    np.testing.assert_array_equal(dense[grid], SRC[grid])
    assert dense[[]].shape == (0, 2, 4)
    assert dense[[]].dtype == np.float32


def test_dense_indexing_of_scalars(tmp_path):
    from_numpy(tmp_path / "l", np.array([5, 6, 7], dtype=np.uint8))
    ds = DenseDataset(tmp_path / "l")
    assert ds[1].shape == () and ds[1] == 6
    np.testing.assert_array_equal(ds[[2, 0]], [7, 5])


def test_dense_index_errors_name_the_index(dense):
    with pytest.raises(IndexError, match="index 8 is out of range .* length 8"):
        dense[8]
    with pytest.raises(IndexError, match="index -9 "):
        dense[-9]
    with pytest.raises(IndexError, match="index 99 "):
        dense[[0, 99, 1]]
    with pytest.raises(IndexError, match="index -20 "):
        dense[np.array([1, -20])]
    with pytest.raises(IndexError, match="index 300 "):
        dense[np.array([300], dtype=np.uint16)]
    with pytest.raises(IndexError, match="index 12 "):
        dense.gather([1, 12])
    with pytest.raises(IndexError, match="boolean mask of shape"):
        dense[np.ones(3, dtype=bool)]
    with pytest.raises(TypeError, match="float64"):
        dense[[1.5, 2.0]]
    with pytest.raises(TypeError, match="tuple"):
        dense[1, 2]
    with pytest.raises(TypeError):
        dense["a"]


def test_dense_gather_fills_caller_array(dense):
    out = np.full((3, 2, 4), -1, dtype=np.float32)
    got = dense.gather([4, 0, -1], out=out)
    assert got is out
    np.testing.assert_array_equal(out, SRC[[4, 0, 7]])
    fresh = dense.gather(np.array([2, 3]))
    np.testing.assert_array_equal(fresh, SRC[[2, 3]])


def test_dense_gather_validates_out(dense):
    with pytest.raises(TypeError, match="out has dtype float64, but the dataset's dtype is float32"):
        dense.gather([0, 1], out=np.empty((2, 2, 4)))
    with pytest.raises(ValueError, match=r"out has shape \(3, 2, 4\), but the batch needs shape \(2, 2, 4\)"):
        dense.gather([0, 1], out=np.empty((3, 2, 4), np.float32))
    with pytest.raises(ValueError, match="C-contiguous"):
        dense.gather([0, 1], out=np.empty((2, 4, 2), np.float32).transpose(0, 2, 1))
    ro = np.empty((2, 2, 4), np.float32)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        dense.gather([0, 1], out=ro)
    with pytest.raises(TypeError, match="numpy.ndarray"):
        dense.gather([0, 1], out=bytearray(64))


def test_dense_gather_int64_array_matches_list_path(dense):
    """A 1-D int64 index array reads in place (no range check in Python):
    negative indices, out-of-range ones and unfit buffers still behave as
    they do for a list of the same indices."""
    neg = np.array([-1, 0, -8], dtype=np.int64)
    np.testing.assert_array_equal(dense.gather(neg), SRC[[7, 0, 0]])
    out = np.full((3, 2, 4), -1, dtype=np.float32)
    assert dense.gather(neg, out=out) is out
    np.testing.assert_array_equal(out, SRC[[7, 0, 0]])
    for bad, named in (([1, 8, 2], 8), ([0, -9], -9)):
        out = np.full((len(bad), 2, 4), -1, dtype=np.float32)
        with pytest.raises(IndexError, match=f"index {named} is out of range for DenseDataset of length 8"):
            dense.gather(np.array(bad, dtype=np.int64), out=out)
        assert (out == -1).all()
    # The index error comes first, as for a list, even with a wrong buffer.
    with pytest.raises(IndexError, match="index 8 is out of range"):
        dense.gather(np.array([8], dtype=np.int64), out=np.empty((5, 2, 4), np.float32))
    with pytest.raises(ValueError, match=r"out has shape \(3, 2, 4\), but the batch needs shape \(2, 2, 4\)"):
        dense.gather(np.array([0, 1], dtype=np.int64), out=np.empty((3, 2, 4), np.float32))
    ro = np.empty((2, 2, 4), np.float32)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        dense.gather(np.array([0, 1], dtype=np.int64), out=ro)
    # A big-endian or strided index array takes the general path.
    np.testing.assert_array_equal(dense.gather(np.array([3, 1], dtype=">i8")), SRC[[3, 1]])
    np.testing.assert_array_equal(dense.gather(np.arange(8, dtype=np.int64)[::3]), SRC[[0, 3, 6]])
    dense.close()
    with pytest.raises(ClosedError):
        dense.gather(np.array([0], dtype=np.int64))


def test_dense_gather_int64_array_into_out_falls_back_as_the_list_path(dense):
    """gather(int64 array, out=) leaves the flags it does not check itself
    to the native call's buffer export; an index array or ``out`` the export
    refuses, or that is not int64, still gets the general path's answer, and
    ``out`` is filled or untouched, never half-written."""
    idx = np.array([5, 2, 7], dtype=np.int64)
    want = SRC[[5, 2, 7]]
    with pytest.raises(ValueError, match="C-contiguous"):
        dense.gather(idx, out=np.empty((3, 4, 2), np.float32).transpose(0, 2, 1))
    fortran = np.asfortranarray(np.empty((3, 2, 4), np.float32))
    with pytest.raises(ValueError, match="C-contiguous"):
        dense.gather(idx, out=fortran)
    for other in (np.arange(8, dtype=np.int64)[[5, 2, 7]][::1], np.arange(16, dtype=np.int64)[10:4:-2] - 3,
                  idx.astype(">i8"), idx.astype(np.int32), idx.astype(np.uint64)):
        out = np.full((3, 2, 4), -1, dtype=np.float32)
        assert dense.gather(other, out=out) is out
        np.testing.assert_array_equal(out, SRC[np.asarray(other, dtype=np.int64)])
    strided = np.zeros(6, dtype=np.int64)
    strided[::2] = idx
    out = np.full((3, 2, 4), -1, dtype=np.float32)
    assert dense.gather(strided[::2], out=out) is out
    np.testing.assert_array_equal(out, want)
    # An out of another dtype that is equal but not the same object reads too.
    out = np.full((3, 2, 4), -1, dtype=np.dtype("<f4"))
    np.testing.assert_array_equal(dense.gather(idx, out=out), want)
    # A read-only out is refused with nothing written.
    ro = np.full((3, 2, 4), -1, dtype=np.float32)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        dense.gather(idx, out=ro)
    assert (ro == -1).all()
    dense.close()
    with pytest.raises(ClosedError):
        dense.gather(idx, out=np.empty((3, 2, 4), np.float32))


def test_dense_gather_into_out_after_unpickling(dense):
    """A dataset unpickled (its store opened on first use) reads through the
    int64-array path into ``out`` as the original does."""
    import pickle

    copy = pickle.loads(pickle.dumps(dense))
    try:
        out = np.full((2, 2, 4), -1, dtype=np.float32)
        assert copy.gather(np.array([6, 1], dtype=np.int64), out=out) is out
        np.testing.assert_array_equal(out, SRC[[6, 1]])
    finally:
        copy.close()


def test_dense_gather_into_out_raises_on_damage(tmp_path):
    """A flipped byte in a record is CorruptStoreError from gather(int64
    array, out=) too, never a batch."""
    from loaderx.errors import CorruptStoreError

    src = np.arange(64 * 8, dtype=np.float32).reshape(64, 8)
    path = tmp_path / "s"
    from_numpy(path, src, codec="raw")
    with open(path / "0.chunk", "r+b") as f:
        f.seek(21 * 32 + 5)
        b = f.read(1)
        f.seek(21 * 32 + 5)
        f.write(bytes([b[0] ^ 0x10]))
    with DenseDataset(path) as ds:
        out = np.empty((3, 8), np.float32)
        np.testing.assert_array_equal(ds.gather(np.array([0, 63, 20], dtype=np.int64), out=out), src[[0, 63, 20]])
        with pytest.raises(CorruptStoreError, match="21"):
            ds.gather(np.array([0, 21, 22], dtype=np.int64), out=out)


def test_dense_iteration(dense):
    rows = list(dense)
    assert len(rows) == 8
    np.testing.assert_array_equal(np.stack(rows), SRC)


def test_dense_close_and_context(tmp_path):
    from_numpy(tmp_path / "d", SRC)
    ds = DenseDataset(tmp_path / "d")
    with ds as same:
        assert same is ds
    assert ds.closed
    assert repr(ds) == f"DenseDataset({str(tmp_path / 'd')!r}, closed)"
    for use in (lambda: ds[0], lambda: ds[[0]], lambda: len(ds), lambda: ds.gather([0]), ds.stats):
        with pytest.raises(ClosedError, match="closed"):
            use()
    with pytest.raises(ValueError):  # ClosedError is a ValueError
        ds[0]
    ds.close()  # twice is fine
    with pytest.raises(ClosedError):
        with ds:
            pass


def test_open_errors(tmp_path, ragged):
    with pytest.raises(FileNotFoundError, match="no loaderx store"):
        DenseDataset(tmp_path / "missing")
    (tmp_path / "plain").mkdir()
    with pytest.raises(FileNotFoundError, match="not a loaderx store"):
        DenseDataset(tmp_path / "plain")
    with pytest.raises(ValueError, match="'ragged' store.*RaggedDataset"):
        DenseDataset(ragged.path)
    from_numpy(tmp_path / "d", SRC)
    with pytest.raises(ValueError, match="'dense' store.*DenseDataset"):
        RaggedDataset(tmp_path / "d")
    Zrecord(tmp_path / "raw", create=True).close()
    with pytest.raises(ValueError, match="without a schema.*Zrecord"):
        DenseDataset(tmp_path / "raw")
    with pytest.raises(ValueError, match="without a schema"):
        RaggedDataset(tmp_path / "raw")


def test_dense_threads_gather_concurrently(tmp_path):
    src = np.arange(4000 * 16, dtype=np.int64).reshape(4000, 16)
    from_numpy(tmp_path / "d", src, codec="zstd")
    ds = DenseDataset(tmp_path / "d")
    errors = []

    def reader(seed):
        rng = np.random.default_rng(seed)
        out = np.empty((64, 16), dtype=np.int64)
        try:
            for _ in range(200):
                idx = rng.integers(0, 4000, 64)
                ds.gather(idx, out=out)
                if not np.array_equal(out, src[idx]):
                    errors.append(seed)
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=reader, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_dense_pickles_by_path(dense):
    clone = pickle.loads(pickle.dumps(dense))
    try:
        assert clone.path == dense.path
        np.testing.assert_array_equal(clone[[1, 2]], SRC[[1, 2]])
    finally:
        clone.close()


# -- RaggedDataset --------------------------------------------------------------


def test_ragged_reads(ragged, ragged_records, tmp_path):
    assert len(ragged) == 5
    assert ragged.dtype == np.int32
    assert ragged.item_shape == ()
    assert repr(ragged) == (
        f"RaggedDataset({str(tmp_path / 'tokens')!r}, len=5, dtype=int32, item_shape=(), codec='zstd')"
    )
    np.testing.assert_array_equal(ragged[2], ragged_records[2])
    np.testing.assert_array_equal(ragged[-1], ragged_records[-1])
    assert ragged[3].shape == (0,)
    got = ragged[[0, 2, 4]]
    assert isinstance(got, list) and len(got) == 3
    for g, k in zip(got, (0, 2, 4)):
        assert g.dtype == np.int32
        np.testing.assert_array_equal(g, ragged_records[k])
    assert [len(r) for r in ragged[1:4]] == [1, 4, 0]
    assert ragged[[]] == []
    np.testing.assert_array_equal(ragged.lengths(), [3, 1, 4, 0, 5])
    np.testing.assert_array_equal(ragged.lengths([4, 0]), [5, 3])
    assert [r.tolist() for r in ragged] == [r.tolist() for r in ragged_records]
    with pytest.raises(IndexError, match="index 5 "):
        ragged[5]
    with pytest.raises(IndexError, match="index -6 "):
        ragged[[0, -6]]


def test_ragged_trailing_shape(tmp_path):
    recs = [np.full((n, 2, 3), n, dtype=np.float64) for n in (2, 5, 1)]
    from_iterator(tmp_path / "r", recs)
    rs = RaggedDataset(tmp_path / "r")
    assert rs.item_shape == (2, 3)
    got = rs[[1, 2, 0]]
    assert [g.shape for g in got] == [(5, 2, 3), (1, 2, 3), (2, 2, 3)]
    np.testing.assert_array_equal(got[0], recs[1])
    rs.close()
    with pytest.raises(ClosedError):
        rs[0]


# -- pad ------------------------------------------------------------------------


def test_pad(ragged_records):
    padded, lengths = pad(ragged_records)
    assert padded.shape == (5, 5) and padded.dtype == np.int32
    assert lengths.dtype == np.int64
    np.testing.assert_array_equal(lengths, [3, 1, 4, 0, 5])
    for row, rec in zip(padded, ragged_records):
        np.testing.assert_array_equal(row[: len(rec)], rec)
        assert (row[len(rec):] == 0).all()
    padded, _ = pad(ragged_records, value=-1, dtype=np.float32)
    assert padded.dtype == np.float32
    assert padded[1].tolist() == [0, -1, -1, -1, -1]


def test_pad_trailing_and_errors():
    recs = [np.ones((2, 3)), np.zeros((4, 3))]
    padded, lengths = pad(recs, value=7)
    assert padded.shape == (2, 4, 3)
    assert (padded[0, 2:] == 7).all()
    np.testing.assert_array_equal(lengths, [2, 4])
    padded, lengths = pad([[1, 2], [3]])
    np.testing.assert_array_equal(padded, [[1, 2], [3, 0]])
    with pytest.raises(ValueError, match=r"record 1 has shape \(2, 2\).*\(3,\)"):
        pad([np.ones((2, 3)), np.ones((2, 2))])
    with pytest.raises(ValueError, match="record 0 is 0-d"):
        pad([np.float32(1)])
    padded, lengths = pad([])
    assert padded.shape == (0, 0) and lengths.shape == (0,)
    mixed, _ = pad([np.array([1], np.int8), np.array([2.5])])
    assert mixed.dtype == np.float64
