"""The documented examples, run as written (on small generated data), and the
package surface."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import loaderx

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rng = np.random.default_rng(0)
    np.save("data.npy", rng.standard_normal((1000, 3, 8, 8)).astype(np.float32))
    np.save("label.npy", rng.integers(0, 10, 1000))
    return tmp_path


def test_quick_start(workdir):
    from loaderx.converter import from_numpy
    from loaderx.dataset import DenseDataset
    from loaderx.dataloader import DataLoader

    from_numpy("train_data", np.load("data.npy", mmap_mode="r"))
    from_numpy("train_label", np.load("label.npy", mmap_mode="r"))

    loader = DataLoader({"data": DenseDataset("train_data"), "label": DenseDataset("train_label")},
                        transform=lambda batch: batch)

    for i, batch in enumerate(loader):
        if i >= 256:
            break

    assert batch["data"].shape == (256, 3, 8, 8)
    assert batch["label"].shape == (256,)
    # record i lines up across streams
    data, label = np.load("data.npy"), np.load("label.npy")
    idx = loader.sampler(256)  # the step of the last batch taken
    np.testing.assert_array_equal(batch["data"], data[idx])
    np.testing.assert_array_equal(batch["label"], label[idx])
    loader.close()


def test_converting_a_numpy_tensor(workdir):
    from loaderx.converter import from_numpy
    from loaderx.dataset import DenseDataset

    from_numpy("train_data", np.load("data.npy", mmap_mode="r"))
    from_numpy("train_label", np.load("label.npy", mmap_mode="r"))

    # many small, similar records compress far better against a trained dictionary:
    images = np.tile(np.arange(64, dtype=np.uint8).reshape(8, 8), (500, 1, 1))
    images[:, 0, 0] = np.arange(500) % 256
    from_numpy("train_images", images, codec="zstd_dict")

    ds = DenseDataset("train_data")
    assert ds.shape == (1000, 3, 8, 8)
    labels = DenseDataset("train_label")
    assert labels.item_shape == ()  # a 1-D array becomes a dataset of scalars
    assert DenseDataset("train_images").codec == "zstd_dict"
    np.testing.assert_array_equal(DenseDataset("train_images")[[0, 499]], images[[0, 499]])
    assert os.path.isfile(os.path.join("train_data", "schema.msgpack"))


def test_records(workdir):
    from loaderx.converter import from_numpy
    from loaderx.dataset import DenseDataset

    from_numpy("data", np.arange(64, dtype=np.float32).reshape(8, 2, 4))
    ds = DenseDataset("data")
    assert ds[[0, 5, 2]].shape == (3, 2, 4)  # shape straight from the schema


def test_ragged_and_collate(workdir):
    from loaderx.converter import from_iterator, from_numpy
    from loaderx.dataloader import DataLoader
    from loaderx.dataset import DenseDataset, RaggedDataset, pad

    seqs = [np.arange(L, dtype=np.int32) for L in (3, 1, 4, 1, 5)]
    from_iterator("tokens", seqs)
    rs = RaggedDataset("tokens")

    records = rs[[0, 2, 4]]  # list of ndarray, one per record
    padded, lengths = pad(records)  # dense (B, max_len) + row counts
    assert [r.tolist() for r in records] == [[0, 1, 2], [0, 1, 2, 3], [0, 1, 2, 3, 4]]
    assert padded.shape == (3, 5)
    assert lengths.tolist() == [3, 4, 5]

    # a loader reads dense streams: pad once into a dense store, then collate
    all_padded, _ = pad(rs[:])
    from_numpy("dense_tokens", all_padded)
    from_numpy("labels", np.arange(5))
    dense_tokens, labelset = DenseDataset("dense_tokens"), DenseDataset("labels")

    def collate(batch):
        return {"input_ids": batch["tokens"], "label": batch["label"]}

    loader = DataLoader({"tokens": dense_tokens, "label": labelset}, batch_size=2,
                        transform=collate)
    batch = next(loader)
    assert batch["input_ids"].shape == (2, 5)
    for ids, label in zip(batch["input_ids"], batch["label"]):
        np.testing.assert_array_equal(ids, all_padded[label])
    loader.close()


# -- the package ---------------------------------------------------------------


def test_version_and_exports():
    assert loaderx.__version__ == "0.1.0"
    from loaderx import DenseDataset, errors
    from loaderx.dataset import DenseDataset as Direct

    assert DenseDataset is Direct
    assert errors.ClosedError is loaderx.errors.ClosedError
    assert loaderx.errors.ClosedError.__name__ == "ClosedError"
    for name in loaderx.__all__:
        assert getattr(loaderx, name) is not None
    assert "DataLoader" in dir(loaderx)
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        loaderx.nope


def test_import_is_cheap():
    code = (
        "import sys, json, loaderx; "
        "print(json.dumps(sorted(m for m in ('numpy', 'cffi', 'loaderx.store._native', "
        "'loaderx.dataloader') if m in sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                         check=True)
    assert json.loads(out.stdout) == []


def test_num_threads():
    before = loaderx.get_num_threads()
    try:
        loaderx.set_num_threads(1)
        assert loaderx.get_num_threads() == 1
        loaderx.set_num_threads(np.int64(3))
        assert loaderx.get_num_threads() == 3
        loaderx.set_num_threads(0)  # back to the default
        assert loaderx.get_num_threads() >= 1
        with pytest.raises(ValueError, match="got -1"):
            loaderx.set_num_threads(-1)
        with pytest.raises(TypeError, match="got 2.5"):
            loaderx.set_num_threads(2.5)
    finally:
        loaderx.set_num_threads(before)
