"""Token-weighted mixtures (``Mixture(..., by="tokens")``): token shares per
step and over the schedule's period, rows that continue each source's token
stream, weight changes at the loader step named in every pack mode, resume
and elastic resume, and what is refused."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

import loaderx
from loaderx import DataLoader, Mixture, Pack
from loaderx.dataset import RaggedDataset

L = 64
#: records per source, and the range of their lengths (the books are long)
SOURCES = {"web": (400, 1, 60), "code": (300, 1, 120), "books": (60, 100, 700)}
WEIGHTS = {"web": 0.6, "code": 0.3, "books": 0.1}


def _records(k: int, n: int, lo: int, hi: int) -> list[np.ndarray]:
    rng = np.random.default_rng(k)
    # each token names its source, record and place: source*10**7 + record*10**4 + place
    return [np.arange(m, dtype=np.int32) + k * 10**7 + i * 10**4 for i, m in enumerate(rng.integers(lo, hi, n))]


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, str], dict[str, list[np.ndarray]]]:
    root = tmp_path_factory.mktemp("tokmix")
    paths, recs = {}, {}
    for k, (name, (n, lo, hi)) in enumerate(SOURCES.items()):
        recs[name] = _records(k, n, lo, hi)
        paths[name] = str(root / name)
        loaderx.from_iterator(paths[name], iter(recs[name]), progress=False)
    return paths, recs


def _mix(paths: dict[str, str], weights=WEIGHTS, by: str = "tokens", **kw) -> Mixture:
    return Mixture({n: {"t": RaggedDataset(p)} for n, p in paths.items()}, weights, by=by, **kw)


def _token_sources(b) -> np.ndarray:
    return np.repeat(b.sources, np.diff(b.cu_seqlens.astype(np.int64)))


def test_token_shares_per_step_and_exact_over_the_period(stores):
    paths, recs = stores
    rows = 8  # w * rows = 4.8 / 2.4 / 0.8 rows a step: period 5
    every = [r for n in SOURCES for r in recs[n]]
    with DataLoader(_mix(paths), batch_size=rows, num_workers=0, seed=4, pack={"t": Pack(L, rows=rows)}) as dl:
        per_step = []
        for _ in range(20):
            b = next(dl)["t"]
            assert (b.segment_ids > 0).all()  # no padding
            flat = b.values.reshape(-1)
            for k, rec in enumerate(b.records.tolist()):  # each segment is its record's tokens from its start
                lo, hi = int(b.cu_seqlens[k]), int(b.cu_seqlens[k + 1])
                np.testing.assert_array_equal(flat[lo:hi], every[rec][b.starts[k] : b.starts[k] + hi - lo])
            ts = _token_sources(b)
            # a row is one source's
            assert (ts.reshape(rows, L) == ts.reshape(rows, L)[:, :1]).all()
            per_step.append(np.bincount(ts, minlength=3))
    per_step = np.array(per_step)
    for i, w in enumerate(WEIGHTS.values()):
        target = Fraction(str(w)) * rows * L
        assert (np.abs(per_step[:, i] - float(target)) <= L).all()  # within one row of its share every step
    period = math.lcm(*[(Fraction(str(w)) * rows).denominator for w in WEIGHTS.values()])
    assert period == 5
    for a in range(0, 20, period):  # exactly the weights' tokens over each period
        got = per_step[a : a + period].sum(axis=0)
        np.testing.assert_array_equal(got, [int(Fraction(str(w)) * rows * L * period) for w in WEIGHTS.values()])


def test_each_sources_rows_continue_its_token_stream(stores):
    paths, recs = stores
    rows = 8
    lens = [len(r) for n in SOURCES for r in recs[n]]
    with DataLoader(_mix(paths), batch_size=rows, num_workers=0, seed=4, pack={"t": Pack(L, rows=rows)}) as dl:
        last: dict[int, tuple[int, int]] = {}
        for _ in range(30):
            b = next(dl)["t"]
            seg_len = np.diff(b.cu_seqlens.astype(np.int64))
            for src, rec, at, m in zip(b.sources.tolist(), b.records.tolist(), b.starts.tolist(), seg_len.tolist()):
                if src in last:
                    prev_rec, prev_end = last[src]
                    if rec == prev_rec:
                        assert at == prev_end  # the record continues where it stopped
                    else:
                        assert at == 0 and prev_end == lens[prev_rec]  # a new record after a whole one
                last[src] = (rec, at + m)


@pytest.mark.parametrize("mode", ["concat", "first_fit", None])
def test_a_weight_change_lands_at_the_loader_step_named(stores, mode):
    paths, _ = stores
    switch = 7
    weights = {0: {"web": 1, "code": 0, "books": 0}, switch: {"web": 0, "code": 0, "books": 1}}
    by = "tokens" if mode == "concat" else "records"
    # first_fit rows long enough for every record (a books record split into rows of L could fit no row)
    pack = None if mode is None else {"t": Pack(L if mode == "concat" else 4096, mode=mode, rows=4)}
    with DataLoader(_mix(paths, weights, by=by), batch_size=4, num_workers=0, seed=1, pack=pack) as dl:
        seen = []
        for _ in range(12):
            batch = next(dl)
            src = batch["source"] if mode is None else _token_sources(batch["t"])
            seen.append(set(src[src >= 0].tolist()))
    assert all(s == {0} for s in seen[:switch]), seen
    assert all(s == {2} for s in seen[switch:]), seen


def _run(paths, world: int, rank: int, steps: range, state=None, mode="concat"):
    weights = {0: WEIGHTS, 5: {"web": 1, "code": 1, "books": 2}}
    by = "tokens" if mode == "concat" else "records"
    pack = None if mode is None else {"t": Pack(L, mode=mode, rows=8 // world)}
    dl = DataLoader(_mix(paths, weights, by=by), batch_size=8 // world, shard=(rank, world), num_workers=0,
                    seed=9, pack=pack)
    if state is not None:
        dl.load_state_dict(state)
    out = []
    for _ in steps:
        b = next(dl)
        b = b["t"] if mode is not None else b
        out.append(b.values.copy() if mode is not None else b["t"].values.copy())
    st = dl.state_dict()
    dl.close()
    return out, st


@pytest.mark.parametrize("mode", ["concat", "first_fit", None])
def test_resume_and_elastic_resume_are_exact_across_the_change(stores, mode):
    """Saved at step 4 by a world of 2, resumed by worlds of 1 and 2 past the
    change at step 5: the batches of an uninterrupted run of one."""
    paths, _ = stores
    whole, _ = _run(paths, 1, 0, range(12), mode=mode)
    first, state = _run(paths, 2, 0, range(4), mode=mode)  # saved at step 4 by a world of 2
    if mode is not None:  # rank 0's rows are the first half of the global rows
        assert np.array_equal(np.concatenate(first), np.concatenate([w[:4] for w in whole[:4]]))
    again, _ = _run(paths, 1, 0, range(8), state=state, mode=mode)  # resumed by a world of 1, past the change
    for a, b in zip(again, whole[4:]):
        assert np.array_equal(a, b)
    halves = [_run(paths, 2, r, range(8), state=state, mode=mode)[0] for r in (0, 1)]
    for s in range(8):  # and by a world of 2: the ranks' rows together are the global rows
        assert np.array_equal(np.concatenate([halves[0][s], halves[1][s]]), whole[4 + s])


def test_token_weights_over_dense_sources_are_record_weights_scaled_by_length():
    """Dense sources share one item shape, so every record has as many
    tokens: by='tokens' draws exactly what by='records' does."""
    x = np.arange(4000 * 16, dtype=np.int32).reshape(4000, 16)
    runs = []
    for by in ("records", "tokens"):
        mix = Mixture({"a": {"x": x[:3000]}, "b": {"x": x[3000:]}}, {"a": 0.7, "b": 0.3}, by=by)
        assert mix.segments == mix.weights
        with DataLoader(mix, batch_size=20, num_workers=0, seed=0) as dl:
            runs.append([next(dl)["x"].copy() for _ in range(5)])
            assert dl.state_dict()["mixture"]["by"] == by
    for a, b in zip(*runs):
        assert np.array_equal(a, b)


def test_token_weights_refuse_what_they_cannot_do(stores, tmp_path):
    paths, _ = stores
    with pytest.raises(ValueError, match=r"by must be 'records' or 'tokens'.*'bytes'"):
        _mix(paths, by="bytes")
    for mode, what in (("first_fit", "packed in mode 'first_fit'"), (None, "not packed")):
        pack = None if mode is None else {"t": Pack(L, mode=mode)}
        with pytest.raises(ValueError, match=what + r".*by='tokens'"):
            DataLoader(_mix(paths), batch_size=4, num_workers=0, pack=pack)
    empty = str(tmp_path / "empty")
    loaderx.from_iterator(empty, iter([np.zeros(0, np.int32)] * 5), progress=False)
    with pytest.raises(ValueError, match=r"source 'none' has no tokens"):
        Mixture({"web": {"t": RaggedDataset(paths["web"])}, "none": {"t": RaggedDataset(empty)}},
                {"web": 1, "none": 1}, by="tokens")
    with pytest.raises(ValueError, match="epoch=True with a Mixture"):  # no pass for a schedule to run past
        DataLoader(_mix(paths), batch_size=4, epoch=True, pack={"t": L})


def test_a_record_weighted_concat_schedule_says_its_unit(stores):
    paths, _ = stores
    weights = {0: WEIGHTS, 10: {"web": 1}}
    with pytest.raises(ValueError, match=r"schedule_unit='record_batches'"):
        DataLoader(_mix(paths, weights, by="records"), batch_size=4, num_workers=0, pack={"t": L})
    mix = _mix(paths, weights, by="records", schedule_unit="record_batches")
    DataLoader(mix, batch_size=4, num_workers=0, pack={"t": L}).close()
    with pytest.raises(ValueError, match="schedule_unit must be"):
        _mix(paths, by="records", schedule_unit="tokens")
