"""Hand ml_dtypes arrays (bfloat16, float8 ...) to frameworks over DLPack.

NumPy exports only its own element types over DLPack; an array of an
``ml_dtypes`` type such as ``bfloat16`` raises ``BufferError``. DLPack itself
has codes for these types, so :func:`to_dlpack` wraps such an array in an
object that exports it with the right code, without a copy::

    batch = DenseDataset("embeddings")[0:256]        # a bfloat16 array
    t = torch.from_dlpack(to_dlpack(batch))          # torch.bfloat16, same memory
    x = jax.numpy.from_dlpack(to_dlpack(batch))

Arrays of NumPy's own types are returned as they are (NumPy exports them).
The array is kept alive until the consumer releases the tensor.
"""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np

from loaderx.store._dtypes import is_ml_dtype

__all__ = ["to_dlpack"]

#: DLPack 1.1 type codes of the ml_dtypes types (DLDataTypeCode).
_CODES = {
    "bfloat16": 4,
    "float8_e3m4": 7,
    "float8_e4m3": 8,
    "float8_e4m3b11fnuz": 9,
    "float8_e4m3fn": 10,
    "float8_e4m3fnuz": 11,
    "float8_e5m2": 12,
    "float8_e5m2fnuz": 13,
    "float8_e8m0fnu": 14,
    "float6_e2m3fn": 15,
    "float6_e3m2fn": 16,
    "float4_e2m1fn": 17,
}
#: Bits per element as DLPack states them (sub-byte types are byte-padded).
_BITS = {"float6_e2m3fn": 6, "float6_e3m2fn": 6, "float4_e2m1fn": 4}

_KDL_CPU = 1


class _Device(ctypes.Structure):
    _fields_ = (("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32))


class _DataType(ctypes.Structure):
    _fields_ = (("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16))


class _Tensor(ctypes.Structure):
    _fields_ = (
        ("data", ctypes.c_void_p),
        ("device", _Device),
        ("ndim", ctypes.c_int32),
        ("dtype", _DataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    )


class _Managed(ctypes.Structure):
    pass


_DELETER = ctypes.CFUNCTYPE(None, ctypes.POINTER(_Managed))
_Managed._fields_ = (("dl_tensor", _Tensor), ("manager_ctx", ctypes.c_void_p), ("deleter", _DELETER))

# What an exported tensor keeps alive, by the address of its DLManagedTensor,
# until its consumer calls the deleter (or the capsule dies unconsumed).
_alive: dict[int, tuple[Any, ...]] = {}


def _on_delete(managed: Any, _cast: Any = ctypes.cast, _vp: Any = ctypes.c_void_p, _pop: Any = _alive.pop) -> None:
    # Default arguments keep what it needs: a tensor may be freed while the
    # interpreter shuts down, after this module's globals are gone.
    _pop(_cast(managed, _vp).value or 0, None)


_deleter = _DELETER(_on_delete)


_api = ctypes.pythonapi
_api.PyCapsule_New.restype = ctypes.py_object
_api.PyCapsule_New.argtypes = (ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p)
_api.PyCapsule_IsValid.restype = ctypes.c_int
_api.PyCapsule_IsValid.argtypes = (ctypes.c_void_p, ctypes.c_char_p)
_api.PyCapsule_GetPointer.restype = ctypes.c_void_p
_api.PyCapsule_GetPointer.argtypes = (ctypes.c_void_p, ctypes.c_char_p)

_NAME = b"dltensor"


def _on_capsule_freed(
    capsule: int, _valid: Any = _api.PyCapsule_IsValid, _get: Any = _api.PyCapsule_GetPointer,
    _pop: Any = _alive.pop, _name: bytes = _NAME,
) -> None:
    # A consumer renames the capsule to "used_dltensor" and owns the tensor;
    # a capsule still named "dltensor" was never consumed: release it here.
    if _valid(capsule, _name):
        _pop(_get(capsule, _name) or 0, None)


_capsule_destructor = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(_on_capsule_freed)

# Native code may call these two after this module is torn down (a tensor
# freed at interpreter exit): they must never be freed themselves.
_api.Py_IncRef.argtypes = (ctypes.py_object,)
_api.Py_IncRef(_deleter)
_api.Py_IncRef(_capsule_destructor)


class _Exported:
    """A zero-copy DLPack view of one CPU array of an ml_dtypes type."""

    __slots__ = ("_array", "_code", "_bits")

    def __init__(self, array: np.ndarray, code: int, bits: int) -> None:
        self._array = array
        self._code = code
        self._bits = bits

    def __dlpack_device__(self) -> tuple[int, int]:
        return (_KDL_CPU, 0)

    def __dlpack__(self, *, stream: Any = None, max_version: Any = None, dl_device: Any = None,
                   copy: Any = None) -> Any:
        if stream is not None and stream != -1:
            raise BufferError(f"a CPU array takes no stream, got stream={stream!r}")
        if copy:
            raise BufferError("to_dlpack exports without a copy; pass copy=None or False")
        a = self._array
        ndim = a.ndim
        shape = (ctypes.c_int64 * max(ndim, 1))(*a.shape)
        strides = (ctypes.c_int64 * max(ndim, 1))(*(s // a.itemsize for s in a.strides))
        managed = _Managed()
        t = managed.dl_tensor
        t.data = a.ctypes.data if a.size else None
        t.device = _Device(_KDL_CPU, 0)
        t.ndim = ndim
        t.dtype = _DataType(self._code, self._bits, 1)
        t.shape = ctypes.cast(shape, ctypes.POINTER(ctypes.c_int64))
        t.strides = ctypes.cast(strides, ctypes.POINTER(ctypes.c_int64))
        t.byte_offset = 0
        managed.manager_ctx = None
        managed.deleter = _deleter
        address = ctypes.addressof(managed)
        _alive[address] = (a, shape, strides, managed)
        return _api.PyCapsule_New(address, _NAME, ctypes.cast(_capsule_destructor, ctypes.c_void_p))


def to_dlpack(array: np.ndarray) -> Any:
    """Something ``torch.from_dlpack`` / ``jax.numpy.from_dlpack`` accept for
    ``array``: the array itself for NumPy's types, a zero-copy DLPack
    exporter for the ml_dtypes types (bfloat16, float8_*, float6_*,
    float4_e2m1fn).

    Raises:
        TypeError: ``array`` is not a NumPy array.
        BufferError: an ml_dtypes type DLPack has no code for (int2, int4 ...),
            or strides that are not a multiple of the element size.
    """
    if not isinstance(array, np.ndarray):
        raise TypeError(f"to_dlpack takes a numpy.ndarray, got {type(array).__name__}")
    if not is_ml_dtype(array.dtype):
        return array
    name = array.dtype.type.__name__
    code = _CODES.get(name)
    if code is None:
        raise BufferError(f"DLPack has no type code for {name}; view the array as its integer storage instead")
    if any(s % array.itemsize for s in array.strides):
        raise BufferError(f"strides {array.strides} are not a multiple of the element size {array.itemsize}")
    return _Exported(array, code, _BITS.get(name, 8 * array.itemsize))
