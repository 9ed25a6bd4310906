"""Comparing and copying nested batches (dicts, lists, tuples, named tuples of
arrays) in the loader tests: every array's dtype, shape and values must
match, and a copy never shares a recycled buffer."""

from __future__ import annotations

from typing import Any

import numpy as np


def assert_same(a: Any, b: Any, where: str) -> None:
    assert type(a) is type(b), (where, type(a), type(b))
    if isinstance(a, dict):
        assert list(a) == list(b), where
        for k in a:
            assert_same(a[k], b[k], f"{where}[{k!r}]")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, f"{where}[{i}]")
    elif isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and a.shape == b.shape, (where, a.dtype, b.dtype, a.shape, b.shape)
        np.testing.assert_array_equal(a, b, err_msg=where)
    else:
        assert a == b, where


def copy_tree(x: Any) -> Any:
    if isinstance(x, dict):
        return {k: copy_tree(v) for k, v in x.items()}
    if isinstance(x, tuple) and hasattr(x, "_fields"):
        return type(x)(*(copy_tree(v) for v in x))
    if isinstance(x, (list, tuple)):
        return type(x)(copy_tree(v) for v in x)
    if isinstance(x, np.ndarray):
        return x.copy()
    return x
