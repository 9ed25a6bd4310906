"""Arrow, Parquet and Hugging Face sources, and the multi-stream dataset."""

from __future__ import annotations

import importlib.util
import os

import numpy as np
import pytest

import loaderx
from loaderx.errors import StoreExistsError

pa = pytest.importorskip("pyarrow", reason="pyarrow is not installed (pip install 'loaderx[arrow]')")
pq = pytest.importorskip("pyarrow.parquet", reason="pyarrow.parquet is not available")
HAS_HF = importlib.util.find_spec("datasets") is not None
needs_hf = pytest.mark.skipif(not HAS_HF, reason="datasets is not installed (pip install 'loaderx[hf]')")

N = 300


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    return {
        "image": rng.integers(0, 256, size=(N, 28, 28), dtype=np.uint8),
        "label": (np.arange(N) % 10).astype(np.int64),
        "u8": (np.arange(N) % 256).astype(np.uint8),
        "flag": np.arange(N) % 3 == 0,
        "half": np.linspace(-1, 1, N).astype(np.float16),
        "tokens": [np.arange(i % 9, dtype=np.int32) * 3 for i in range(N)],
    }


@pytest.fixture(scope="module")
def table(data):
    img = pa.FixedSizeListArray.from_arrays(
        pa.FixedSizeListArray.from_arrays(pa.array(data["image"].reshape(-1)), 28), 28
    )
    return pa.table({
        "image": img,
        "label": pa.array(data["label"]),
        "u8": pa.array(data["u8"]),
        "flag": pa.array(data["flag"]),
        "half": pa.array(data["half"]),
        "tokens": pa.array([t.tolist() for t in data["tokens"]], type=pa.list_(pa.int32())),
    })


def check_all(ms, data, rows=slice(None)):
    idx = np.arange(N)[rows]
    assert ms.num_records == len(idx) and len(ms) == 6
    for name in ("image", "label", "u8", "flag", "half"):
        got = ms[name][:]
        want = data[name][idx]
        assert got.dtype == want.dtype, name
        np.testing.assert_array_equal(got, want)
    assert ms["tokens"].dtype == np.int32
    for g, i in zip(ms["tokens"][:], idx):
        np.testing.assert_array_equal(g, data["tokens"][i])


def test_table_to_aligned_stores(tmp_path, table, data):
    ms = loaderx.from_arrow(tmp_path / "out", table)
    with ms:
        assert list(ms) == ["image", "label", "u8", "flag", "half", "tokens"]
        assert isinstance(ms["image"], loaderx.DenseDataset) and ms["image"].item_shape == (28, 28)
        assert isinstance(ms["tokens"], loaderx.RaggedDataset)
        check_all(ms, data)
        row = ms.row(7)
        assert row["label"] == 7 and row["tokens"].tolist() == data["tokens"][7].tolist()
    with loaderx.MSDataset(tmp_path / "out") as again:  # reopened: sorted by name
        assert sorted(again) == list(again)
        check_all(again, data)


def test_small_batches_and_a_sliced_table(tmp_path, table, data):
    with loaderx.from_arrow(tmp_path / "a", table, batch_bytes=5000) as ms:
        check_all(ms, data)
    with loaderx.from_arrow(tmp_path / "b", table.slice(40, 100)) as ms:
        check_all(ms, data, slice(40, 140))


def test_columns_pick_and_order(tmp_path, table, data):
    with loaderx.from_arrow(tmp_path / "o", table, columns=["u8", "label"]) as ms:
        assert list(ms) == ["u8", "label"]
    assert sorted(os.listdir(tmp_path / "o")) == ["label", "u8"]
    with pytest.raises(KeyError, match="'nope'"):
        loaderx.from_arrow(tmp_path / "k", table, columns=["label", "nope"])
    assert not (tmp_path / "k").exists()


def test_parquet_files_and_directories(tmp_path, table, data):
    pq.write_table(table, tmp_path / "t.parquet", row_group_size=64)
    with loaderx.from_arrow(tmp_path / "f", str(tmp_path / "t.parquet"), batch_bytes=20_000) as ms:
        check_all(ms, data)
    (tmp_path / "parts").mkdir()
    pq.write_table(table.slice(0, 100), tmp_path / "parts" / "0.parquet")
    pq.write_table(table.slice(100), tmp_path / "parts" / "1.parquet")
    with loaderx.from_arrow(tmp_path / "d", tmp_path / "parts") as ms:
        check_all(ms, data)


def test_arrow_ipc_file(tmp_path, table, data):
    import pyarrow.feather as feather

    feather.write_feather(table, tmp_path / "t.feather")
    with loaderx.from_arrow(tmp_path / "i", str(tmp_path / "t.feather")) as ms:
        check_all(ms, data)


@pytest.mark.parametrize(
    ("column", "words"),
    [
        (pa.array(["a", "b"] * 5), ["'bad'", "string"]),
        (pa.array([{"x": 1}] * 10), ["'bad'", "struct", "separate columns"]),
        (pa.array([{"bytes": b"..", "path": "a.png"}] * 10), ["'bad'", "not yet decoded"]),
        (pa.array([[[1], [2, 3]]] * 10), ["'bad'", "list<item: list"]),
        (pa.array(["a", "b"] * 5).dictionary_encode(), ["'bad'", "dictionary"]),
    ],
)
def test_refused_columns_are_named_and_nothing_is_written(tmp_path, column, words):
    t = pa.table({"ok": pa.array(np.arange(10)), "bad": column})
    with pytest.raises(TypeError) as e:
        loaderx.from_arrow(tmp_path / "o", t)
    for w in words:
        assert w in str(e.value)
    assert not (tmp_path / "o").exists()


def test_nulls_are_refused_and_nothing_is_left(tmp_path):
    t = pa.table({"a": pa.array(np.arange(1000)), "b": pa.array([1.0] * 999 + [None])})
    with pytest.raises(ValueError, match=r"'b' holds 1 null"):
        loaderx.from_arrow(tmp_path / "o", t, batch_bytes=1000)
    assert not (tmp_path / "o").exists()
    (tmp_path / "e").mkdir()  # an existing empty directory is kept, emptied again
    with pytest.raises(ValueError, match="null"):
        loaderx.from_arrow(tmp_path / "e", t, batch_bytes=1000)
    assert os.listdir(tmp_path / "e") == []


def test_existing_output(tmp_path, table):
    loaderx.from_arrow(tmp_path / "o", table, columns=["label"]).close()
    with pytest.raises(StoreExistsError, match="overwrite"):
        loaderx.from_arrow(tmp_path / "o", table, columns=["u8"])
    with loaderx.from_arrow(tmp_path / "o", table, columns=["u8"], overwrite=True) as ms:
        assert list(ms) == ["u8"]
    assert os.listdir(tmp_path / "o") == ["u8"]
    (tmp_path / "o" / "notes.txt").write_text("mine")
    with pytest.raises(StoreExistsError, match="notes.txt"):
        loaderx.from_arrow(tmp_path / "o", table, overwrite=True)
    assert (tmp_path / "o" / "notes.txt").exists() and (tmp_path / "o" / "u8").exists()


def test_codecs(tmp_path, table, data):
    with loaderx.from_arrow(tmp_path / "raw", table, columns=["image", "label"], codec="raw") as ms:
        assert ms["image"].codec == "raw"
        np.testing.assert_array_equal(ms["image"][:], data["image"])
    base = np.random.default_rng(1).integers(0, 256, size=256, dtype=np.uint8)
    rows = np.repeat(base[None, :], 200, axis=0)
    rows[:, ::32] = np.arange(200, dtype=np.uint8)[:, None]
    t = pa.table({"x": pa.FixedSizeListArray.from_arrays(pa.array(rows.reshape(-1)), 256)})
    with loaderx.from_arrow(tmp_path / "dict", t, codec="zstd_dict", dict_tier="fast") as ms:
        assert ms["x"].codec == "zstd_dict" and ms["x"].stats()["dict_bytes"] > 0
        np.testing.assert_array_equal(ms["x"][:], rows)
    with pytest.raises(ValueError, match=r"column 'image'.*dictionary"):  # too few records to train on
        loaderx.from_arrow(tmp_path / "bad", table.slice(0, 3), columns=["image"], codec="zstd_dict")
    assert not (tmp_path / "bad").exists()


def test_dataloader_takes_the_multistream_dataset(tmp_path, table, data):
    with loaderx.from_arrow(tmp_path / "o", table, columns=["image", "label"]) as ms:
        loader = loaderx.DataLoader(ms, batch_size=32, sampler="sequential", num_workers=0)
        batch = next(iter(loader))
        np.testing.assert_array_equal(batch["image"], data["image"][:32])
        np.testing.assert_array_equal(batch["label"], data["label"][:32])
        assert batch["image"].dtype == np.uint8


def test_multistream_refuses_unaligned_streams(tmp_path):
    loaderx.from_numpy(tmp_path / "d" / "a", np.zeros(3))
    loaderx.from_numpy(tmp_path / "d" / "b", np.zeros(4))
    with pytest.raises(ValueError, match=r"not aligned.*'a': 3.*'b': 4"):
        loaderx.MSDataset(tmp_path / "d")
    with loaderx.MSDataset(tmp_path / "d", columns=["b"]) as ms:
        assert ms.num_records == 4 and len(ms) == 1
    with pytest.raises(FileNotFoundError, match="no loaderx stores"):
        loaderx.MSDataset(tmp_path)


def test_multistream_delete_keeps_streams_aligned(tmp_path):
    ids = np.arange(100, dtype=np.int64)
    t = pa.table({"id": pa.array(ids), "rep": pa.array([[i] * (i % 5 + 1) for i in ids], type=pa.list_(pa.int64()))})
    loaderx.from_arrow(tmp_path / "o", t).close()
    with loaderx.MSDataset(tmp_path / "o", writable=True) as ms:
        ms.delete([0, 5, 99, 42])
        assert ms.num_records == 96
        got = ms["id"][:]
        assert sorted(got.tolist()) == sorted(set(range(100)) - {0, 5, 99, 42})
        for i, rec in zip(got.tolist(), ms["rep"][:]):
            assert rec.tolist() == [i] * (i % 5 + 1)


@needs_hf
def test_hugging_face_dataset_keeps_uint8(tmp_path, table, data):
    import datasets

    ds = datasets.Dataset(table)
    # the trap: the numpy formatter widens small ints; the Arrow path does not
    with loaderx.from_arrow(tmp_path / "hf", ds) as ms:
        check_all(ms, data)
        assert ms["u8"].dtype == np.uint8


@needs_hf
def test_hugging_face_selection_and_order_are_honoured(tmp_path, table, data):
    import datasets

    ds = datasets.Dataset(table).shuffle(seed=3).select(range(50))
    with loaderx.from_arrow(tmp_path / "hf", ds, columns=["label", "tokens", "image"]) as ms:
        want = ds.with_format("numpy")
        np.testing.assert_array_equal(ms["label"][:], want["label"])
        np.testing.assert_array_equal(ms["image"][:], np.asarray(want["image"], dtype=np.uint8))
        for got, w in zip(ms["tokens"][:], ds["tokens"]):
            assert got.tolist() == w


@needs_hf
def test_hugging_face_saved_to_disk_and_features(tmp_path):
    import datasets

    features = datasets.Features({
        "pixels": datasets.Sequence(datasets.Value("uint8"), length=4),
        "label": datasets.ClassLabel(names=["a", "b"]),
        "ids": datasets.Sequence(datasets.Value("int16")),
    })
    ds = datasets.Dataset.from_dict(
        {"pixels": [[1, 2, 3, 4]] * 6, "label": [0, 1] * 3, "ids": [[1], [2, 3], [], [4], [5], [6, 7, 8]]},
        features=features,
    )
    ds.save_to_disk(str(tmp_path / "saved"))
    with loaderx.from_arrow(tmp_path / "o", str(tmp_path / "saved")) as ms:
        assert ms["pixels"].dtype == np.uint8 and ms["pixels"].item_shape == (4,)
        assert ms["label"][:].tolist() == [0, 1] * 3
        assert ms["ids"].dtype == np.int16 and [r.tolist() for r in ms["ids"][:]][5] == [6, 7, 8]


@needs_hf
def test_hugging_face_undecoded_images_are_refused(tmp_path):
    import datasets

    pytest.importorskip("PIL", reason="datasets builds an Image column only with Pillow (the test extra has it)")

    ds = datasets.Dataset.from_dict(
        {"img": [{"bytes": b"\x89PNG", "path": None}] * 2, "y": [0, 1]},
        features=datasets.Features({"img": datasets.Image(), "y": datasets.Value("int64")}),
    )
    with pytest.raises(TypeError, match=r"'img'.*not yet decoded"):
        loaderx.from_arrow(tmp_path / "o", ds)
    assert not (tmp_path / "o").exists()


def test_without_pyarrow_the_extra_is_named(tmp_path):
    import subprocess
    import sys

    code = "import sys; sys.modules['pyarrow'] = None\nimport loaderx\nloaderx.from_arrow('x', None)\n"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    assert r.returncode != 0 and "loaderx[arrow]" in r.stderr


@pytest.mark.parametrize("sync", [True, False])
def test_from_arrow_syncs_unless_told_not_to(tmp_path, monkeypatch, sync):
    from loaderx.store import _native

    synced = []
    real = _native.store_sync
    monkeypatch.setattr(_native, "store_sync", lambda h: (synced.append(h), real(h))[1])
    table = pa.table({"x": pa.array(np.arange(50, dtype=np.int32)), "y": pa.array(np.arange(50) * 2.0)})
    ms = loaderx.from_arrow(tmp_path / "t", table, sync=sync, progress=False)
    assert len(synced) == (2 if sync else 0)
    np.testing.assert_array_equal(ms["x"][:], np.arange(50, dtype=np.int32))
    ms.close()
    reopened = loaderx.MSDataset(tmp_path / "t")
    np.testing.assert_array_equal(reopened["y"][:], np.arange(50) * 2.0)
    reopened.close()
