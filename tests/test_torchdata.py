"""A LoaderIterable inside torchdata's StatefulDataLoader: its state_dict()
taken mid-run and loaded into a fresh StatefulDataLoader continues with
exactly the batches of the uninterrupted run, for any num_workers, over plain
streams and over a mixture; plain torch DataLoader yields the same batches."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
stateful = pytest.importorskip("torchdata.stateful_dataloader")

from loaderx import Mixture  # noqa: E402
from loaderx.torch import LoaderIterable  # noqa: E402

X = np.arange(400 * 3, dtype=np.float32).reshape(400, 3)


def make(kind: str) -> LoaderIterable:
    src = Mixture({"a": {"x": X[:350]}, "b": {"x": X[350:]}}, {"a": 2, "b": 1}) if kind == "mixture" else {"x": X}
    return LoaderIterable(src, batch_size=6, seed=2, steps=17)


def run(kind: str, workers: int, stop: int | None = None, state: dict | None = None):
    ctx = "spawn" if workers else None
    dl = stateful.StatefulDataLoader(make(kind), batch_size=None, num_workers=workers, multiprocessing_context=ctx)
    if state is not None:
        dl.load_state_dict(state)
    out = []
    for batch in dl:
        out.append(batch["x"].numpy().copy())
        if stop is not None and len(out) == stop:
            return out, dl.state_dict()
    return out, None


# each spawned torch worker imports torch afresh (seconds here): few cases with workers
@pytest.mark.parametrize(("kind", "workers"), [("streams", 0), ("mixture", 0), ("mixture", 3)])
def test_stateful_dataloader_round_trip(kind, workers):
    straight, _ = run(kind, workers)
    assert len(straight) == 17
    head, state = run(kind, workers, stop=7)
    tail, _ = run(kind, workers, state=state)
    assert len(tail) == 10
    for a, b in zip(straight, head + tail):
        np.testing.assert_array_equal(a, b)
    plain = torch.utils.data.DataLoader(make(kind), batch_size=None, num_workers=workers,
                                        multiprocessing_context="spawn" if workers else None)
    for a, b in zip(straight, plain):
        np.testing.assert_array_equal(a, b["x"].numpy())


def test_a_worker_state_refuses_another_num_workers():
    _, state = run("streams", 2, stop=3)
    with pytest.raises(Exception, match="resume with the same num_workers"):
        run("streams", 1, state=state)


# -- packed streams ------------------------------------------------------------


@pytest.fixture(scope="module")
def token_store(tmp_path_factory):
    import loaderx

    path = str(tmp_path_factory.mktemp("torch_pack") / "tok")
    rng = np.random.default_rng(5)
    loaderx.from_iterator(path, iter([np.arange(n, dtype=np.int32) + 100 * i for i, n in
                                      enumerate(rng.integers(1, 30, 120))]), progress=False)
    return path


def packed(path: str, mode: str) -> LoaderIterable:
    from loaderx import Pack
    from loaderx.dataset import RaggedDataset

    pack = Pack(8, mode=mode, rows=None if mode == "concat" else 3)
    return LoaderIterable({"t": RaggedDataset(path)}, batch_size=4, seed=1, steps=13, pack={"t": pack})


def run_packed(path: str, mode: str, workers: int, stop: int | None = None, state: dict | None = None):
    dl = stateful.StatefulDataLoader(packed(path, mode), batch_size=None, num_workers=workers,
                                     multiprocessing_context="spawn" if workers else None)
    if state is not None:
        dl.load_state_dict(state)
    out = []
    for batch in dl:
        t = batch["t"]
        assert isinstance(t.values, torch.Tensor) and isinstance(t.segment_ids, torch.Tensor)
        out.append([t.values.numpy().copy(), t.segment_ids.numpy().copy(), t.positions.numpy().copy(),
                    t.records.numpy().copy()])
        if stop is not None and len(out) == stop:
            return out, dl.state_dict()
    return out, None


@pytest.mark.parametrize(("mode", "workers"), [("concat", 0), ("first_fit", 0), ("concat", 2)])
def test_packed_batches_pass_through_as_tensors_and_resume(token_store, mode, workers):
    from loaderx import DataLoader, Pack
    from loaderx.dataset import RaggedDataset

    pack = Pack(8, mode=mode, rows=None if mode == "concat" else 3)
    with DataLoader({"t": RaggedDataset(token_store)}, batch_size=4, seed=1, steps=13, num_workers=0,
                    pack={"t": pack}) as ref:
        want = [[np.copy(b["t"].values), np.copy(b["t"].segment_ids), np.copy(b["t"].positions),
                 np.copy(b["t"].records)] for b in ref]
        saved = ref.state_dict()
    straight, _ = run_packed(token_store, mode, workers)
    head, state = run_packed(token_store, mode, workers, stop=5)
    tail, _ = run_packed(token_store, mode, workers, state=state)
    assert len(straight) == len(head) + len(tail) == len(want) == 13
    for a, b, c in zip(want, straight, head + tail):
        for x, y, z in zip(a, b, c):
            np.testing.assert_array_equal(x, y)
            np.testing.assert_array_equal(x, z)
    it = packed(token_store, mode)  # the loader's state loads into the iterable and back
    it.load_state_dict({**saved, "step": 9})
    assert it.start_step == 9 and it.state_dict(2)["pack"] == saved["pack"]
    got = [b["t"].values.numpy() for b in torch.utils.data.DataLoader(it, batch_size=None)]
    assert len(got) == 4 and all((x == y[0]).all() for x, y in zip(got, want[9:]))


def test_a_bad_pack_fails_at_construction_quoting_it(token_store):
    from loaderx.dataset import RaggedDataset

    with pytest.raises(ValueError, match=r"pack=\{'t': 0\}"):
        LoaderIterable({"t": RaggedDataset(token_store)}, batch_size=4, pack={"t": 0})
    with pytest.raises(TypeError, match=r"\[\('t', 8\)\]"):
        LoaderIterable({"t": RaggedDataset(token_store)}, batch_size=4, pack=[("t", 8)])
