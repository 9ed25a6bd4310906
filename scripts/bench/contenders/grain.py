"""Grain's DataLoader reading ArrayRecord (data and label in one record),
with worker processes."""

from __future__ import annotations

import gc
import os
from typing import Any

import numpy as np
from report import log

from contenders import arrayrecord
from contenders.base import Batches, LoaderContender, installed, try_import

VERSION = ("grain", "grain")


class GrainLoader(LoaderContender):
    name = "grain"

    def available(self) -> str | None:
        if not installed("grain"):
            return "not installed (pip install grain)"
        if not try_import(arrayrecord.MODULE)[0]:
            return "array-record not installed (pip install array-record)"
        return None

    def prepare(self, ldir: str, data: np.ndarray, labels: np.ndarray) -> dict[str, Any]:
        dpath = os.path.join(ldir, "data.array_record")
        log("[loader] writing ArrayRecord (data + label per record) ...")
        wr = arrayrecord.writer(dpath)
        lb = labels.view(np.uint8).reshape(len(labels), 8)
        for i in range(len(data)):
            wr.write(data[i].tobytes() + lb[i].tobytes())
        wr.close()
        return {"data": dpath, "label": None}

    def open(self, cfg: dict[str, Any]) -> Batches:
        import grain.python as gp
        from absl import flags

        # Grain reads absl flags in its workers; outside an absl app nothing has
        # parsed them, so take the defaults (grain 0.2.18 raises otherwise)
        if not flags.FLAGS.is_parsed():
            flags.FLAGS.mark_as_parsed()

        # Grain's operations must be module-level classes its workers can
        # import: they live in grain_ops, which only this child imports.
        from contenders.grain_ops import GrainParse

        src = gp.ArrayRecordDataSource(cfg["data"])
        sampler = gp.IndexSampler(num_records=len(src), shuffle=True, seed=0, num_epochs=None,
                                  shard_options=gp.NoSharding())
        dl = gp.DataLoader(data_source=src, sampler=sampler,
                           operations=[GrainParse(cfg["shape"], cfg["dtype"], cfg["transform"] == "augment"),
                                       gp.Batch(cfg["batch"], drop_remainder=True)],
                           worker_count=cfg["workers"])
        holder = {"it": iter(dl)}

        def get() -> np.ndarray:
            return next(holder["it"])["data"]

        def close() -> None:
            # dropping the iterator stops the workers and frees their shared
            # memory; a killed tree would leave its segments in /dev/shm
            holder.clear()
            gc.collect()
        return get, close


LOADERS: list[LoaderContender] = [GrainLoader()]
