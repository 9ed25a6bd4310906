"""Resuming from a state's cursor: the same batches as an uninterrupted run,
for little work whatever the step.

A loader with a concat-packed stream or an exact mixture saves a cursor
(loaderx.loader._state): where its step starts in the stream of tokens, and
the mixture schedule's position. These tests check that a resume from it
gives byte-identical batches (against an uninterrupted run over a few
thousand steps, and against the replay of a state without a cursor at
large steps), that it counts no more than a chunk or two of sampler steps
and of PD² steps at any step (TokenIndex.counted and _PD2.work count them),
that states stay JSON-safe, small and chain exactly, that process and torch
workers seek to it too, and that a cursor that was changed or does not fit
the data is refused.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import loaderx
from loaderx import DataLoader, Mixture, Pack
from loaderx.loader import _packing, _schedule
from loaderx.loader._packing import TokenIndex
from loaderx.loader._schedule import _PD2
from loaderx.loader._state import seal_cursor

ROOT = Path(__file__).resolve().parent.parent
L = 8  # packed row length
SIZES = {"a": 150, "b": 90, "c": 40}
#: token counts as weights: the exact schedule's period is in the millions
TOKEN_WEIGHTS = {"a": 12_000_017, "b": 7_000_003, "c": 3_000_001}


def records(name: str, n: int, seed: int) -> list[np.ndarray]:
    """Records whose tokens name their source, record and place."""
    rng = np.random.default_rng(seed)
    base = {"a": 0, "b": 1, "c": 2}[name] * 10**6
    return [np.arange(k, dtype=np.int32) + base + 1000 * i for i, k in enumerate(rng.integers(1, 3 * L, n))]


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    d = tmp_path_factory.mktemp("cursor")
    out = {}
    for k, (name, n) in enumerate(SIZES.items()):
        loaderx.from_iterator(str(d / name), iter(records(name, n, k)), progress=False)
        out[name] = loaderx.RaggedDataset(str(d / name))
    # the same number of records as "a", other lengths: a state of "a" saved over other data
    loaderx.from_iterator(str(d / "other"), iter(records("a", SIZES["a"], 99)), progress=False)
    out["other"] = loaderx.RaggedDataset(str(d / "other"))
    yield out, d
    for ds in out.values():
        ds.close()


#: name -> (weights or None for one store, counts, pack mode or None)
CONFIGS = {
    "store concat": (None, "exact", "concat"),
    "mixture concat": (TOKEN_WEIGHTS, "exact", "concat"),
    "mixture first_fit": (TOKEN_WEIGHTS, "exact", "first_fit"),
    "mixture unpacked": (TOKEN_WEIGHTS, "exact", None),
    "sampled concat": (TOKEN_WEIGHTS, "sampled", "concat"),
    "schedule concat": ({0: TOKEN_WEIGHTS, 300: {"a": 1, "b": 2, "c": 4}, 900: [5, 3, 1_000_003]}, "exact", "concat"),
}


def make(stores, config: str, world: int = 1, rank: int = 0, store: str = "a", **kw) -> DataLoader:
    """A loader of ``config``: a global batch of 4 records, 4 global rows of L."""
    weights, counts, mode = CONFIGS[config]
    ds = stores[0]
    if weights is None:
        streams = {"t": ds[store]}
    else:
        unit = "record_batches" if mode == "concat" else "steps"
        streams = Mixture({name: {"t": ds[name]} for name in SIZES}, weights, counts=counts, schedule_unit=unit)
    pack = None if mode is None else {"t": Pack(L, mode=mode, rows=4 // world)}
    return DataLoader(streams, batch_size=4 // world, shard=(rank, world), seed=3, pack=pack, **kw)


def snap(x):
    """A batch's arrays, copied (a packed or ragged batch as a tuple of them)."""
    if isinstance(x, np.ndarray):
        return x.copy()
    if isinstance(x, dict):
        return {k: snap(v) for k, v in x.items()}
    if isinstance(x, tuple):
        items = [snap(v) for v in x]
        return type(x)(*items) if hasattr(x, "_fields") else tuple(items)
    return x


def same(a, b, where: str) -> None:
    if isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for k in a:
            same(a[k], b[k], f"{where} {k}")
    elif isinstance(a, tuple):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            same(x, y, f"{where}[{i}]")
    elif isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and a.shape == b.shape, where
        assert a.tobytes() == b.tobytes(), where
    else:
        assert a == b, where


def json_safe(state: dict) -> dict:
    return json.loads(json.dumps(state))


def work() -> np.ndarray:
    return np.array([TokenIndex.counted, _PD2.work])


@pytest.fixture
def small_chunks(monkeypatch):
    """Chunks and checkpoints of 64 steps, so that a few thousand steps
    cross many of them (and the evicted chunk sums are summed again)."""
    monkeypatch.setattr(_packing, "CHUNK_STEPS", 64)
    monkeypatch.setattr(_packing, "CACHED_CHUNKS", 4)
    monkeypatch.setattr(_schedule, "CHECKPOINT", 64)
    return 64


# -- against an uninterrupted run -----------------------------------------------


@pytest.mark.parametrize("config", list(CONFIGS))
def test_a_cursor_resume_is_the_uninterrupted_run(stores, config, small_chunks):
    c = small_chunks
    steps, after = 2000, 3
    points = [1, 777, 1999 - after]
    want, states = {}, {}
    with make(stores, config, num_workers=0) as dl:
        for s in range(steps):
            if any(p <= s <= p + after for p in points):
                states[s] = json_safe(dl.state_dict())
            batch = next(dl)
            if any(p <= s < p + after for p in points):
                want[s] = snap(batch)
    weights, counts, mode = CONFIGS[config]
    has_cursor = mode == "concat" or (counts == "exact" and weights is not None)
    assert ("cursor" in states[1]) == has_cursor
    if has_cursor:
        assert len(json.dumps(states[points[-1]]["cursor"])) < 400  # small: a few ints per part
    for p in points:
        with make(stores, config, num_workers=2, workers="thread") as resumed:
            before = work()
            resumed.load_state_dict(states[p])
            got = [snap(next(resumed)) for _ in range(after)]
            spent = work() - before
            for k, b in enumerate(got):
                same(b, want[p + k], f"{config}: step {p + k} after a resume at {p}")
            # a state saved after the resume is the uninterrupted run's: chains of resumes stay exact
            assert json_safe(resumed.state_dict()) == states[p + after]
        if has_cursor:  # a chunk or two of sampler steps, whatever the step (the prefetch adds a few steps)
            assert spent[0] <= 2 * c, (config, p, spent)
            assert spent[1] <= 4 * c + 64, (config, p, spent)
    # a state without its cursor (as the release before cursors saved it) loads by replay, exactly
    old = {k: v for k, v in states[points[-1]].items() if k != "cursor"}
    with make(stores, config, num_workers=0) as replay:
        before = work()
        replay.load_state_dict(old)
        same(snap(next(replay)), want[points[-1]], f"{config}: a state without a cursor")
        spent = work() - before
        assert json_safe(replay.state_dict()) == states[points[-1] + 1]
    if has_cursor and mode == "concat":  # the replay counts every sampler step before: what the cursor saves
        assert spent[0] > 8 * c, spent


@pytest.mark.parametrize("mode", ["concat", "first_fit"])
def test_an_elastic_resume_from_a_cursor_is_exact(stores, mode, small_chunks):
    config = "mixture concat" if mode == "concat" else "mixture first_fit"
    with make(stores, config, num_workers=0) as one:
        for _ in range(1234):
            next(one)
        want = [snap(next(one)["t"]) for _ in range(3)]
    ranks = [make(stores, config, world=2, rank=r, num_workers=0) for r in range(2)]
    for dl in ranks:
        dl.load_state_dict({**ranks[0].state_dict(), "step": 1200})  # replay to 1200, then walk
        for _ in range(34):
            next(dl)
    saved = [json_safe(dl.state_dict()) for dl in ranks]
    assert saved[0]["cursor"] == saved[1]["cursor"] and saved[0]["step"] == 1234  # global: the same on every rank
    for dl in ranks:
        dl.close()
    fields = ("values", "segment_ids", "positions")
    for world in (1, 4):
        after = [make(stores, config, world=world, rank=r, num_workers=0) for r in range(world)]
        before = work()
        for dl in after:
            dl.load_state_dict(saved[1])
        for s in range(3):
            got = [next(dl)["t"] for dl in after]
            for f in fields:
                joined = np.concatenate([getattr(b, f) for b in got])
                assert joined.tobytes() == getattr(want[s], f).tobytes(), (world, s, f)
        assert (work() - before)[0] <= 2 * 64 * world
        for dl in after:
            dl.close()


def test_loaders_that_seek_for_free_save_no_cursor(stores):
    """Nothing of these depends on the steps before: their states are as
    they were (no cursor), and resume exactly."""
    ds = stores[0]
    mixture = {name: {"t": ds[name]} for name in SIZES}
    cases = [
        ({"t": ds["a"]}, {}),
        ({"t": ds["a"]}, {"pack": {"t": Pack(L, mode="first_fit", rows=3)}}),
        ({"t": ds["a"]}, {"pack": {"t": Pack(L, mode="first_fit", rows=3)}, "epoch": True, "sampler": "sequential"}),
        (Mixture(mixture, TOKEN_WEIGHTS, counts="sampled"), {}),
        (Mixture(mixture, TOKEN_WEIGHTS, counts="sampled"), {"pack": {"t": Pack(L, mode="first_fit", rows=3)}}),
    ]
    for streams, kw in cases:
        with DataLoader(streams, batch_size=4, seed=1, num_workers=0, **kw) as dl:
            for _ in range(20):
                next(dl)
            state = json_safe(dl.state_dict())
            want = snap(next(dl))
        assert "cursor" not in state, kw
        with DataLoader(streams, batch_size=4, seed=1, num_workers=0, **kw) as again:
            again.load_state_dict(state)
            same(snap(next(again)), want, str(kw))


def test_a_changed_step_resumes_exactly_from_the_cursor_or_from_step_0(stores, small_chunks):
    with make(stores, "mixture concat", num_workers=0) as dl:
        run = [snap(next(dl)) for _ in range(900)]
        state = json_safe(dl.state_dict())  # at step 900
    for step, uses_cursor in ((890, False), (900, True), (850, False)):
        with make(stores, "mixture concat", num_workers=0) as again:
            before = work()
            again.load_state_dict({**state, "step": step})
            for s in range(step, 900):
                same(snap(next(again)), run[s], f"from {step}: step {s}")
            assert ((work() - before)[0] <= 2 * 64) == uses_cursor


def test_a_schedule_continues_from_its_anchors_as_from_step_0(small_chunks):
    """Random weights (token counts, floats, fractions; two sources taking
    extras or more) and weight changes: a fresh schedule given the anchors
    at a step has every later step's counts of one walked from step 0."""
    import random

    from loaderx.loader._schedule import Schedule, check_schedule

    rng = random.Random(11)
    for _ in range(30):
        k = rng.randint(2, 5)
        names = [f"s{i}" for i in range(k)]
        starts = sorted({0, *rng.sample(range(1, 400), rng.randint(0, 2))})
        weights = {s: [rng.choice([rng.randint(1, 10**7), round(rng.random(), 3) + 0.001]) for _ in names]
                   for s in starts}
        g = rng.randint(1, 70)
        walked = Schedule(check_schedule(weights, names), g, "exact", 0)
        windows = [walked.window(s) for s in range(600)]
        at = sorted(rng.sample(range(600), 2))
        anchors = json.loads(json.dumps(walked.anchors(at)))
        fresh = Schedule(check_schedule(weights, names), g, "exact", 0)
        before = _PD2.work
        fresh.seek(anchors)
        for s in range(at[0], 600):
            assert fresh.window(s) == windows[s], (weights, g, at, s)
        assert _PD2.work - before <= 600 - at[0] + 2 * 64 * len(starts)
        u, c = anchors[-1]
        with pytest.raises(ValueError):  # counts the schedule never has at that step
            fresh.seek([[u, [c[0] + 2, c[1] - 2, *c[2:]]]])


# -- large steps --------------------------------------------------------------


def test_a_resume_at_step_a_million_counts_one_chunk(stores):
    """One store, sequential: where any step starts in the stream of tokens
    is plain arithmetic here, so a cursor at step 10**6 is known without a
    replay, and so are the rows it must give."""
    ds = stores[0]["a"]
    lens = ds.lengths()
    every = np.concatenate(records("a", SIZES["a"], 0))
    total = int(lens.sum())
    cum = np.concatenate([[0], np.cumsum(lens)])
    g, rows = 4, 4
    step = 10**6

    def tokens_before(t: int) -> int:  # sampler step t draws records t*g .. t*g + g - 1, wrapping
        passes, at = divmod(t * g, SIZES["a"])
        return passes * total + int(cum[at])

    first = step * rows * L
    lo, hi = 0, first + 1  # the last sampler step whose tokens start at or before `first`
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if tokens_before(mid) <= first else (lo, mid)
    t = lo
    r, n = first - tokens_before(t), tokens_before(t + 1) - tokens_before(t)
    state = DataLoader({"t": ds}, batch_size=g, sampler="sequential", pack={"t": L}, num_workers=0).state_dict()
    state = {**state, "step": step, "cursor": seal_cursor({"step": step, "pack": {"t": [t, r, n]}})}
    with DataLoader({"t": ds}, batch_size=g, sampler="sequential", pack={"t": L}, num_workers=0) as dl:
        before = work()
        dl.load_state_dict(json_safe(state))
        got = [next(dl)["t"].values.reshape(-1).copy() for _ in range(3)]
        spent = work() - before
        assert json_safe(dl.state_dict())["cursor"]["pack"]["t"][0] > t
    assert spent[0] <= _packing.CHUNK_STEPS, spent  # one chunk, where a replay would sum ~600,000 steps
    stream = np.concatenate([every] * 2)
    for k, b in enumerate(got):
        at = (first + k * rows * L) % total
        np.testing.assert_array_equal(b, stream[at : at + rows * L])


def test_an_exact_mixture_at_step_a_million_seeks_without_replaying():
    """Weights whose schedule has a period of 60,013 steps: the replay of a
    state without a cursor at step 10**6 runs ~4*10**4 PD² steps (10**6 mod
    the period), a cursor's seek a handful; the batches are the same."""
    arrays = {name: np.arange(n * 2, dtype=np.int32).reshape(n, 2) + 10**5 * k for k, (name, n) in
              enumerate({"a": 300, "b": 200, "c": 100, "d": 50}.items())}
    weights = {"a": 15013, "b": 15017, "c": 15031, "d": 14952}  # they sum to the prime 60013: the period
    mix = Mixture({k: {"x": v} for k, v in arrays.items()}, weights)
    probe = DataLoader(mix, batch_size=16, num_workers=0)
    period = probe.sampler.schedule.parts[0]._pd2.period
    assert 10**4 < period < 10**5 and 10**6 % period > 10**4
    old = {k: v for k, v in probe.state_dict().items() if k != "cursor"}
    before = work()
    probe.load_state_dict({**old, "step": 10**6})
    want = [snap(next(probe)) for _ in range(3)]
    replayed = work() - before
    probe.load_state_dict({**old, "step": 10**6})
    state = json_safe(probe.state_dict())
    assert [a[0] for a in state["cursor"]["mixture"]] == [10**6]
    with DataLoader(mix, batch_size=16, num_workers=0) as dl:
        before = work()
        dl.load_state_dict(state)
        got = [snap(next(dl)) for _ in range(3)]
        spent = work() - before
    assert replayed[1] > 10**4 and spent[1] <= 8, (replayed, spent)
    for k, (a, b) in enumerate(zip(got, want)):
        same(a, b, f"step {10**6 + k}")
    probe.close()


def test_a_packed_mixture_cursor_matches_the_replay_at_a_large_step(stores):
    """The replay of a state without a cursor (summing every sampler step
    before) and a cursor's seek give the same rows at step 30,000; the
    cursor counts a chunk, the replay ~20 of them."""
    step = 30_000
    with make(stores, "schedule concat", num_workers=0) as old:
        state = {k: v for k, v in old.state_dict().items() if k != "cursor"}
        before = work()
        old.load_state_dict({**state, "step": step})
        saved = json_safe(old.state_dict())
        want = [snap(next(old)) for _ in range(4)]
        replayed = work() - before
        later = json_safe(old.state_dict())
    with make(stores, "schedule concat", num_workers=0) as new:
        before = work()
        new.load_state_dict(saved)
        got = [snap(next(new)) for _ in range(4)]
        spent = work() - before
        assert json_safe(new.state_dict()) == later
    for k, (a, b) in enumerate(zip(got, want)):
        same(a, b, f"step {step + k}")
    assert replayed[0] >= 10 * _packing.CHUNK_STEPS and spent[0] <= _packing.CHUNK_STEPS, (replayed, spent)
    assert spent[1] <= 2 * _packing.CHUNK_STEPS + _schedule.CHECKPOINT, spent


# -- refusals -------------------------------------------------------------------


def resealed(state: dict, **changes) -> dict:
    """The state with cursor entries changed and the digest made again (as
    a program that rewrites states might)."""
    body = {k: v for k, v in state["cursor"].items() if k != "check"}
    body.update(changes)
    return {**state, "cursor": seal_cursor(body)}


def test_a_cursor_that_was_changed_or_does_not_fit_is_refused(stores):
    with make(stores, "mixture concat", num_workers=0) as dl:
        for _ in range(50):
            next(dl)
        state = json_safe(dl.state_dict())
    cur = state["cursor"]
    t, r, n = cur["pack"]["t"]
    edited = json.loads(json.dumps(state))
    edited["cursor"]["pack"]["t"][1] = r + 1
    anchors = cur["mixture"]
    off_sum = [[anchors[0][0], [anchors[0][1][0] + 1, *anchors[0][1][1:]]], *anchors[1:]]
    shifted = [[anchors[0][0], [anchors[0][1][0] + 2, anchors[0][1][1] - 2, *anchors[0][1][2:]]], *anchors[1:]]
    cases = [
        (edited, "does not match its check"),
        (resealed(state, pack={"t": [t, n, n]}), f"token {n} is not one of sampler step {t}'s {n}"),
        (resealed(state, pack={"t": [t, r, n + 1]}), f"sampler step {t} holds {n} tokens here, not {n + 1}"),
        (resealed(state, pack={"t": [t + 1, r, n]}), f"sampler step {t + 1} holds"),
        (resealed(state, pack={"x": [t, r, n]}), r"concat-packed streams \['x'\], this loader packs \['t'\]"),
        (resealed(state, mixture=off_sum), "counts summing to"),
        (resealed(state, mixture=shifted), "not within 1 of its share"),
        (resealed(state, pack={"t": [t, r, -1]}), r"pack\['t'\] n=-1"),
        (resealed(state, pack={"t": [t, float(r), n]}), r"pack\['t'\] r=.*non-negative int"),
        ({**state, "cursor": {k: v for k, v in cur.items() if k != "pack"}}, "does not match its check"),
        ({**state, "cursor": [1, 2]}, "not a dict"),
    ]
    for bad, match in cases:
        with make(stores, "mixture concat", num_workers=0) as other:
            with pytest.raises(ValueError, match=match):
                other.load_state_dict(bad)
            other.load_state_dict(state)  # a refused state leaves the loader able to load a good one
    # over other data with the same number of records: the step's tokens differ
    with DataLoader({"t": stores[0]["a"]}, batch_size=4, seed=3, pack={"t": L}, num_workers=0) as a:
        for _ in range(20):
            next(a)
        saved = json_safe(a.state_dict())
    with DataLoader({"t": stores[0]["other"]}, batch_size=4, seed=3, pack={"t": L}, num_workers=0) as b:
        with pytest.raises(ValueError, match="stream 't' has the same record count but other records"):
            b.load_state_dict(saved)  # the state's fingerprint of the data
        unmarked = {k: v for k, v in saved.items() if k != "data"}  # as a state saved before fingerprints
        with pytest.raises(ValueError, match="a state saved over other data"):
            b.load_state_dict(unmarked)  # the cursor does not fit this data either
        b.load_state_dict({k: v for k, v in unmarked.items() if k != "cursor"})  # without both: this data's rows


# -- worker processes -------------------------------------------------------------


@pytest.mark.usefixtures("deadline")
def test_process_workers_seek_to_the_cursor(stores):
    from procw_funcs import with_work

    with make(stores, "mixture concat", num_workers=0) as dl:
        dl.load_state_dict({**dl.state_dict(), "step": 20_000})  # replayed here, once
        state = json_safe(dl.state_dict())
        want = [snap(next(dl)["t"]) for _ in range(4)]
        later = json_safe(dl.state_dict())
    with make(stores, "mixture concat", num_workers=2, workers="process", transform=with_work) as procs:
        procs.load_state_dict(state)
        got = [next(procs) for _ in range(4)]
        before = work()
        saved = json_safe(procs.state_dict())
        # the cursor after step 20,003 came from the worker that made it: nothing counted here
        assert saved == later and (work() - before == 0).all()
    for k, b in enumerate(got):
        same(snap(b["t"]), want[k], f"step {20_000 + k}")
        # each worker's whole work so far: its seek and a chunk, not the ~12 chunks before the step
        assert b["work"][0] <= 2 * _packing.CHUNK_STEPS, b["work"]


@pytest.mark.usefixtures("deadline")
def test_torch_workers_seek_to_the_cursor(stores, tmp_path):
    pytest.importorskip("torch")
    _, d = stores
    step = 20_000
    with make(stores, "mixture concat", num_workers=0) as dl:
        dl.load_state_dict({**dl.state_dict(), "step": step})
        state = json_safe(dl.state_dict())
        want = [snap(next(dl)["t"]) for _ in range(4)]
    (tmp_path / "state.json").write_text(json.dumps(state))
    # torch forks its workers: a fresh interpreter whose main process never loads the library
    code = f"""
        import json, numpy as np, torch
        from loaderx import Mixture, Pack, RaggedDataset
        from loaderx.store import _native
        from loaderx.torch import LoaderIterable
        from loaderx.loader._packing import TokenIndex
        from loaderx.loader._schedule import _PD2

        def with_work(batch):
            return {{**batch, "work": np.array([TokenIndex.counted, _PD2.work])}}

        mix = Mixture({{n: {{"t": RaggedDataset({str(d)!r} + "/" + n)}} for n in "abc"}}, {TOKEN_WEIGHTS!r})
        it = LoaderIterable(mix, batch_size=4, seed=3, pack={{"t": Pack({L}, rows=4)}}, transform=with_work)
        state = json.load(open({str(tmp_path / "state.json")!r}))
        it.load_state_dict(state)
        assert it.state_dict(5)["cursor"] == state["cursor"]  # passed on: this process reads no table
        out = {{"values": [], "segment_ids": [], "work": []}}
        for k, b in enumerate(torch.utils.data.DataLoader(it, batch_size=None, num_workers=2)):
            out["values"].append(b["t"].values.numpy())
            out["segment_ids"].append(b["t"].segment_ids.numpy())
            out["work"].append(b["work"].numpy())
            if k == 3:
                break
        assert not _native.loaded()
        np.savez({str(tmp_path / "got.npz")!r}, **{{k: np.stack(v) for k, v in out.items()}})
        print("ok")
    """
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=300, cwd=ROOT)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), proc.stdout + proc.stderr
    got = np.load(tmp_path / "got.npz")
    for k in range(4):
        np.testing.assert_array_equal(got["values"][k], want[k].values)
        np.testing.assert_array_equal(got["segment_ids"][k], want[k].segment_ids)
        assert got["work"][k][0] <= 2 * _packing.CHUNK_STEPS, got["work"]  # each worker: a chunk, not ~12


def test_a_device_loader_saves_the_cursor_of_the_first_step_it_holds_back(stores):
    jax = pytest.importorskip("jax")
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    from loaderx.jax import DeviceLoader

    with make(stores, "mixture unpacked", num_workers=0) as dl:
        for _ in range(40):
            next(dl)
        want = json_safe(dl.state_dict())
    sharding = NamedSharding(Mesh(np.array(jax.devices()[:1]), ("data",)), PartitionSpec("data"))
    with DeviceLoader(make(stores, "mixture unpacked", num_workers=0), sharding, prefetch=3) as dev:
        for _ in range(40):
            next(dev)
        assert dev.loader.step > 40  # batches held back on the devices
        assert json_safe(dev.state_dict()) == want  # its cursor too is of step 40, so a resume uses it


def test_a_custom_samplers_cursor_is_of_its_own_rank(stores, small_chunks):
    """A custom sampler shards itself and its rank packs its own indices, so
    the cursor is that rank's: another rank of the world (whose state it
    may load) counts its own from step 0 instead."""
    from loaderx.sampler import WeightedSampler

    ds = stores[0]["a"]
    w = np.linspace(1, 3, SIZES["a"])

    def rank(r: int, **kw) -> DataLoader:
        kw = {"num_workers": 0, **kw}
        return DataLoader({"t": ds}, sampler=WeightedSampler(w, 4, seed=2, shard=(r, 2)), pack={"t": L}, **kw)

    states, want = {}, {}
    for r in (0, 1):
        with rank(r) as dl:
            for _ in range(600):
                next(dl)
            states[r] = json_safe(dl.state_dict())
            want[r] = snap(next(dl)["t"])
        assert states[r]["cursor"]["shard"] == [r, 2]
    assert states[0]["cursor"]["pack"] != states[1]["cursor"]["pack"]
    for r, saved_by, bounded in ((1, 1, True), (0, 1, False), (1, 0, False)):
        with rank(r) as dl:
            before = work()
            dl.load_state_dict(states[saved_by])
            same(snap(next(dl)["t"]), want[r], f"rank {r} from rank {saved_by}'s state")
            assert ((work() - before)[0] <= 2 * 64) == bounded
    with rank(1, num_workers=1, workers="process") as procs:  # its worker process seeks as the rank does
        procs.load_state_dict(states[1])
        same(snap(next(procs)["t"]), want[1], "rank 1 on a worker process")
        assert json_safe(procs.state_dict())["cursor"]["shard"] == [1, 2]
