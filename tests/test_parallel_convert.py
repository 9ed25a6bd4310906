"""``num_shards=`` on the converters: a sharded dataset written by one worker
process per shard reads back record for record as the single-process
conversion of the same input (every dtype family, dense and ragged, Arrow
columns, one shard, several, more shards than records), every shard carries
the one codec (and dictionary) the parent decided, and a worker that fails,
dies or is interrupted leaves no dataset and nothing behind."""

from __future__ import annotations

import _thread
import multiprocessing
import os
import signal
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import loaderx
from loaderx.errors import StoreExistsError, WorkerError
from loaderx.store import _native, _parallel, shards

try:
    import ml_dtypes
except ImportError:  # optional
    ml_dtypes = None


def dense_values(path: Path) -> np.ndarray:
    ds = loaderx.DenseDataset(path)
    return ds[np.arange(len(ds), dtype=np.int64)]


def ragged_values(path: Path) -> list[np.ndarray]:
    ds = loaderx.RaggedDataset(path)
    return [ds[i] for i in range(len(ds))]


def visible(path: Path) -> list[str]:
    """The entries of a directory that are not hidden (the commit's lock is)."""
    return sorted(e for e in os.listdir(path) if not e.startswith("."))


def shard_dirs(path: Path) -> list[Path]:
    return [path / s.name for s in shards.read_manifest(path).shards]


def assert_single_codec(path: Path, stream: str = "") -> None:
    """Every shard (its ``stream``) has the same codec, choice record and
    dictionary bytes."""
    seen = set()
    for d in shard_dirs(path):
        store = d / stream if stream else d
        h = _native.store_open(store, readonly=True)
        try:
            codec = _native.store_codec(h)
        finally:
            _native.store_close(h)
        choice = _native.schema_codec_choice(store)
        dictionary = (store / "dict.zr").read_bytes() if (store / "dict.zr").exists() else b""
        seen.add((codec, repr(choice), dictionary))
    assert len(seen) == 1, seen


DTYPES = [np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.int64, np.uint64,
          np.float16, np.float32, np.float64, np.complex64, np.bool_]


@pytest.mark.parametrize("dtype", DTYPES + (["bfloat16"] if ml_dtypes is not None else []), ids=str)
def test_every_dtype_family_matches_one_store(tmp_path: Path, dtype) -> None:
    dt = np.dtype(getattr(ml_dtypes, dtype) if isinstance(dtype, str) else dtype)
    rng = np.random.default_rng(1)
    raw = rng.integers(0, 200, size=(37, 3, 2))
    arr = (raw % 2 == 0) if dt == np.bool_ else raw.astype(dt)
    loaderx.from_numpy(tmp_path / "one", arr, codec="raw")
    loaderx.from_numpy(tmp_path / "three", arr, codec="raw", num_shards=3)
    want = dense_values(tmp_path / "one")
    got = dense_values(tmp_path / "three")
    assert got.dtype == want.dtype == dt and got.shape == arr.shape
    assert got.tobytes() == want.tobytes() == np.ascontiguousarray(arr).tobytes()
    assert [s.length for s in shards.read_manifest(tmp_path / "three").shards] == [12, 12, 13]


@pytest.mark.parametrize("codec", ["auto", "raw", "zstd", "zstd_dict", "narrow"])
def test_codecs_are_decided_once_for_every_shard(tmp_path: Path, codec: str) -> None:
    rng = np.random.default_rng(2)
    arr = (rng.zipf(1.3, size=(600, 64)) % 3000).astype(np.int32)
    loaderx.from_numpy(tmp_path / "s", arr, codec=codec, num_shards=2)
    np.testing.assert_array_equal(dense_values(tmp_path / "s"), arr)
    assert_single_codec(tmp_path / "s")


@pytest.mark.parametrize("num", [1, 2, 3, 9])
def test_shard_counts_dense_and_ragged(tmp_path: Path, num: int) -> None:
    arr = np.arange(7 * 5, dtype=np.float32).reshape(7, 5)
    loaderx.from_numpy(tmp_path / "d", arr, codec="zstd", num_shards=num)
    np.testing.assert_array_equal(dense_values(tmp_path / "d"), arr)
    lengths = [s.length for s in shards.read_manifest(tmp_path / "d").shards]
    assert len(lengths) == num and sum(lengths) == 7 and max(lengths) - min(lengths) <= 1

    recs = [np.full((i % 4, 2), i, dtype=np.int16) for i in range(7)]  # some of length 0
    loaderx.from_iterator(tmp_path / "r", (r for r in recs), codec="zstd", num_shards=num)
    got = ragged_values(tmp_path / "r")
    assert len(got) == 7
    for g, r in zip(got, recs):
        assert g.dtype == r.dtype and g.shape == r.shape and (g == r).all()
    assert len(shards.read_manifest(tmp_path / "r").shards) == num


@pytest.mark.parametrize("codec", ["auto", "zstd_dict", "narrow"])
def test_ragged_stream_matches_one_store(tmp_path: Path, codec: str) -> None:
    rng = np.random.default_rng(3)
    recs = [(rng.zipf(1.5, size=int(n)) % 1000).astype(np.int32) for n in rng.integers(1, 300, 900)]
    loaderx.from_iterator(tmp_path / "one", recs, codec=codec)
    loaderx.from_iterator(tmp_path / "sh", iter(recs), codec=codec, num_shards=3)
    want, got = ragged_values(tmp_path / "one"), ragged_values(tmp_path / "sh")
    assert len(got) == len(want) == len(recs)
    assert all(g.tobytes() == w.tobytes() for g, w in zip(got, want))
    assert_single_codec(tmp_path / "sh")


def test_memmap_sources_are_read_from_their_file(tmp_path: Path) -> None:
    arr = np.arange(300 * 6, dtype=">i4").reshape(300, 6)  # byte-swapped on disk
    np.save(tmp_path / "a.npy", arr)
    mm = np.load(tmp_path / "a.npy", mmap_mode="r")
    for name, src in [("whole", mm), ("slice", mm[50:250]), ("fortran", np.asfortranarray(arr)),
                      ("strided", mm[::3])]:
        loaderx.from_numpy(tmp_path / name, src, codec="raw", num_shards=2)
        got = dense_values(tmp_path / name)
        assert got.dtype == np.dtype("=i4")
        np.testing.assert_array_equal(got, src)
        # the call's scratch copy (made only for the arrays in memory) is gone
        assert visible(tmp_path / name) == sorted(["manifest.json", *(d.name for d in shard_dirs(tmp_path / name))])


def test_arrow_columns_match_one_conversion(tmp_path: Path) -> None:
    pa = pytest.importorskip("pyarrow")
    n = 500
    rng = np.random.default_rng(4)
    table = pa.table({
        "id": pa.array(np.arange(n, dtype=np.int64)),
        "flag": pa.array(rng.integers(0, 2, n).astype(bool)),
        "vec": pa.FixedSizeListArray.from_arrays(pa.array(rng.random(n * 4).astype(np.float32)), 4),
        "toks": pa.array([list(range(i % 9)) for i in range(n)], type=pa.list_(pa.int32())),
    })
    one = loaderx.from_arrow(tmp_path / "one", table)
    for num in (2, 3):
        ms = loaderx.from_arrow(tmp_path / f"s{num}", table, num_shards=num)
        assert sorted(ms) == sorted(one) and ms.num_records == one.num_records == n
        for col in ("id", "flag", "vec"):
            np.testing.assert_array_equal(dense_values(tmp_path / f"s{num}" / col), dense_values(tmp_path / "one" / col))
            assert_single_codec(tmp_path / f"s{num}", col)
        got, want = ragged_values(tmp_path / f"s{num}" / "toks"), ragged_values(tmp_path / "one" / "toks")
        assert all(g.tobytes() == w.tobytes() for g, w in zip(got, want)) and len(got) == n
    small = table.slice(0, 4)
    ms = loaderx.from_arrow(tmp_path / "more", small, num_shards=6)  # more shards than rows
    assert ms.num_records == 4 and len(shards.read_manifest(tmp_path / "more").shards) == 6
    np.testing.assert_array_equal(dense_values(tmp_path / "more" / "id"), np.arange(4))
    assert [r.tolist() for r in ragged_values(tmp_path / "more" / "toks")] == [list(range(i)) for i in range(4)]


def test_arrow_nulls_in_one_shard_fail_naming_it(tmp_path: Path) -> None:
    pa = pytest.importorskip("pyarrow")
    values = list(range(100))
    values[70] = None
    table = pa.table({"x": pa.array(values, type=pa.int32())})
    with pytest.raises(WorkerError, match=r"shard 1 of 2 \(rows 50\.\.99\)") as info:
        loaderx.from_arrow(tmp_path / "s", table, codec="raw", num_shards=2)
    assert isinstance(info.value.__cause__, ValueError) and "rows 50..99" in str(info.value.__cause__)
    assert not (tmp_path / "s").exists()
    # codec="auto" samples the first batch in the parent, which meets the null first
    with pytest.raises(ValueError, match="null"):
        loaderx.from_arrow(tmp_path / "s", table, num_shards=2)
    assert not (tmp_path / "s").exists()


def test_failed_worker_commits_nothing_and_leaves_nothing(tmp_path: Path) -> None:
    np.save(tmp_path / "a.npy", np.arange(4000, dtype=np.int64).reshape(1000, 4))
    mm = np.load(tmp_path / "a.npy", mmap_mode="r")
    os.unlink(tmp_path / "a.npy")  # mapped here, gone for the workers that reopen it
    (tmp_path / "out").mkdir()  # an empty directory that was there before
    with pytest.raises(WorkerError, match=r"shard [01] of 2 \(records (0\.\.499|500\.\.999)\).*FileNotFoundError"):
        loaderx.from_numpy(tmp_path / "out", mm, codec="raw", num_shards=2)
    assert os.listdir(tmp_path / "out") == []


def _children() -> list[multiprocessing.Process]:
    return [p for p in multiprocessing.active_children() if p.name.startswith("loaderx-shard-")]


def _when_writing(dataset: Path, action, want: int = 2, timeout: float = 120.0) -> threading.Thread:
    """Run ``action(children)`` on a thread once ``want`` shard workers are
    alive and each has created its store in ``dataset`` (which happens
    before the first record is written)."""
    def stores() -> int:
        try:
            names = os.listdir(dataset)
        except OSError:
            return 0
        return sum(n.startswith("shard-") and (dataset / n / "meta.zr").exists() for n in names)

    def watch() -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            kids = _children()
            if len(kids) >= want and stores() >= want:
                action(kids)
                return
            time.sleep(0.01)

    t = threading.Thread(target=watch, daemon=True)
    t.start()
    return t


def _slow_input() -> np.ndarray:
    # about 2 x 48 MiB of zstd level-3 work: seconds per shard on this machine
    rng = np.random.default_rng(5)
    return rng.integers(0, 1 << 20, size=(24 * 1024, 1024), dtype=np.int32)


@pytest.mark.skipif(_parallel.max_workers() < 2, reason="needs two shard workers at once (two usable CPUs)")
def test_killed_worker_fails_naming_the_shard(tmp_path: Path) -> None:
    arr = _slow_input()
    t = _when_writing(tmp_path / "s", lambda kids: os.kill(next(p for p in kids if p.name.endswith("-1")).pid, signal.SIGKILL))
    with pytest.raises(WorkerError, match=r"shard 1 of 2 .*killed by SIGKILL"):
        loaderx.from_numpy(tmp_path / "s", arr, codec="zstd", num_shards=2)
    t.join(5)
    assert not (tmp_path / "s").exists()
    assert _children() == []


def test_ctrl_c_ends_the_workers_and_leaves_no_dataset(tmp_path: Path) -> None:
    # interrupt_main does nothing while SIGINT is ignored, which it is in a
    # process started as a shell's background job: install Python's handler
    import signal

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        arr = _slow_input()
        t = _when_writing(tmp_path / "s", lambda kids: _thread.interrupt_main(), want=min(2, _parallel.max_workers()))
        with pytest.raises(KeyboardInterrupt):
            loaderx.from_numpy(tmp_path / "s", arr, codec="zstd", num_shards=2)
        t.join(5)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert not (tmp_path / "s").exists()
    assert _children() == []


def test_overwrite_and_refusals(tmp_path: Path) -> None:
    a = np.arange(10, dtype=np.int32)
    loaderx.from_numpy(tmp_path / "s", a, codec="raw", num_shards=2)
    with pytest.raises(StoreExistsError, match="overwrite=True"):
        loaderx.from_numpy(tmp_path / "s", a, codec="raw", num_shards=2)
    loaderx.from_numpy(tmp_path / "s", a * 2, codec="raw", num_shards=3, overwrite=True)
    np.testing.assert_array_equal(dense_values(tmp_path / "s"), a * 2)
    assert len(visible(tmp_path / "s")) == 4  # the manifest and the new shards only
    loaderx.from_numpy(tmp_path / "single", a, codec="raw")
    with pytest.raises(StoreExistsError, match="not a sharded dataset"):
        loaderx.from_numpy(tmp_path / "single", a, codec="raw", num_shards=2, overwrite=True)
    np.testing.assert_array_equal(dense_values(tmp_path / "single"), a)
    for bad, err in [(0, ValueError), (-2, ValueError), (True, TypeError), (2.0, TypeError), ("2", TypeError)]:
        with pytest.raises(err, match=repr(bad).replace("(", r"\(")):
            loaderx.from_numpy(tmp_path / "bad", a, num_shards=bad)
        with pytest.raises(err, match="num_shards"):
            loaderx.from_iterator(tmp_path / "bad", [a], num_shards=bad)
    assert not (tmp_path / "bad").exists()


def test_progress_counts_every_worker(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    arr = np.arange(3000 * 8, dtype=np.int64).reshape(3000, 8)
    loaderx.from_numpy(tmp_path / "s", arr, codec="raw", num_shards=3, progress=True)
    err = capsys.readouterr().err
    assert "3,000/3,000 records" in err.splitlines()[-1]
