"""What a loader must not do silently: let a custom sampler replace a
Mixture's weights, read a NumPy float weight as its binary fraction, or load
a state saved over other data of the same size."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

import loaderx
from loaderx import DataLoader, Mixture
from loaderx.sampler import WeightedSampler


def test_a_custom_sampler_cannot_replace_a_mixtures_weights():
    x = np.arange(100, dtype=np.int32)
    mix = Mixture({"a": {"x": x[:60]}, "b": {"x": x[60:]}}, {"a": 0.9, "b": 0.1})
    sampler = WeightedSampler(np.ones(100), 10, seed=0)
    with pytest.raises(ValueError, match=r"sampler=WeightedSampler\(...\) with a Mixture.*replace them") as e:
        DataLoader(mix, sampler=sampler, batch_size=10)
    assert "Stream" not in str(e.value) and "Draw" not in str(e.value)


@pytest.mark.parametrize("kind", [np.float16, np.float32, np.float64])
def test_numpy_float_weights_are_the_decimals_typed(kind):
    x = np.arange(100, dtype=np.int32)
    mix = Mixture({"a": {"x": x[:50]}, "b": {"x": x[50:]}, "c": {"x": x[:10]}},
                  {"a": kind(0.6), "b": kind(0.3), "c": kind(0.1)})
    assert mix.weights[0][1] == (Fraction(3, 5), Fraction(3, 10), Fraction(1, 10))
    with DataLoader(mix, batch_size=10, num_workers=0) as dl:
        assert dl.state_dict()["mixture"]["weights"] == {"0": {"a": "3/5", "b": "3/10", "c": "1/10"}}
        assert [int((next(dl)["source"] == 2).sum()) for _ in range(5)] == [1] * 5  # 0.1 of 10, every step
    with pytest.raises(ValueError, match=r"weights\['a'\] is np.float32\(nan\)|weights\['a'\] is nan"):
        Mixture({"a": {"x": x}}, {"a": np.float32("nan")})


def test_a_state_of_other_data_of_the_same_size_is_refused(tmp_path):
    rng = np.random.default_rng(0)
    paths = {}
    for name in ("a", "a2", "b"):
        paths[name] = str(tmp_path / name)
        loaderx.from_iterator(paths[name], (rng.integers(0, 9, int(k)).astype(np.int32) for k in rng.integers(1, 30, 80)),
                              progress=False)

    def plain(name):
        return DataLoader({"t": loaderx.RaggedDataset(paths[name])}, batch_size=4, num_workers=0)

    with plain("a") as dl:
        next(dl)
        state = dl.state_dict()
    assert set(state["data"]) == {"t"}
    with plain("a2") as other:  # as many records, other ones
        with pytest.raises(ValueError, match=r"other data: stream 't' has the same record count but other records"):
            other.load_state_dict(state)
        other.load_state_dict({k: v for k, v in state.items() if k != "data"})  # a state from before fingerprints
    with plain("a") as same:
        same.load_state_dict(state)

    def mixed(first):
        return DataLoader(Mixture({"web": {"t": loaderx.RaggedDataset(paths[first])},
                                   "code": {"t": loaderx.RaggedDataset(paths["b"])}}, [2, 1]),
                          batch_size=4, num_workers=0)

    with mixed("a") as dl:
        next(dl)
        state = dl.state_dict()
    with mixed("a2") as other, pytest.raises(ValueError, match=r"other data: source 'web' has the same record count"):
        other.load_state_dict(state)
    with mixed("a") as same:
        same.load_state_dict(state)
    # arrays are fingerprinted too
    x = np.arange(40, dtype=np.int64)
    with DataLoader({"x": x}, batch_size=4, num_workers=0) as dl:
        state = dl.state_dict()
    with DataLoader({"x": x[::-1].copy()}, batch_size=4, num_workers=0) as other, pytest.raises(ValueError,
                                                                                                  match="other data"):
        other.load_state_dict(state)
