"""Elastic resume: a state saved by any rank of a world W loads into every
rank of a world W' with the same global batch and continues the global
sample order exactly (built-in samplers, a weighted sampler and mixtures;
thread, process and torch workers); another global batch is refused with the
per-rank batch_size the new world needs."""

from __future__ import annotations

import importlib.util
import random

import numpy as np
import pytest

from loaderx import DataLoader, Mixture
from loaderx.sampler import WeightedSampler

N = 500
X = np.arange(N * 2, dtype=np.int32).reshape(N, 2)


def streams(kind: str):
    if kind == "mixture":
        return Mixture({"a": {"x": X[:300]}, "b": {"x": X[300:]}}, {0: {"a": 0.75, "b": 0.25}, 6: [1, 1]})
    return {"x": X}


def loader(kind: str, batch: int, shard: tuple[int, int], **kw) -> DataLoader:
    sampler = kind if kind in ("cyclic", "iid", "sequential") else "cyclic"
    if kind == "weighted":
        w = np.linspace(0, 1, N)
        return DataLoader(streams(kind), sampler=WeightedSampler(w, batch, seed=4, shard=shard), **kw)
    return DataLoader(streams(kind), batch_size=batch, sampler=sampler, seed=4, shard=shard, **kw)


def divisors(g: int) -> list[int]:
    return [d for d in range(1, g + 1) if g % d == 0]


@pytest.mark.parametrize("kind", ["cyclic", "iid", "sequential", "weighted", "mixture"])
def test_resume_at_random_steps_and_world_sizes(kind):
    rng = random.Random(hash(kind) % 1000)
    for _ in range(6):
        g = rng.choice([12, 24, 30, 36])
        w1, w2 = rng.choice(divisors(g)), rng.choice(divisors(g))
        stop = rng.randint(0, 15)
        ref = loader(kind, g, (0, 1), num_workers=0)
        before = [loader(kind, g // w1, (r, w1), num_workers=0) for r in range(w1)]
        for s in range(stop):
            assert (np.concatenate([b.indices(s) for b in before]) == ref.indices(s)).all()
            for b in before:
                next(b)
        state = before[rng.randrange(w1)].state_dict()  # whichever rank saved it
        after = [loader(kind, g // w2, (r, w2), num_workers=1) for r in range(w2)]
        for a in after:
            a.load_state_dict(state)
        for s in range(stop, stop + 8):
            got = np.concatenate([next(a)["x"] for a in after])
            assert (got == X[ref.indices(s)]).all(), (kind, g, w1, w2, stop, s)
        for a in after:
            a.close()


@pytest.mark.parametrize("kind", ["cyclic", "mixture"])
def test_another_global_batch_is_refused_naming_the_batch_size_needed(kind):
    state = loader(kind, 8, (1, 4), num_workers=0).state_dict()  # global batch 32
    with pytest.raises(ValueError, match=r"global batch 32 \(batch_size=8 x world 4\).*batch_size=16 with world 2"):
        loader(kind, 10, (0, 2), num_workers=0).load_state_dict(state)
    with pytest.raises(ValueError, match="a world that divides 32 \\(world 3 does not\\)"):
        loader(kind, 10, (0, 3), num_workers=0).load_state_dict(state)


def test_process_workers_resume_a_state_of_another_world():
    ref = loader("mixture", 24, (0, 1), num_workers=0)
    ranks = [loader("mixture", 8, (r, 3), num_workers=0) for r in range(3)]
    for b in ranks:
        for _ in range(5):
            next(b)
    state = ranks[2].state_dict()
    for w2 in (1, 2):
        after = [loader("mixture", 24 // w2, (r, w2), num_workers=2, workers="process") for r in range(w2)]
        for a in after:
            a.load_state_dict(state)
        for s in range(5, 12):
            got = np.concatenate([next(a)["x"] for a in after])
            assert (got == X[ref.indices(s)]).all(), (w2, s)
        for a in after:
            a.close()


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch not installed")
def test_torch_workers_resume_a_state_of_another_world():
    import torch.utils.data

    from loaderx.torch import LoaderIterable

    ref = loader("mixture", 24, (0, 1), num_workers=0)
    half = loader("mixture", 12, (1, 2), num_workers=0, steps=14)
    for _ in range(4):
        next(half)
    state = half.state_dict()
    it = LoaderIterable(streams("mixture"), batch_size=24, seed=4, steps=14)
    it.load_state_dict(state)
    dl = torch.utils.data.DataLoader(it, batch_size=None, num_workers=2, multiprocessing_context="spawn")
    got = [b["x"].numpy() for b in dl]
    assert len(got) == 10
    for s, x in zip(range(4, 14), got):
        assert (x == X[ref.indices(s)]).all(), s
