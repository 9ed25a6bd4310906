"""Sharded datasets (loaderx.store.shards): read as one, loaded, committed,
and damaged.

Every test writes real stores under tmp_path. Reading: for random splits of
a source array into shards (empty shards, one shard, many tiny ones, unequal
lengths) with the codecs mixed across shards, every kind of key gives the
rows of the source. Loading: the loader gives over a sharded dataset the
batches it gives over one store of the same records. Committing: what a
commit refuses, and that a refused commit changes nothing; what a killed
writer leaves is invisible and the next commit removes it, while a live
writer's shard is kept. Damage: a damaged manifest, a missing or replaced
shard and a flipped byte are errors naming the file, and ``verify()`` and
the command line scan every shard.

The file stays one because its fixtures (the split writers, the source
arrays, the child processes) serve every section, and each section reads
best against the others: reading, loading, committing and damage are four
sides of one on-disk layout.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import pickle
import shutil
import signal
import subprocess
import sys
import textwrap
import time
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from trees import assert_same, copy_tree

from loaderx.cli import main as cli_main
from loaderx.converter import from_iterator, from_numpy
from loaderx.dataloader import DataLoader
from loaderx.dataset import DenseDataset, RaggedDataset
from loaderx.errors import CorruptStoreError
from loaderx.mixture import Mixture
from loaderx.store import shards
from loaderx.store._store import crc32c

REPO = str(Path(__file__).resolve().parent.parent)
INTS = ("uint8", "int16", "int32", "int64", "uint16")

needs_shm = pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="process workers need /dev/shm (Linux)")


# -- writing shards ------------------------------------------------------------


def split_sizes(rng: np.random.Generator, n: int, style: str) -> list[int]:
    """Shard lengths summing to ``n``: one shard, many tiny ones, random
    unequal ones, or random ones with empty shards (first, last, between)."""
    if style == "one":
        return [n]
    if style == "tiny":
        sizes = []
        while sum(sizes) < n:
            sizes.append(min(int(rng.integers(1, 3)), n - sum(sizes)))
        return sizes
    k = int(rng.integers(2, 7))
    cuts = np.sort(rng.integers(0, n + 1, size=k - 1))
    sizes = np.diff(np.concatenate([[0], cuts, [n]])).tolist()
    if style == "empty":
        sizes = [0, *sizes[:1], 0, 0, *sizes[1:], 0]
    return [int(s) for s in sizes]


def codecs_for(rng: np.random.Generator, dtype: str, k: int) -> list[str]:
    """A codec per shard, mixed: raw and zstd, narrow too for integers;
    every codec appears when there are enough shards."""
    pool = ["raw", "zstd", "narrow"] if dtype in INTS else ["raw", "zstd"]
    return [pool[i % len(pool)] if i < len(pool) else str(rng.choice(pool)) for i in range(k)]


def write_dense(root: Path, parts: list[np.ndarray], codecs: list[str]) -> list[str]:
    names = []
    for part, codec in zip(parts, codecs, strict=True):
        with shards.ShardWriter(root) as w:
            from_numpy(w.path, part, codec=codec, progress=False)
            names.append(w.name)
    return names


def write_ragged_store(path: str, records: list[np.ndarray], codec: str, dtype: str, tail: tuple[int, ...]) -> None:
    """A ragged store of ``records``; an empty one (which ``from_iterator``
    cannot make: it takes the dtype from the first record) by deleting the
    one record of a store."""
    if records:
        from_iterator(path, records, codec=codec, progress=False)
        return
    from_iterator(path, [np.zeros((1, *tail), dtype=dtype)], codec=codec, progress=False)
    with RaggedDataset(path, writable=True) as r:
        r.delete([0])


def write_ragged(root: Path, parts: list[list[np.ndarray]], codecs: list[str], dtype: str,
                 tail: tuple[int, ...]) -> list[str]:
    names = []
    for part, codec in zip(parts, codecs, strict=True):
        with shards.ShardWriter(root) as w:
            write_ragged_store(w.path, part, codec, dtype, tail)
            names.append(w.name)
    return names


def cut(seq: Any, sizes: list[int]) -> list[Any]:
    out, at = [], 0
    for s in sizes:
        out.append(seq[at : at + s])
        at += s
    return out


def dense_source(rng: np.random.Generator, n: int, dtype: str, shape: tuple[int, ...]) -> np.ndarray:
    dt = np.dtype(dtype)
    if dt.kind == "f":
        return rng.standard_normal((n, *shape)).astype(dt)
    info = np.iinfo(dt)
    return rng.integers(max(info.min, -1000), min(info.max, 1000), size=(n, *shape), endpoint=True).astype(dt)


def ragged_source(rng: np.random.Generator, n: int, dtype: str, tail: tuple[int, ...]) -> list[np.ndarray]:
    lens = rng.integers(0, 9, size=n)  # empty records too
    width = int(np.prod(tail, dtype=np.int64))
    return [(np.arange(int(k) * width) + 97 * i).reshape((int(k), *tail)).astype(dtype) for i, k in enumerate(lens)]


def make_sharded_dense(root: Path, data: np.ndarray, sizes: list[int], codecs: list[str] | None = None) -> list[str]:
    names = write_dense(root, cut(data, sizes), codecs or ["raw"] * len(sizes))
    shards.commit(root, names)
    return names


def keys(rng: np.random.Generator, n: int) -> list[Any]:
    """Every kind of key a dataset takes, for a dataset of ``n`` records."""
    ks: list[Any] = [
        rng.integers(0, n, size=40),  # random
        np.repeat(rng.integers(0, n, size=6), 3),  # repeated
        np.sort(rng.integers(0, n, size=30)),  # sorted
        np.arange(n)[::-1].copy(),  # reversed
        -rng.integers(1, n + 1, size=20),  # negative
        [int(i) for i in rng.integers(-n, n, size=9)],  # a list, both signs
        rng.random(n) < 0.3,  # a mask
        slice(None), slice(2, n - 1, 3), slice(None, None, -2), slice(n - 1, 0, -5), slice(n, n + 4),
    ]
    return ks


# -- reading -------------------------------------------------------------------

DENSE_CASES = [
    ("uint8", (7,), "random"),
    ("int16", (), "empty"),
    ("float32", (2, 3), "tiny"),
    ("int64", (4,), "one"),
    ("float64", (3,), "random"),
    ("int32", (5,), "empty"),
]


@pytest.mark.parametrize(("dtype", "shape", "style"), DENSE_CASES)
def test_dense_sharded_reads_like_the_source(tmp_path, dtype, shape, style):
    rng = np.random.default_rng(zlib.crc32(repr((dtype, shape, style)).encode()))
    n = 31 if style == "tiny" else int(rng.integers(60, 140))
    data = dense_source(rng, n, dtype, shape)
    sizes = split_sizes(rng, n, style)
    codecs = codecs_for(rng, dtype, len(sizes))
    names = make_sharded_dense(tmp_path, data, sizes, codecs)
    with DenseDataset(tmp_path) as ds:
        assert len(ds) == n and ds.dtype == data.dtype and ds.item_shape == shape and ds.shape == data.shape
        assert ds.shards == [os.path.join(str(tmp_path), s) for s in names]
        for key in keys(rng, n):
            got = ds[key]
            assert got.dtype == data.dtype
            np.testing.assert_array_equal(got, data[key], err_msg=f"key {key!r}")
        for i in (0, n - 1, -1, -n, n // 2):
            np.testing.assert_array_equal(ds[i], data[i])
        idx = rng.integers(0, n, size=50)
        out = np.empty((50, *shape), dtype=data.dtype)
        assert ds.gather(idx, out=out) is out
        np.testing.assert_array_equal(out, data[idx])
        for a, b in zip(ds.__getitems__(idx[:7].tolist()), data[idx[:7]]):
            np.testing.assert_array_equal(a, b)
        rows = list(ds)
        assert len(rows) == n
        np.testing.assert_array_equal(np.stack(rows), data)
        with pytest.raises(IndexError):
            ds[[0, n]]
        with pytest.raises(IndexError):
            ds[-n - 1]
        assert ds.stats()["shards"] == len(sizes) and ds.stats()["length"] == n


RAGGED_CASES = [
    ("int32", (), "random"),
    ("float32", (2,), "empty"),
    ("uint16", (), "tiny"),
    ("int64", (3,), "one"),
]


@pytest.mark.parametrize(("dtype", "tail", "style"), RAGGED_CASES)
def test_ragged_sharded_reads_like_the_source(tmp_path, dtype, tail, style):
    rng = np.random.default_rng(zlib.crc32(repr((dtype, tail, style, "ragged")).encode()))
    n = 27 if style == "tiny" else int(rng.integers(50, 120))
    records = ragged_source(rng, n, dtype, tail)
    sizes = split_sizes(rng, n, style)
    names = write_ragged(tmp_path, cut(records, sizes), codecs_for(rng, dtype, len(sizes)), dtype, tail)
    shards.commit(tmp_path, names)
    every = np.arange(n)
    with RaggedDataset(tmp_path) as rs:
        assert len(rs) == n and rs.dtype == np.dtype(dtype) and rs.item_shape == tail
        np.testing.assert_array_equal(rs.lengths(), [len(r) for r in records])
        for key in keys(rng, n):
            got = rs[key]
            want = [records[i] for i in every[key]]
            assert len(got) == len(want), key
            for k, (a, b) in enumerate(zip(got, want)):
                assert a.dtype == b.dtype and a.shape == b.shape, (key, k)
                np.testing.assert_array_equal(a, b, err_msg=f"key {key!r} item {k}")
        for i in (0, n - 1, -1):
            np.testing.assert_array_equal(rs[i], records[i])
        got = list(rs)
        assert len(got) == n and all(np.array_equal(a, b) for a, b in zip(got, records))


def arrow_table(rng: np.random.Generator, start: int, n: int) -> Any:
    pa = pytest.importorskip("pyarrow")
    x = rng.standard_normal((n, 3)).astype(np.float32)
    tok = [rng.integers(0, 50, size=int(rng.integers(0, 6))).astype(np.int32) for _ in range(n)]
    table = pa.table({
        "x": pa.FixedSizeListArray.from_arrays(pa.array(x.reshape(-1)), 3),
        "id": pa.array(np.arange(start, start + n, dtype=np.int64)),
        "tok": pa.array([t.tolist() for t in tok], type=pa.list_(pa.int32())),
    })
    return table, x, tok


def write_multistream(root: Path, rng: np.random.Generator, sizes: list[int],
                      codecs: list[str]) -> tuple[list[str], dict[str, Any]]:
    from loaderx.arrow import from_arrow

    names, xs, toks, start = [], [], [], 0
    for size, codec in zip(sizes, codecs, strict=True):
        table, x, tok = arrow_table(rng, start, size)
        start += size
        with shards.ShardWriter(root) as w:
            from_arrow(w.path, table, codec=codec, progress=False).close()
            names.append(w.name)
        xs.append(x)
        toks += tok
    shards.commit(root, names)
    return names, {"x": np.concatenate(xs), "id": np.arange(start), "tok": toks}


def test_multistream_sharded_reads_like_the_source(tmp_path):
    from loaderx.arrow import MSDataset

    rng = np.random.default_rng(11)
    names, src = write_multistream(tmp_path, rng, [13, 0, 1, 40, 7], ["raw", "zstd", "raw", "zstd", "raw"])
    n = 61
    m = shards.read_manifest(tmp_path)
    assert m.layout == "streams" and sorted(m.streams) == ["id", "tok", "x"] and m.length == n
    assert m.streams["tok"].kind == "ragged" and m.streams["x"].item_shape == (3,)
    with MSDataset(tmp_path) as ms:
        assert sorted(ms) == ["id", "tok", "x"] and ms.num_records == n
        assert isinstance(ms["x"], DenseDataset) and isinstance(ms["tok"], RaggedDataset)
        for key in keys(rng, n):
            np.testing.assert_array_equal(ms["x"][key], src["x"][key])
            np.testing.assert_array_equal(ms["id"][key], src["id"][key])
            got = ms["tok"][key]
            want = [src["tok"][i] for i in np.arange(n)[key]]
            assert len(got) == len(want) and all(np.array_equal(a, b) for a, b in zip(got, want))
        row = ms.row(20)
        assert row["id"] == 20 and np.array_equal(row["x"], src["x"][20]) and np.array_equal(row["tok"], src["tok"][20])
    with MSDataset(tmp_path, columns=["id"]) as ms:
        assert list(ms) == ["id"]
    # one stream of it, by path (a path that exists on disk in no shard's place)
    with DenseDataset(os.path.join(tmp_path, "x")) as one:
        assert len(one) == n and one.item_shape == (3,)
        np.testing.assert_array_equal(one[:], src["x"])
        assert one.shards == [os.path.join(str(tmp_path), s, "x") for s in names]
    with RaggedDataset(os.path.join(tmp_path, "tok")) as one:
        assert all(np.array_equal(a, b) for a, b in zip(one[::-1], src["tok"][::-1]))
    with pytest.raises(ValueError, match="ragged"):
        DenseDataset(os.path.join(tmp_path, "tok"))
    with pytest.raises(ValueError, match="sharded"):
        DenseDataset(tmp_path)  # a multi-stream dataset is not one dense store


def test_sharded_datasets_are_read_only(tmp_path):
    from loaderx.arrow import MSDataset

    make_sharded_dense(tmp_path / "d", np.zeros((4, 2), np.float32), [1, 3])
    with pytest.raises(ValueError, match="read-only"):
        DenseDataset(tmp_path / "d", writable=True)
    rng = np.random.default_rng(0)
    shards.commit(tmp_path / "r", write_ragged(tmp_path / "r", [ragged_source(rng, 5, "int32", ())], ["raw"],
                                               "int32", ()))
    with pytest.raises(ValueError, match="read-only"):
        RaggedDataset(tmp_path / "r", writable=True)
    write_multistream(tmp_path / "m", rng, [3, 2], ["raw", "raw"])
    with pytest.raises(ValueError, match="read-only"):
        MSDataset(tmp_path / "m", writable=True)
    with DenseDataset(tmp_path / "d") as ds, pytest.raises(io.UnsupportedOperation):
        ds.append(np.zeros((1, 2), np.float32))


# -- the loader ----------------------------------------------------------------

N = 203


@pytest.fixture
def pair(tmp_path):
    """The same records as single stores and as sharded datasets, each
    stream split differently (the loader aligns them by global index)."""
    rng = np.random.default_rng(5)
    x = rng.integers(0, 255, size=(N, 3, 5), dtype=np.uint8)
    label = np.arange(N, dtype=np.int64)
    tok = ragged_source(rng, N, "int32", ())
    single = tmp_path / "single"
    single.mkdir()
    from_numpy(single / "x", x, codec="zstd", progress=False)
    from_numpy(single / "label", label, codec="raw", progress=False)
    from_iterator(single / "tok", tok, codec="raw", progress=False)
    sh = tmp_path / "sharded"
    make_sharded_dense(sh / "x", x, [50, 0, 100, 53], ["raw", "zstd", "zstd", "raw"])
    make_sharded_dense(sh / "label", label, [1] * 3 + [200], ["raw", "narrow", "raw", "zstd"])
    sizes = [70, 70, 63]
    shards.commit(sh / "tok", write_ragged(sh / "tok", cut(tok, sizes), ["zstd", "raw", "raw"], "int32", ()))
    return {"single": single, "sharded": sh, "x": x, "label": label, "tok": tok}


def streams_of(root: Path, ragged: bool = True) -> dict[str, Any]:
    s: dict[str, Any] = {"x": DenseDataset(root / "x"), "label": DenseDataset(root / "label")}
    if ragged:
        s["tok"] = RaggedDataset(root / "tok")
    return s


def batches(streams: dict[str, Any], steps: int, **kw: Any) -> list[Any]:
    with DataLoader(streams, **kw) as loader:
        return [copy_tree(next(loader)) for _ in range(steps)]


def test_loader_over_shards_matches_one_store_on_threads(pair):
    kw = dict(batch_size=16, seed=3, num_workers=2, workers="thread")
    for sampler in ("cyclic", "iid", "sequential"):
        want = batches(streams_of(pair["single"]), 15, sampler=sampler, **kw)
        got = batches(streams_of(pair["sharded"]), 15, sampler=sampler, **kw)
        assert_same(got, want, sampler)
    # and what they hold is the source's records at the loader's indices
    with DataLoader(streams_of(pair["sharded"]), **kw) as loader:
        for step in range(5):
            b, idx = next(loader), loader.indices(step)
            np.testing.assert_array_equal(b["x"], pair["x"][idx])
            np.testing.assert_array_equal(b["label"], idx)
            values, offsets, _lengths = b["tok"]
            for k, i in enumerate(idx):
                np.testing.assert_array_equal(values[offsets[k] : offsets[k + 1]], pair["tok"][i])


@needs_shm
def test_loader_over_shards_matches_one_store_on_processes_and_resumes(pair):
    kw = dict(batch_size=16, seed=9, num_workers=2)
    want = batches(streams_of(pair["single"]), 12, workers="thread", **kw)
    with DataLoader(streams_of(pair["sharded"]), workers="process", **kw) as loader:
        got = [copy_tree(next(loader)) for _ in range(7)]
        state = loader.state_dict()
    assert state["step"] == 7
    with DataLoader(streams_of(pair["sharded"]), workers="process", **kw) as loader:
        loader.load_state_dict(state)
        got += [copy_tree(next(loader)) for _ in range(5)]
    assert_same(got, want, "process workers, resumed at step 7")


def test_state_dict_resume_is_exact_on_shards(pair):
    kw = dict(batch_size=12, seed=21, num_workers=2, workers="thread", sampler="cyclic")
    want = batches(streams_of(pair["sharded"]), 40, **kw)  # 40 x 12 > 203: crosses a reshuffle
    for stop in (1, 17, 33):
        with DataLoader(streams_of(pair["sharded"]), **kw) as loader:
            for _ in range(stop):
                next(loader)
            state = json.loads(json.dumps(loader.state_dict()))  # as a checkpoint stores it
        with DataLoader(streams_of(pair["sharded"]), **kw) as loader:
            loader.load_state_dict(state)
            rest = [copy_tree(next(loader)) for _ in range(40 - stop)]
        assert_same(rest, want[stop:], f"resumed at {stop}")


def test_ranks_get_disjoint_batches_of_shards(pair):
    world, seen = 3, []
    for rank in range(world):
        kw = dict(batch_size=10, seed=4, shard=(rank, world), epoch=True, workers="thread", num_workers=2)
        got = batches(streams_of(pair["sharded"], ragged=False), 7, **kw)
        want = batches(streams_of(pair["single"], ragged=False), 7, **kw)
        assert_same(got, want, f"rank {rank}")
        labels = np.concatenate([b["label"] for b in got])
        for b in got:
            np.testing.assert_array_equal(b["x"], pair["x"][b["label"]])
        seen.append(labels)
    for a in range(world):
        for b in range(a + 1, world):
            assert not set(seen[a].tolist()) & set(seen[b].tolist()), (a, b)
    assert sorted(np.concatenate(seen).tolist()) == list(range(N))  # one epoch: every record once


def test_mixture_of_a_sharded_and_a_single_store(pair, tmp_path):
    other = np.full((40, 3, 5), 7, dtype=np.uint8) + np.arange(40, dtype=np.uint8)[:, None, None]
    from_numpy(tmp_path / "ox", other, codec="raw", progress=False)
    from_numpy(tmp_path / "olabel", np.arange(40, dtype=np.int64) + 10_000, codec="raw", progress=False)
    mix = Mixture(
        {"a": streams_of(pair["sharded"], ragged=False),
         "b": {"x": DenseDataset(tmp_path / "ox"), "label": DenseDataset(tmp_path / "olabel")}},
        {"a": 0.75, "b": 0.25},
    )
    every_x = np.concatenate([pair["x"], other])
    every_label = np.concatenate([pair["label"], np.arange(40) + 10_000])
    with DataLoader(mix, batch_size=20, num_workers=2, seed=4, workers="thread") as loader:
        for step in range(12):
            b, idx = next(loader), loader.indices(step)
            src, _ = mix.locate(idx)
            np.testing.assert_array_equal(b["x"], every_x[idx])
            np.testing.assert_array_equal(b["label"], every_label[idx])
            assert (b["source"] == src).all() and np.bincount(src, minlength=2).tolist() == [15, 5]


@pytest.mark.parametrize("mode", ["concat", "first_fit"])
def test_pack_on_a_sharded_ragged_stream(pair, mode):
    from loaderx.packing import Pack

    kw = dict(batch_size=8, seed=2, num_workers=2, workers="thread", pack={"tok": Pack(16, mode=mode)})
    got = batches({"tok": RaggedDataset(pair["sharded"] / "tok")}, 10, **kw)
    want = batches({"tok": RaggedDataset(pair["single"] / "tok")}, 10, **kw)
    assert_same(got, want, mode)
    # the packed tokens are the records' own
    for b in got:
        rows = b["tok"]
        flat = rows.values.reshape(-1)
        for k, (r, s) in enumerate(zip(rows.records.tolist(), rows.starts.tolist())):
            if r >= 0:
                seg = flat[rows.cu_seqlens[k] : rows.cu_seqlens[k + 1]]
                np.testing.assert_array_equal(seg, pair["tok"][r][s : s + len(seg)])


_CHILD_READ = textwrap.dedent(
    """
    import pickle, sys
    import numpy as np
    with open(sys.argv[1], "rb") as f:
        ds, idx = pickle.load(f)
    np.save(sys.argv[2], ds[idx])
    print(len(ds), ds.dtype, ds.item_shape)
    """
)


def test_a_pickled_sharded_dataset_reads_in_a_spawned_process(pair, tmp_path):
    ds = DenseDataset(pair["sharded"] / "x")
    idx = np.random.default_rng(1).integers(0, N, size=64)
    blob = pickle.dumps((ds, idx))
    assert all(os.path.basename(p).encode() in blob for p in ds.shards)  # the manifest travels, not handles
    (tmp_path / "p.pkl").write_bytes(blob)
    out = subprocess.run(
        [sys.executable, "-c", _CHILD_READ, str(tmp_path / "p.pkl"), str(tmp_path / "out.npy")],
        env={**os.environ, "PYTHONPATH": REPO}, capture_output=True, text=True, timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [str(N), "uint8", "(3,", "5)"]
    np.testing.assert_array_equal(np.load(tmp_path / "out.npy"), pair["x"][idx])
    again = pickle.loads(blob)[0]  # in this process: deferred, opens at first use
    np.testing.assert_array_equal(again[idx], pair["x"][idx])
    assert again.shards == ds.shards


_TORCH_CHILD = textwrap.dedent(
    """
    import sys
    import numpy as np, torch
    from loaderx.dataset import DenseDataset
    from loaderx.store import _native
    assert torch.multiprocessing.get_start_method() == "fork"
    ds = DenseDataset(sys.argv[1], max_open_shards=2)  # the library stays unloaded here
    dl = torch.utils.data.DataLoader(ds, batch_size=7, num_workers=2, shuffle=True,
                                     generator=torch.Generator().manual_seed(0))
    rows = torch.cat(list(dl)).numpy().reshape(len(ds), -1)
    want = np.load(sys.argv[2])
    got = rows[np.lexsort(rows.T[::-1])]
    assert np.array_equal(got, want[np.lexsort(want.T[::-1])]), "the workers read other rows"
    print("parent loaded:", _native.loaded())
    """
)


def test_torch_workers_fork_over_a_sharded_dataset(pair, tmp_path):
    pytest.importorskip("torch")
    # Each forked worker opens the dataset's shards itself, at its first read,
    # under the cap the dataset was made with.
    np.save(tmp_path / "want.npy", pair["x"].reshape(N, -1))
    out = subprocess.run(
        [sys.executable, "-c", _TORCH_CHILD, str(pair["sharded"] / "x"), str(tmp_path / "want.npy")],
        env={**os.environ, "PYTHONPATH": REPO}, capture_output=True, text=True, timeout=600,
    )
    assert out.returncode == 0, out.stderr
    assert "parent loaded: False" in out.stdout


def test_a_pickled_sharded_dataset_keeps_the_generation_it_was_opened_at(tmp_path):
    # A worker process gets the dataset by pickle: it must read the records
    # the loader sized its sampler by, whatever was committed since.
    root = tmp_path / "g"
    data = np.arange(30 * 3, dtype=np.float32).reshape(30, 3)
    names = make_sharded_dense(root, data, [10, 20])
    ds = DenseDataset(root)
    blob = pickle.dumps(ds)
    shards.commit(root, write_dense(root, [np.full((4, 3), 8, np.float32)], ["raw"]), append=True)
    copy = pickle.loads(blob)
    assert len(copy) == 30
    np.testing.assert_array_equal(copy[:], data)
    assert copy.shards == ds.shards
    assert len(DenseDataset(root)) == 34  # a new open sees the new generation
    np.testing.assert_array_equal(ds[:], data)  # the original opens its shards
    unread = DenseDataset(root)  # opens no shard yet
    shards.commit(root, write_dense(root, [np.zeros((30, 3), np.float32)], ["raw"]))  # replaces every shard
    copy = pickle.loads(blob)
    with pytest.raises(CorruptStoreError, match=rf"{names[0]}.*missing.*since"):
        copy[0]
    np.testing.assert_array_equal(ds[:], data)  # the open original still reads the shards it has open (deleted)
    with pytest.raises(CorruptStoreError, match=rf"{names[1]}.*missing.*since"):
        unread[15]  # a shard first read after it was deleted is an error naming it
    unread.close()
    with DenseDataset(root) as now:
        np.testing.assert_array_equal(now[:], np.zeros((30, 3), np.float32))
    ds.close()


# -- commit --------------------------------------------------------------------


def manifest_bytes(root: Path) -> bytes:
    return (root / shards.MANIFEST_FILE).read_bytes()


@pytest.fixture
def published(tmp_path):
    """A committed dataset of two float32 (3,) shards and its source."""
    root = tmp_path / "ds"
    data = np.arange(30 * 3, dtype=np.float32).reshape(30, 3)
    names = make_sharded_dense(root, data, [10, 20])
    return root, data, names


def assert_unchanged(root: Path, before: bytes, data: np.ndarray) -> None:
    assert manifest_bytes(root) == before
    with DenseDataset(root) as ds:
        np.testing.assert_array_equal(ds[:], data)


@pytest.mark.parametrize(
    ("bad", "field", "value"),
    [
        (np.zeros((4, 3), np.float64), "dtype", "<f8"),
        (np.zeros((4, 4), np.float32), "item_shape", "(4,)"),
        (np.zeros((4, 3, 1), np.float32), "item_shape", "(3, 1)"),
    ],
)
def test_commit_refuses_a_disagreeing_shard_and_changes_nothing(published, bad, field, value):
    root, data, names = published
    before = manifest_bytes(root)
    [odd] = write_dense(root, [bad], ["raw"])
    for append, named in ((True, [odd]), (False, [*names, odd]), (False, [odd, *names])):
        with pytest.raises(ValueError) as e:
            shards.commit(root, named, append=append)
        msg = str(e.value)
        assert field in msg and value in msg, msg
        # the message names the disagreeing pair: the odd shard and the first one
        assert repr(odd) in msg and repr(names[0]) in msg, msg
        assert_unchanged(root, before, data)
        assert all(os.path.isdir(root / s) for s in (*names, odd))  # a refused commit deletes nothing


def test_commit_refuses_kind_layout_and_stream_disagreement(tmp_path):
    rng = np.random.default_rng(3)
    root = tmp_path / "k"
    [dense] = write_dense(root, [np.zeros((5,), np.int32)], ["raw"])
    [ragged] = write_ragged(root, [ragged_source(rng, 5, "int32", ())], ["raw"], "int32", ())
    with pytest.raises(ValueError, match=rf"shard {ragged!r} has kind 'ragged'.*'dense'"):
        shards.commit(root, [dense, ragged])
    assert not (root / shards.MANIFEST_FILE).exists()
    # layout: a store and a directory of streams
    _, _ = write_multistream(tmp_path / "ms", rng, [4], ["raw"])
    streams_shard = shards.read_manifest(tmp_path / "ms").shards[0].name
    shutil.move(str(tmp_path / "ms" / streams_shard), str(root / streams_shard))
    with pytest.raises(ValueError, match=rf"shard {streams_shard!r} is a 'streams' shard, shard {dense!r} a 'store'"):
        shards.commit(root, [dense, streams_shard])
    # streams: a shard without one column
    other = tmp_path / "ms2"
    a, b = write_multistream(other, rng, [3, 2], ["raw", "raw"])[0]
    shutil.rmtree(other / b / "id")
    with pytest.raises(ValueError, match=rf"shard {b!r} has streams \['tok', 'x'\], shard {a!r} \['id', 'tok', 'x'\]"):
        shards.commit(other, [a, b])
    # a stream of another dtype
    table, _, _ = arrow_table(rng, 0, 3)
    import pyarrow as pa

    from loaderx.arrow import from_arrow

    with shards.ShardWriter(other) as w:
        t = table.set_column(1, "id", pa.array(np.arange(3, dtype=np.int32)))
        from_arrow(w.path, t, codec="raw", progress=False).close()
    with pytest.raises(ValueError, match=rf"shard {w.name!r} stream 'id' has dtype '<i4', the others '<i8'"):
        shards.commit(other, [a, w.name])


def test_commit_refuses_missing_and_incomplete_shards(published):
    root, data, names = published
    before = manifest_bytes(root)
    with pytest.raises(ValueError, match=r"shard-nothere.*missing"):
        shards.commit(root, ["shard-nothere"], append=True)
    with shards.ShardWriter(root) as w:
        os.makedirs(w.path)  # a writer that made its directory and nothing else
        with pytest.raises(ValueError, match=rf"{w.name}.*neither a store nor a directory of stores"):
            shards.commit(root, [w.name], append=True)
        from_numpy(os.path.join(w.path, "x"), np.zeros((3, 3), np.float32), codec="raw", progress=False)
        from_numpy(os.path.join(w.path, "y"), np.zeros((2, 3), np.float32), codec="raw", progress=False)
        with pytest.raises(ValueError, match=rf"{w.name}.*differ in length"):
            shards.commit(root, [w.name], append=True)  # a multi-stream write cut short
    with shards.ShardWriter(root) as w:
        from_numpy(w.path, np.zeros((3, 3), np.float32), codec="raw", progress=False)
        os.remove(os.path.join(w.path, "meta.zr"))  # a store without its header
        with pytest.raises(ValueError, match=rf"{w.name}"):
            shards.commit(root, [w.name], append=True)
    with pytest.raises(ValueError, match="named twice"):
        shards.commit(root, [names[0], names[0]])
    with pytest.raises(ValueError, match="already in the manifest"):
        shards.commit(root, [names[1]], append=True)
    for bad in ("../x", ".hidden", "", shards.MANIFEST_FILE):
        with pytest.raises(ValueError, match="plain directory name"):
            shards.commit(root, [bad], append=True)
    assert_unchanged(root, before, data)


def test_append_puts_new_shards_after_the_old_and_replace_removes_them(published):
    root, data, names = published
    more = np.arange(100, 100 + 7 * 3, dtype=np.float32).reshape(7, 3)
    new = write_dense(root, [more[:3], more[3:]], ["zstd", "raw"])
    with DenseDataset(root) as old_view:
        m = shards.commit(root, new, append=True)
        assert [s.name for s in m.shards] == [*names, *new] and m.length == 37
        assert [s.length for s in m.shards] == [10, 20, 3, 4]
        assert len(old_view) == 30  # a reader keeps the generation it opened
        np.testing.assert_array_equal(old_view[:], data)
    assert shards.read_manifest(root) == m
    with DenseDataset(root) as ds:
        np.testing.assert_array_equal(ds[:], np.concatenate([data, more]))
        np.testing.assert_array_equal(ds[[36, 0, 30, 29]], np.concatenate([data, more])[[36, 0, 30, 29]])
    # append=False publishes only the shards named and deletes the previous generation
    m2 = shards.commit(root, [new[1], names[0]])
    assert [s.name for s in m2.shards] == [new[1], names[0]]
    assert not (root / names[1]).exists() and not (root / new[0]).exists()
    with DenseDataset(root) as ds:
        np.testing.assert_array_equal(ds[:], np.concatenate([more[3:], data[:10]]))


def test_append_to_nothing_and_commit_of_nothing(tmp_path):
    root = tmp_path / "a"
    with pytest.raises(ValueError, match="nothing to commit"):
        shards.commit(root, [])
    [s] = write_dense(root, [np.ones((2, 2), np.int16)], ["raw"])
    m = shards.commit(root, [s], append=True)  # no manifest yet: append starts one
    assert [x.name for x in m.shards] == [s]
    assert shards.commit(root, [], append=True) == m


_CHILD_KILLED = textwrap.dedent(
    """
    import sys
    import numpy as np
    from loaderx.converter import from_numpy
    from loaderx.store import shards
    w = shards.ShardWriter(sys.argv[1])
    print(w.name, flush=True)
    big = np.ones((2048, 64 << 10), dtype=np.uint8)  # 128 MiB
    from_numpy(w.path, big, codec="raw", progress=False)
    print("done", flush=True)
    sys.stdin.read()
    """
)

_CHILD_LIVE = textwrap.dedent(
    """
    import sys
    import numpy as np
    from loaderx.converter import from_numpy
    from loaderx.store import shards
    with shards.ShardWriter(sys.argv[1]) as w:
        from_numpy(w.path, np.full((5, 3), 9, np.float32), codec="raw", progress=False)
        print(w.name, flush=True)
        sys.stdin.readline()  # hold the shard until told
    print("closed", flush=True)
    """
)


def spawn(script: str, *args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", script, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": REPO},
    )


def entries_of(root: Path, name: str) -> list[str]:
    return sorted(e for e in os.listdir(root) if name in e)


def test_a_killed_writer_leaves_nothing_visible_and_a_live_one_is_kept(published):
    root, data, names = published
    before = manifest_bytes(root)
    killed = spawn(_CHILD_KILLED, str(root))
    live = None
    try:
        dead = killed.stdout.readline().strip()
        assert dead.startswith("shard-"), killed.stderr.read()
        deadline = time.monotonic() + 60
        # wait for the store to be in the making (its staging directory, or the shard itself)
        while not [e for e in entries_of(root, dead) if not e.endswith(".lock")]:
            assert time.monotonic() < deadline and killed.poll() is None, "the child never started writing"
            time.sleep(0.002)
        killed.send_signal(signal.SIGKILL)
        killed.wait(timeout=30)
        left = [e for e in entries_of(root, dead) if not e.endswith(".lock")]
        assert left, "the killed writer left nothing: the test saw nothing to clean"
        assert_unchanged(root, before, data)  # its leftovers are not part of the dataset
        live = spawn(_CHILD_LIVE, str(root))
        held = live.stdout.readline().strip()
        assert held.startswith("shard-"), live.stderr.read()
        [mine] = write_dense(root, [np.full((2, 3), 5, np.float32)], ["raw"])
        m = shards.commit(root, [mine], append=True)
        assert [s.name for s in m.shards] == [*names, mine]
        assert entries_of(root, dead) == [], "the commit left the killed writer's files"
        assert os.path.isdir(root / held), "the commit deleted a live writer's shard"
        assert (root / f".writing-{held}.lock").exists()
        live.stdin.write("\n")
        live.stdin.flush()
        assert live.stdout.readline().strip() == "closed"
        assert live.wait(timeout=30) == 0
        m = shards.commit(root, [held], append=True)
        with DenseDataset(root) as ds:
            np.testing.assert_array_equal(
                ds[:], np.concatenate([data, np.full((2, 3), 5, np.float32), np.full((5, 3), 9, np.float32)])
            )
        assert sorted(e for e in os.listdir(root) if not e.startswith(".")) == sorted(
            [shards.MANIFEST_FILE, *(s.name for s in m.shards)]
        )
    finally:
        for p in (killed, live):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()


_CHILD_COMMITTER = textwrap.dedent(
    """
    import sys
    from loaderx.store import shards
    print("ready", flush=True)
    for _ in range(int(sys.argv[2])):
        shards.commit(sys.argv[1], [], append=True)
    """
)


def test_writers_starting_while_another_process_commits_keep_their_shards(published):
    # A commit probes each reservation's lock and deletes those no writer
    # holds. A writer starting meanwhile (its lock file made, not locked yet)
    # must neither end up holding a lock file the commit deleted (its shard
    # would go with the next commit) nor fail to start because a probe held
    # its lock for a moment.
    root, data, _ = published
    committer = spawn(_CHILD_COMMITTER, str(root), "300")
    live: list[shards.ShardWriter] = []
    started = 0
    deadline = time.monotonic() + 300
    try:
        assert committer.stdout.readline().strip() == "ready", committer.stderr.read()
        while committer.poll() is None:
            assert time.monotonic() < deadline, f"300 commits took over 300 s ({started} writers started)"
            w = shards.ShardWriter(root)
            os.makedirs(w.path)  # the shard in the making
            started += 1
            live.append(w)
            gone = [x.name for x in live if not os.path.isdir(x.path)]
            assert not gone, f"a commit deleted the shards of live writers {gone} ({started} started)"
            if len(live) > 20:  # done with the oldest: it goes, so the directory stays small
                old = live.pop(0)
                old.close()
                shutil.rmtree(old.path, ignore_errors=True)
        assert committer.wait(timeout=60) == 0, committer.stderr.read()
        shards.commit(root, [], append=True)
        gone = [x.name for x in live if not os.path.isdir(x.path)]
        assert not gone, f"a commit deleted the shards of live writers {gone} ({started} started)"
        assert started > 100, started  # writers start far faster than commits finish
    finally:
        for w in live:
            w.close()
        if committer.poll() is None:
            committer.kill()
            committer.wait()
    shards.commit(root, [], append=True)
    assert sorted(os.listdir(root)) == sorted(
        [shards.MANIFEST_FILE, ".commit.lock", *(s.name for s in shards.read_manifest(root).shards)])
    assert_unchanged(root, manifest_bytes(root), data)


_CHILD_CREATING = textwrap.dedent(
    """
    import sys
    import numpy as np
    from loaderx.converter import from_numpy
    from loaderx.store import shards
    w = shards.ShardWriter(sys.argv[1], prefix=sys.argv[2])
    print(w.name, flush=True)
    from_numpy(w.path, np.full((64, 3), 3, np.float32), codec="raw", progress=False)
    print("done", flush=True)
    """
)


def staged(stages: Path) -> list[str]:
    """The staging directories of a store's Creates in ``stages`` (its
    .NAME.zrecord-stage), or [] while there is none."""
    try:
        return sorted(e for e in os.listdir(stages) if e.startswith("create-"))
    except FileNotFoundError:
        return []


@pytest.mark.parametrize("prefix", ["shard", "part.train", "p" * 183])
def test_a_commit_keeps_a_live_writers_store_in_the_making(published, prefix):
    # The writer is stopped (SIGSTOP) while its store is being created, in
    # its staging directory in .NAME.zrecord-stage beside the shard's path;
    # a commit then must keep that directory, whatever the prefix (dots,
    # the longest allowed), and the writer finishes once continued.
    root, data, names = published
    for _attempt in range(30):
        child = spawn(_CHILD_CREATING, str(root), prefix)
        try:
            name = child.stdout.readline().strip()
            assert name.startswith(prefix + "-"), child.stderr.read()
            stages = root / f".{name}.zrecord-stage"
            while not staged(stages) and child.poll() is None:
                pass
            child.send_signal(signal.SIGSTOP)
            inside = staged(stages)
            if inside:
                shards.commit(root, [], append=True)
                assert staged(stages) == inside, "the commit removed it"
            child.send_signal(signal.SIGCONT)
            assert child.stdout.readline().strip() == "done", child.stderr.read()
            assert child.wait(timeout=60) == 0
        finally:
            if child.poll() is None:
                child.send_signal(signal.SIGCONT)
                child.kill()
                child.wait()
        if inside:
            break
        shards.commit(root, [], append=True)  # this one finished before the stop: clean it
    else:
        pytest.fail("no stop landed inside a create in 30 tries")
    m = shards.commit(root, [name], append=True)
    assert [s.name for s in m.shards] == [*names, name]
    with DenseDataset(root) as ds:
        np.testing.assert_array_equal(ds[:30], data)
        assert len(ds) == 94
    with shards.ShardWriter(root, prefix=prefix) as w:
        assert len(w.name.encode()) <= 200
    with pytest.raises(ValueError, match="184"):
        shards.ShardWriter(root, prefix="p" * 184)


def old_staging(root: Path, name: str) -> list[str]:
    """Leave beside shard ``name`` the staging and trash directories that a
    Create of an earlier release left when killed; return their names."""
    made = [f".{name}.zrecord-create-0123456789abcdef", f".{name}.zrecord-trash-00112233445566ff"]
    for d in made:
        (root / d).mkdir()
        (root / d / "meta.zr").write_bytes(b"")
        (root / d / "0.chunk").write_bytes(b"")
    return made


def test_a_commit_deletes_a_dead_writers_staging_leftovers(published):
    """A writer killed inside its store's Create leaves .NAME.zrecord-stage
    holding the Create's staging directory; the next commit deletes it, and
    the staging directories earlier releases left beside a shard, while it
    keeps those of a live writer and hidden entries that only look alike."""
    root, _data, names = published
    for _attempt in range(30):
        child = spawn(_CHILD_CREATING, str(root), "dead")
        try:
            dead = child.stdout.readline().strip()
            assert dead.startswith("dead-"), child.stderr.read()
            stages = root / f".{dead}.zrecord-stage"
            while not staged(stages) and child.poll() is None:
                pass
            child.kill()
        finally:
            child.wait()
        if staged(stages):
            break
        shards.commit(root, [], append=True)  # the Create finished before the kill: clean it
    else:
        pytest.fail("no kill landed inside a create in 30 tries")
    dead_old = old_staging(root, dead)
    lookalikes = [f".{dead}.zrecord-notes", f".{dead}.zrecord-create-0123", ".zrecord-stage"]
    for e in lookalikes:
        (root / e).mkdir()
    with shards.ShardWriter(root, prefix="live") as live:
        (root / f".{live.name}.zrecord-stage" / "create-0123456789abcdef").mkdir(parents=True)
        live_old = old_staging(root, live.name)
        shards.commit(root, [], append=True)
        left = sorted(os.listdir(root))
        assert f".{dead}.zrecord-stage" not in left, "the commit left the dead writer's staging directory"
        assert not set(dead_old) & set(left), "the commit left what an earlier release's Create left"
        assert {f".{live.name}.zrecord-stage", *live_old, *lookalikes} <= set(left)
    # The live writer closed without a commit: abandon takes its leftovers too.
    assert shards.abandon(root, [live.name]) == [live.name]
    left = set(os.listdir(root))
    assert not {f".{live.name}.zrecord-stage", *live_old} & left
    assert set(lookalikes) <= left
    assert [s.name for s in shards.read_manifest(root).shards] == names


@pytest.mark.parametrize(("entry", "owner"), [
    (".shard-0123456789abcdef.zrecord-stage", "shard-0123456789abcdef"),
    (".part.train-0123456789abcdef.zrecord-stage", "part.train-0123456789abcdef"),
    (".a.zrecord-stage.zrecord-stage", "a.zrecord-stage"),
    (".shard-1.zrecord-create-0123456789abcdef", "shard-1"),
    (".shard-1.zrecord-trash-0123456789abcdef", "shard-1"),
    (".a.b.zrecord-create-0123456789abcdef", "a.b"),
    (".zrecord-stage", None),
    ("shard-1.zrecord-stage", None),
    (".shard-1.zrecord-stage-x", None),
    (".shard-1.zrecord-create-0123456789ABCDEF", None),
    (".shard-1.zrecord-create-0123456789abcde", None),
    (".shard-1.zrecord-trash-0123456789abcdef0", None),
    (".shard-1.zrecord-notes", None),
    (".writing-shard-1.lock", None),
    (".git", None),
])
def test_staging_owner_names(entry, owner):
    assert shards._staging_owner(entry) == owner


def test_a_writer_closed_without_commit_is_cleaned_by_the_next_commit(published):
    root, _data, names = published
    [orphan] = write_dense(root, [np.zeros((3, 3), np.float32)], ["raw"])  # written, closed, never committed
    with shards.ShardWriter(root) as w:
        from_numpy(w.path, np.ones((1, 3), np.float32), codec="raw", progress=False)
        m = shards.commit(root, [w.name], append=True)  # an own, still open writer's shard is published
    assert not (root / orphan).exists()
    assert [s.name for s in m.shards] == [*names, w.name]


def test_a_commit_deletes_only_what_the_dataset_made(published):
    """Files a user keeps beside the shards (notes, a .git directory, a store
    that is no shard) survive every commit; only shards, reservations and
    staging directories the module made are ever deleted."""
    root, _data, names = published
    (root / "NOTES.txt").write_text("keep me")
    (root / ".git").mkdir()
    (root / ".git" / "HEAD").write_text("ref: refs/heads/main")
    from_numpy(root / "unrelated_store", np.zeros((2, 2), np.int16), codec="raw", progress=False)
    [orphan] = write_dense(root, [np.zeros((3, 3), np.float32)], ["raw"])
    shards.commit(root, [], append=True)
    assert not (root / orphan).exists()
    assert (root / "NOTES.txt").read_text() == "keep me"
    assert (root / ".git" / "HEAD").exists()
    assert (root / "unrelated_store" / "meta.zr").exists()
    [new] = write_dense(root, [np.ones((4, 3), np.float32)], ["raw"])
    shards.commit(root, [new])  # a replacing commit drops the old shards, and only them
    assert all(not (root / n).exists() for n in names)
    assert (root / "NOTES.txt").exists() and (root / ".git").is_dir() and (root / "unrelated_store").is_dir()
    with DenseDataset(root) as ds:
        np.testing.assert_array_equal(ds[:], np.ones((4, 3), np.float32))


def test_a_published_writer_leaves_no_reservation_behind(tmp_path):
    root = tmp_path / "ds"
    with shards.ShardWriter(root) as w:  # committed while still open
        from_numpy(w.path, np.zeros((2, 2), np.float32), codec="raw", progress=False)
        shards.commit(root, [w.name])
    [other] = write_dense(root, [np.ones((1, 2), np.float32)], ["raw"])  # closed, then committed
    shards.commit(root, [other], append=True)
    assert sorted(os.listdir(root)) == sorted([".commit.lock", shards.MANIFEST_FILE, w.name, other])


def test_a_sharded_commit_replaces_a_single_store_written_there(tmp_path):
    root = tmp_path / "ds"
    from_numpy(root, np.zeros((5, 2), np.float32), codec="raw", progress=False)
    (root / "NOTES.txt").write_text("keep me")
    with shards.ShardWriter(root) as w:
        from_numpy(w.path, np.ones((3, 2), np.float32), codec="raw", progress=False)
    shards.commit(root, [w.name])
    left = sorted(e for e in os.listdir(root) if not e.startswith("."))
    assert left == sorted(["NOTES.txt", shards.MANIFEST_FILE, w.name])
    with DenseDataset(root) as ds:
        np.testing.assert_array_equal(ds[:], np.ones((3, 2), np.float32))


def test_abandon_keeps_a_shard_a_live_writer_holds(published):
    root, _data, names = published
    live = shards.ShardWriter(root)
    from_numpy(live.path, np.zeros((2, 3), np.float32), codec="raw", progress=False)
    [done] = write_dense(root, [np.zeros((3, 3), np.float32)], ["raw"])
    assert shards.abandon(root, [live.name, done, names[0]]) == [done]
    assert (root / live.name).is_dir() and not (root / done).exists() and (root / names[0]).is_dir()
    live.close()
    assert shards.abandon(root, [live.name]) == [live.name]
    assert not (root / live.name).exists()


# -- damage at open or read ----------------------------------------------------


def rewrite_manifest(root: Path, change: Any, *, reseal: bool) -> None:
    body = json.loads(manifest_bytes(root))
    change(body)
    if reseal:
        body.pop("crc32c")
        body["crc32c"] = crc32c(json.dumps(body, sort_keys=True, separators=(",", ":")).encode())
    (root / shards.MANIFEST_FILE).write_text(json.dumps(body, indent=1, sort_keys=True))


def _edit_name(body: dict) -> None:
    name = body["shards"][0]["name"]
    body["shards"][0]["name"] = name[:-1] + ("1" if name.endswith("0") else "0")


MANIFEST_DAMAGE = {
    "truncated": lambda root: (root / shards.MANIFEST_FILE).write_bytes(manifest_bytes(root)[:57]),
    "empty": lambda root: (root / shards.MANIFEST_FILE).write_bytes(b""),
    "length edited": lambda root: (root / shards.MANIFEST_FILE).write_bytes(
        manifest_bytes(root).replace(b'"length": 20', b'"length": 21')),
    "name edited": lambda root: rewrite_manifest(root, _edit_name, reseal=False),
    "wrong checksum": lambda root: rewrite_manifest(root, lambda b: b.update(crc32c=b["crc32c"] ^ 1), reseal=False),
    "other format": lambda root: rewrite_manifest(root, lambda b: b.update(format="lance"), reseal=True),
    "other version": lambda root: rewrite_manifest(root, lambda b: b.update(version=2), reseal=True),
    "sum resealed wrong": lambda root: rewrite_manifest(root, lambda b: b.update(length=31), reseal=True),
    "not an object": lambda root: (root / shards.MANIFEST_FILE).write_text("[1, 2]"),
}


@pytest.mark.parametrize("damage", sorted(MANIFEST_DAMAGE))
def test_a_damaged_manifest_is_refused_naming_it(published, damage):
    root, _, _ = published
    if damage == "length edited":
        assert b'"length": 20' in manifest_bytes(root)
    MANIFEST_DAMAGE[damage](root)
    want = os.path.join(str(root), shards.MANIFEST_FILE)
    for opener in (lambda: DenseDataset(root), lambda: shards.read_manifest(root),
                   lambda: shards.commit(root, [], append=True)):
        with pytest.raises(CorruptStoreError) as e:
            opener()
        assert want in str(e.value), str(e.value)
    if damage == "other version":
        assert "version 2" in str(e.value)
    if damage == "other format":
        assert "'lance'" in str(e.value)


def test_a_damaged_manifest_of_streams_is_refused(tmp_path):
    from loaderx.arrow import MSDataset

    write_multistream(tmp_path, np.random.default_rng(2), [4, 5], ["raw", "zstd"])
    rewrite_manifest(tmp_path, lambda b: b["streams"]["x"].update(item_shape=[4]), reseal=False)
    for opener in (lambda: MSDataset(tmp_path), lambda: DenseDataset(tmp_path / "x")):
        with pytest.raises(CorruptStoreError, match="manifest.json.*checksum"):
            opener()


def test_a_missing_or_replaced_shard_is_refused_naming_it(published, tmp_path):
    root, data, names = published
    victim = root / names[1]
    saved = tmp_path / "saved"
    shutil.move(str(victim), str(saved))

    def read_refused(match: str) -> None:
        # A shard opens (and is checked) at the first read that needs it:
        # the records of the other shards still read.
        with DenseDataset(root) as ds:
            np.testing.assert_array_equal(ds[:10], data[:10])
            for key in (slice(None), 10, [0, 29]):
                with pytest.raises(CorruptStoreError, match=match):
                    ds[key]

    read_refused(rf"shard {names[1]!r} is missing")
    from_numpy(victim, np.zeros((19, 3), np.float32), codec="raw", progress=False)  # one record short
    read_refused(rf"shard {names[1]!r} holds 19 records, the manifest says 20")
    shutil.rmtree(victim)
    from_numpy(victim, np.zeros((20, 3), np.float64), codec="raw", progress=False)
    read_refused(rf"shard {names[1]!r} has dtype '<f8', the others '<f4'")
    shutil.rmtree(victim)
    from_numpy(victim, np.zeros((20, 2), np.float32), codec="raw", progress=False)
    read_refused(rf"shard {names[1]!r} has item_shape \(2,\), the others \(3,\)")
    shutil.rmtree(victim)
    shutil.move(str(saved), str(victim))
    with DenseDataset(root) as ds:
        np.testing.assert_array_equal(ds[:], data)


@pytest.fixture
def flipped(tmp_path):
    """Four raw shards; one byte of record ``LOCAL`` of shard 2 flipped."""
    root = tmp_path / "f"
    data = np.arange(80 * 4, dtype=np.int32).reshape(80, 4)
    names = make_sharded_dense(root, data, [20, 15, 25, 20])
    chunk = root / names[2] / "0.chunk"
    raw = bytearray(chunk.read_bytes())
    assert len(raw) == 25 * 16
    raw[FLIP_LOCAL * 16 + 5] ^= 0x40
    chunk.write_bytes(bytes(raw))
    return root, data, names, str(chunk)


FLIP_LOCAL = 7
FLIP_GLOBAL = 20 + 15 + FLIP_LOCAL


def test_a_flipped_byte_names_the_shards_chunk_and_its_local_index(flipped):
    root, data, _names, chunk = flipped
    with DenseDataset(root) as ds:
        np.testing.assert_array_equal(ds[: FLIP_GLOBAL], data[:FLIP_GLOBAL])  # the rest reads
        np.testing.assert_array_equal(ds[FLIP_GLOBAL + 1 :], data[FLIP_GLOBAL + 1 :])
        for key in (FLIP_GLOBAL, [0, 79, FLIP_GLOBAL], slice(None), FLIP_GLOBAL - 80):
            with pytest.raises(CorruptStoreError) as e:
                ds[key]
            assert f"record {FLIP_LOCAL} in {chunk}" in str(e.value), str(e.value)
    with DataLoader({"x": DenseDataset(root)}, batch_size=10, sampler="sequential", num_workers=2,
                    workers="thread", epoch=True) as loader:
        for step in range(4):
            np.testing.assert_array_equal(next(loader)["x"], data[step * 10 : step * 10 + 10])
        with pytest.raises(CorruptStoreError, match=rf"record {FLIP_LOCAL} in {chunk}"):
            next(loader)  # step 4: records 40-49


@needs_shm
def test_a_flipped_byte_through_process_workers(flipped):
    root, data, _names, chunk = flipped
    with DataLoader({"x": DenseDataset(root)}, batch_size=10, sampler="sequential", num_workers=2,
                    workers="process", epoch=True) as loader:
        for step in range(4):
            np.testing.assert_array_equal(next(loader)["x"], data[step * 10 : step * 10 + 10])
        with pytest.raises(CorruptStoreError) as e:  # a store's error keeps its type across the process
            next(loader)
    text = str(e.value)
    assert "step 4" in text and f"record {FLIP_LOCAL} in {chunk}" in text and "worker process" in text, text


# -- verify and the command line ---------------------------------------------


def test_verify_scans_every_shard_with_global_indices(flipped):
    root, _data, names, chunk = flipped
    with DenseDataset(root) as ds:
        report = ds.verify()
        assert not report.ok and report.records == 80 and report.checked == 80
        [fault] = report.faults
        assert fault.file == chunk and fault.index == FLIP_GLOBAL
        assert f"shard {names[2]!r}" in fault.what and f"its record {FLIP_LOCAL}" in fault.what
        assert f"{chunk}, record {FLIP_GLOBAL}" in str(report)
        # a commit since: the dataset verifies the shards it reads, not the new manifest's
        shards.commit(root, write_dense(root, [np.zeros((3, 4), np.int32)], ["raw"]), append=True)
        assert ds.verify().records == 80 and shards.read_manifest(root).length == 83
        # damage that keeps a shard from opening is listed too, not raised
        meta = root / names[0] / "meta.zr"
        head = bytearray(meta.read_bytes())
        head[15] ^= 1  # the length, under the header's checksum
        meta.write_bytes(bytes(head))
        report = ds.verify()
        files = [f.file for f in report.faults]
        assert str(meta) in files and chunk in files, report
        shutil.rmtree(root / names[3])
        report = ds.verify()
        assert any(f.file == str(root / names[3]) and "missing" in f.what for f in report.faults), report
    ds.close()
    with pytest.raises(Exception, match="closed"):
        ds.verify()


def test_verify_of_a_clean_sharded_dataset_and_of_a_ragged_one(tmp_path, pair):
    root = tmp_path / "c"
    make_sharded_dense(root, np.ones((9, 2), np.uint8), [0, 4, 5], ["raw", "zstd", "narrow"])
    with DenseDataset(root) as ds:
        r = ds.verify()
        assert r.ok and r.records == 9 and r.checked == 9 and r.checksummed and r.version >= 4
    with RaggedDataset(pair["sharded"] / "tok") as rs:
        r = rs.verify()
        assert r.ok and r.records == N
    # a record of the wrong size for the schema, in shard 1 of a ragged dataset (a row is 4 bytes)
    rag = tmp_path / "rag"
    good = [np.arange(3, dtype=np.int32)] * 4
    names = write_ragged(rag, [good, good], ["raw", "raw"], "int32", ())
    shards.commit(rag, names)
    from loaderx.zrecord import Zrecord

    with Zrecord(rag / names[1]) as zr:  # a writer that bypassed the schema
        zr.append([b"\x01\x02\x03"])
    rewrite_manifest(rag, lambda b: (b["shards"][1].update(length=5), b.update(length=9)), reseal=True)
    with RaggedDataset(rag) as rs:
        [fault] = rs.verify().faults
    assert fault.file == str(rag / names[1] / "schema.msgpack") and fault.index == 8, fault


def run_cli(*argv: str) -> tuple[int, Any]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        status = cli_main(["--json", *argv])
    text = out.getvalue()
    return status, json.loads(text) if text.strip() else None


def test_cli_info_and_verify_of_sharded_datasets(flipped, pair, tmp_path):
    root, data, _names, chunk = flipped
    status, doc = run_cli("info", str(root))
    assert status == 0 and doc["kind"] == "dense" and doc["length"] == 80 and doc["shards"] == 4
    assert doc["shape"] == [80, 4] and doc["dtype"] == "int32"
    status, doc = run_cli("verify", str(root))
    assert status == 1 and not doc["ok"]
    [fault] = doc["stores"][str(root)]["faults"]
    assert fault["file"] == chunk and fault["index"] == FLIP_GLOBAL
    status, doc = run_cli("verify", str(pair["sharded"] / "x"))
    assert status == 0 and doc["ok"] and doc["stores"][str(pair["sharded"] / "x")]["records"] == N
    status, doc = run_cli("info", str(pair["sharded"] / "tok"))
    assert status == 0 and doc["kind"] == "ragged" and doc["shards"] == 3 and doc["length"] == N
    ms = tmp_path / "ms"
    write_multistream(ms, np.random.default_rng(4), [6, 0, 5], ["raw", "raw", "zstd"])
    status, doc = run_cli("info", str(ms))
    assert status == 0 and doc["kind"] == "multistream" and sorted(doc["streams"]) == ["id", "tok", "x"]
    assert doc["streams"]["tok"]["kind"] == "ragged" and doc["streams"]["x"]["length"] == 11
    assert doc["streams"]["id"]["shards"] == 3
    status, doc = run_cli("info", str(ms / "x"))
    assert status == 0 and doc["length"] == 11 and doc["item_shape"] == [3]
    status, doc = run_cli("verify", str(ms))
    assert status == 0 and doc["ok"] and len(doc["stores"]) == 3
    status, doc = run_cli("head", str(ms), "-n", "2")
    assert status == 0 and [r["id"] for r in doc] == [0, 1]
    for cmd in (["compact", str(root)], ["delete", str(root), "--indices", "1"]):
        status, doc = run_cli(*cmd)
        assert status == 3 and "read-only" in doc["error"]
    with DenseDataset(root) as ds:  # nothing was changed
        np.testing.assert_array_equal(ds[: FLIP_GLOBAL], data[:FLIP_GLOBAL])
    MANIFEST_DAMAGE["wrong checksum"](root)
    status, doc = run_cli("verify", str(root))
    assert status == 4 and "manifest.json" in doc["error"]


def test_commit_syncs_unless_told_not_to(tmp_path, monkeypatch):
    calls = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (calls.append(fd), real(fd))[1])
    for sync in (True, False):
        root = tmp_path / f"sync-{sync}"
        [name] = write_dense(root, [np.arange(6, dtype=np.float32).reshape(3, 2)], ["raw"])
        calls.clear()
        shards.commit(root, [name], sync=sync)
        files = sum(len(f) + 1 for _, _, f in os.walk(root / name))  # every file and directory of the shard
        assert (len(calls) >= files + 2) if sync else (calls == []), (sync, len(calls), files)
        with DenseDataset(root) as ds:
            np.testing.assert_array_equal(ds[:], np.arange(6, dtype=np.float32).reshape(3, 2))
