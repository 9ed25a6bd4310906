"""A mixture's ragged gather: the joined native read (local read-only
stores) and the per-source staging read (any other source) give the bytes
one reads record by record, in batch order, and the packed loaders over
them give the same batches."""

from __future__ import annotations

import numpy as np
import pytest

import loaderx
from loaderx.converter import from_iterator
from loaderx.dataset import RaggedDataset
from loaderx.loader import _mixstreams as mixture_mod


def _records(rng: np.random.Generator, n: int, lo: int, hi: int, row: tuple[int, ...], dtype: str) -> list[np.ndarray]:
    return [rng.integers(0, 1000, (int(k), *row)).astype(dtype) for k in rng.integers(lo, hi, n)]


@pytest.fixture(scope="module")
def sources(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[str, list[np.ndarray]]]:
    root = tmp_path_factory.mktemp("mixgather")
    rng = np.random.default_rng(3)
    out = {}
    for row, dtype in (((), "int32"), ((3,), "float32")):
        key = f"{dtype}{len(row)}"
        for name, (n, lo, hi) in {"short": (300, 0, 4), "mid": (200, 0, 300), "long": (40, 1500, 4000)}.items():
            recs = _records(rng, n, lo, hi, row, dtype)
            path = str(root / f"{key}-{name}")
            from_iterator(path, iter(recs), progress=False)
            out[f"{key}-{name}"] = (path, recs)
    return out


def _mixture(sources: dict[str, tuple[str, list[np.ndarray]]], key: str, writable: bool) -> loaderx.Mixture:
    names = ("short", "mid", "long")
    return loaderx.Mixture(
        {n: {"x": RaggedDataset(sources[f"{key}-{n}"][0], writable=writable)} for n in names},
        {"short": 0.5, "mid": 0.3, "long": 0.2},
    )


@pytest.mark.parametrize("key", ["int320", "float321"])
@pytest.mark.parametrize("writable", [False, True], ids=["joined", "staged"])
def test_gather_matches_records(sources: dict[str, tuple[str, list[np.ndarray]]], key: str, writable: bool) -> None:
    mix = _mixture(sources, key, writable)
    stream = mix.loader_streams({}, np.dtype(np.int64))["x"]
    assert (stream._joined() is None) == writable  # the path under test is the one taken
    every = [r for n in ("short", "mid", "long") for r in sources[f"{key}-{n}"][1]]
    rng = np.random.default_rng(0)
    slot = [np.empty(16, dtype=np.uint8), np.empty(64, np.int64), np.empty(65, np.int64), np.empty(64, np.int64),
            np.empty(0, stream.dtype)]
    batches = [rng.integers(0, len(mix), 64) for _ in range(30)]
    batches += [np.arange(300, 364), np.full(64, 505), np.arange(64)]  # one source (two ways), and short ones
    for idx in batches:
        idx = idx.astype(np.int64)
        got = stream.gather_into(idx, slot)
        want = np.concatenate([every[i] for i in idx]) if idx.size else np.zeros((0,), stream.dtype)
        assert got.values.dtype == want.dtype and got.values.shape == want.shape
        assert np.array_equal(got.values, want)
        assert np.array_equal(got.lengths, [len(every[i]) for i in idx])
        assert np.array_equal(stream.lengths(idx), got.lengths)


@pytest.mark.parametrize("mode", ["concat", "first_fit"])
def test_packed_batches_equal_both_ways(sources: dict[str, tuple[str, list[np.ndarray]]], mode: str) -> None:
    runs = []
    for writable in (False, True):
        mix = _mixture(sources, "int320", writable)
        dl = loaderx.DataLoader(mix, batch_size=24, num_workers=0, seed=1, pack={"x": loaderx.Pack(256, mode=mode)})
        runs.append([next(dl)["x"] for _ in range(25)])
        dl.close()
    for a, b in zip(*runs):
        for field in ("values", "segment_ids", "positions", "cu_seqlens", "records", "starts", "sources"):
            assert np.array_equal(getattr(a, field), getattr(b, field)), field


def test_scatter_paths_agree() -> None:
    """The scatter's slice copies and its copy by index give the same bytes."""
    rng = np.random.default_rng(5)
    for size_range in ((1, 8), (600, 3000)):
        sizes = rng.integers(*size_range, 50) * 4
        rows_of = rng.permutation(50)
        groups = [np.sort(rows_of[:30]), np.sort(rows_of[30:])]
        starts = np.zeros(51, dtype=np.int64)
        np.cumsum(sizes, out=starts[1:])
        stage = rng.integers(0, 255, int(sizes.sum()), dtype=np.uint8)
        placed, at = [], 0
        for rows in groups:
            placed.append((rows, sizes[rows], at))
            at += int(sizes[rows].sum())
        want = np.empty(int(sizes.sum()), dtype=np.uint8)
        for rows, part, base in placed:  # record by record
            here = base + np.cumsum(part) - part
            for r, h, m in zip(rows, here, part):
                want[starts[r] : starts[r] + m] = stage[h : h + m]
        got = np.zeros_like(want)
        mixture_mod._scatter(placed, starts, stage, got, 4)
        assert np.array_equal(got, want)


def test_a_closed_source_is_refused_on_the_joined_path(sources):
    from loaderx.errors import ClosedError

    mix = _mixture(sources, "int320", False)
    stream = mix.loader_streams({}, np.dtype(np.int64))["x"]
    slot = [np.empty(16, dtype=np.uint8), np.empty(4, np.int64), np.empty(5, np.int64), np.empty(4, np.int64),
            np.empty(0, stream.dtype)]
    stream.gather_into(np.arange(4, dtype=np.int64), slot)
    stream.parts[1][1].close()
    with pytest.raises(ClosedError, match="is closed"):
        stream.gather_into(np.arange(4, dtype=np.int64), slot)
