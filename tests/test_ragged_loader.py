"""Ragged streams in the DataLoader: packed and padded batches, aligned with
dense streams, resumable, with recycled buffers that never overwrite a held
batch."""

from __future__ import annotations

import json

import numpy as np
import pytest

from loaderx.converter import from_iterator, from_numpy
from loaderx.dataloader import DataLoader, PackedBatch, PaddedBatch
from loaderx.dataset import DenseDataset, RaggedDataset, pad
from loaderx.sampler import Sampler

N = 97


def records(n: int = N, tail: tuple[int, ...] = (), seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        length = int(rng.integers(0, 40)) if i % 11 else 0  # some empty records
        out.append(rng.integers(-1000, 1000, size=(length, *tail)).astype(np.int32))
    return out


@pytest.fixture
def tokens(tmp_path):
    recs = records()
    from_iterator(tmp_path / "tok", recs, codec="raw")
    from_numpy(tmp_path / "ids", np.arange(N, dtype=np.int64))
    with RaggedDataset(tmp_path / "tok") as rs, DenseDataset(tmp_path / "ids") as ids:
        yield recs, rs, ids


def expected_indices(step: int, batch_size: int = 8, seed: int = 0) -> np.ndarray:
    return Sampler("cyclic", N, batch_size, seed=seed)(step)


def check_packed(got: PackedBatch, want: list[np.ndarray], offsets_dtype=np.int64) -> None:
    assert isinstance(got, PackedBatch)
    lengths = np.array([len(r) for r in want], dtype=np.int64)
    np.testing.assert_array_equal(got.lengths, lengths)
    assert got.lengths.dtype == np.int64
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    assert got.offsets.dtype == offsets_dtype
    np.testing.assert_array_equal(got.offsets, offsets)
    flat = np.concatenate(want) if want else np.zeros(0, np.int32)
    assert got.values.dtype == np.int32
    np.testing.assert_array_equal(got.values, flat)


@pytest.mark.parametrize("workers", [0, 2])
def test_packed_matches_numpy_every_step(tokens, workers):
    recs, rs, ids = tokens
    with DataLoader({"tok": rs, "id": ids}, batch_size=8, num_workers=workers) as loader:
        for step in range(30):  # more than three cycles: buffers are reused and grow
            batch = next(loader)
            idx = expected_indices(step)
            np.testing.assert_array_equal(batch["id"], idx)  # the dense stream lines up
            check_packed(batch["tok"], [recs[i] for i in idx])


def test_offsets_int32_and_row_shape(tmp_path):
    recs = records(40, tail=(3, 2), seed=5)
    from_iterator(tmp_path / "r", recs, codec="zstd")
    with RaggedDataset(tmp_path / "r") as rs:
        loader = DataLoader({"r": rs}, batch_size=5, sampler="sequential", num_workers=0,
                            offsets_dtype=np.int32)
        for step in range(10):
            got = next(loader)["r"]
            want = [recs[(step * 5 + j) % 40] for j in range(5)]
            assert got.values.shape == (sum(len(r) for r in want), 3, 2)
            assert got.offsets.dtype == np.int32
            np.testing.assert_array_equal(got.values, np.concatenate(want))
            for k in range(5):
                np.testing.assert_array_equal(got.values[got.offsets[k]:got.offsets[k + 1]], want[k])
        loader.close()


@pytest.mark.parametrize("spec", ["max", 64, ("multiple", 16)])
def test_padding_modes(tokens, spec):
    recs, rs, ids = tokens
    with DataLoader({"tok": rs, "id": ids}, batch_size=8, pad={"tok": spec}, num_workers=2) as loader:
        for step in range(20):
            batch = next(loader)
            got = batch["tok"]
            assert isinstance(got, PaddedBatch)
            want = [recs[i] for i in batch["id"]]
            ref, lengths = pad(want)
            longest = ref.shape[1]
            width = {"max": longest, 64: 64}.get(spec) if isinstance(spec, (str, int)) else -(
                -longest // 16
            ) * 16
            assert got.values.shape == (8, width)
            np.testing.assert_array_equal(got.values[:, :longest], ref)
            assert not got.values[:, longest:].any()
            np.testing.assert_array_equal(got.lengths, lengths)


def test_padding_with_row_shape_matches_pad(tmp_path):
    recs = records(30, tail=(2,), seed=3)
    from_iterator(tmp_path / "r", recs, codec="raw")
    with RaggedDataset(tmp_path / "r") as rs:
        loader = DataLoader({"r": rs}, batch_size=6, pad={"r": "max"}, sampler="sequential",
                            epoch=True, num_workers=0)
        seen = 0
        for got in loader:
            want = recs[seen:seen + 6]
            ref, lengths = pad(want)
            np.testing.assert_array_equal(got["r"].values, ref)
            np.testing.assert_array_equal(got["r"].lengths, lengths)
            seen += len(want)
        assert seen == 30  # the short last batch came too
        loader.close()


def test_fixed_length_too_short_fails_that_step(tokens):
    _, rs, _ = tokens
    with DataLoader({"tok": rs}, batch_size=8, pad={"tok": 3}, num_workers=0) as loader:
        with pytest.raises(ValueError, match=r"record \d+ has \d+ rows, more than pad=\{'tok': 3\}"):
            next(loader)


@pytest.mark.parametrize("workers", [0, 2])
def test_resume_is_exact(tokens, workers):
    _, rs, ids = tokens
    run = DataLoader({"tok": rs, "id": ids}, batch_size=8, seed=3, num_workers=workers)
    full = [next(run) for _ in range(12)]
    full = [(b["id"].copy(), b["tok"].values.copy(), b["tok"].offsets.copy()) for b in full]
    run.close()
    first = DataLoader({"tok": rs, "id": ids}, batch_size=8, seed=3, num_workers=workers)
    for _ in range(5):
        next(first)
    state = json.loads(json.dumps(first.state_dict()))
    first.close()
    second = DataLoader({"tok": rs, "id": ids}, batch_size=8, seed=3, num_workers=workers)
    second.load_state_dict(state)
    for step in range(5, 12):
        b = next(second)
        np.testing.assert_array_equal(b["id"], full[step][0])
        np.testing.assert_array_equal(b["tok"].values, full[step][1])
        np.testing.assert_array_equal(b["tok"].offsets, full[step][2])
    second.close()


@pytest.mark.parametrize("spec", [None, "max"])
def test_held_batches_are_not_overwritten(tokens, spec):
    recs, rs, ids = tokens
    pads = {} if spec is None else {"tok": spec}
    with DataLoader({"tok": rs, "id": ids}, batch_size=8, pad=pads, num_workers=2, prefetch=2) as loader:
        held = []
        for _ in range(40):
            b = next(loader)
            part = b["tok"]
            # keep one part only (a view, or the bare values) of some batches
            if len(held) % 3 == 0:
                held.append((b["id"].copy(), part.values, part.lengths.copy()))
            else:
                held.append((b["id"].copy(), part.values[:1] if part.values.shape[0] else part.values,
                             part.lengths.copy()))
            del b, part
        for k, (idx, values, lengths) in enumerate(held):
            want = [recs[i] for i in idx]
            if spec is None:
                flat = np.concatenate(want)
                ref = flat if k % 3 == 0 else flat[:1]
            else:
                padded, _ = pad(want)
                ref = padded if k % 3 == 0 else padded[:1]
            np.testing.assert_array_equal(values, ref)


def test_pool_recycles_dropped_batches(tokens):
    _, rs, _ = tokens
    loader = DataLoader({"tok": rs}, batch_size=8, num_workers=0)
    pool = loader._streams[0][2]
    first = next(loader)["tok"].offsets.__array_interface__["data"][0]
    addresses = {next(loader)["tok"].offsets.__array_interface__["data"][0] for _ in range(10)}
    assert addresses == {first}  # each dropped batch's slot is refilled by the next step
    assert len(pool) == 1
    loader.close()


def test_bad_arguments(tokens, tmp_path):
    _, rs, ids = tokens
    streams = {"tok": rs, "id": ids}
    with pytest.raises(ValueError, match=r"pad=\{'tok': 'long'\}.*'max'.*positive int.*'multiple'"):
        DataLoader(streams, pad={"tok": "long"})
    for bad in (0, -4, True, 2.5, ("multiple", 0), ("multiple",), ("bucket", 8), ["multiple", 8]):
        with pytest.raises(ValueError, match=r"pad=\{'tok'"):
            DataLoader(streams, pad={"tok": bad})
    with pytest.raises(ValueError, match=r"pad=\{'id': \.\.\.\} names no ragged stream.*\['tok'\]"):
        DataLoader(streams, pad={"id": "max"})
    with pytest.raises(ValueError, match=r"pad=\{'nope'"):
        DataLoader(streams, pad={"nope": "max"})
    with pytest.raises(TypeError, match="pad must be None or a dict"):
        DataLoader(streams, pad="max")
    for bad in (np.float32, "int16", 32, None):
        with pytest.raises(ValueError, match="offsets_dtype must be np.int32 or np.int64"):
            DataLoader(streams, offsets_dtype=bad)
    short = tmp_path / "short"
    from_iterator(short, records(10), codec="raw")
    with RaggedDataset(short) as other, pytest.raises(ValueError, match="equal lengths"):
        DataLoader({"tok": other, "id": ids})


def test_state_dict_lists_ragged_stream(tokens):
    _, rs, ids = tokens
    with DataLoader({"tok": rs, "id": ids}, batch_size=8) as loader:
        assert loader.state_dict()["streams"] == {"tok": N, "id": N}
        assert loader.streams["tok"] is rs
