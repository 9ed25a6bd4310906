"""loaderx: convert a NumPy array once, then stream training batches at memory
speed with exact resumption.

The public names are loaded on first use, so ``import loaderx`` costs neither
NumPy nor the native library::

    import loaderx

    loaderx.from_numpy("train_data", array)
    ds = loaderx.DenseDataset("train_data")
    loader = loaderx.DataLoader({"data": ds}, batch_size=256)

Modules: :mod:`loaderx.converter` (NumPy → store), :mod:`loaderx.dataset`
(dense and ragged views), :mod:`loaderx.dataloader` (the endless, step-based
loader), :mod:`loaderx.sampler` (index generation), :mod:`loaderx.zrecord`
(raw byte records), :mod:`loaderx.arrow` (Arrow, Parquet, Hugging Face),
:mod:`loaderx.torch`, :mod:`loaderx.jax`, :mod:`loaderx.dlpack`,
:mod:`loaderx.packing` (sequence packing's options), :mod:`loaderx.mixture`
(weighted mixtures of sources), :mod:`loaderx.ray` (Ray Data's datasink and
datasource) and :mod:`loaderx.errors`. Each of the first
twelve is a thin public face that
re-exports its names from the subpackage holding the code:

* ``loaderx.store``: the binding, the store handle, element types, pages,
  the codec choice, writing stores and reading dense, ragged and raw ones;
* ``loaderx.loader``: the DataLoader and its options, pipeline, process
  pool, saved state, ``workers="auto"``, ragged gather and sampler;
* ``loaderx.io``: Arrow, Parquet and Hugging Face sources;
* ``loaderx.remote``: object storage: the S3 client, the local cache,
  reading through it and uploading;
* ``loaderx.integrations``: torch, jax, dlpack and ray.

Layers, top to bottom; a module imports only from rows below its own, and
never a private (``_``) name of a public module; a subpackage module is named
by its dotted path below ``loaderx`` (``tests/test_layers.py`` reads this
table, finds every module of every subpackage in it and checks the imports,
relative ones resolved, against it)::

    __main__
    cli
    converter  dataset  zrecord  dataloader  sampler  arrow  torch  jax  dlpack  packing  mixture  ray
    integrations.torch  integrations.jax  integrations.ray
    loader.dataloader  io.arrow
    loader.options  io.multistream
    loader._procpool  loader.mixture
    loader._shm  loader._cursor  loader._tokenmix
    loader._native_pipe
    loader._pipeline  loader._packing  loader._mixstreams
    loader._ragged
    store.converter  store.dataset  store.zrecord
    store._parallel  io.remote
    remote.upload
    remote._tree
    remote._guard
    remote._cache  remote._s3  remote._check
    store._autocodec  store._schema  store.shards
    loader.sampler  store._store  integrations.dlpack  loader._state  loader.packing
    store._native
    errors  _args  _progress  store._pages  store._dtypes  loader._autoworkers  loader._schedule  loader._lookahead
    loader._fingerprint

``__main__`` runs ``cli``, the ``loaderx`` command line. The third row holds
the public faces; nothing inside the package imports them, so each public
name has one home and a facade's import costs only its subpackage module.
``integrations.torch`` and ``integrations.jax`` fit a loader into those
frameworks' habits (an ``IterableDataset`` split across torch's workers;
batches put onto devices with a sharding and prefetched), and
``integrations.ray`` plugs datasets into Ray Data (a datasink writing one
shard per write task, committed once; a datasource reading by shard and
record range); each imports its framework, so nothing else imports them. ``loader.dataloader`` is the public
loader, its arguments checked into a ``LoaderOptions`` by ``loader.options``,
over ``loader._native_pipe`` (the default path: steps drawn and gathered
ahead by the native step pipeline, one native call per step, the batch
buffers recycled once the consumer lets go) or ``loader._pipeline`` (worker
threads, the step window, recycled batch buffers: a transform, or streams
the native pipeline cannot read), ``loader._procpool`` (worker processes handing batches back in
shared memory, for ``workers="process"``, over the segments and slot layout
of ``loader._shm``), ``loader._autoworkers`` (the timing of the first steps
on threads and the verdict of ``workers="auto"``: stay on threads or move to
processes), ``loader._ragged`` (a ragged stream's packed gather into
recycled buffers, and its padding) and ``loader._packing`` (a ragged stream
packed into fixed rows, concat or first-fit, with segment ids and positions;
``loader.packing`` holds its options, ``Pack``, and its batch, ``PackedRows``),
and ``loader._cursor`` (the resume cursor a state saves, made from and
sought to by the packed streams and the mixture schedule, for the loader and
its worker processes alike); ``loader._tokenmix`` packs a token-weighted
mixture (``Mixture(by="tokens")``) into rows of one source each, by the
exact schedule over rows, and ``loader._fingerprint`` (NumPy only, the
lowest row) digests a stream's records for a saved state to refuse other
data by.
``loader.mixture`` mixes named sources by weight for the loader: its streams
over the sources' joint index space (``loader._mixstreams``: one native
gather per batch over a set of the sources' stores, or per source into a
staging area), and its sampler, which takes each
step's per-source counts from ``loader._schedule`` (the exact Pfair schedule
or the sampled counts, and the checks of weights and of a saved mixture,
plain Python). ``io.arrow`` converts Arrow tables,
Parquet files and Hugging Face datasets into a directory of aligned stores;
``io.multistream`` opens such a directory as one multi-stream dataset.
``io.remote`` is the public face of uploading to object storage
(``push``, ``verify``, ``publish``), whose code is ``remote.upload``'s.
``store.converter`` writes stores, and with ``num_shards=`` hands a sharded
dataset's shards (its own and ``io.arrow``'s) to ``store._parallel``, which
writes them in worker processes at once and commits them; ``store.dataset``
and ``store.zrecord`` read them, both built on ``store._store`` (the one owner of a native store
handle); ``store.dataset`` reads a schema without the library through
``store._schema``. ``store.shards`` keeps a sharded dataset's manifest: writers
reserve shards, one commit publishes them in one rename, and readers check
each shard against it. ``loader.sampler`` draws indices; ``loader._state`` builds and
checks a loader's saved state (pure Python, shared by the loader and
``integrations.torch``); ``integrations.dlpack`` hands ml_dtypes arrays
(bfloat16 ...) to frameworks. ``store._native`` is the binding, the only
module that knows the C ABI. The ``remote`` subpackage is the object-storage
path, one block of rows: ``remote._s3`` is the S3 client (URLs, settings,
errors), ``remote._cache`` the cache's options, directory, eviction and page
state, ``remote._check`` the checks of the small files a mirror downloads
whole (header, dictionary, schema, manifest), ``remote._guard`` what keeps each handle's reads inside the pages its
process holds, ``remote._tree`` the mirror of a dataset in object storage
in that bounded local cache (pages fetched, checked, pinned and evicted,
the state in files and kernel locks), and ``remote.upload`` pushes a store,
a multi-stream directory or a sharded dataset, manifest last, and verifies
it (it reads a sharded dataset's manifest through ``store.shards``). At the bottom, with no loaderx imports:
``errors`` (exceptions), ``_args`` (argument checks), ``_progress`` (the
progress line), ``store._pages`` (releasing pages of a memory-mapped
source), ``store._dtypes`` (the element types a store holds, ml_dtypes
included, and their schema names) ``loader._autoworkers`` (the timing
and verdict above, plain Python) and ``loader._lookahead`` (fetching the
pages of the sampler's next steps into the cache of a dataset in object
storage, on a thread of its own; it calls the guards it is given). The subpackages' own ``__init__`` modules
hold only a docstring. This package module loads the public names on first
use.
"""

from __future__ import annotations

import importlib
import logging
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# Store opened or recovered, compaction reclaimed N bytes: logged to the
# "loaderx" logger, silent until the application configures logging.
logging.getLogger("loaderx").addHandler(logging.NullHandler())

# public name -> module that defines it
_EXPORTS = {
    "DenseDataset": "loaderx.dataset",
    "RaggedDataset": "loaderx.dataset",
    "pad": "loaderx.dataset",
    "CacheOptions": "loaderx.dataset",
    "Pack": "loaderx.packing",
    "PackedRows": "loaderx.packing",
    "DataLoader": "loaderx.dataloader",
    "Mixture": "loaderx.mixture",
    "from_numpy": "loaderx.converter",
    "from_iterator": "loaderx.converter",
    "train_dict": "loaderx.converter",
    "from_arrow": "loaderx.arrow",
    "MSDataset": "loaderx.arrow",
    "to_dlpack": "loaderx.dlpack",
    "Zrecord": "loaderx.zrecord",
    "Sampler": "loaderx.sampler",
    "WeightedSampler": "loaderx.sampler",
    "sample": "loaderx.sampler",
}

# submodules reachable as attributes without an explicit import
_SUBMODULES = (
    "errors", "converter", "dataset", "dataloader", "mixture", "sampler", "zrecord", "arrow", "cli", "packing",
)

__all__ = [
    "__version__",
    "DenseDataset",
    "RaggedDataset",
    "pad",
    "CacheOptions",
    "Pack",
    "PackedRows",
    "DataLoader",
    "Mixture",
    "from_numpy",
    "from_iterator",
    "train_dict",
    "from_arrow",
    "MSDataset",
    "to_dlpack",
    "Zrecord",
    "Sampler",
    "WeightedSampler",
    "sample",
    "errors",
    "set_num_threads",
    "get_num_threads",
]

if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs only
    from loaderx import errors
    from loaderx.arrow import MSDataset, from_arrow
    from loaderx.converter import from_iterator, from_numpy, train_dict
    from loaderx.dataloader import DataLoader
    from loaderx.dataset import CacheOptions, DenseDataset, RaggedDataset, pad
    from loaderx.dlpack import to_dlpack
    from loaderx.mixture import Mixture
    from loaderx.packing import Pack, PackedRows
    from loaderx.sampler import Sampler, WeightedSampler, sample
    from loaderx.zrecord import Zrecord


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is not None:
        value = getattr(importlib.import_module(module), name)
    elif name in _SUBMODULES:
        value = importlib.import_module(f"loaderx.{name}")
    else:
        raise AttributeError(f"module 'loaderx' has no attribute {name!r}")
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


def set_num_threads(n: int) -> None:
    """Set how many native worker threads one gather, append or compact may
    fan out to (like ``torch.set_num_threads``). Applies process-wide; 0
    restores the default (one per CPU).

    Raises:
        TypeError: ``n`` is not an integer.
        ValueError: ``n`` is negative.
    """
    if isinstance(n, bool) or not hasattr(n, "__index__"):
        raise TypeError(f"num_threads must be an int, got {n!r}")
    n = n.__index__()
    if n < 0:
        raise ValueError(f"num_threads must be 0 (the default) or more, got {n!r}")
    from loaderx.store import _native

    _native.set_threads(n)


def get_num_threads() -> int:
    """Return the number of native worker threads (see :func:`set_num_threads`)."""
    from loaderx.store import _native

    return int(_native.get_threads())
