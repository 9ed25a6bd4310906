"""Grain's record parser. Its workers unpickle operations by module path, so
the class lives at module level here; importing this module imports Grain,
which only the Grain loader's child process does."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import grain.python as gp
import numpy as np
from data import augment_sample


class GrainParse(gp.MapTransform):
    """bytes of one record (data then an int64 label) -> {"data", "label"}."""

    def __init__(self, shape: Sequence[int], dtype: Any, augment: bool) -> None:
        self.shape, self.dtype, self.augment = tuple(shape), np.dtype(dtype), augment

    def map(self, rec: bytes) -> dict[str, Any]:
        a = np.frombuffer(rec, np.uint8)
        x = a[:-8].view(self.dtype).reshape(self.shape)
        if self.augment:
            x = augment_sample(x)
        return {"data": x, "label": a[-8:].view(np.int64)[0]}
