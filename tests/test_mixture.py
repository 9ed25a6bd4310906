"""Mixtures of named sources: the per-step counts (both bounds of the exact
schedule, over many random weights, batch sizes, steps and weight changes;
the sampled variant), each source's coverage, the batches' contents, thread
and process workers, resume across a weight change, and every refusal."""

from __future__ import annotations

import itertools
import random
from fractions import Fraction

import numpy as np
import pytest

import loaderx
from loaderx import DataLoader, Mixture
from loaderx.loader._schedule import CHECKPOINT, ExactCounts, SampledCounts, Schedule, check_schedule, spread


def random_weights(rng: random.Random, k: int) -> list:
    kinds = [
        lambda: 0,
        lambda: rng.randint(1, 10**7),  # token counts
        lambda: round(rng.random(), rng.randint(1, 4)),  # floats such as 0.35
        lambda: Fraction(rng.randint(0, 50), rng.randint(1, 50)),
    ]
    w = [rng.choice(kinds)() for _ in range(k)]
    if not any(w):
        w[rng.randrange(k)] = 1
    return w


def assert_bounds(w, g, counts_by_step):
    """Every step's count within ±1 of w·g, and every running sum within ±1
    of w·g·(s + 1), both strictly; every step sums to g."""
    run = [0] * len(w)
    for s, c in enumerate(counts_by_step):
        assert sum(c) == g, (s, c)
        for i, x in enumerate(c):
            run[i] += x
            target = w[i] * g
            assert abs(x - target) < 1, f"step {s} source {i}: {x} records, target {target}"
            assert abs(run[i] - target * (s + 1)) < 1, f"step {s} source {i}: running {run[i]}, target {target * (s + 1)}"


def test_exact_counts_hold_both_bounds_for_random_weights_and_batches():
    rng = random.Random(20261201)
    for _ in range(150):
        k = rng.randint(1, 6)
        names = [f"s{i}" for i in range(k)]
        (_, w), = check_schedule(random_weights(rng, k), names)
        g = rng.randint(1, 600)
        steps = rng.randint(1, 300)
        counts = ExactCounts(w, g)
        cum = [counts.before(t) for t in range(steps + 1)]
        assert_bounds(w, g, [[b - a for a, b in zip(cum[t], cum[t + 1])] for t in range(steps)])


def test_exact_counts_at_any_step_match_the_walk_from_step_zero():
    # a period of millions (token-count weights): checkpoints, not a replay
    w = check_schedule([1_234_567, 7_654_321, 1_000_003, 999_983], list("abcd"))[0][1]
    walked = ExactCounts(w, 256)
    cum = [walked.before(t) for t in range(3 * CHECKPOINT + 5)]
    assert walked.period > 10**6
    rng = random.Random(5)
    fresh = ExactCounts(w, 256)
    for t in rng.sample(range(len(cum)), 40) + [len(cum) - 1, 0, CHECKPOINT, CHECKPOINT - 1]:
        assert fresh.before(t) == cum[t], t
    # a small period: any step, however far, costs at most a period
    small = check_schedule({"a": 0.35, "b": 0.4, "c": 0.25}, list("abc"))[0][1]
    far = ExactCounts(small, 100)
    s = 10**7 + 3
    a, b = far.before(s), far.before(s + 1)
    assert sum(b) - sum(a) == 100 and all(abs(x * 100 * (s + 1) - y) < 1 for x, y in zip(small, b))


def test_weight_changes_keep_the_bounds_within_each_segment():
    rng = random.Random(7)
    for _ in range(40):
        k = rng.randint(2, 5)
        names = [f"s{i}" for i in range(k)]
        starts = sorted({0, *rng.sample(range(1, 200), rng.randint(1, 3))})
        schedule = {s: random_weights(rng, k) for s in starts}
        segments = check_schedule(schedule, names)
        g = rng.randint(1, 300)
        sched = Schedule(segments, g, "exact", 0)
        windows = [sched.window(s) for s in range(260)]
        for (b0, c0), (b1, _) in itertools.pairwise(windows):
            assert [x + y for x, y in zip(b0, c0)] == b1  # running counts chain across changes
        bounds = [*starts, 260]
        for (start, w), end in zip(segments, bounds[1:]):
            assert_bounds(w, g, [windows[s][1] for s in range(start, end)])


def test_sampled_counts_are_multinomial_with_running_sums_from_the_bridge():
    w = check_schedule({"a": 0.5, "b": 0.3, "c": 0.2}, list("abc"))[0][1]
    sampled = SampledCounts(w, 64, 11, 0)
    per = [[b - a for a, b in zip(sampled.before(t), sampled.before(t + 1))] for t in range(400)]
    assert all(sum(c) == 64 for c in per)
    assert len({tuple(c) for c in per}) > 20  # counts vary step to step
    share = np.array(per).sum(0) / (400 * 64)
    assert np.allclose(share, [0.5, 0.3, 0.2], atol=0.02)
    fresh = SampledCounts(w, 64, 11, 0)
    assert fresh.before(399) == list(np.array(per[:399]).sum(0))  # straight to a step
    far = fresh.before(5_000_000)  # past one top block of the bridge, without a replay
    assert sum(far) == 64 * 5_000_000
    assert [b - a for a, b in zip(far, fresh.before(5_000_001))] != [0, 0, 0]
    other = SampledCounts(w, 64, 12, 0)
    assert [other.before(t) for t in range(50)] != [sampled.before(t) for t in range(50)]


def test_spread_interleaves_and_keeps_each_source_in_order():
    src, j = spread([5, 3, 0, 8])
    assert sorted(src.tolist()) == [0] * 5 + [1] * 3 + [3] * 8
    for i in (0, 1, 3):
        assert j[src == i].tolist() == list(range((src == i).sum()))
    halves = [np.bincount(src[:8], minlength=4), np.bincount(src[8:], minlength=4)]
    assert all(abs(int(h[i]) - c / 2) <= 1 for h in halves for i, c in enumerate([5, 3, 0, 8]))


@pytest.fixture
def two_sources():
    a = np.arange(1000 * 3, dtype=np.float32).reshape(1000, 3)
    b = -np.arange(40 * 3, dtype=np.float32).reshape(40, 3) - 1
    return {"a": {"x": a, "id": np.arange(1000)}, "b": {"x": b, "id": np.arange(40) + 10_000}}


def test_batches_hold_the_sources_records_with_their_source(two_sources):
    mix = Mixture(two_sources, {"a": 0.7, "b": 0.3})
    assert mix.names == ("a", "b") and mix.sizes == (1000, 40) and len(mix) == 1040
    every_x = np.concatenate([two_sources["a"]["x"], two_sources["b"]["x"]])
    with DataLoader(mix, batch_size=20, num_workers=2, seed=4, workers="thread") as loader:
        for step in range(10):
            batch = next(loader)
            idx = loader.indices(step)
            src, rec = mix.locate(idx)
            assert (batch["x"] == every_x[idx]).all()
            assert batch["source"].dtype == np.int32 and (batch["source"] == src).all()
            assert np.bincount(src, minlength=2).tolist() == [14, 6]
            assert (rec < np.array(mix.sizes)[src]).all()


def source_stream(loader: DataLoader, mix: Mixture, steps: int) -> dict[int, list[int]]:
    """Each source's records in the order it gave them over ``steps`` steps."""
    seen: dict[int, list[int]] = {i: [] for i in range(len(mix.names))}
    for s in range(steps):
        src, rec = mix.locate(loader.indices(s))
        for i in seen:
            seen[i].extend(rec[src == i].tolist())
    return seen


def test_each_source_is_covered_once_per_cycle_whatever_the_mix(two_sources):
    mix = Mixture(two_sources, {0: {"a": 0.9, "b": 0.1}, 30: {"a": 0.2, "b": 0.8}})
    loader = DataLoader(mix, batch_size=37, num_workers=0, seed=1)
    seen = source_stream(loader, mix, 200)
    for i, n in enumerate(mix.sizes):
        got = seen[i]
        assert len(got) >= 2 * n
        for c in range(len(got) // n):
            assert sorted(got[c * n : (c + 1) * n]) == list(range(n)), (i, c)
        assert got[:n] != got[n : 2 * n]  # a fresh permutation each cycle


def test_sources_of_very_different_sizes_and_a_weight_of_zero():
    big = np.arange(10_000_000, dtype=np.int32)
    small = np.arange(1000, dtype=np.int32) + 10**8
    never = np.full(5, -1, dtype=np.int32)
    mix = Mixture({"big": {"t": big}, "small": {"t": small}, "never": {"t": never}},
                  {"big": 3, "small": 1, "never": 0})
    with DataLoader(mix, batch_size=64, num_workers=0, seed=2) as loader:
        for _ in range(40):
            batch = next(loader)
            assert np.bincount(batch["source"], minlength=3).tolist() == [48, 16, 0]
            assert (batch["t"][batch["source"] == 0] < 10**8).all()
    seen = source_stream(DataLoader(mix, batch_size=64, num_workers=0, seed=2), mix, 125)
    assert sorted(seen[1][:1000]) == list(range(1000)) and seen[2] == []


def test_sampled_mixture_loader_and_iid_sources(two_sources):
    mix = Mixture(two_sources, {"a": 0.5, "b": 0.5}, counts="sampled", sampler="iid")
    a = [next(iter_) for iter_ in [DataLoader(mix, batch_size=32, num_workers=0, seed=3)] for _ in range(30)]
    b = list(DataLoader(mix, batch_size=32, num_workers=0, seed=3, steps=30))
    assert all((x["id"] == y["id"]).all() for x, y in zip(a, b))
    shares = [np.bincount(x["source"], minlength=2)[1] for x in a]
    assert len(set(shares)) > 3 and 0.4 < np.mean(shares) / 32 < 0.6


def test_resume_is_exact_across_a_weight_change(two_sources):
    mix = Mixture(two_sources, {0: {"a": 1, "b": 1}, 9: {"a": 0.9, "b": 0.1}, 17: [1, 3]})
    straight = [b["id"].copy() for b in DataLoader(mix, batch_size=24, num_workers=2, seed=8, steps=30)]
    rng = random.Random(3)
    for stop in rng.sample(range(1, 30), 6):
        first = DataLoader(mix, batch_size=24, num_workers=2, seed=8, steps=30)
        for _ in range(stop):
            next(first)
        state = first.state_dict()
        assert state["mixture"]["weights"]["9"] == {"a": "9/10", "b": "1/10"}
        again = DataLoader(Mixture(two_sources, {0: {"a": 1, "b": 1}, 9: {"a": 0.9, "b": 0.1}, 17: [1, 3]}),
                           batch_size=24, num_workers=1, seed=8, steps=30)
        again.load_state_dict(state)
        assert all((x == y["id"]).all() for x, y in zip(straight[stop:], again))


def test_ranks_split_the_global_batch_of_a_mixture(two_sources):
    mix = Mixture(two_sources, {"a": 0.6, "b": 0.4})
    whole = DataLoader(mix, batch_size=30, num_workers=0, seed=5)
    ranks = [DataLoader(mix, batch_size=10, num_workers=0, seed=5, shard=(r, 3)) for r in range(3)]
    for s in range(12):
        assert (np.concatenate([r.indices(s) for r in ranks]) == whole.indices(s)).all()
        assert all(abs(int((mix.locate(r.indices(s))[0] == 1).sum()) - 4) <= 2 for r in ranks)


def test_thread_and_process_workers_give_the_same_batches(tmp_path):
    dense_a = tmp_path / "dense_a"
    loaderx.from_numpy(str(dense_a), np.arange(600 * 4, dtype=np.int16).reshape(600, 4))
    records = [np.arange(i % 9 + 1, dtype=np.int32) * (i + 1) for i in range(700)]
    loaderx.from_iterator(str(tmp_path / "rag_a"), iter(records[:600]))
    loaderx.from_iterator(str(tmp_path / "rag_b"), iter(records[600:]))
    mm = np.lib.format.open_memmap(str(tmp_path / "b.npy"), mode="w+", dtype=np.int16, shape=(100, 4))
    mm[:] = -np.arange(400, dtype=np.int16).reshape(100, 4)
    mm.flush()
    mix = Mixture(
        {"a": {"x": loaderx.DenseDataset(str(dense_a)), "t": loaderx.RaggedDataset(str(tmp_path / "rag_a"))},
         "b": {"x": np.load(str(tmp_path / "b.npy"), mmap_mode="r"), "t": loaderx.RaggedDataset(str(tmp_path / "rag_b"))}},
        {0: {"a": 2, "b": 1}, 5: {"a": 1, "b": 2}},
    )
    out = {}
    for workers in ("thread", "process"):
        with DataLoader(mix, batch_size=12, num_workers=2, workers=workers, seed=6, steps=10) as loader:
            out[workers] = [(b["x"].copy(), b["source"].copy(), [a.copy() for a in b["t"]]) for b in loader]
    every = np.concatenate([np.arange(600 * 4, dtype=np.int16).reshape(600, 4), mm])
    probe = DataLoader(mix, batch_size=12, num_workers=0, seed=6)
    for s, ((x, src, (vals, offs, _)), (x2, src2, t2)) in enumerate(zip(out["thread"], out["process"])):
        idx = probe.indices(s)
        assert (x == every[idx]).all() and (x == x2).all() and (src == src2).all()
        assert all((p == q).all() for p, q in zip((vals, offs), t2[:2]))
        for k, i in enumerate(idx):
            assert (vals[offs[k] : offs[k + 1]] == records[i]).all()


def test_ragged_mixture_pads():
    a = [np.arange(n, dtype=np.int64) + 1 for n in (3, 5, 2, 7)]
    b = [np.full(n, 9, dtype=np.int64) for n in (1, 4)]
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        loaderx.from_iterator(f"{d}/a", iter(a))
        loaderx.from_iterator(f"{d}/b", iter(b))
        mix = Mixture({"a": {"t": loaderx.RaggedDataset(f"{d}/a")}, "b": {"t": loaderx.RaggedDataset(f"{d}/b")}},
                      {"a": 1, "b": 1})
        with DataLoader(mix, batch_size=4, num_workers=0, pad={"t": "max"}) as loader:
            batch = next(loader)
            dense, lengths = batch["t"]
            idx = loader.indices(0)
            every = a + b
            assert dense.shape == (4, int(lengths.max()))
            for k, i in enumerate(idx):
                assert (dense[k, : lengths[k]] == every[i]).all() and (dense[k, lengths[k] :] == 0).all()


@pytest.mark.parametrize(
    ("weights", "error", "match"),
    [
        ({"a": -1, "b": 1}, ValueError, r"weights\['a'\] is -1; weights must be finite and non-negative"),
        ({"a": 0, "b": 0.0}, ValueError, "are all 0"),
        ({"a": 1, "c": 1}, ValueError, "unknown source 'c'"),
        ({"a": float("nan"), "b": 1}, ValueError, r"weights\['a'\] is nan"),
        ({"a": float("inf"), "b": 1}, ValueError, r"weights\['a'\] is inf"),
        ({"a": True, "b": 1}, TypeError, "not a bool"),
        ({"a": "0.5", "b": 1}, TypeError, r"is '0.5' \(str\)"),
        ([1, 2, 3], ValueError, "3 weights for 2 sources"),
        ({5: {"a": 1}}, ValueError, "must start at step 0"),
        ({0: {"a": 1}, 10: {"a": -2}}, ValueError, r"weights at step 10\['a'\] is -2"),
        (0.5, TypeError, "must be a dict of source name"),
    ],
)
def test_bad_weights_are_refused_naming_the_value(two_sources, weights, error, match):
    with pytest.raises(error, match=match):
        Mixture(two_sources, weights)


def test_mismatched_sources_are_refused_naming_source_and_stream(two_sources):
    a = two_sources["a"]
    with pytest.raises(ValueError, match=r"source 'b' has streams \['x'\].*missing in 'b': \['id'\]"):
        Mixture({"a": a, "b": {"x": two_sources["b"]["x"]}}, [1, 1])
    with pytest.raises(ValueError, match="source 'b' stream 'x' has dtype float64, but in source 'a' it has float32"):
        Mixture({"a": a, "b": {"x": np.zeros((4, 3)), "id": np.arange(4)}}, [1, 1])
    with pytest.raises(ValueError, match=r"source 'b' stream 'x' has item shape \(2,\), but in source 'a' it has \(3,\)"):
        Mixture({"a": a, "b": {"x": np.zeros((4, 2), np.float32), "id": np.arange(4)}}, [1, 1])
    with pytest.raises(ValueError, match=r"source 'b': its streams must have equal lengths"):
        Mixture({"a": a, "b": {"x": np.zeros((4, 3), np.float32), "id": np.arange(5)}}, [1, 1])
    with pytest.raises(ValueError, match="source 'b' is empty"):
        Mixture({"a": a, "b": {"x": np.zeros((0, 3), np.float32), "id": np.arange(0)}}, [1, 1])
    with pytest.raises(TypeError, match="source 'b' stream 'x' must be a DenseDataset"):
        Mixture({"a": a, "b": {"x": [1, 2], "id": np.arange(2)}}, [1, 1])
    with pytest.raises(ValueError, match="source_key='id' is also a stream name"):
        Mixture(two_sources, [1, 1], source_key="id")
    with pytest.raises(ValueError, match="counts must be 'exact' or 'sampled'"):
        Mixture(two_sources, [1, 1], counts="round")
    with pytest.raises(ValueError, match="sampler=.*Mixture\\(sampler=...\\)"):
        DataLoader(Mixture(two_sources, [1, 1]), sampler="iid")
    with pytest.raises(ValueError, match="a mixture is endless"):
        DataLoader(Mixture(two_sources, [1, 1]), epoch=True)


def test_a_state_from_another_mixture_is_refused_saying_what_differs(two_sources):
    state = DataLoader(Mixture(two_sources, {"a": 0.7, "b": 0.3}), batch_size=8, num_workers=0).state_dict()
    fewer = {"a": two_sources["a"], "b": {k: v[:30] for k, v in two_sources["b"].items()}}
    cases = [
        (Mixture(fewer, {"a": 0.7, "b": 0.3}), "source 'b' had 40 records, this loader's has 30"),
        (Mixture(two_sources, {"a": 0.6, "b": 0.4}), r"weights schedule is \{'0': \{'a': '7/10', 'b': '3/10'\}\}"),
        (Mixture(two_sources, {0: {"a": 0.7, "b": 0.3}, 5: {"a": 1}}), "weights schedule"),
        (Mixture({"b": two_sources["b"], "a": two_sources["a"]}, {"a": 0.7, "b": 0.3}), r"sources are \['a', 'b'\]"),
        (Mixture(two_sources, {"a": 0.7, "b": 0.3}, counts="sampled"), "mixture counts='exact'"),
        (Mixture(two_sources, {"a": 0.7, "b": 0.3}, sampler="iid"), "mixture sampler='cyclic'"),
    ]
    for mix, match in cases:
        with pytest.raises(ValueError, match=match):
            DataLoader(mix, batch_size=8, num_workers=0).load_state_dict(state)
    plain = DataLoader(two_sources["a"], batch_size=8, num_workers=0)
    with pytest.raises(ValueError, match="from a loader over a Mixture"):
        plain.load_state_dict({**state, "streams": plain.state_dict()["streams"]})
    with pytest.raises(ValueError, match="over plain streams"):
        DataLoader(Mixture(two_sources, {"a": 0.7, "b": 0.3}), batch_size=8, num_workers=0).load_state_dict(
            plain.state_dict())


# -- packed mixtures ----------------------------------------------------------

PL = 8  # the packed row length


@pytest.fixture(scope="module")
def packed_sources(tmp_path_factory):
    """Two ragged token sources whose tokens name their source, record and
    place (source b's tokens are negative), with a dense label stream."""
    d = tmp_path_factory.mktemp("packed_mix")
    rng = np.random.default_rng(11)
    recs = {
        "a": [np.arange(n, dtype=np.int32) + i * 1000 for i, n in enumerate(rng.integers(1, 3 * PL, 90))],
        "b": [-(np.arange(n, dtype=np.int32) + i * 1000) - 1 for i, n in enumerate(rng.integers(1, 2 * PL, 40))],
    }
    for name, rs in recs.items():
        loaderx.from_iterator(str(d / name), iter(rs), progress=False)
    sources = {name: {"t": loaderx.RaggedDataset(str(d / name)), "y": np.arange(len(rs), dtype=np.int64)}
               for name, rs in recs.items()}
    yield recs, sources, d
    for s in sources.values():
        s["t"].close()


def packed_mix(sources, only_tokens: bool = True) -> Mixture:
    srcs = {k: ({"t": v["t"]} if only_tokens else v) for k, v in sources.items()}
    return Mixture(srcs, {0: {"a": 2, "b": 1}, 4: {"a": 1, "b": 1}}, schedule_unit="record_batches")


def check_packed_sources(b, mix: Mixture, every: list[np.ndarray]) -> None:
    """Each segment's tokens are its record's from its start, and its source is its record's."""
    cu = b.cu_seqlens.astype(np.int64)
    flat = b.values.reshape(-1)
    assert b.sources.dtype == np.int32 and b.sources.shape == b.records.shape
    real = b.records >= 0
    assert (b.sources[~real] == -1).all()
    np.testing.assert_array_equal(b.sources[real], mix.locate(b.records[real])[0])
    for k in np.flatnonzero(real).tolist():
        lo, hi = int(cu[k]), int(cu[k + 1])
        rec, at = int(b.records[k]), int(b.starts[k])
        np.testing.assert_array_equal(flat[lo:hi], every[rec][at : at + hi - lo])


def test_a_packed_mixture_uses_every_token_once_in_order_with_its_source(packed_sources):
    recs, sources, _ = packed_sources
    mix = packed_mix(sources)
    every = recs["a"] + recs["b"]
    with DataLoader(mix, batch_size=6, num_workers=0, seed=2, pack={"t": PL}) as dl:
        assert set(next(dl)) == {"t"}  # concat: no per-row source stream
        dl.load_state_dict({**dl.state_dict(), "step": 0})
        got = []
        for _ in range(20):
            b = next(dl)["t"]
            check_packed_sources(b, mix, every)
            got.append(b.values.reshape(-1).copy())
        flat = np.concatenate(got)
        stream = np.concatenate([every[i] for s in range(40) for i in dl.indices(s)])
        np.testing.assert_array_equal(flat, stream[: flat.size])


def test_a_first_fit_mixture_keeps_the_source_stream(packed_sources):
    recs, sources, _ = packed_sources
    mix = packed_mix(sources, only_tokens=False)
    every = recs["a"] + recs["b"]
    with DataLoader(mix, batch_size=8, num_workers=0, seed=2,
                    pack={"t": loaderx.Pack(PL, mode="first_fit", rows=5)}) as dl:
        for s in range(6):
            batch = next(dl)
            idx = dl.indices(s)
            np.testing.assert_array_equal(batch["source"], mix.locate(idx)[0])
            np.testing.assert_array_equal(batch["y"], mix.locate(idx)[1])
            b = batch["t"]
            check_packed_sources(b, mix, every)
            placed = set(b.records[b.records >= 0].tolist())
            assert placed <= set(idx.tolist()) and len(placed) + b.dropped == len(set(idx.tolist()))


@pytest.mark.parametrize("mode", ["concat", "first_fit"])
def test_a_packed_mixture_resumes_exactly_at_another_world(packed_sources, mode):
    _, sources, _ = packed_sources
    mix = packed_mix(sources)
    rng = random.Random(mode)
    fields = ("values", "segment_ids", "positions", "sources")

    def make(world, rank, **kw):
        pack = loaderx.Pack(PL, mode=mode, rows=12 // world)
        return DataLoader(mix, batch_size=24 // world, seed=3, shard=(rank, world), pack={"t": pack}, **kw)

    ref = make(1, 0, num_workers=0)
    want = [next(ref)["t"] for _ in range(12)]
    want = [{f: np.copy(getattr(b, f)) for f in fields} for b in want]
    ref.close()
    for _ in range(3):
        w1, w2, stop = rng.choice([1, 2, 3, 4, 6]), rng.choice([1, 2, 3, 4, 6]), rng.randint(0, 6)
        before = [make(w1, r, num_workers=0) for r in range(w1)]
        for _ in range(stop):
            for b in before:
                next(b)
        state = before[rng.randrange(w1)].state_dict()
        after = [make(w2, r, num_workers=1, workers="thread") for r in range(w2)]
        for a in after:
            a.load_state_dict(state)
        for s in range(stop, stop + 4):
            got = [next(a)["t"] for a in after]
            for f in ("values", "segment_ids", "positions"):
                np.testing.assert_array_equal(np.concatenate([getattr(b, f) for b in got]), want[s][f])
            if mode == "first_fit":  # padding segments split by rank: compare the real ones
                np.testing.assert_array_equal(np.concatenate([b.sources[b.sources >= 0] for b in got]),
                                              want[s]["sources"][want[s]["sources"] >= 0])
        for dl in before + after:
            dl.close()


@pytest.mark.usefixtures("deadline")
def test_a_packed_mixture_is_the_same_on_threads_and_processes(packed_sources):
    _, sources, _ = packed_sources
    mix = packed_mix(sources)
    for pack in (loaderx.Pack(PL), loaderx.Pack(PL, mode="first_fit", rows=4)):
        out = {}
        for workers in ("thread", "process"):
            with DataLoader(mix, batch_size=6, num_workers=2, workers=workers, seed=8, steps=8,
                            start_step=2, pack={"t": pack}) as dl:
                out[workers] = [[np.copy(a) for a in b["t"] if isinstance(a, np.ndarray)] for b in dl]
        assert len(out["thread"]) == 6
        for x, y in zip(out["thread"], out["process"]):
            assert len(x) == len(y) == 8
            for a, b in zip(x, y):
                np.testing.assert_array_equal(a, b)
