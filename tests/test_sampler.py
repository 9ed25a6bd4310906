"""sample() and Sampler."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from loaderx.sampler import MODES, Sampler, sample


@pytest.mark.parametrize("mode", MODES)
def test_shape_range_and_determinism(mode):
    a = sample(mode, 1000, 64, 5, seed=3)
    assert a.dtype == np.int64 and a.shape == (64,)
    assert a.min() >= 0 and a.max() < 1000
    np.testing.assert_array_equal(a, sample(mode, 1000, 64, 5, seed=3))
    out = np.full(64, -1, dtype=np.int64)
    assert sample(mode, 1000, 64, 5, seed=3, out=out) is out
    np.testing.assert_array_equal(out, a)


def test_sequential_walks_a_circular_queue():
    for step in (0, 1, 2, 7):
        want = (step * 32 + np.arange(32)) % 70
        np.testing.assert_array_equal(sample("sequential", 70, 32, step), want)
    # sharded: rank r takes positions [r*B, (r+1)*B) of the global batch
    np.testing.assert_array_equal(
        sample("sequential", 70, 8, 3, shard=(2, 4)), (3 * 32 + 16 + np.arange(8)) % 70
    )
    # the seed does not matter
    np.testing.assert_array_equal(sample("sequential", 70, 8, 3, seed=9), sample("sequential", 70, 8, 3))


def test_random_modes_depend_on_seed_and_step():
    for mode in ("iid", "cyclic"):
        a = sample(mode, 10_000, 100, 0, seed=1)
        assert not np.array_equal(a, sample(mode, 10_000, 100, 0, seed=2))
        assert not np.array_equal(a, sample(mode, 10_000, 100, 1, seed=1))


def test_cyclic_is_a_permutation_per_cycle():
    n, b = 103, 10
    steps_per_cycle = n // b
    for cycle in range(3):
        drawn = np.concatenate(
            [sample("cyclic", n, b, cycle * steps_per_cycle + j, seed=4) for j in range(steps_per_cycle)]
        )
        assert len(np.unique(drawn)) == len(drawn) == steps_per_cycle * b
    c0 = np.concatenate([sample("cyclic", n, b, j, seed=4) for j in range(steps_per_cycle)])
    c1 = np.concatenate([sample("cyclic", n, b, steps_per_cycle + j, seed=4) for j in range(steps_per_cycle)])
    assert not np.array_equal(c0, c1)  # a fresh permutation each cycle


def test_iid_is_roughly_uniform():
    n = 16
    counts = np.bincount(
        np.concatenate([sample("iid", n, 1000, s, seed=11) for s in range(40)]), minlength=n
    )
    expected = 40_000 / n
    chi2 = ((counts - expected) ** 2 / expected).sum()
    assert chi2 < 60  # 15 degrees of freedom: p < 1e-6 beyond ~55


@pytest.mark.parametrize("mode", MODES)
def test_shards_assemble_the_global_batch(mode):
    world = 3
    for step in (0, 4):
        parts = [sample(mode, 500, 16, step, seed=7, shard=(r, world)) for r in range(world)]
        np.testing.assert_array_equal(np.concatenate(parts), sample(mode, 500, 48, step, seed=7))
        if mode != "iid":
            assert len(np.unique(np.concatenate(parts))) == 48


def test_invalid_arguments_are_quoted():
    cases = [
        (dict(mode="random"), ValueError, "'random'"),
        (dict(n=0), ValueError, "n must be a positive int64, got 0"),
        (dict(batch_size=-4), ValueError, "batch_size must be a positive int64, got -4"),
        (dict(step=-1), ValueError, "step must be a non-negative int64, got -1"),
        (dict(seed=-1), ValueError, r"seed must be in \[0, 2\*\*64\), got -1"),
        (dict(seed=2**64), ValueError, "got 18446744073709551616"),
        (dict(shard=(2, 2)), ValueError, r"rank must be in \[0, 2\), got shard=\(2, 2\)"),
        (dict(shard=(0, 0)), ValueError, r"world must be at least 1, got shard=\(0, 0\)"),
        (dict(shard=3), TypeError, "shard must be a \\(rank, world\\) pair, got 3"),
        (dict(n=10, batch_size=11, mode="cyclic"), ValueError, "at most n = 10"),
        (dict(n=10, batch_size=4, shard=(0, 3), mode="cyclic"), ValueError, "4 \\* 3 = 12"),
        (dict(n=2.5), TypeError, "n must be an integer, got 2.5"),
        (dict(step="3"), TypeError, "step must be an integer, got '3'"),
        (dict(batch_size=True), TypeError, "batch_size must be an integer, got True"),
    ]
    for override, exc, msg in cases:
        args = dict(mode="iid", n=100, batch_size=8, step=0, seed=0, shard=(0, 1))
        args.update(override)
        with pytest.raises(exc, match=msg):
            sample(args.pop("mode"), args.pop("n"), args.pop("batch_size"), args.pop("step"), **args)
    # iid and sequential may draw more than n per step
    assert sample("iid", 10, 50, 0).shape == (50,)


def test_out_is_validated():
    with pytest.raises(TypeError, match="int64"):
        sample("iid", 10, 4, 0, out=np.empty(4, dtype=np.int32))
    with pytest.raises(ValueError, match=r"shape \(4,\)"):
        sample("iid", 10, 4, 0, out=np.empty(5, dtype=np.int64))
    with pytest.raises(ValueError, match="C-contiguous"):
        sample("iid", 10, 4, 0, out=np.empty(8, dtype=np.int64)[::2])
    ro = np.empty(4, dtype=np.int64)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        sample("iid", 10, 4, 0, out=ro)
    with pytest.raises(TypeError, match="numpy.ndarray"):
        sample("iid", 10, 4, 0, out=[0, 0, 0, 0])


def test_sampler_dataclass():
    s = Sampler("cyclic", n=1000, batch_size=32, seed=5, shard=[1, 2])
    assert s.shard == (1, 2)  # normalised to a tuple
    assert repr(s) == "Sampler(mode='cyclic', n=1000, batch_size=32, seed=5, shard=(1, 2))"
    assert s.global_batch_size == 64
    assert s.steps_per_cycle == 15
    assert Sampler("iid", 10, 2).steps_per_cycle is None
    np.testing.assert_array_equal(s(7), sample("cyclic", 1000, 32, 7, seed=5, shard=(1, 2)))
    out = np.empty(32, dtype=np.int64)
    assert s(7, out=out) is out
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.seed = 6  # type: ignore[misc]
    assert s == Sampler("cyclic", 1000, 32, 5, (1, 2))
    assert hash(s) == hash(Sampler("cyclic", 1000, 32, 5, (1, 2)))
    assert Sampler("iid", np.int64(10), 2).n == 10
    with pytest.raises(ValueError, match="'shuffle'"):
        Sampler("shuffle", 10, 2)
    with pytest.raises(ValueError, match="got 0"):
        Sampler("iid", 0, 2)
    with pytest.raises(ValueError, match="at most n = 10"):
        Sampler("cyclic", 10, 20)
    with pytest.raises(ValueError, match="got -2"):
        s(-2)
