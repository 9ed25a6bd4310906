"""Transforms and samplers for the process-worker tests: defined at module
level in a module the spawned workers can import, so they pickle."""

from __future__ import annotations

import time
from typing import Any, NamedTuple

import numpy as np

from loaderx.dataloader import PackedBatch

BATCH = 8


def flip_scale(batch: dict[str, np.ndarray]) -> dict[str, Any]:
    """A per-sample Python loop, as an augmentation would be."""
    data = batch["data"]
    out = np.empty(data.shape, dtype=np.float32)
    for i in range(len(data)):
        out[i] = data[i, ..., ::-1] * 0.5
    return {"data": out, "label": batch["label"], "rows": len(data), "tag": "x"}


class Pair(NamedTuple):
    x: np.ndarray
    y: np.ndarray


def as_pair(batch: dict[str, np.ndarray]) -> Pair:
    return Pair(batch["data"].sum(axis=-1), batch["label"] * 2)


def as_array(batch: dict[str, np.ndarray]) -> np.ndarray:
    return batch["data"] + 1


def as_list(batch: dict[str, Any]) -> list[Any]:
    tok = batch["tok"]
    assert isinstance(tok, PackedBatch)
    return [tok.values * 3, (tok.offsets, tok.lengths), None, np.int64(7)]


def fail_at_step_3(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Raises on the batch of step 3 of a sequential loader over labels 0..n-1."""
    if int(batch["label"][0]) == 3 * BATCH:
        raise ValueError(f"bad record {int(batch['label'][0])}")
    return batch


def slow(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    time.sleep(0.2)
    return batch


def returns_a_set(batch: dict[str, np.ndarray]) -> Any:
    return {"data": batch["data"], "names": {"a", "b"}}


class EverySeventh:
    """A custom sampler: a pure function of the step."""

    def __init__(self, n: int, batch_size: int) -> None:
        self.n = n
        self.batch_size = batch_size

    def indices(self, step: int) -> np.ndarray:
        return (np.arange(self.batch_size, dtype=np.int64) * 7 + step * 3) % self.n


def _refuse(why: str) -> Any:
    raise RuntimeError(why)


class BreaksInTheWorker:
    """A transform that pickles but cannot be rebuilt in a worker."""

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return batch

    def __reduce__(self) -> tuple[Any, ...]:
        return (_refuse, ("no rebuilding here",))


def with_work(batch: dict[str, Any]) -> dict[str, Any]:
    """The batch and the work this process's token indexes and mixture
    schedules did so far (sampler steps summed, PD² steps run)."""
    from loaderx.loader._packing import TokenIndex
    from loaderx.loader._schedule import _PD2

    return {**batch, "work": np.array([TokenIndex.counted, _PD2.work], dtype=np.int64)}
