"""loaderx datasets in Ray Data: a :class:`LoaderxDatasink` that writes a Ray
dataset as a sharded loaderx dataset, and a :class:`LoaderxDatasource` that
reads any loaderx dataset back into Ray.

Import it only where Ray is installed (``pip install 'loaderx[ray]'``;
``import loaderx`` never imports ray)::

    import ray
    from loaderx import ray as lxray

    ds = ray.data.read_parquet("corpus/").map_batches(tokenize)
    lxray.write(ds, "tokens")                 # one shard per write task
    ms = loaderx.MSDataset("tokens")          # or DenseDataset("tokens/<column>")
    again = lxray.read("tokens")              # a ray.data.Dataset

The datasink, the datasource and the column conversions between Arrow and
stores they share stay in one module: each is the other's inverse, and the
version check guards them all.

Writing is two-phase. Every write task writes its blocks into one shard of
its own (:class:`loaderx.store.shards.ShardWriter`, then
:func:`loaderx.arrow.from_arrow`, one stream per column), which no reader
sees; when every task has finished, the driver commits the shards once, in
the order of the write tasks, with one rename of the manifest. A job that
fails commits nothing: the directory keeps its previous dataset (or none),
the driver removes the shards of the failed job that it can see, and the next
commit removes any a killed worker left behind.

Column types are kept exactly: an ``int32`` column stays ``int32``; a
fixed-size list, or one of Ray's fixed-shape tensor columns
(``ArrowTensorType``, ``ArrowTensorTypeV2``, Arrow's ``fixed_shape_tensor``),
becomes a dense stream with that item shape; a list column, or one of Ray's
variable-shaped tensor columns whose tensors differ only in their first axis,
becomes a ragged stream. Ray chooses a column's tensor type per batch: a
``map_batches`` step that returns lists of arrays gives a fixed-shape tensor
for a batch whose arrays happen to share one length and a variable-shaped one
otherwise. Inside one write task such a column is stored ragged as soon as
one of its blocks is. A task that saw only equal lengths cannot know about
the others and writes the column dense; before committing, the driver
rewrites such a shard's stream ragged (reading and writing that stream of
that shard once, logged). Naming the column in ``ragged=`` has every task
store it ragged and spares the rewrite. Shards that still disagree (another
dtype, another trailing shape) are refused by the commit, which keeps the
previous dataset.

With ``codec="auto"`` each shard chooses its codecs itself, per column, from
its own first records (the rule of :func:`loaderx.arrow.from_arrow`, with the
store's size taken as the shard's); the driver sees no data before the tasks
run, so it cannot choose for them. Shards of one dataset may then use
different codecs, which readers do not notice. Pass a codec to have one.

Reading splits the dataset by shard and by record range within a shard into
about ``parallelism`` read tasks. A task is pickled as paths and ranges only
and opens the stores itself, in a Ray worker (a fresh process, never a fork
of one that loaded the library). It yields Arrow tables of at most about
``block_bytes``: a dense stream of scalars as a plain column, one with an
item shape as Ray's fixed-shape tensor column, a ragged stream as a list
column (of fixed-size lists when it has a trailing shape), every dtype
exact.

Ray Data's ``Datasink`` and ``Datasource`` are developer APIs that change
between Ray releases, so this module checks the installed version against
:data:`SUPPORTED_RAY` at import and refuses others with an ImportError.

The sink and the source stay in this one module (past 700 lines) because
they are the two halves of one mapping between Ray's column types and
loaderx streams, and the only place that imports ray and checks its version.
"""

from __future__ import annotations

import functools
import logging
import os
import re
import shutil
import uuid
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import ray

try:  # plain ray without its data extra, or a release too old for these names
    import pyarrow as pa
    import ray.data
    from ray.data.block import BlockAccessor, BlockMetadata
    from ray.data.datasource import Datasink, Datasource, ReadTask, WriteResult
    from ray.data.extensions import (
        ArrowTensorArray,
        ArrowTensorType,
        ArrowTensorTypeV2,
        ArrowVariableShapedTensorType,
    )
except ImportError as e:  # the range is SUPPORTED_RAY's, below
    raise ImportError(
        f"loaderx.ray supports ray[data] >=2.60,<3 (pip install 'loaderx[ray]'); with ray "
        f"{getattr(ray, '__version__', 'unknown')} this fails: {e}"
    ) from e

from loaderx._args import CONVERT_CODECS, check_codec
from loaderx.errors import StoreExistsError
from loaderx.io.arrow import from_arrow
from loaderx.io.multistream import META_FILE, is_multistream
from loaderx.store import _native, shards
from loaderx.store._dtypes import from_schema_name
from loaderx.store.converter import from_iterator
from loaderx.store.dataset import DenseDataset, RaggedDataset

if TYPE_CHECKING:
    from loaderx._args import PathLike

__all__ = ["LoaderxDatasink", "LoaderxDatasource", "write", "read", "SUPPORTED_RAY", "BLOCK_BYTES", "COLUMN"]

#: The Ray releases this module was tested with.
SUPPORTED_RAY = ">=2.60,<3"
_RAY_MIN = (2, 60)
_RAY_BELOW = (3,)

#: About how many bytes one block of a read task holds.
BLOCK_BYTES = 64 << 20

#: The Ray column of a dataset that is a single store (layout "store").
COLUMN = "data"

_log = logging.getLogger("loaderx")

# What this module calls on Ray's classes (and overrides): a release that
# lacks one of them is refused at import rather than failing inside a job.
_NEEDED = {
    Datasink: ("write", "on_write_start", "on_write_complete", "on_write_failed", "min_rows_per_write"),
    Datasource: ("get_read_tasks", "estimate_inmemory_data_size"),
}


def _release(version: str) -> tuple[int, ...]:
    m = re.match(r"(\d+)(?:\.(\d+))?", version)
    if m is None:
        return ()
    return tuple(int(p) for p in m.groups() if p is not None)


def _check_ray() -> None:
    version = str(getattr(ray, "__version__", "unknown"))
    release = _release(version)
    if not release or release < _RAY_MIN or release >= _RAY_BELOW:
        raise ImportError(
            f"loaderx.ray supports ray[data] {SUPPORTED_RAY}; this is ray {version} "
            f"(pip install 'loaderx[ray]' installs a supported one)"
        )
    for cls, names in _NEEDED.items():
        missing = [n for n in names if not hasattr(cls, n)]
        if missing:
            raise ImportError(
                f"ray {version}'s {cls.__name__} has no {', '.join(missing)}; loaderx.ray supports "
                f"ray[data] {SUPPORTED_RAY}"
            )


_check_ray()


# ---------------------------------------------------------------------------
# writing: Ray blocks -> plain Arrow columns that from_arrow stores exactly


def _nest(values: Any, shape: Sequence[int]) -> Any:
    """Flat values as nested fixed-size lists of ``shape`` (outermost first)."""
    for size in reversed(tuple(shape)):
        values = pa.FixedSizeListArray.from_arrays(values, int(size))
    return values


def _ragged_of(offsets: np.ndarray, values: Any, tail: Sequence[int]) -> Any:
    """A large list whose row ``i`` holds rows ``offsets[i]:offsets[i+1]`` of
    ``values`` (flat), each row of shape ``tail``."""
    return pa.LargeListArray.from_arrays(pa.array(offsets.astype(np.int64), pa.int64()), _nest(values, tail))


def _no_nulls(name: str, arr: Any) -> None:
    if arr.null_count:
        raise ValueError(
            f"column {name!r} holds {arr.null_count} null(s); a store has no null: fill or drop them first"
        )


def _plain(name: str, arr: Any, ragged: bool) -> Any:
    """One chunk of a column as an array of plain Arrow types: Ray's tensor
    extensions become nested fixed-size lists (dense) or large lists of them
    (ragged), lists become large lists; ``ragged`` turns a fixed first axis
    into a ragged one."""
    t = arr.type
    fixed_shape = getattr(pa, "FixedShapeTensorType", None)
    if isinstance(t, (ArrowTensorType, ArrowTensorTypeV2)) or (
        fixed_shape is not None and isinstance(t, fixed_shape)
    ):
        _no_nulls(name, arr)
        perm = getattr(t, "permutation", None)
        if perm is not None and list(perm) != list(range(len(perm))):
            raise TypeError(f"column {name!r} is a tensor column with dimension order {perm}; make it row-major first")
        arr = _nest(arr.storage.flatten(), t.shape)
    elif isinstance(t, ArrowVariableShapedTensorType):
        _no_nulls(name, arr)
        data, shapes = arr.storage.flatten()
        dims = shapes.flatten().to_numpy().astype(np.int64).reshape(len(arr), t.ndim)
        tail = tuple(int(d) for d in dims[0, 1:]) if len(arr) else ()
        bad = np.flatnonzero((dims[:, 1:] != np.array(tail, dtype=np.int64)).any(axis=1))
        if len(bad):
            k = int(bad[0])
            raise TypeError(
                f"column {name!r}: its tensors differ beyond their first axis (row 0 has shape "
                f"{tuple(dims[0].tolist())}, row {k} {tuple(dims[k].tolist())}); a ragged stream varies only "
                "in the first axis"
            )
        offsets = np.zeros(len(arr) + 1, dtype=np.int64)
        np.cumsum(dims[:, 0], out=offsets[1:])
        return _ragged_of(offsets, data.flatten(), tail)
    if isinstance(arr, pa.ExtensionArray):
        raise TypeError(f"column {name!r} has the extension type {t}, which has no store form")
    t = arr.type
    if pa.types.is_list(t):
        arr = arr.cast(pa.large_list(t.value_field))
    if ragged and pa.types.is_fixed_size_list(arr.type):
        _no_nulls(name, arr)
        n, size = len(arr), arr.type.list_size
        arr = pa.LargeListArray.from_arrays(
            pa.array(np.arange(n + 1, dtype=np.int64) * size, pa.int64()), arr.flatten()
        )
    elif ragged and not pa.types.is_large_list(arr.type):
        raise TypeError(f"column {name!r} has type {t}, which has no first axis to store ragged")
    return arr


def _as_ragged(name: str, arr: Any) -> Any:
    """A dense column (fixed-size lists) as a ragged one of the same rows."""
    return _plain(name, arr, True)


def _task_table(blocks: Iterable[Any], columns: Sequence[str] | None, ragged: frozenset[str]) -> Any:
    """The blocks of one write task as one Arrow table of plain types, or
    None when they hold no rows. Ray's write operator keeps every block of the
    task alive until the task ends (it passes them on), so concatenating them
    (no copy of the values) holds nothing more."""
    tables = []
    for block in blocks:
        table = BlockAccessor.for_block(block).to_arrow()
        if table.num_rows == 0:
            continue
        names = list(table.column_names) if columns is None else list(columns)
        missing = [c for c in names if c not in table.column_names]
        if missing:
            raise KeyError(f"no column {', '.join(map(repr, missing))} in the Ray dataset; it has {table.column_names}")
        cols = []
        for c in names:
            chunks = [_plain(c, chunk, c in ragged) for chunk in table.column(c).chunks]
            cols.append(pa.chunked_array(chunks, type=chunks[0].type) if chunks else table.column(c))
        tables.append(pa.table(cols, names=names))
    if not tables:
        return None
    names = tables[0].column_names
    for k, t in enumerate(tables[1:], 1):
        if t.column_names != names:
            raise ValueError(f"block {k} of a write task has columns {t.column_names}, block 0 {names}")
    # A column stored ragged in one block (Ray's per-batch tensor choice)
    # is stored ragged in all of them.
    for c in names:
        types = [t.schema.field(c).type for t in tables]
        if any(pa.types.is_large_list(ty) for ty in types) and not all(pa.types.is_large_list(ty) for ty in types):
            for k, t in enumerate(tables):
                if not pa.types.is_large_list(types[k]):
                    col = pa.chunked_array([_as_ragged(c, ch) for ch in t.column(c).chunks])
                    tables[k] = t.set_column(t.column_names.index(c), c, col)
        types = [t.schema.field(c).type for t in tables]
        for k, ty in enumerate(types):
            if ty != types[0]:
                raise TypeError(f"column {c!r} has type {ty} in block {k} of a write task, {types[0]} in block 0")
    return pa.concat_tables(tables)


#: A shard's name as ShardWriter makes it: a prefix, a dash, 16 hex digits.
_SHARD_NAME = re.compile(r"[^.][^/]*-[0-9a-f]{16}")


def _sharding_leftover(path: str, entry: str) -> bool:
    """Whether ``entry`` is what shard writers and commits leave in a dataset
    directory (a lock, a store's staging directory, a manifest being
    written, a shard that was never committed)."""
    if entry.startswith(".writing-") or entry == ".commit.lock" or entry.startswith(".manifest.json.tmp-"):
        return True
    if entry.startswith("."):
        return shards._staging_owner(entry) is not None
    sub = os.path.join(path, entry)
    return not os.path.islink(sub) and os.path.isdir(sub) and _SHARD_NAME.fullmatch(entry) is not None


def _check_target(path: str, mode: str) -> None:
    """Refuse a ``path`` that holds anything but a loaderx dataset, so a
    dataset never shares its directory with other files. Accepted: nothing, an empty directory, a
    sharded dataset, what failed writes left, and (``mode="overwrite"``) a
    loaderx store or directory of stores."""
    if not os.path.lexists(path):
        return
    if os.path.islink(path) or not os.path.isdir(path):
        raise StoreExistsError(f"{path!r} already exists and is not a directory")
    entries = [e for e in os.listdir(path) if not _sharding_leftover(path, e)]
    if shards.is_sharded(path):
        shards.read_manifest(path)  # a damaged manifest is reported before any work
        entries = [e for e in entries if e != shards.MANIFEST_FILE]
    elif os.path.isfile(os.path.join(path, META_FILE)) or is_multistream(path):
        if mode == "append":
            raise StoreExistsError(
                f"{path!r} holds a loaderx store or directory of stores, not a sharded dataset; append needs "
                "a sharded dataset (write it with mode='overwrite' to replace it)"
            )
        return
    for e in entries:
        sub = os.path.join(path, e)
        if os.path.islink(sub) or not os.path.isdir(sub) or not (
            os.path.isfile(os.path.join(sub, META_FILE)) or is_multistream(sub)
        ):
            raise StoreExistsError(
                f"{path!r} holds {e!r}, which is not part of a loaderx dataset; refusing to write a "
                "dataset there"
            )


class LoaderxDatasink(Datasink):
    """Write a Ray dataset as a sharded loaderx dataset at ``path``, one shard
    (a directory of aligned streams, one per column) per write task, committed
    once by the driver in the order of the write tasks.

    Use it with ``ray_dataset.write_datasink(LoaderxDatasink(path))``, or
    :func:`write`. After a successful write, :attr:`manifest` is the
    committed :class:`loaderx.store.shards.Manifest` and :attr:`write_tasks`
    the number of write tasks (tasks without rows write no shard).

    Args:
        path: the dataset directory; created if missing. With
            ``mode="overwrite"`` it may hold a previous sharded dataset, a
            loaderx store or directory of stores, which the commit replaces;
            anything else there is refused.
        codec: the codec of every stream (``"auto"``, ``"raw"``, ``"zstd"``,
            ``"zstd_dict"``, ``"narrow"``); ``"auto"`` lets each shard choose
            per column from its own first records (see the module notes).
        mode: ``"overwrite"`` replaces the dataset, ``"append"`` puts the new
            shards after those of the current one (their streams must agree).
        columns: the columns to write, in this order; all by default.
        ragged: columns to store ragged even in a write task whose blocks
            all came as fixed-shape tensors (Ray picks the tensor type per
            batch, so a tokenizer's output may).
        min_rows_per_write: passed to Ray: fewer, larger write tasks (and
            shards) of at least this many rows.
        sync: fsync every shard and the manifest before the commit returns.
            Off by default, as for Ray's own writers and ``from_numpy``: the
            commit's rename still switches readers at once, and a power cut
            that loses shards the manifest names makes opening the dataset
            a CorruptStoreError naming them, never other data.

    Raises:
        ValueError: a bad option (quoting it).
        loaderx.errors.StoreExistsError: at the write's start, ``path`` holds
            something a commit would destroy.
    """

    def __init__(
        self,
        path: PathLike,
        *,
        codec: str = "auto",
        mode: str = "overwrite",
        columns: Sequence[str] | None = None,
        ragged: Sequence[str] | None = None,
        min_rows_per_write: int | None = None,
        sync: bool = False,
    ) -> None:
        if not isinstance(sync, bool):
            raise TypeError(f"sync must be True or False, got {sync!r}")
        self._sync = sync
        self._path = os.path.abspath(os.fspath(path))  # write tasks may run in another directory
        self._codec = check_codec(codec, CONVERT_CODECS)
        if mode not in ("overwrite", "append"):
            raise ValueError(f"mode must be 'overwrite' or 'append'; got {mode!r}")
        self._mode = mode
        self._columns = _names("columns", columns)
        self._ragged = frozenset(_names("ragged", ragged) or ())
        if min_rows_per_write is not None and (
            isinstance(min_rows_per_write, bool) or not isinstance(min_rows_per_write, int) or min_rows_per_write <= 0
        ):
            raise ValueError(f"min_rows_per_write must be a positive int or None; got {min_rows_per_write!r}")
        self._min_rows = min_rows_per_write
        self._prefix = _job_prefix()
        self._started = False
        self._created = False
        self.manifest: shards.Manifest | None = None
        self.write_tasks: int | None = None

    @property
    def path(self) -> str:
        """The dataset directory (absolute)."""
        return self._path

    @property
    def min_rows_per_write(self) -> int | None:
        return self._min_rows

    def get_name(self) -> str:
        return "Loaderx"

    def on_write_start(self, schema: Any = None) -> None:
        """On the driver, before the first write task: check and create the
        directory. ``schema`` is not used: when the write is fused with a
        ``map_batches`` before it, it describes that step's input."""
        if self._started:  # a second job through the same sink gets shard names of its own
            self._prefix = _job_prefix()
        self._started = True
        self.manifest = None
        _check_target(self._path, self._mode)
        self._created = not os.path.lexists(self._path)
        os.makedirs(self._path, exist_ok=True)

    def write(self, blocks: Iterable[Any], ctx: Any) -> dict[str, Any]:
        """In a write task: the task's blocks into one new shard. Returns the
        task's index, the shard's name (None for a task without rows) and its
        row count."""
        task = int(ctx.task_idx)
        table = _task_table(blocks, self._columns, self._ragged)
        if table is None:
            return {"task": task, "name": None, "rows": 0}
        with shards.ShardWriter(self._path, prefix=self._prefix) as w:
            try:
                ms = from_arrow(w.path, table, codec=self._codec, progress=False, sync=self._sync)
                ms.close()
            except BaseException:
                shutil.rmtree(w.path, ignore_errors=True)
                raise
            name = w.name
        return {"task": task, "name": name, "rows": int(table.num_rows)}

    def on_write_complete(self, write_result: WriteResult) -> None:
        """On the driver, once every task succeeded: commit the shards in task
        order (one manifest rename). A refusal raises, and Ray then calls
        :meth:`on_write_failed`."""
        self.write_tasks = len(write_result.write_returns)
        done = sorted((r for r in write_result.write_returns if r is not None), key=lambda r: r["task"])
        written = [r for r in done if r["name"] is not None]
        names = [r["name"] for r in written]
        if not names and self._mode == "append" and shards.is_sharded(self._path):
            self.manifest = shards.read_manifest(self._path)  # nothing to add
            return
        if not names:
            raise ValueError(f"the Ray dataset has no rows: nothing to commit at {self._path!r}")
        lengths = _unify_kinds(self._path, names, self._codec)
        for r in written:
            if lengths[r["name"]] != r["rows"]:
                raise ValueError(
                    f"shard {r['name']!r} of write task {r['task']} holds {lengths[r['name']]} records, "
                    f"the task wrote {r['rows']} rows"
                )
        try:
            self.manifest = shards.commit(self._path, names, append=self._mode == "append", sync=self._sync)
        except ValueError as e:
            hint = ""
            if "kind" in str(e):
                hint = "; name columns that are lists in some rows in ragged= to store them ragged in every shard"
            raise ValueError(f"{e}{hint}") from e

    def on_write_failed(self, error: Exception) -> None:
        """On the driver, when the job failed: commit nothing and remove the
        shards this job wrote (the manifest's are never touched; a shard still
        being written when the job failed is removed by the next commit)."""
        removed = _remove_job_shards(self._path, self._prefix)
        if self._created:
            shards.remove_if_empty(self._path)
        _log.info("loaderx: write to %s failed (%s); removed %d uncommitted shard(s)", self._path, error, removed)


def _unify_kinds(root: str, names: Sequence[str], codec: str) -> dict[str, int]:
    """Rewrite ragged every dense stream of the shards ``names`` whose column
    is ragged in another shard, when its records fit that column (same dtype,
    its item shape the ragged trailing shape behind a first axis): the write
    task saw only fixed-shape tensor blocks of a column Ray typed per batch.
    Returns each shard's records."""
    found = {n: shards.describe(os.path.join(root, n)) for n in names}
    described = {n: streams for n, (_, streams, _) in found.items()}
    columns = sorted({c for streams in described.values() for c in streams})
    for c in columns:
        infos = {n: st[c] for n, st in described.items() if c in st}
        ragged = [i for i in infos.values() if i.kind == "ragged"]
        if not ragged:
            continue
        want = ragged[0]
        for n, i in infos.items():
            if i.kind == "dense" and i.dtype == want.dtype and i.item_shape[1:] == want.item_shape and i.item_shape:
                _dense_to_ragged(os.path.join(root, n, c), codec)
                _log.info("loaderx: stream %r of shard %s came dense; rewrote it ragged", c, n)
    return {n: length for n, (_, _, length) in found.items()}


def _dense_to_ragged(path: str, codec: str) -> None:
    """Replace the dense store at ``path`` (in a shard no manifest names yet)
    by a ragged store of the same records."""
    parent, name = os.path.split(path)
    tag = uuid.uuid4().hex[:8]
    staged, old = os.path.join(parent, f".{name}.ragged-{tag}"), os.path.join(parent, f".{name}.dense-{tag}")
    with DenseDataset(path) as ds:
        from_iterator(staged, ds, codec=codec, progress=False)
    os.rename(path, old)
    os.rename(staged, path)
    shutil.rmtree(old, ignore_errors=True)


def _names(what: str, names: Sequence[str] | None) -> list[str] | None:
    if names is None:
        return None
    if isinstance(names, str):
        raise TypeError(f"{what} must be a list of names, not the string {names!r}")
    out = list(names)
    bad = [n for n in out if not isinstance(n, str)]
    if bad:
        raise TypeError(f"{what} must hold column names (str); got {bad[0]!r}")
    if len(set(out)) != len(out):
        raise ValueError(f"{what} lists a name twice: {out}")
    return out


def _job_prefix() -> str:
    return f"ray-{uuid.uuid4().hex[:12]}"


def _remove_job_shards(path: str, prefix: str) -> int:
    """Abandon the shards named ``prefix-...`` whose writer has finished;
    the number removed. A shard whose writer may still run (its lock held)
    is left to the next commit, which checks the lock again."""
    try:
        entries = set(os.listdir(path))
    except OSError:
        return 0
    names = sorted(e for e in entries if e.startswith(prefix + "-"))
    try:
        return len(shards.abandon(path, names))
    except Exception as e:  # an unreadable manifest: touch nothing
        _log.warning("loaderx: left the uncommitted shards at %s in place: %s", path, e)
        return 0


def write(ray_dataset: Any, path: PathLike, **opts: Any) -> shards.Manifest:
    """Write ``ray_dataset`` as a sharded loaderx dataset at ``path``
    (``ray_dataset.write_datasink(LoaderxDatasink(path, **opts))``) and
    return the committed manifest. ``opts`` are :class:`LoaderxDatasink`'s,
    and ``concurrency`` and ``ray_remote_args``, which go to Ray."""
    ray_opts = {k: opts.pop(k) for k in ("concurrency", "ray_remote_args") if k in opts}
    sink = LoaderxDatasink(path, **opts)
    ray_dataset.write_datasink(sink, **ray_opts)
    assert sink.manifest is not None  # on_write_complete ran, or write_datasink raised
    return sink.manifest


# ---------------------------------------------------------------------------
# reading: record ranges of shards -> Arrow blocks


class _Stream:
    """What a read task needs of one stream: its kind, dtype and item shape."""

    __slots__ = ("name", "kind", "dtype", "item_shape", "row_bytes")

    def __init__(self, name: str, kind: str, dtype: np.dtype, item_shape: tuple[int, ...]) -> None:
        self.name = name
        self.kind = kind
        self.dtype = dtype
        self.item_shape = item_shape
        self.row_bytes = int(np.prod(item_shape, dtype=np.int64)) * dtype.itemsize

    def __reduce__(self) -> tuple[Any, ...]:
        return (_Stream, (self.name, self.kind, self.dtype, self.item_shape))


def _arrow_type(s: _Stream) -> Any:
    try:
        t = pa.from_numpy_dtype(s.dtype)
    except (pa.ArrowNotImplementedError, TypeError, ValueError):
        raise TypeError(
            f"stream {s.name!r} holds {s.dtype} elements, which Arrow has no type for; read it with "
            "loaderx itself (DenseDataset / RaggedDataset)"
        ) from None
    return t


def _open(shard: str, s: _Stream, layout: str) -> DenseDataset | RaggedDataset:
    path = shard if layout == "store" else os.path.join(shard, s.name)
    return RaggedDataset(path) if s.kind == "ragged" else DenseDataset(path)


def _column(s: _Stream, data: Any) -> Any:
    """One block's column: ``data`` is an array ``(n, *item_shape)`` (dense)
    or a list of arrays (ragged)."""
    if s.kind == "dense":
        if not s.item_shape:
            return pa.array(data, type=pa.from_numpy_dtype(s.dtype))
        return ArrowTensorArray.from_numpy(data, column_name=s.name)
    lengths = np.fromiter((len(r) for r in data), dtype=np.int64, count=len(data))
    offsets = np.zeros(len(data) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    if offsets[-1] > np.iinfo(np.int32).max:  # a list column's offsets are int32
        raise ValueError(
            f"stream {s.name!r}: {len(data)} records of {int(offsets[-1])} rows do not fit one Arrow list "
            "block; read with a smaller block_bytes"
        )
    flat = np.concatenate([r.reshape(-1) for r in data]) if data else np.empty(0, s.dtype)
    values = _nest(pa.array(flat, type=pa.from_numpy_dtype(s.dtype)), s.item_shape)
    return pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), values)


def _read_task(
    pieces: Sequence[tuple[str, int, int]], streams: Sequence[_Stream], layout: str, block_rows: int
) -> Iterator[Any]:
    """The body of one read task, run in a Ray worker: each piece
    ``(shard, start, stop)`` read ``block_rows`` records at a time."""
    for shard, start, stop in pieces:
        opened = [_open(shard, s, layout) for s in streams]
        try:
            for lo in range(start, stop, block_rows):
                hi = min(stop, lo + block_rows)
                cols = [_column(s, ds[lo:hi]) for s, ds in zip(streams, opened)]
                yield pa.table(cols, names=[s.name for s in streams])
        finally:
            for ds in opened:
                ds.close()


class LoaderxDatasource(Datasource):
    """A loaderx dataset as a Ray Data source: a single store (one column,
    :data:`COLUMN`), a directory of aligned stores (one column per stream),
    or a sharded dataset of either layout.

    Use it with ``ray.data.read_datasource(LoaderxDatasource(path))``, or
    :func:`read`. The dataset is looked at once, here, on the driver (the
    manifest of a sharded one, the schemas, and the record sizes of ragged
    streams, which the blocks' sizes need); read tasks open the stores again
    in the workers. Rows come in the dataset's order.

    Args:
        path: the dataset.
        columns: the streams to read, in this order; all by default.
        block_bytes: about how many bytes one block holds.

    Raises:
        FileNotFoundError: nothing loaderx at ``path``.
        KeyError: a requested column is not a stream of the dataset.
        TypeError: a stream's dtype has no Arrow type (bfloat16 ...).
    """

    def __init__(
        self, path: PathLike, columns: Sequence[str] | None = None, *, block_bytes: int = BLOCK_BYTES
    ) -> None:
        super().__init__()
        if isinstance(block_bytes, bool) or not isinstance(block_bytes, int) or block_bytes <= 0:
            raise ValueError(f"block_bytes must be a positive int; got {block_bytes!r}")
        self._path = os.path.abspath(os.fspath(path))
        self._block_bytes = block_bytes
        self._layout, streams, self._shards = _describe(self._path)
        wanted = _names("columns", columns)
        if wanted is not None:
            missing = [c for c in wanted if c not in streams]
            if missing:
                raise KeyError(f"{self._path!r} has no stream {', '.join(map(repr, missing))}; it has {list(streams)}")
            streams = {c: streams[c] for c in wanted}
        self._streams = list(streams.values())
        for s in self._streams:
            _arrow_type(s)
        self._ragged_rows = _ragged_rows(self._shards, self._streams, self._layout)

    @property
    def path(self) -> str:
        return self._path

    def get_name(self) -> str:
        return "Loaderx"

    @property
    def columns(self) -> list[str]:
        """The Ray columns the blocks hold, in order."""
        return [s.name for s in self._streams]

    @property
    def num_rows(self) -> int:
        """The records of each stream."""
        return sum(n for _, n in self._shards)

    def _bytes(self, shard: int, start: int, stop: int) -> int:
        """The bytes rows ``start:stop`` of shard ``shard`` take in blocks."""
        total = 0
        for s in self._streams:
            if s.kind == "dense":
                total += (stop - start) * s.row_bytes
            else:
                ends = self._ragged_rows[(shard, s.name)]  # cumulative rows, from 0
                total += int(ends[stop] - ends[start]) * s.row_bytes + 4 * (stop - start)
        return total

    def estimate_inmemory_data_size(self) -> int:
        return sum(self._bytes(k, 0, n) for k, (_, n) in enumerate(self._shards))

    def get_read_tasks(
        self, parallelism: int, per_task_row_limit: int | None = None, data_context: Any = None, **_: Any
    ) -> list[ReadTask]:
        """About ``parallelism`` tasks of about equal row counts, cut at
        shard boundaries and inside shards; each task reads consecutive rows,
        so the tasks in order give the rows in order."""
        total = self.num_rows
        if total == 0:
            return []
        target = -(-total // max(1, int(parallelism)))
        row_bytes = max(1, self.estimate_inmemory_data_size() // total)
        block_rows = max(1, self._block_bytes // row_bytes)
        schema = pa.schema([(s.name, _column(s, _empty(s)).type) for s in self._streams])
        tasks: list[ReadTask] = []
        pieces: list[tuple[str, int, int]] = []
        rows = nbytes = 0

        def close() -> None:
            nonlocal pieces, rows, nbytes
            meta = BlockMetadata(num_rows=rows, size_bytes=nbytes, input_files=None, exec_stats=None)
            fn = functools.partial(_read_task, tuple(pieces), tuple(self._streams), self._layout, block_rows)
            tasks.append(ReadTask(fn, meta, schema=schema, per_task_row_limit=per_task_row_limit))
            pieces, rows, nbytes = [], 0, 0

        for k, (shard, n) in enumerate(self._shards):
            pos = 0
            while pos < n:
                take = min(target - rows, n - pos)
                pieces.append((shard, pos, pos + take))
                nbytes += self._bytes(k, pos, pos + take)
                rows += take
                pos += take
                if rows == target:
                    close()
        if pieces:
            close()
        return tasks


def _empty(s: _Stream) -> Any:
    if s.kind == "dense":
        return np.empty((0, *s.item_shape), dtype=s.dtype)
    return []


def _describe(path: str) -> tuple[str, dict[str, _Stream], list[tuple[str, int]]]:
    """A dataset's layout, streams and ``(directory, records)`` per shard."""
    resolved = shards.resolve(path)
    if resolved is not None:
        root, only, m = resolved
        where = os.path.join(root, shards.MANIFEST_FILE)
        streams = {
            (COLUMN if m.layout == "store" else name): _Stream(
                COLUMN if m.layout == "store" else name,
                info.kind,
                from_schema_name(info.dtype, where),
                tuple(int(d) for d in info.item_shape),
            )
            for name, info in m.streams.items()
            if not only or name == only
        }
        return m.layout, streams, [(os.path.join(root, s.name), int(s.length)) for s in m.shards]
    if os.path.isfile(os.path.join(path, META_FILE)):
        stream, n = _stream_of(COLUMN, path)
        return "store", {COLUMN: stream}, [(path, n)]
    if is_multistream(path):
        names = sorted(
            e for e in os.listdir(path) if not e.startswith(".") and os.path.isfile(os.path.join(path, e, META_FILE))
        )
        found = {n: _stream_of(n, os.path.join(path, n)) for n in names}
        lengths = {n: length for n, (_, length) in found.items()}
        if len(set(lengths.values())) > 1:
            raise ValueError(f"{path!r}: the streams are not aligned (lengths {lengths})")
        return "streams", {n: s for n, (s, _) in found.items()}, [(path, next(iter(lengths.values())))]
    raise FileNotFoundError(f"no loaderx dataset at {path!r} (no store, directory of stores or manifest)")


def _stream_of(name: str, path: str) -> tuple[_Stream, int]:
    """The stream of the store at ``path``, and its records."""
    kind, dtype_name, shape = _native.schema_read(path)
    s = _Stream(name, kind, from_schema_name(dtype_name, path), tuple(int(d) for d in shape))
    ds = _open(path, s, "store")
    try:
        return s, len(ds)
    finally:
        ds.close()


def _ragged_rows(
    shard_list: Sequence[tuple[str, int]], streams: Sequence[_Stream], layout: str
) -> dict[tuple[int, str], np.ndarray]:
    """For each ragged stream of each shard, its cumulative row counts
    (``[0, L0, L0+L1, ...]``): the sizes of any record range in O(1)."""
    out: dict[tuple[int, str], np.ndarray] = {}
    for k, (shard, _) in enumerate(shard_list):
        for s in streams:
            if s.kind != "ragged":
                continue
            ds = _open(shard, s, layout)
            try:
                lengths = ds.lengths()
            finally:
                ds.close()
            ends = np.zeros(len(lengths) + 1, dtype=np.int64)
            np.cumsum(lengths, out=ends[1:])
            out[(k, s.name)] = ends
    return out


def read(path: PathLike, columns: Sequence[str] | None = None, **read_args: Any) -> Any:
    """``ray.data.read_datasource(LoaderxDatasource(path, columns))``: a
    loaderx dataset as a ``ray.data.Dataset``. ``read_args`` go to
    ``read_datasource`` (``override_num_blocks``, ``ray_remote_args`` ...),
    except ``block_bytes``, which goes to the source."""
    source_opts = {k: read_args.pop(k) for k in ("block_bytes",) if k in read_args}
    return ray.data.read_datasource(LoaderxDatasource(path, columns, **source_opts), **read_args)
