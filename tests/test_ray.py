"""loaderx.ray on a real local Ray cluster: Ray datasets written as sharded
loaderx datasets (values, dtypes and row order exact; one shard per write
task; append; a failed job leaves the previous dataset intact), loaderx
datasets of every layout read back through the datasource, and the version
check at import."""

from __future__ import annotations

import importlib
import os
import sys
import types
from pathlib import Path

import numpy as np
import pytest

import loaderx
from loaderx.errors import StoreExistsError
from loaderx.store import shards

ray = pytest.importorskip("ray", reason="ray is not installed (pip install 'loaderx[ray]')")
pa = pytest.importorskip("pyarrow", reason="pyarrow is not installed (pip install 'loaderx[ray]')")
lxray = importlib.import_module("loaderx.ray")  # after the skip: it imports ray


@pytest.fixture(scope="module", autouse=True)
def cluster():
    """One local Ray cluster for the module. Its workers import the loaderx
    that this process imported (a checkout may shadow an installed one), and
    this module, whose functions the Ray steps are."""
    paths = [str(Path(loaderx.__file__).resolve().parent.parent), str(Path(__file__).resolve().parent)]
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PYTHONPATH", os.pathsep.join([*paths, *filter(None, [os.environ.get("PYTHONPATH")])]))
        mp.setenv("RAY_AUTH_MODE", "disabled")
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="error")
    ctx = ray.data.DataContext.get_current()
    ctx.enable_progress_bars = False
    ctx.execution_options.preserve_order = True
    yield
    ray.shutdown()


def tokenize(batch):
    """A tokenizer-like step: variable-length int32 rows from each number."""
    x = batch["x"]
    return {
        "x": x,
        "ids": [np.arange(int(v[0]) % 7 + 1, dtype=np.int32) + int(v[0]) for v in x],
    }


def expected_ids(x: np.ndarray) -> list[np.ndarray]:
    return [np.arange(int(v) % 7 + 1, dtype=np.int32) + int(v) for v in x[:, 0]]


def info(kind: str, dtype: str, item_shape: tuple[int, ...]) -> tuple[str, np.dtype, tuple[int, ...]]:
    return kind, np.dtype(dtype), item_shape


def streams(m: shards.Manifest) -> dict[str, tuple[str, np.dtype, tuple[int, ...]]]:
    """A manifest's streams as (kind, dtype, item shape)."""
    return {k: info(v.kind, v.dtype, v.item_shape) for k, v in m.streams.items()}


def listing(path) -> set[str]:
    return set(os.listdir(path)) - {shards.MANIFEST_FILE, ".commit.lock"}


def test_numpy_through_a_tokenizer_round_trips_exactly(tmp_path):
    x = (np.arange(90, dtype=np.int32) * 3).reshape(30, 3)
    rds = ray.data.from_numpy(x).rename_columns({"data": "x"}).repartition(3)
    sink = lxray.LoaderxDatasink(tmp_path / "ds")
    rds.map_batches(tokenize, batch_size=4).write_datasink(sink)
    m = sink.manifest
    # one shard per write task, in the tasks' order
    assert sink.write_tasks == 3 and len(m.shards) == 3
    assert [s.length for s in m.shards] == [10, 10, 10] and m.length == 30
    assert m.layout == "streams" and set(m.streams) == {"x", "ids"}
    assert streams(m)["x"] == info("dense", "int32", (3,))
    assert streams(m)["ids"] == info("ragged", "int32", ())
    ms = loaderx.MSDataset(tmp_path / "ds")
    got = ms["x"][:]
    assert got.dtype == np.int32 and np.array_equal(got, x)
    ids = ms["ids"][:]
    assert all(a.dtype == np.int32 for a in ids)
    assert [a.tolist() for a in ids] == [a.tolist() for a in expected_ids(x)]
    dense = loaderx.DenseDataset(tmp_path / "ds" / "x")  # one stream of the sharded dataset
    assert np.array_equal(dense[[29, 0, 15]], x[[29, 0, 15]])
    ms.close()
    dense.close()


def test_arrow_and_items_keep_every_type(tmp_path):
    t = pa.table(
        {
            "s": pa.array(np.arange(8, dtype=np.int16)),
            "f": pa.array([[i, -i] for i in range(8)], pa.list_(pa.float32(), 2)),
            "b": pa.array([[1] * (i % 3) for i in range(8)], pa.list_(pa.uint8())),
            "p": pa.array([[[i, i + 1]] * (i % 2 + 1) for i in range(8)], pa.list_(pa.list_(pa.int64(), 2))),
        }
    )
    rds = ray.data.from_arrow([t.slice(0, 5), t.slice(5)])
    m = lxray.write(rds, tmp_path / "a")
    assert len(m.shards) == 2
    assert streams(m) == {
        "s": info("dense", "int16", ()),
        "f": info("dense", "float32", (2,)),
        "b": info("ragged", "uint8", ()),
        "p": info("ragged", "int64", (2,)),
    }
    ms = loaderx.MSDataset(tmp_path / "a")
    assert ms["s"][:].tolist() == list(range(8)) and ms["s"].dtype == np.int16
    assert ms["f"][:].tolist() == [[i, -i] for i in range(8)]
    assert [r.tolist() for r in ms["b"][:]] == [[1] * (i % 3) for i in range(8)]
    assert [r.tolist() for r in ms["p"][:]] == [[[i, i + 1]] * (i % 2 + 1) for i in range(8)]
    ms.close()

    items = [{"a": i, "v": list(range(i % 4))} for i in range(6)]
    m = lxray.write(ray.data.from_items(items, override_num_blocks=2), tmp_path / "i")
    assert streams(m) == {"a": info("dense", "int64", ()), "v": info("ragged", "int64", ())}
    ms = loaderx.MSDataset(tmp_path / "i")
    assert ms["a"][:].tolist() == list(range(6))
    assert [r.tolist() for r in ms["v"][:]] == [list(range(i % 4)) for i in range(6)]
    ms.close()


def test_a_ray_tensor_column_becomes_a_dense_stream_of_its_shape(tmp_path):
    x = np.random.default_rng(0).random((12, 2, 3), dtype=np.float32)
    rds = ray.data.from_numpy(x)
    assert "Tensor" in str(rds.schema().types[0])  # Ray's own tensor extension type
    m = lxray.write(rds, tmp_path / "t", codec="zstd")
    assert streams(m) == {"data": info("dense", "float32", (2, 3))}
    ds = loaderx.DenseDataset(tmp_path / "t" / "data")
    got = ds[:]
    assert got.dtype == np.float32 and np.array_equal(got, x)
    for s in m.shards:
        with loaderx.DenseDataset(tmp_path / "t" / s.name / "data") as shard:
            assert shard.codec == "zstd"
    ds.close()


def test_append_puts_the_new_shards_after_the_old_and_codecs_may_differ(tmp_path):
    a = np.arange(20, dtype=np.uint16).reshape(10, 2)
    b = np.arange(100, 112, dtype=np.uint16).reshape(6, 2)
    first = lxray.write(ray.data.from_numpy(a).repartition(2), tmp_path / "d", codec="raw")
    second = lxray.write(ray.data.from_numpy(b), tmp_path / "d", mode="append", codec="zstd")
    assert [s.name for s in second.shards[:2]] == [s.name for s in first.shards]
    assert len(second.shards) == 3 and second.length == 16
    ds = loaderx.DenseDataset(tmp_path / "d" / "data")
    assert np.array_equal(ds[:], np.concatenate([a, b]))
    ds.close()
    # overwrite replaces the dataset, and the commit deletes the old shards
    third = lxray.write(ray.data.from_numpy(b), tmp_path / "d")
    assert listing(tmp_path / "d") == {s.name for s in third.shards}
    assert np.array_equal(loaderx.MSDataset(tmp_path / "d")["data"][:], b)


def boom_on(value):
    def step(batch):
        if (batch["x"][:, 0] == value).any():
            raise RuntimeError(f"boom at {value}")
        return batch

    return step


def test_a_failed_job_leaves_the_previous_dataset_and_its_shards_go(tmp_path):
    path = tmp_path / "d"
    old = np.arange(8, dtype=np.int32).reshape(4, 2)
    m0 = lxray.write(ray.data.from_numpy(old).rename_columns({"data": "x"}), path)
    manifest = (path / shards.MANIFEST_FILE).read_bytes()
    new = np.arange(1000, 1120, dtype=np.int32).reshape(60, 2)
    rds = ray.data.from_numpy(new).rename_columns({"data": "x"}).repartition(6)
    with pytest.raises(Exception, match="boom at 1110"):  # a row of the last block
        lxray.write(rds.map_batches(boom_on(1110), batch_size=5), path)
    assert (path / shards.MANIFEST_FILE).read_bytes() == manifest
    ms = loaderx.MSDataset(path)
    assert np.array_equal(ms["x"][:], old)
    ms.close()
    # the next commit leaves nothing but its own shards
    m1 = lxray.write(ray.data.from_numpy(new[:5]).rename_columns({"data": "x"}), path, mode="append")
    assert listing(path) == {s.name for s in m1.shards}
    assert [s.name for s in m1.shards[:1]] == [s.name for s in m0.shards]


def test_a_failed_first_job_leaves_no_dataset(tmp_path):
    path = tmp_path / "first"
    rds = ray.data.from_numpy(np.arange(40, dtype=np.int32).reshape(20, 2)).rename_columns({"data": "x"})
    with pytest.raises(Exception, match="boom at 38"):
        lxray.write(rds.repartition(4).map_batches(boom_on(38)), path)
    assert not shards.is_sharded(path)
    leftovers = [e for e in os.listdir(path) if not e.startswith(".")] if path.exists() else []
    assert all(not os.path.isfile(path / e / "x" / "meta.zr") or (path / f".writing-{e}.lock").exists() for e in leftovers)


def test_the_failed_jobs_finished_shards_are_abandoned_at_once(tmp_path):
    """The driver's side of a failure, step by step: a task's finished
    shard is removed by on_write_failed, the committed ones are kept."""
    path = tmp_path / "d"
    keep = lxray.write(ray.data.from_numpy(np.zeros((3, 2), np.int8)), path)
    sink = lxray.LoaderxDatasink(path)
    sink.on_write_start(None)
    got = sink.write(iter([pa.table({"data": pa.array([[1, 2]], pa.list_(pa.int8(), 2))})]), types.SimpleNamespace(task_idx=0))
    assert got["rows"] == 1 and (path / got["name"]).is_dir()
    sink.on_write_failed(RuntimeError("another task failed"))
    assert listing(path) == {s.name for s in keep.shards}
    assert np.array_equal(loaderx.DenseDataset(path / "data")[:], np.zeros((3, 2), np.int8))


def test_tasks_that_disagree_on_a_columns_kind_are_made_ragged_before_the_commit(tmp_path):
    """Ray types a batch of equal-length arrays as a fixed-shape tensor: a
    write task that sees only such batches writes the column dense, and the
    driver rewrites that shard's stream ragged before committing."""
    rows = [{"n": i} for i in range(8)]

    def ids(batch):
        n = batch["n"]
        width = (lambda v: 3) if n[0] == 0 else (lambda v: v % 3 + 1)  # block 0: equal lengths
        return {"ids": [np.full(width(int(v)), int(v), dtype=np.int32) for v in n], "n": n}

    rds = ray.data.from_items(rows, override_num_blocks=2).map_batches(ids, batch_size=None)
    want = [[i] * 3 for i in range(4)] + [[i] * (i % 3 + 1) for i in range(4, 8)]
    for name, opts in (("k", {}), ("r", {"ragged": ["ids"]})):
        m = lxray.write(rds, tmp_path / name, **opts)
        assert len(m.shards) == 2
        assert streams(m) == {"ids": info("ragged", "int32", ()), "n": info("dense", "int64", ())}
        assert [r.tolist() for r in loaderx.RaggedDataset(tmp_path / name / "ids")[:]] == want
        assert listing(tmp_path / name) == {s.name for s in m.shards}
        for s in m.shards:  # nothing staged is left inside a shard
            assert sorted(os.listdir(tmp_path / name / s.name)) == ["ids", "n"]


def test_tasks_that_disagree_on_a_dtype_commit_nothing(tmp_path):
    path = tmp_path / "d"
    lxray.write(ray.data.from_numpy(np.arange(4, dtype=np.int64)).rename_columns({"data": "n"}), path)
    manifest = (path / shards.MANIFEST_FILE).read_bytes()

    def widen(batch):
        n = batch["n"]
        return {"n": n.astype(np.int32 if n[0] == 0 else np.int64)}

    rds = ray.data.from_items([{"n": i} for i in range(6)], override_num_blocks=2).map_batches(widen, batch_size=None)
    with pytest.raises(ValueError, match="dtype"):
        lxray.write(rds, path)
    assert (path / shards.MANIFEST_FILE).read_bytes() == manifest
    assert listing(path) == {s.name for s in shards.read_manifest(path).shards}
    assert loaderx.MSDataset(path)["n"][:].tolist() == [0, 1, 2, 3]


def test_a_task_whose_blocks_mix_fixed_and_variable_tensors_stores_them_ragged(tmp_path):
    """Ray's write operator hands a task its blocks as they came: a fixed-shape
    tensor block and a variable-shaped one of the same column."""
    from ray.data.extensions import ArrowTensorArray

    fixed = ArrowTensorArray.from_numpy(np.arange(6, dtype=np.int32).reshape(2, 3))
    varied = ArrowTensorArray.from_numpy([np.arange(k, dtype=np.int32) for k in (1, 4)])
    assert type(fixed.type).__name__ != type(varied.type).__name__
    sink = lxray.LoaderxDatasink(tmp_path / "mix")
    sink.on_write_start(None)
    blocks = [pa.table({"ids": fixed}), pa.table({"ids": varied})]
    got = sink.write(iter(blocks), types.SimpleNamespace(task_idx=0))
    sink.on_write_complete(ray.data.datasource.WriteResult(num_rows=4, size_bytes=0, write_returns=[got]))
    assert streams(sink.manifest) == {"ids": info("ragged", "int32", ())}
    rs = loaderx.RaggedDataset(tmp_path / "mix" / "ids")
    assert [r.tolist() for r in rs[:]] == [[0, 1, 2], [3, 4, 5], [0], [0, 1, 2, 3]]
    rs.close()


def test_the_sink_refuses_a_directory_a_commit_would_clobber(tmp_path):
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("mine")
    with pytest.raises(StoreExistsError, match="notes.txt"):
        lxray.LoaderxDatasink(tmp_path / "other").on_write_start(None)
    assert (tmp_path / "other" / "notes.txt").read_text() == "mine"
    (tmp_path / "hidden" / ".git").mkdir(parents=True)
    with pytest.raises(StoreExistsError, match="'.git'"):
        lxray.LoaderxDatasink(tmp_path / "hidden").on_write_start(None)
    # what a killed first write left (a partial shard, a lock) is no reason to refuse
    (tmp_path / "left" / "ray-0123456789ab-0123456789abcdef" / "x").mkdir(parents=True)
    (tmp_path / "left" / ".writing-ray-0123456789ab-0123456789abcdef.lock").touch()
    (tmp_path / "left" / ".ray-0123456789ab-0123456789abcdef.zrecord-stage" / "create-0123456789abcdef").mkdir(parents=True)
    m = lxray.write(ray.data.from_numpy(np.ones((2, 2), np.uint8)), tmp_path / "left")
    assert listing(tmp_path / "left") == {s.name for s in m.shards}
    loaderx.from_numpy(tmp_path / "single", np.zeros((2, 2), np.uint8))
    with pytest.raises(StoreExistsError, match="append needs a sharded dataset"):
        lxray.LoaderxDatasink(tmp_path / "single", mode="append").on_write_start(None)
    with pytest.raises(ValueError, match="'merge'"):
        lxray.LoaderxDatasink(tmp_path / "x", mode="merge")
    with pytest.raises(ValueError, match="'lz4'"):
        lxray.LoaderxDatasink(tmp_path / "x", codec="lz4")


# ---------------------------------------------------------------------------
# reading


def read_back(path, parallelism=4, **kw):
    """The dataset through the datasource, with its read tasks."""
    source = lxray.LoaderxDatasource(path, **kw)
    tasks = source.get_read_tasks(parallelism)
    return source, tasks, ray.data.read_datasource(source, override_num_blocks=parallelism)


def check_tasks(source, tasks, parallelism):
    """About ``parallelism`` tasks whose metadata say what their blocks hold."""
    assert parallelism <= len(tasks) <= parallelism + 1
    total = 0
    for t in tasks:
        blocks = list(t())
        rows = sum(b.num_rows for b in blocks)
        assert rows == t.metadata.num_rows > 0
        nbytes = sum(b.nbytes for b in blocks)
        slack = 8 * (rows + len(blocks)) * len(blocks[0].column_names)  # list offsets
        assert abs(t.metadata.size_bytes - nbytes) <= slack, (t.metadata.size_bytes, nbytes)
        total += rows
    assert total == source.num_rows
    assert source.estimate_inmemory_data_size() == sum(t.metadata.size_bytes for t in tasks)


def test_read_a_single_dense_store(tmp_path):
    x = np.arange(2 * 50 * 3, dtype=np.float32).reshape(50, 2, 3)
    loaderx.from_numpy(tmp_path / "s", x)
    source, tasks, rds = read_back(tmp_path / "s")
    check_tasks(source, tasks, 4)
    batch = rds.to_numpy_refs()
    got = np.concatenate([ray.get(r)["data"] for r in batch])
    assert got.dtype == np.float32 and np.array_equal(got, x)


def test_read_a_single_ragged_store(tmp_path):
    recs = [np.arange(i % 5, dtype=np.int64) * i for i in range(23)]
    loaderx.from_iterator(tmp_path / "r", iter(recs))
    source, tasks, rds = read_back(tmp_path / "r", parallelism=3)
    check_tasks(source, tasks, 3)
    t = pa.concat_tables(ray.get(rds.to_arrow_refs()))
    assert t.schema.field("data").type == pa.list_(pa.int64())
    assert t.column("data").to_pylist() == [r.tolist() for r in recs]


def test_read_a_multistream_directory_and_choose_columns(tmp_path):
    t = pa.table(
        {
            "label": pa.array(np.arange(40, dtype=np.uint8)),
            "img": pa.array([[i] * 4 for i in range(40)], pa.list_(pa.int32(), 4)),
            "tok": pa.array([[i] * (i % 3) for i in range(40)], pa.list_(pa.int16())),
            "flag": pa.array([i % 2 == 0 for i in range(40)]),
        }
    )
    loaderx.from_arrow(tmp_path / "m", t)
    source, tasks, rds = read_back(tmp_path / "m")
    check_tasks(source, tasks, 4)
    got = pa.concat_tables(ray.get(rds.to_arrow_refs()))
    assert got.column("label").type == pa.uint8() and got.column("label").to_pylist() == list(range(40))
    assert got.column("flag").to_pylist() == [i % 2 == 0 for i in range(40)]
    assert got.column("tok").type == pa.list_(pa.int16())
    assert got.column("tok").to_pylist() == [[i] * (i % 3) for i in range(40)]
    img = rds.to_numpy_refs()
    arr = np.concatenate([ray.get(r)["img"] for r in img])
    assert arr.dtype == np.int32 and arr.shape == (40, 4) and arr[7].tolist() == [7] * 4
    only = lxray.read(tmp_path / "m", columns=["tok", "label"])
    assert only.columns() == ["tok", "label"]
    with pytest.raises(KeyError, match="'nope'"):
        lxray.LoaderxDatasource(tmp_path / "m", columns=["nope"])


def test_read_sharded_datasets_of_both_layouts(tmp_path):
    # layout "store": shards written by hand, as any writer would
    root = tmp_path / "st"
    parts = [np.full((n, 2), k, dtype=np.int16) for k, n in enumerate([7, 1, 12])]
    names = []
    for p in parts:
        with shards.ShardWriter(root) as w:
            loaderx.from_numpy(w.path, p)
            names.append(w.name)
    shards.commit(root, names)
    source, tasks, rds = read_back(root, parallelism=5)
    check_tasks(source, tasks, 5)
    got = np.concatenate([ray.get(r)["data"] for r in rds.to_numpy_refs()])
    assert np.array_equal(got, np.concatenate(parts))
    # layout "streams", written through the sink, read back equal to the source
    x = np.arange(60, dtype=np.int32).reshape(20, 3)
    src = ray.data.from_numpy(x).rename_columns({"data": "x"}).repartition(3).map_batches(tokenize, batch_size=3)
    lxray.write(src, tmp_path / "ms")
    source, tasks, rds = read_back(tmp_path / "ms", parallelism=4)
    check_tasks(source, tasks, 4)
    back = pa.concat_tables(ray.get(rds.to_arrow_refs()))
    assert back.column("ids").to_pylist() == [a.tolist() for a in expected_ids(x)]
    assert np.array_equal(np.concatenate([ray.get(r)["x"] for r in rds.to_numpy_refs()]), x)
    assert rds.count() == 20
    # one stream of a sharded multi-stream dataset
    one = lxray.LoaderxDatasource(tmp_path / "ms" / "ids")
    assert one.columns == ["ids"] and one.num_rows == 20
    got = pa.concat_tables(ray.get(lxray.read(tmp_path / "ms" / "ids").to_arrow_refs()))
    assert got.column_names == ["ids"] and got.column("ids").to_pylist() == [a.tolist() for a in expected_ids(x)]


def test_read_refuses_what_it_cannot_read(tmp_path):
    with pytest.raises(FileNotFoundError, match="no loaderx dataset"):
        lxray.LoaderxDatasource(tmp_path)


# ---------------------------------------------------------------------------
# the version check (last: it reloads the module)


def test_an_unsupported_ray_is_refused_at_import(monkeypatch):
    module = importlib.import_module("loaderx.integrations.ray")
    try:
        monkeypatch.setattr(ray, "__version__", "1.0.0")
        with pytest.raises(ImportError, match=r"supports ray\[data\] >=2\.60,<3; this is ray 1\.0\.0"):
            importlib.reload(module)
        monkeypatch.setattr(ray, "__version__", "3.0.0")
        with pytest.raises(ImportError, match=r">=2\.60,<3"):
            importlib.reload(module)
        monkeypatch.undo()
        monkeypatch.delattr(ray.data.Datasink, "on_write_failed")
        with pytest.raises(ImportError, match="Datasink has no on_write_failed"):
            importlib.reload(module)
        monkeypatch.undo()
        monkeypatch.setitem(sys.modules, "ray.data.extensions", None)  # a release without these names
        with pytest.raises(ImportError, match=r"supports ray\[data\] >=2\.60,<3.*ray\.data\.extensions"):
            importlib.reload(module)
    finally:
        monkeypatch.undo()
        importlib.reload(module)
        importlib.reload(lxray)
