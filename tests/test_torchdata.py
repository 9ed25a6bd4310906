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
