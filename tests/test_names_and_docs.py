"""One word for one thing, help() that shows the documentation, per-token
sources in every pack mode, and messages that name only public things."""

from __future__ import annotations

import importlib
import pydoc
import re
import warnings

import numpy as np
import pytest

import loaderx
from loaderx import DataLoader, Mixture, Pack

FACES = ["arrow", "converter", "dataloader", "dataset", "dlpack", "mixture", "packing", "sampler", "zrecord"]


@pytest.mark.parametrize("name", FACES)
def test_help_on_a_public_face_shows_the_module_behind_it(name):
    face = importlib.import_module(f"loaderx.{name}")
    impl = re.search(r"The public face of\s+:mod:`([\w.]+)`", face.__doc__).group(1)
    first = importlib.import_module(impl).__doc__.strip().splitlines()[0]
    assert first in pydoc.render_doc(face)


def test_loader_iterable_takes_num_workers_and_the_old_name_warns():
    pytest.importorskip("torch")
    from loaderx.torch import LoaderIterable

    x = np.arange(40, dtype=np.int32)
    assert LoaderIterable({"x": x}, batch_size=4, num_workers=3).options.num_workers == 3
    with pytest.warns(DeprecationWarning, match=r"num_threads=\) is now num_workers="):
        it = LoaderIterable({"x": x}, batch_size=4, num_threads=2)
    assert it.options.num_workers == 2
    with pytest.raises(TypeError, match="give num_workers only"):
        LoaderIterable({"x": x}, batch_size=4, num_workers=2, num_threads=2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        LoaderIterable({"x": x}, batch_size=4)


def test_concat_rows_give_each_tokens_source(tmp_path):
    rng = np.random.default_rng(1)
    for name in ("a", "b"):
        loaderx.from_iterator(str(tmp_path / name), (rng.integers(0, 9, int(k)).astype(np.int32)
                                                     for k in rng.integers(1, 50, 60)), progress=False)
    mix = Mixture({n: {"t": loaderx.RaggedDataset(str(tmp_path / n))} for n in "ab"}, [1, 1])
    for mode in ("concat", "first_fit"):
        with DataLoader(mix, batch_size=8, num_workers=0, pack={"t": Pack(32, mode=mode, rows=4)}) as dl:
            for _ in range(3):
                b = next(dl)["t"]
                ts = b.token_sources
                assert ts.shape == b.segment_ids.shape and ts.dtype == np.int32
                flat_seg = np.repeat(np.arange(len(b.records)), np.diff(b.cu_seqlens.astype(np.int64)))
                assert np.array_equal(ts.reshape(-1), b.sources[flat_seg])
                assert ((ts == -1) == (b.segment_ids == 0)).all()


def test_messages_name_no_internal_class(tmp_path):
    rng = np.random.default_rng(2)
    loaderx.from_iterator(str(tmp_path / "r"), (rng.integers(0, 9, int(k)).astype(np.int32)
                                                for k in rng.integers(1, 50, 60)), progress=False)
    ragged = loaderx.RaggedDataset(str(tmp_path / "r"))
    x = np.arange(60, dtype=np.int32)
    with pytest.raises(ValueError, match=r"names a NumPy array, not a ragged stream") as e:
        DataLoader({"x": x, "t": ragged}, pack={"x": 8})
    assert "Stream" not in str(e.value)
    mix = Mixture({"a": {"t": ragged, "x": x}, "b": {"t": ragged, "x": x}}, [1, 1])
    with pytest.raises(ValueError, match=r"names a NumPy array") as e:
        DataLoader(mix, pack={"x": 8})
    assert "Stream" not in str(e.value)
    # a concat state loaded by a first_fit loader: the message is about the packing
    one = Mixture({"a": {"t": ragged}, "b": {"t": ragged}}, [1, 1])
    with DataLoader(one, batch_size=4, num_workers=0, pack={"t": Pack(16)}) as dl:
        state = dl.state_dict()
    with DataLoader(one, batch_size=4, num_workers=0, pack={"t": Pack(16, mode="first_fit")}) as other:
        with pytest.raises(ValueError, match=r"state_dict has pack=.*'concat'.*this loader has pack=.*'first_fit'"):
            other.load_state_dict(state)
