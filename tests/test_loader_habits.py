"""DataLoader: finite passes, torch-style arguments, data identity in the
state, NumPy streams and custom samplers."""

from __future__ import annotations

import json

import numpy as np
import pytest

from loaderx.converter import from_numpy
from loaderx.dataloader import DataLoader
from loaderx.dataset import DenseDataset
from loaderx.loader import dataloader
from loaderx.sampler import Sampler, WeightedSampler

N = 97


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    root = tmp_path_factory.mktemp("habits")
    ids = np.arange(N, dtype=np.int64)
    from_numpy(root / "label", ids)
    from_numpy(root / "image", (ids[:, None] * 10 + np.arange(3)).astype(np.float32))
    from_numpy(root / "other", ids[:60])
    return root


@pytest.fixture
def streams(stores):
    ds = {name: DenseDataset(stores / name) for name in ("label", "image")}
    yield ds
    for d in ds.values():
        d.close()


@pytest.fixture(params=["native", "per-step workers", "one gatherer"])
def pipeline_shape(request, monkeypatch):
    if request.param != "native":  # the Python pipeline's two shapes
        monkeypatch.setenv("LOADERX_PIPELINE", "python")
    if request.param == "one gatherer":
        monkeypatch.setattr(dataloader, "SHARED_GATHER_BYTES", 0)
    return request.param


def labels(loader):
    return [np.array(b["label"], copy=True) for b in loader]


# -- finite passes ------------------------------------------------------------------


@pytest.mark.parametrize("workers", [0, 3])
@pytest.mark.usefixtures("pipeline_shape")
def test_sequential_epoch_visits_each_record_once_without_wrapping(streams, workers):
    with DataLoader(streams, batch_size=8, sampler="sequential", epoch=True,
                    num_workers=workers) as loader:
        assert len(loader) == 13  # 12 full batches and one of 1
        got = labels(loader)
        assert [len(b) for b in got] == [8] * 12 + [1]
        np.testing.assert_array_equal(np.concatenate(got), np.arange(N))
        with pytest.raises(StopIteration):
            next(loader)
        assert loader.step == 13
    last = got[-1]
    assert last.tolist() == [96]  # the endless loader would wrap to [96, 0, 1, ...]


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.usefixtures("pipeline_shape")
def test_epoch_with_a_transform_and_image_alignment(streams, workers):
    with DataLoader(streams, batch_size=10, sampler="sequential", epoch=True, num_workers=workers,
                    transform=lambda b: (b["label"].copy(), b["image"].copy())) as loader:
        out = list(loader)
    assert len(out) == 10 and out[-1][0].shape == (7,) and out[-1][1].shape == (7, 3)
    for lab, img in out:
        np.testing.assert_array_equal(img[:, 0], lab * 10)


def test_cyclic_epoch_is_a_permutation_keyed_by_seed(streams):
    runs = {}
    for seed in (1, 2):
        with DataLoader(streams, batch_size=8, sampler="cyclic", epoch=True, seed=seed,
                        num_workers=2) as loader:
            runs[seed] = np.concatenate(labels(loader))
    for perm in runs.values():
        assert len(perm) == N and sorted(perm.tolist()) == list(range(N))
    assert runs[1].tolist() != runs[2].tolist()
    assert runs[1].tolist() != list(range(N))


def test_drop_last_drops_the_short_batch(streams):
    with DataLoader(streams, batch_size=8, sampler="sequential", epoch=True, drop_last=True,
                    num_workers=0) as loader:
        assert len(loader) == 12
        got = labels(loader)
    np.testing.assert_array_equal(np.concatenate(got), np.arange(96))


def test_sharded_epoch_covers_each_record_once_across_ranks(streams):
    world = 3
    per_rank = []
    for rank in range(world):
        with DataLoader(streams, batch_size=8, sampler="cyclic", epoch=True, seed=4,
                        shard=(rank, world), num_workers=1) as loader:
            assert len(loader) == 5  # 97 / 24 -> 4 full global batches + 1 short
            per_rank.append(labels(loader))
    together = np.concatenate([b for batches in per_rank for b in batches])
    assert sorted(together.tolist()) == list(range(N))
    # the short last global batch (1 record) is split as evenly as possible
    assert sorted(len(batches[-1]) for batches in per_rank) == [0, 0, 1]


def test_steps_stops_the_endless_modes(streams):
    with DataLoader(streams, batch_size=8, sampler="iid", seed=3, steps=5, num_workers=2) as loader:
        assert len(loader) == 5
        got = labels(loader)
    sampler = Sampler("iid", N, 8, seed=3)
    assert len(got) == 5
    for step, b in enumerate(got):
        np.testing.assert_array_equal(b, sampler(step))
    with DataLoader(streams, batch_size=8, sampler="sequential", epoch=True, steps=3,
                    num_workers=0) as loader:
        assert len(loader) == 3 and len(labels(loader)) == 3


@pytest.mark.parametrize("workers", [0, 2])
def test_a_finite_pass_resumes_from_state_dict(streams, workers):
    kw = dict(batch_size=8, sampler="cyclic", epoch=True, seed=7, num_workers=workers)
    with DataLoader(streams, **kw) as ref:
        reference = labels(ref)
    first = DataLoader(streams, **kw)
    head = [np.array(next(first)["label"], copy=True) for _ in range(5)]
    state = json.loads(json.dumps(first.state_dict()))
    first.close()
    assert state["pass"] == {"steps": 13, "epoch": True, "drop_last": False}
    with DataLoader(streams, **kw) as resumed:
        resumed.load_state_dict(state)
        tail = labels(resumed)
    assert [b.tolist() for b in head + tail] == [b.tolist() for b in reference]
    with DataLoader(streams, **kw) as loader:
        loader.load_state_dict({**state, "step": 13})  # the end: nothing left
        assert labels(loader) == []
        with pytest.raises(ValueError, match="step=14, past the end of this 13-step loader"):
            loader.load_state_dict({**state, "step": 14})


def test_a_held_short_batch_is_not_overwritten(streams):
    with DataLoader(streams, batch_size=8, sampler="sequential", epoch=True, num_workers=2) as loader:
        held = list(loader)  # every batch dict kept: none of their buffers may be reused
        loader.load_state_dict({**loader.state_dict(), "step": 0})
        again = labels(loader)
    assert [b["label"].tolist() for b in held] == [b.tolist() for b in again]
    assert held[-1]["label"].tolist() == [96] and held[-1]["image"].shape == (1, 3)


def test_len_of_an_endless_loader_raises(streams):
    with DataLoader(streams, batch_size=8, num_workers=0) as loader:
        with pytest.raises(TypeError, match="endless DataLoader has no len"):
            len(loader)


def test_finite_pass_validation(streams):
    cases = [
        (dict(steps=0), ValueError, "steps must be at least 1 or None"),
        (dict(steps=2.5), TypeError, "steps must be an integer, got 2.5"),
        (dict(epoch=1), TypeError, "epoch must be True or False, got 1"),
        (dict(epoch=True, drop_last="yes"), TypeError, "drop_last must be True or False, got 'yes'"),
        (dict(drop_last=True), TypeError, "drop_last=True applies to an epoch=True pass only"),
        (dict(epoch=True, sampler="iid"), ValueError, "epoch=True needs sampler='sequential'"),
        (dict(steps=4, start_step=5), ValueError, "start_step=5 is past the end of this 4-step"),
        (dict(epoch=True, drop_last=True, batch_size=98, sampler="sequential"), ValueError,
         "drop_last=True leaves nothing"),
    ]
    for kwargs, exc, msg in cases:
        with pytest.raises(exc, match=msg):
            DataLoader(streams, **{"batch_size": 8, **kwargs})


# -- torch habits -------------------------------------------------------------------


@pytest.mark.parametrize("key, value, hint", [
    ("shuffle", True, "sampler='cyclic'"),
    ("collate_fn", lambda b: b, "use transform="),
    ("pin_memory", True, "pin_memory()"),
    ("persistent_workers", True, "live as long as the loader"),
    ("batch_sampler", object(), "indices\\(step\\)"),
    ("prefetch_factor", 2, "use prefetch="),
    ("worker_init_fn", print, "threads"),
    ("generator", None, "use seed="),
])
def test_torch_arguments_name_the_equivalent(streams, key, value, hint):
    with pytest.raises(TypeError, match=f"DataLoader has no {key}= .*{hint}") as info:
        DataLoader(streams, batch_size=8, **{key: value})
    assert "\n" not in str(info.value)


def test_unknown_arguments_and_torch_objects(streams):
    with pytest.raises(TypeError, match="unexpected keyword argument 'bogus'"):
        DataLoader(streams, bogus=1)
    with pytest.raises(TypeError, match="wrap one in a dict"):
        DataLoader(streams["label"], batch_size=8)

    class TorchLikeSampler:  # iterates indices, has no indices(step)
        def __iter__(self):
            return iter(range(N))

    with pytest.raises(TypeError, match="sampler must be one of .* indices\\(step\\)"):
        DataLoader(streams, sampler=TorchLikeSampler())


def test_dense_dataset_of_a_npy_file_suggests_from_numpy(tmp_path):
    path = tmp_path / "data.npy"
    np.save(path, np.zeros(3))
    with pytest.raises(FileNotFoundError, match="from_numpy"):
        DenseDataset(path)


# -- data identity in the state -----------------------------------------------------


def test_load_state_dict_refuses_other_data(stores, streams):
    with DataLoader(streams, batch_size=8, num_workers=0) as loader:
        state = loader.state_dict()
    assert state["streams"] == {"label": N, "image": N}
    other = DenseDataset(stores / "other")
    with DataLoader({"label": other, "image": np.zeros((60, 3))}, batch_size=8,
                    num_workers=0) as loader:
        with pytest.raises(ValueError, match="stream 'label' had 97 records, this loader's has 60"):
            loader.load_state_dict(state)
    other.close()
    with DataLoader({"label": streams["label"]}, batch_size=8, num_workers=0) as loader:
        with pytest.raises(ValueError, match=r"other streams.*missing here: \['image'\]"):
            loader.load_state_dict(state)
        with pytest.raises(ValueError, match="pass="):
            loader.load_state_dict({**state, "streams": {"label": N},
                                    "pass": {"steps": 4, "epoch": False, "drop_last": False}})
        # a state saved before streams and pass were recorded still loads
        old = {k: state[k] for k in ("step", "seed", "sampler", "batch_size", "shard")}
        loader.load_state_dict({**old, "step": 3})
        assert loader.step == 3


# -- NumPy streams ------------------------------------------------------------------


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.usefixtures("pipeline_shape")
def test_numpy_arrays_and_memmaps_are_streams(streams, tmp_path, workers):
    ids = np.arange(N, dtype=np.int64)
    mm = np.lib.format.open_memmap(tmp_path / "x.npy", mode="w+", dtype=np.float32, shape=(N, 2, 2))
    mm[:] = ids[:, None, None] + np.zeros((2, 2), np.float32)
    mm.flush()
    mm = np.load(tmp_path / "x.npy", mmap_mode="r")
    kw = dict(batch_size=8, sampler="cyclic", seed=5, num_workers=workers)
    with DataLoader({"label": streams["label"], "arr": ids * 2, "mm": mm}, **kw) as loader:
        assert loader.streams["mm"] is mm
        sampler = Sampler("cyclic", N, 8, seed=5)
        for step in range(20):
            b = next(loader)
            idx = sampler(step)
            np.testing.assert_array_equal(b["label"], idx)
            np.testing.assert_array_equal(b["arr"], idx * 2)
            assert b["mm"].shape == (8, 2, 2) and b["mm"].dtype == np.float32
            np.testing.assert_array_equal(b["mm"][:, 1, 1], idx.astype(np.float32))
    with DataLoader({"arr": ids}, batch_size=10, sampler="sequential", epoch=True,
                    num_workers=workers) as loader:
        np.testing.assert_array_equal(np.concatenate(labels_of(loader, "arr")), ids)


def labels_of(loader, name):
    return [np.array(b[name], copy=True) for b in loader]


def test_numpy_stream_validation(streams):
    with pytest.raises(ValueError, match="'x' is a 0-d array"):
        DataLoader({"x": np.array(3)})
    with pytest.raises(TypeError, match="'x' has dtype object"):
        DataLoader({"x": np.array([None] * N)})
    with pytest.raises(ValueError, match="equal lengths; got label=97, x=3"):
        DataLoader({"label": streams["label"], "x": np.zeros(3)})


# -- custom samplers ----------------------------------------------------------------


class EveryOther:
    """Even records in order, then odd ones: a pure function of step."""

    def __init__(self, batch_size):
        self.batch_size = batch_size
        self.order = np.concatenate([np.arange(0, N, 2), np.arange(1, N, 2)])

    def indices(self, step):
        start = step * self.batch_size
        return np.take(self.order, np.arange(start, start + self.batch_size), mode="wrap")


@pytest.mark.parametrize("workers", [0, 2])
def test_a_custom_sampler_replaces_the_modes(streams, workers):
    s = EveryOther(5)
    with DataLoader(streams, sampler=s, num_workers=workers) as loader:
        assert loader.batch_size == 5
        for step in range(30):
            np.testing.assert_array_equal(next(loader)["label"], s.indices(step))
        state = loader.state_dict()
    assert state["sampler"].endswith("EveryOther")
    with DataLoader(streams, sampler=s, num_workers=workers) as resumed:
        resumed.load_state_dict(state)
        np.testing.assert_array_equal(next(resumed)["label"], s.indices(30))


def test_a_state_names_a_public_sampler_by_its_public_module(streams):
    """States saved before the sampler module moved into loaderx.loader name
    loaderx.sampler.WeightedSampler; such a state still loads."""
    s = WeightedSampler(np.ones(N), batch_size=5, seed=3)
    with DataLoader(streams, sampler=s) as loader:
        state = loader.state_dict()
        first = next(loader)["label"]
    assert state["sampler"] == "loaderx.sampler.WeightedSampler"
    with DataLoader(streams, sampler=WeightedSampler(np.ones(N), batch_size=5, seed=3)) as resumed:
        resumed.load_state_dict({**state, "sampler": "loaderx.sampler.WeightedSampler"})
        np.testing.assert_array_equal(next(resumed)["label"], first)


def test_custom_sampler_output_is_checked(streams):
    class Bad:
        def __init__(self, out):
            self.out = out

        def indices(self, step):
            return self.out

    cases = [
        (np.array([0, 1.5]), TypeError, r"Bad.indices\(0\) returned an array of dtype float64"),
        (np.array([0, 1, 2]), ValueError, r"returned shape \(3,\); .* needs \(2,\)"),
        (np.array([0, 97]), IndexError, "returned index 97, out of range for streams of length 97"),
    ]
    for out, exc, msg in cases:
        with DataLoader(streams, batch_size=2, sampler=Bad(out), num_workers=0) as loader:
            with pytest.raises(exc, match=msg):
                next(loader)
    with pytest.raises(ValueError, match="batch_size=3 but the sampler draws batch_size=5"):
        DataLoader(streams, batch_size=3, sampler=EveryOther(5))
    with pytest.raises(ValueError, match="epoch=True needs sampler='sequential'"):
        DataLoader(streams, sampler=EveryOther(5), epoch=True)
    with DataLoader(streams, sampler=EveryOther(5), steps=3, num_workers=0) as loader:
        assert len(loader) == 3 and len(labels(loader)) == 3
    with pytest.raises(ValueError, match="a custom sampler shards itself"):
        DataLoader(streams, sampler=EveryOther(5), shard=(0, 2))
    with pytest.raises(ValueError, match="draws from n=10 records but the streams hold 97"):
        DataLoader(streams, sampler=WeightedSampler(np.ones(10), 2))


def test_weighted_sampler_in_the_loader_is_pure_in_seed_and_step(streams):
    w = np.linspace(0, 1, N)
    s = WeightedSampler(w, 16, seed=11)
    with DataLoader(streams, sampler=s, num_workers=2) as loader:
        got = [np.array(next(loader)["label"], copy=True) for _ in range(6)]
    again = WeightedSampler(w, 16, seed=11)
    for step, b in enumerate(got):
        np.testing.assert_array_equal(b, again.indices(step))
    assert WeightedSampler(w, 16, seed=12).indices(0).tolist() != got[0].tolist()


def test_weighted_sampling_with_replacement_follows_the_weights():
    w = np.array([1.0, 2.0, 3.0, 4.0, 0.0])
    s = WeightedSampler(w, 1000, seed=3)
    counts = np.bincount(np.concatenate([s.indices(k) for k in range(40)]), minlength=5)
    assert counts[4] == 0  # weight 0 is never drawn
    expected = 40_000 * w[:4] / w.sum()
    chi2 = float(((counts[:4] - expected) ** 2 / expected).sum())
    assert chi2 < 16.27, (counts, chi2)  # the 0.1% critical value, 3 degrees of freedom


def test_weighted_sampling_without_replacement():
    w = np.array([1.0, 2.0, 3.0, 4.0])
    W = w.sum()
    # inclusion probability of each record in a draw of 2 without replacement
    incl = np.array([
        w[i] / W + sum(w[j] / W * w[i] / (W - w[j]) for j in range(4) if j != i) for i in range(4)
    ])
    s = WeightedSampler(w, 2, replacement=False, seed=5)
    steps = 20_000
    counts = np.zeros(4)
    for k in range(steps):
        idx = s.indices(k)
        assert idx[0] != idx[1]
        counts[idx] += 1
    sd = np.sqrt(steps * incl * (1 - incl))
    assert np.all(np.abs(counts - steps * incl) < 5 * sd), (counts, steps * incl)
    # sharded: the ranks split one global draw, so they never overlap within a step
    r0 = WeightedSampler(w, 2, replacement=False, seed=5, shard=(0, 2))
    r1 = WeightedSampler(w, 2, replacement=False, seed=5, shard=(1, 2))
    for k in range(50):
        assert sorted(np.concatenate([r0.indices(k), r1.indices(k)]).tolist()) == [0, 1, 2, 3]


def test_weighted_sampler_validation():
    cases = [
        (([1, -1], 1), {}, ValueError, r"weights\[1\] = -1.0"),
        (([1, np.nan], 1), {}, ValueError, r"weights\[1\] = nan"),
        (([[1.0]], 1), {}, ValueError, "non-empty 1-D"),
        (([0, 0], 1), {}, ValueError, "all 0"),
        (([1, 0, 1], 3), {"replacement": False}, ValueError, "positive weight \\(2\\)"),
        (([1, 1], 0), {}, ValueError, "batch_size must be a positive"),
        (([1, 1], 1), {"replacement": 1}, TypeError, "replacement must be True or False"),
        (([1, 1], 1), {"seed": -1}, ValueError, "seed"),
        ((["a"], 1), {}, TypeError, "weights must be an array of numbers"),
    ]
    for args, kwargs, exc, msg in cases:
        with pytest.raises(exc, match=msg):
            WeightedSampler(*args, **kwargs)
    with pytest.raises(ValueError, match="step must be a non-negative"):
        WeightedSampler([1, 1], 1).indices(-1)
