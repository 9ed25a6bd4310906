"""Element types: which dtypes a store holds and how the schema names them.

NumPy's own fixed-size types (bool, signed and unsigned integers, floats,
complex) are recorded by ``numpy.dtype.str`` (``"<f4"``, ``"|u1"``). The
machine-learning types of the ``ml_dtypes`` package (``bfloat16``, the
``float8_*`` variants, ``int4`` ...) have no stable ``dtype.str`` (bfloat16's
is an anonymous ``"<V2"``, float8_e5m2's is ``"<f1"``), so the schema records
them by name. ``ml_dtypes`` is an optional dependency: it is imported only
when a schema names one of its types, and its types are recognised on the way
in without importing it. Nothing here touches the native library.
"""

from __future__ import annotations

import importlib
from typing import Any

import numpy as np

__all__ = [
    "ML_DTYPE_NAMES", "is_ml_dtype", "check_storable", "schema_name", "from_schema_name",
    "narrow_element", "check_narrow",
]

#: The ml_dtypes element types a store may hold, by the name the schema records.
ML_DTYPE_NAMES = (
    "bfloat16",
    "float8_e3m4",
    "float8_e4m3",
    "float8_e4m3fn",
    "float8_e4m3fnuz",
    "float8_e4m3b11fnuz",
    "float8_e5m2",
    "float8_e5m2fnuz",
    "float8_e8m0fnu",
    "float6_e2m3fn",
    "float6_e3m2fn",
    "float4_e2m1fn",
    "int2",
    "int4",
    "uint2",
    "uint4",
)

_ML_MODULE = "ml_dtypes"


def is_ml_dtype(dtype: np.dtype) -> bool:
    """Whether ``dtype`` is one of the ``ml_dtypes`` element types."""
    t = dtype.type
    return getattr(t, "__module__", "").split(".")[0] == _ML_MODULE and t.__name__ in ML_DTYPE_NAMES


def check_storable(dtype: np.dtype) -> np.dtype:
    """The dtype to store ``dtype`` as: a fixed-size numeric or bool NumPy
    type in native byte order, or an ``ml_dtypes`` type as it is.

    Raises:
        TypeError: any other dtype (object, string, void, structured, ...).
    """
    if is_ml_dtype(dtype):
        return dtype
    if dtype.fields is not None or dtype.subdtype is not None or dtype.kind not in "biufc":
        raise TypeError(
            f"cannot store dtype {dtype!r} ({dtype.str!r}): records must have a fixed-size "
            "numeric or bool dtype (bool, int8-int64, uint8-uint64, float16-float64, "
            "complex64/complex128, or an ml_dtypes type such as bfloat16 or float8_e4m3fn)"
        )
    return dtype.newbyteorder("=") if dtype.byteorder not in ("=", "|") else dtype


def narrow_element(dtype: np.dtype) -> str | None:
    """The element type a ``"narrow"`` store of ``dtype`` records is made of
    (``"int8"`` to ``"uint64"``), or None when ``dtype`` is not a NumPy
    integer type: bool, floats, complex and the ``ml_dtypes`` types have no
    frame of reference to narrow."""
    if is_ml_dtype(dtype) or dtype.fields is not None or dtype.subdtype is not None:
        return None
    if dtype.kind not in "iu" or dtype.itemsize not in (1, 2, 4, 8):
        return None
    return f"{'int' if dtype.kind == 'i' else 'uint'}{8 * dtype.itemsize}"


def check_narrow(dtype: np.dtype, where: str) -> str:
    """:func:`narrow_element` of ``dtype``, or a ValueError quoting the dtype
    (``where`` says whose it is) when it is not an integer type."""
    element = narrow_element(dtype)
    if element is None:
        raise ValueError(
            f"codec 'narrow' stores arrays of integers, but {where} has dtype {dtype} "
            f"({dtype.str!r}); use codec 'raw', 'zstd' or 'auto' for it"
        )
    return element


def schema_name(dtype: np.dtype) -> str:
    """The string the schema records for a storable ``dtype``."""
    return dtype.type.__name__ if is_ml_dtype(dtype) else dtype.str


def _ml_dtypes() -> Any:
    try:
        return importlib.import_module(_ML_MODULE)
    except ImportError:
        return None


def from_schema_name(name: str, where: str) -> np.dtype:
    """The dtype a schema string names; ``where`` (the store's path) goes
    into the messages.

    Raises:
        ImportError: the name is an ``ml_dtypes`` type and the package is not
            installed (``pip install loaderx[ml]``).
        ValueError: the name is not a dtype.
    """
    if name in ML_DTYPE_NAMES:
        mod = _ml_dtypes()
        if mod is None:
            raise ImportError(
                f"{where!r} holds {name} elements, which need the ml_dtypes package: "
                "pip install 'loaderx[ml]' (or ml_dtypes)"
            )
        t = getattr(mod, name, None)
        if t is None:
            raise ImportError(
                f"{where!r} holds {name} elements, which the installed ml_dtypes "
                f"{getattr(mod, '__version__', '?')} does not define; upgrade ml_dtypes"
            )
        return np.dtype(t)
    try:
        return np.dtype(name)
    except TypeError:
        raise ValueError(f"{where!r}: schema dtype {name!r} is not a NumPy dtype") from None
