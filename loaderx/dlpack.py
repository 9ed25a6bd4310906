"""Hand ml_dtypes arrays (bfloat16, float8 ...) to frameworks over DLPack:
:func:`to_dlpack`.

NumPy exports only its own element types over DLPack; an array of an
``ml_dtypes`` type such as ``bfloat16`` raises ``BufferError``. DLPack itself
has codes for these types, so :func:`to_dlpack` wraps such an array in an
object that exports it with the right code, without a copy::

    batch = DenseDataset("embeddings")[0:256]        # a bfloat16 array
    t = torch.from_dlpack(to_dlpack(batch))          # torch.bfloat16, same memory
    x = jax.numpy.from_dlpack(to_dlpack(batch))

Arrays of NumPy's own types are returned as they are (NumPy exports them).
The array is kept alive until the consumer releases the tensor.

The code lives in :mod:`loaderx.integrations.dlpack`; import the names from here.
"""

from __future__ import annotations

from loaderx.integrations.dlpack import to_dlpack

__all__ = ["to_dlpack"]
