"""Arrow, Parquet and Hugging Face sources, and multi-stream datasets.

:func:`from_arrow` writes each column of a table to its own store under one
directory, all stores aligned (row ``i`` of every column is record ``i`` of
every store):

* a primitive column (bool, integers, floats) becomes a dense store of
  scalars;
* a ``fixed_size_list`` column (nested ones too) becomes a dense store whose
  item shape is the list sizes, e.g. ``fixed_size_list<uint8>[784]`` gives
  records of shape ``(784,)``;
* a ``list<primitive>`` (or ``large_list``) column becomes a ragged store,
  and a list of fixed-size lists a ragged store with a trailing shape.

The source is read batch by batch straight from the Arrow buffers (no Python
object per row), and every dtype is kept exactly: a ``uint8`` column stays
``uint8``. The source may be a ``pyarrow.Table`` or ``RecordBatchReader``, a
``datasets.Dataset`` (Arrow underneath; its row selection and order are
honoured), or a path: a Parquet file, a directory of Parquet files, an Arrow
IPC / Feather file, or a directory written by ``datasets``'
``save_to_disk``. Columns with no store form (strings, structs, images not
yet decoded, columns holding nulls) are refused with a message naming the
column and its type, before anything is written.

:class:`MSDataset` opens such a directory as one multi-stream dataset: a
read-only mapping ``{column: DenseDataset | RaggedDataset}`` that a
:class:`loaderx.DataLoader` takes directly (when every stream is dense).

The single-store and the sharded (``num_shards=``) paths stay in one module:
they share the column plans, the codec decision and the writers.

``pyarrow`` (``pip install 'loaderx[arrow]'``) and ``datasets``
(``loaderx[hf]``) are imported only when used.

The Arrow type mapping (every primitive, nested fixed-size lists, lists,
and the refusals with their reasons) and the readers of each input form stay
in this module, one table of rules; :class:`MSDataset`, which needs no
pyarrow, is :mod:`loaderx.io.multistream`.
"""

from __future__ import annotations

import importlib
import os
import shutil
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from loaderx._args import CONVERT_CODECS, check_codec
from loaderx._progress import Progress
from loaderx.errors import StoreExistsError
from loaderx.io.multistream import META_FILE, MSDataset, is_multistream
from loaderx.remote import _cache, upload
from loaderx.store import _autocodec, _native, _parallel
from loaderx.store._dtypes import check_narrow, check_storable, narrow_element, schema_name
from loaderx.store.converter import DICT_TIERS, train_dict

if TYPE_CHECKING:
    from loaderx._args import PathLike

__all__ = ["from_arrow", "MSDataset", "arrow_source", "is_multistream"]

#: Bytes of source data read per batch.
BATCH_BYTES = 16 << 20



def _require(module: str, extra: str) -> Any:
    try:
        return importlib.import_module(module)
    except ImportError:
        raise ImportError(
            f"this needs the {module} package: pip install 'loaderx[{extra}]' (or {module})"
        ) from None


# ---------------------------------------------------------------------------
# column plans


class _Column:
    """How one source column becomes a store."""

    __slots__ = ("name", "kind", "dtype", "item_shape", "row_bytes", "arrow_type")

    def __init__(self, name: str, kind: str, dtype: np.dtype, item_shape: tuple[int, ...], arrow_type: Any) -> None:
        self.name = name
        self.kind = kind
        self.dtype = dtype
        self.item_shape = item_shape
        self.row_bytes = int(np.prod(item_shape, dtype=np.int64)) * dtype.itemsize
        self.arrow_type = arrow_type


def _element_dtype(pa: Any, t: Any) -> np.dtype | None:
    """The NumPy dtype of a fixed-width primitive Arrow type, else None."""
    if pa.types.is_boolean(t):
        return np.dtype(np.bool_)
    if pa.types.is_integer(t) or pa.types.is_floating(t):
        return check_storable(np.dtype(t.to_pandas_dtype()))
    return None


def _fixed_shape(pa: Any, t: Any) -> tuple[tuple[int, ...], Any]:
    """Peel nested fixed-size lists: their sizes and the innermost type."""
    shape: list[int] = []
    while pa.types.is_fixed_size_list(t):
        shape.append(int(t.list_size))
        t = t.value_type
    return tuple(shape), t


def _refusal(name: str, t: Any, pa: Any) -> TypeError:
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t) or pa.types.is_large_binary(t):
        why = "strings and bytes have no fixed-size element; encode them into numbers (tokenize) first"
    elif pa.types.is_struct(t) and {f.name for f in t} >= {"bytes", "path"}:
        why = "this looks like an image or audio column not yet decoded; decode it into arrays first"
    elif pa.types.is_struct(t):
        why = "nested structs have no store form; convert their fields as separate columns (Table.flatten())"
    elif pa.types.is_dictionary(t):
        why = "dictionary-encoded columns: cast them to their index or value type first"
    elif pa.types.is_list(t) or pa.types.is_large_list(t):
        why = "only a list of numbers (or of fixed-size lists of numbers) becomes a ragged store"
    else:
        why = "only numbers, bools, fixed-size lists and lists of them have a store form"
    return TypeError(f"column {name!r} has type {t}, which cannot be stored: {why}")


def _plan(pa: Any, name: str, t: Any) -> _Column:
    storage = t.storage_type if isinstance(t, pa.ExtensionType) else t
    shape, inner = _fixed_shape(pa, storage)
    dt = _element_dtype(pa, inner)
    if dt is not None:
        return _Column(name, "dense", dt, shape, t)
    if not shape and (pa.types.is_list(storage) or pa.types.is_large_list(storage)):
        tail, leaf = _fixed_shape(pa, storage.value_type)
        dt = _element_dtype(pa, leaf)
        if dt is not None:
            return _Column(name, "ragged", dt, tail, t)
    raise _refusal(name, t, pa)


def _check_name(name: str) -> str:
    if (
        not isinstance(name, str)
        or not name
        or name in (".", "..")
        or name.startswith(".")
        or "/" in name
        or "\0" in name
        or os.sep in name
        or len(name.encode()) > 255
    ):
        raise ValueError(f"column {name!r} cannot name a store directory (empty, starts with '.', or holds '/')")
    return name


# ---------------------------------------------------------------------------
# sources


class _Source:
    """A schema, a row count (or None) and a batch iterator over chosen columns."""

    def __init__(self, schema: Any, num_rows: int | None, batches: Any, what: str) -> None:
        self.schema = schema
        self.num_rows = num_rows
        self._batches = batches  # callable(columns, rows) -> iterator of tables/batches
        self.what = what

    def batches(self, columns: list[str], rows: int) -> Iterator[Any]:
        return self._batches(columns, rows)


def _is_hf_dataset(obj: Any) -> bool:
    t = type(obj)
    return t.__module__.split(".")[0] == "datasets" and hasattr(obj, "with_format") and hasattr(obj, "features")


def _table_source(pa: Any, table: Any, what: str) -> _Source:
    def batches(columns: list[str], rows: int) -> Iterator[Any]:
        yield from table.select(columns).to_batches(max_chunksize=rows)

    return _Source(table.schema, table.num_rows, batches, what)


def _hf_source(pa: Any, ds: Any) -> _Source:
    arrow_ds = ds.with_format("arrow")
    schema = ds.features.arrow_schema

    def batches(columns: list[str], rows: int) -> Iterator[Any]:
        sub = arrow_ds.select_columns(columns)
        yield from sub.iter(batch_size=rows)

    return _Source(schema, len(ds), batches, f"Hugging Face dataset ({len(ds)} rows)")


def _parquet_source(pa: Any, path: str) -> _Source:
    pq = importlib.import_module("pyarrow.parquet")
    if os.path.isdir(path):
        files = sorted(
            os.path.join(path, f) for f in os.listdir(path) if f.endswith(".parquet") and not f.startswith(".")
        )
    else:
        files = [path]
    first = pq.ParquetFile(files[0])
    schema = first.schema_arrow
    total = 0
    for f in files:
        pf = pq.ParquetFile(f)
        if not pf.schema_arrow.equals(schema):
            raise ValueError(f"{f}: its schema differs from {files[0]}'s:\n{pf.schema_arrow}\nvs\n{schema}")
        total += pf.metadata.num_rows

    def batches(columns: list[str], rows: int) -> Iterator[Any]:
        for f in files:
            yield from pq.ParquetFile(f).iter_batches(batch_size=rows, columns=columns)

    return _Source(schema, total, batches, f"Parquet ({len(files)} file(s))")


def _ipc_source(pa: Any, path: str) -> _Source:
    try:
        reader = pa.ipc.open_file(path)
        schema, n = reader.schema, sum(reader.get_batch(i).num_rows for i in range(reader.num_record_batches))

        def batches(columns: list[str], rows: int) -> Iterator[Any]:
            r = pa.ipc.open_file(path)
            for i in range(r.num_record_batches):
                yield from pa.Table.from_batches([r.get_batch(i)]).select(columns).to_batches(max_chunksize=rows)

        return _Source(schema, n, batches, "Arrow IPC file")
    except pa.ArrowInvalid:
        pass
    with pa.ipc.open_stream(path) as r:
        schema = r.schema

    def stream_batches(columns: list[str], rows: int) -> Iterator[Any]:
        with pa.ipc.open_stream(path) as r:
            for b in r:
                yield from pa.Table.from_batches([b]).select(columns).to_batches(max_chunksize=rows)

    return _Source(schema, None, stream_batches, "Arrow IPC stream")


def arrow_source(source: Any) -> Any:
    """Resolve a path to something :func:`from_arrow` reads: a saved Hugging
    Face dataset directory (needs ``datasets``), a Parquet file or directory of
    Parquet files, or an Arrow IPC / Feather file. Anything that is not a
    path is returned as it is.

    Raises:
        ValueError: the path is none of these.
    """
    if not isinstance(source, (str, os.PathLike)):
        return source
    path = os.fspath(source)
    if os.path.isdir(path):
        names = set(os.listdir(path))
        if "state.json" in names and "dataset_info.json" in names:
            datasets = _require("datasets", "hf")
            return datasets.load_from_disk(path)
        if any(n.endswith(".parquet") for n in names):
            return path
        raise ValueError(f"{path}: not a Parquet directory or a saved Hugging Face dataset")
    if not os.path.isfile(path):
        raise ValueError(f"{path}: no such file or directory")
    if path.endswith((".parquet", ".pq", ".arrow", ".feather", ".ipc")):
        return path
    with open(path, "rb") as f:
        head = f.read(6)
    if head[:4] == b"PAR1" or head == b"ARROW1":
        return path
    raise ValueError(f"{path}: not a Parquet or Arrow file (by its name and first bytes)")


def _source(source: Any) -> _Source:
    pa = _require("pyarrow", "arrow")
    if _is_hf_dataset(source):
        if not hasattr(source, "select_columns"):
            raise TypeError("a streaming (Iterable) Hugging Face dataset is not supported; load it as a Dataset")
        return _hf_source(pa, source)
    if isinstance(source, pa.Table):
        return _table_source(pa, source, f"Arrow table ({source.num_rows} rows)")
    if isinstance(source, pa.RecordBatch):
        return _table_source(pa, pa.Table.from_batches([source]), "Arrow record batch")
    if isinstance(source, pa.RecordBatchReader):
        return _table_source(pa, source.read_all(), "Arrow record batch reader")
    if isinstance(source, (str, os.PathLike)):
        path = arrow_source(source)
        if not isinstance(path, str):
            return _source(path)
        if os.path.isdir(path) or path.endswith((".parquet", ".pq")):
            return _parquet_source(pa, path)
        with open(path, "rb") as f:
            if f.read(4) == b"PAR1":
                return _parquet_source(pa, path)
        return _ipc_source(pa, path)
    raise TypeError(
        "from_arrow reads a pyarrow.Table, RecordBatch or RecordBatchReader, a datasets.Dataset, or a "
        f"path to Parquet / Arrow files; got {type(source).__name__}"
    )


# ---------------------------------------------------------------------------
# writing


def _chunks(col: Any) -> list[Any]:
    return list(col.chunks) if hasattr(col, "chunks") else [col]


def _values(pa: Any, arr: Any, plan: _Column, row0: int) -> np.ndarray:
    """The flat element values of a (null-free) array, in row order."""
    if arr.null_count:
        raise ValueError(
            f"column {plan.name!r} holds {arr.null_count} null(s) in rows {row0}..{row0 + len(arr) - 1}; "
            "a store has no null: fill or drop them first"
        )
    depth = len(plan.item_shape) + (1 if plan.kind == "ragged" else 0)
    for _ in range(depth):
        if isinstance(arr, pa.ExtensionArray):
            arr = arr.storage
        arr = arr.flatten()
        if arr.null_count:
            raise ValueError(
                f"column {plan.name!r} holds null elements inside its lists near row {row0}; "
                "a store has no null: fill or drop them first"
            )
    if isinstance(arr, pa.ExtensionArray):
        arr = arr.storage
    out = arr.to_numpy(zero_copy_only=False)
    if out.dtype != plan.dtype:
        out = out.astype(plan.dtype)  # same values: bool unpacked, or a byte order
    return np.ascontiguousarray(out)


def _ragged_offsets(pa: Any, arr: Any, plan: _Column) -> np.ndarray:
    if isinstance(arr, pa.ExtensionArray):
        arr = arr.storage
    offs = arr.offsets.to_numpy().astype(np.int64)
    return (offs - offs[0]) * plan.row_bytes


class _Writer:
    """The open store of one column."""

    def __init__(self, plan: _Column, path: str, handle: int) -> None:
        self.plan = plan
        self.path = path
        self.handle = handle
        self.offsets = np.zeros(1, dtype=np.int64)

    def append(self, pa: Any, col: Any, row0: int) -> int:
        plan = self.plan
        nbytes = 0
        for arr in _chunks(col):
            n = len(arr)
            if n == 0:
                continue
            values = _values(pa, arr, plan, row0)
            data = values.reshape(-1).view(np.uint8)
            if plan.kind == "dense":
                if len(self.offsets) < n + 1:
                    self.offsets = np.arange(n + 1, dtype=np.int64) * plan.row_bytes
                offsets = self.offsets[: n + 1]
            else:
                offsets = _ragged_offsets(pa, arr, plan)
            _native.store_append_packed(self.handle, data, offsets)
            nbytes += data.nbytes
            row0 += n
        return nbytes


def _sample_records(pa: Any, col: Any, plan: _Column, budget: int, most: int = 1 << 62) -> list[np.ndarray]:
    """Up to about ``budget`` bytes (and at most ``most``) of the first
    records of a column batch, as arrays, to train a dictionary on or to
    choose a codec by."""
    out: list[np.ndarray] = []
    total = 0
    for arr in _chunks(col):
        values = _values(pa, arr, plan, 0).reshape(-1).view(np.uint8)
        if plan.kind == "dense":
            bounds = np.arange(len(arr) + 1, dtype=np.int64) * plan.row_bytes
        else:
            bounds = _ragged_offsets(pa, arr, plan)
        for k in range(len(arr)):
            rec = values[bounds[k] : bounds[k + 1]]
            out.append(rec)
            total += rec.nbytes
            if total >= budget or len(out) >= most:
                return out
    return out


def _prepare_dir(path: str, overwrite: bool) -> bool:
    """Make ``path`` ready for new streams; return whether it was created.
    With ``overwrite``, a previous multi-stream directory (nothing but store
    directories inside) is removed; anything else there is refused."""
    if not os.path.lexists(path):
        os.makedirs(path)
        return True
    if os.path.islink(path) or not os.path.isdir(path):
        raise StoreExistsError(f"{path!r} already exists and is not a directory")
    entries = os.listdir(path)
    if not entries:
        return False
    if not overwrite:
        raise StoreExistsError(
            f"{path!r} already exists and is not empty; pass overwrite=True to replace previous loaderx stores"
        )
    for e in entries:
        sub = os.path.join(path, e)
        if os.path.islink(sub) or not os.path.isdir(sub) or not os.path.exists(os.path.join(sub, META_FILE)):
            raise StoreExistsError(
                f"{path!r} holds {e!r}, which is not a loaderx store; refusing to overwrite the directory"
            )
    for e in entries:
        shutil.rmtree(os.path.join(path, e))
    return False


def from_arrow(
    path: PathLike,
    source: Any,
    columns: Sequence[str] | None = None,
    *,
    codec: str = "auto",
    dict_tier: str = "balanced",
    batch_bytes: int = BATCH_BYTES,
    progress: bool | None = None,
    overwrite: bool = False,
    num_shards: int | None = None,
    sync: bool = True,
    storage_options: dict[str, Any] | None = None,
    staging: PathLike | None = None,
) -> MSDataset:
    """Write the columns of an Arrow table, Parquet / Arrow files or a Hugging
    Face dataset as aligned stores under the directory ``path``, one store
    per column (``path/<column>``), and return them opened as an
    :class:`MSDataset`.

    Args:
        path: the directory to create; it must not exist or be empty.
        source: a ``pyarrow.Table``, ``RecordBatch`` or ``RecordBatchReader``,
            a ``datasets.Dataset``, or a path (Parquet file or directory,
            Arrow IPC / Feather file, a ``save_to_disk`` directory).
        columns: the columns to convert, in this order; all by default.
        codec: ``"auto"`` (default), ``"raw"``, ``"zstd"``, ``"zstd_dict"``
            (each column's dictionary trains on its first records) or
            ``"narrow"`` (every column must hold integers, else ValueError
            naming the column and its dtype, before anything is written).
            ``"auto"`` chooses per column by the rule of
            :func:`loaderx.converter.from_numpy`, measured on the column's
            first records (up to 4 MiB of them), with the store's size
            estimated from the source's row count.
        dict_tier: for ``"zstd_dict"``: ``"fast"``, ``"balanced"`` or ``"max"``.
        batch_bytes: about how many bytes of source are read per batch.
        progress: draw a progress line on stderr: None (default) when stderr
            is a terminal.
        overwrite: replace previous loaderx stores at ``path``.
        sync: make every store durable (fsync) before returning, the
            default; ``False`` leaves that to the system, as
            :func:`~loaderx.converter.from_numpy` does by default (a power cut
            may then lose the stores).
        num_shards: None (default) writes one directory of stores. An int
            ``N`` makes ``path`` a sharded dataset of ``N`` shards, each a
            directory of stores holding a contiguous range of rows, each
            written by a worker process of its own (see
            :func:`loaderx.converter.from_numpy`). The source is read once
            and copied into an uncompressed Arrow IPC file inside ``path``
            that the workers map and slice by row range (removed at the
            end); each column's codec (and dictionary) is decided once, on
            its first records, for every shard.

        storage_options: for an ``s3://bucket/prefix`` ``path``: the S3
            client's options; the stores are written into a local staging
            directory and pushed when complete (see
            :func:`loaderx.converter.from_numpy`), and the dataset returned
            reads them back from the bucket through the local cache.
        staging: where that staging directory goes (default
            ``$LOADERX_STAGING_DIR``, else the system's temporary directory).
    Returns:
        The new stores as one :class:`MSDataset`.

    Raises:
        TypeError: a column has no store form (the message names it and its
            type), or the source is of an unknown kind.
        ValueError: a column holds nulls, a name cannot name a directory, or
            a bad option. Nothing is left behind.
        KeyError: a requested column is not in the source.
        ImportError: ``pyarrow`` (or ``datasets``) is not installed.
        loaderx.errors.StoreExistsError: ``path`` exists and is not empty.
        loaderx.errors.WorkerError: with ``num_shards``, a worker failed
            (a column holding nulls, for one) or died; the message names the
            shard and its rows, and the worker's exception is the cause.
        KeyboardInterrupt: re-raised after closing the stores; each holds a
            valid prefix of its column, and they may differ by one batch
            (with ``num_shards``: after removing the unfinished shards).

    Example::

        ds = datasets.load_dataset("mnist", split="train")   # decode images first
        ms = from_arrow("mnist_train", ds)
        loader = DataLoader(ms, batch_size=256)
    """
    if _cache.is_url(path):
        def write(local: str) -> None:
            from_arrow(local, source, columns, codec=codec, dict_tier=dict_tier, batch_bytes=batch_bytes,
                       progress=progress, num_shards=num_shards, sync=False).close()

        upload.publish(str(path), write, overwrite=overwrite, storage_options=storage_options, staging=staging)
        return MSDataset(str(path), columns, storage_options=storage_options)
    if storage_options is not None or staging is not None:
        raise ValueError(f"storage_options= and staging= are for s3:// URLs, not {path!r}")
    pa = _require("pyarrow", "arrow")
    path = os.fspath(path)
    check_codec(codec, CONVERT_CODECS)
    if dict_tier not in DICT_TIERS:
        raise ValueError(f"dict_tier must be one of {', '.join(map(repr, DICT_TIERS))}; got {dict_tier!r}")
    if isinstance(batch_bytes, bool) or not isinstance(batch_bytes, int) or batch_bytes <= 0:
        raise ValueError(f"batch_bytes must be a positive int, got {batch_bytes!r}")
    num = _parallel.check_num_shards(num_shards)
    src = _source(source)
    names = list(src.schema.names)
    if columns is None:
        wanted = names
    else:
        if isinstance(columns, str):
            raise TypeError(f"columns must be a list of names, not the string {columns!r}")
        wanted = list(columns)
        missing = [c for c in wanted if c not in names]
        if missing:
            raise KeyError(f"no column {', '.join(map(repr, missing))} in the source; it has {names}")
        if len(set(wanted)) != len(wanted):
            raise ValueError(f"columns lists a name twice: {wanted}")
    if not wanted:
        raise ValueError("the source has no columns to convert")
    plans = [_plan(pa, _check_name(c), src.schema.field(c).type) for c in wanted]
    if codec == "narrow":
        for p in plans:
            check_narrow(p.dtype, f"column {p.name!r}")
    row_bytes = sum(max(p.row_bytes, 1) * (8 if p.kind == "ragged" else 1) for p in plans)
    rows = max(1, min(1 << 20, batch_bytes // max(row_bytes, 1)))

    if num is not None:
        created = _parallel.prepare_dir(path, overwrite)

        def make_tasks(scratch: Any) -> tuple[list, int, None]:
            ipc, n, decided = _spill(pa, src, wanted, plans, rows, codec, dict_tier, scratch().path)
            tasks = [
                (_arrow_shard, (ipc, a, b, wanted, plans, decided, rows),
                 f"rows {a}..{b - 1}" if b > a else f"no rows (at {a})")
                for a, b in _parallel.ranges(n, num)
            ]
            return tasks, n, None

        _parallel.run(path, num, make_tasks, created=created, label=f"from_arrow {path}", progress=progress,
                      sync=sync)
        return MSDataset(path, columns=wanted)

    created = _prepare_dir(path, overwrite)
    bar = Progress(f"from_arrow {path}", src.num_rows, None, enabled=progress)
    try:
        _write_streams(pa, path, src, wanted, plans, rows, created, bar.update, (codec, dict_tier), sync=sync)
    finally:
        bar.close()
    return MSDataset(path, columns=wanted)


#: A column's codec decided before writing: (codec, element, choice, dictionary).
_Decided = tuple[str, Any, Any, Any]


def _write_streams(
    pa: Any, path: str, src: _Source, wanted: list[str], plans: list[_Column], rows: int, created: bool,
    on_batch: Any, how: tuple[str, str] | dict[str, _Decided], row0: int = 0, sync: bool = True,
) -> None:
    """Write the columns of ``src`` into the stores under ``path``, each
    column's codec chosen on its first batch from ``how = (codec,
    dict_tier)`` or given in ``how`` by name; ``row0`` numbers the first
    row in messages. A failure other than Ctrl-C removes what was written
    (the directory too when the call ``created`` it)."""
    writers: list[_Writer] = []
    done = False
    interrupted = False

    def create(k: int, first: Any, total: int | None) -> _Writer:
        plan = plans[k]
        decided = how[plan.name] if isinstance(how, dict) else _decide(pa, plan, first, *how, total)
        return _create(path, plan, decided)

    try:
        for batch in src.batches(wanted, rows):
            n = batch.num_rows
            if not writers:
                writers = [create(k, batch.column(k), src.num_rows) for k in range(len(plans))]
            nbytes = 0
            for k, w in enumerate(writers):
                nbytes += w.append(pa, batch.column(k), row0)
            row0 += n
            on_batch(n, nbytes)
        if not writers:  # an empty source: empty stores with the schema
            writers = [create(k, None, 0) for k in range(len(plans))]
        done = True
    except KeyboardInterrupt:
        interrupted = True
        raise
    finally:
        for w in writers:
            try:
                if sync:
                    _native.store_sync(w.handle)
            finally:
                (_native.store_close if sync else _native.store_close_unsynced)(w.handle)
        if not done and not interrupted:
            if created:
                shutil.rmtree(path, ignore_errors=True)
            else:
                for w in writers:
                    shutil.rmtree(w.path, ignore_errors=True)


def _decide(pa: Any, plan: _Column, first: Any, codec: str, dict_tier: str, rows: int | None) -> _Decided:
    """The codec of one column, chosen on ``first`` (its first batch, or
    None for an empty source); ``rows`` is the source's row count, None
    when unknown. A ``zstd_dict`` column's dictionary trains here."""
    choice = None
    element = narrow_element(plan.dtype) if codec == "narrow" else None
    if codec == "auto":
        got = [] if first is None else _sample_records(
            pa, first, plan, _autocodec.SAMPLE_BYTES, _autocodec.SAMPLE_MAX_RECORDS
        )
        sample = [_autocodec.record_sample(r, len(got), plan.dtype.itemsize) for r in got]
        mean = sum(r.nbytes for r in got) / len(got) if got else float(plan.row_bytes)
        if rows is None:
            store_bytes, basis = None, "a source that does not say how many rows it has"
        else:
            store_bytes, basis = int(rows * mean), f"{rows} rows times the sample's mean record size"
        choice = _autocodec.choose(
            sample, mean, dict_tier, f"the first {len(got)} records of the column",
            element=narrow_element(plan.dtype), store_bytes=store_bytes, store_bytes_from=basis,
        )
        codec = choice["codec"]
        element = choice["element"] if codec == "narrow" else None
    d = None
    if codec == "zstd_dict":
        budget = int(_native.dict_sample_budget(dict_tier))
        samples = [] if first is None else _sample_records(pa, first, plan, budget)
        try:
            d = train_dict(samples, dict_tier, progress=False)
        except ValueError as e:
            raise ValueError(
                f"column {plan.name!r}: codec 'zstd_dict' could not train a dictionary on its first "
                f"{len(samples)} records ({e}); use codec='zstd'"
            ) from e
    return (codec, element, choice, (dict_tier, d))


def _create(root: str, plan: _Column, decided: _Decided) -> _Writer:
    """Create the store of one column with its decided codec."""
    path = os.path.join(root, plan.name)
    schema = (plan.kind, schema_name(plan.dtype), plan.item_shape)
    codec, element, choice, (dict_tier, d) = decided
    if codec == "zstd_dict":
        h = _native.store_create_dict(path, d, dict_tier=dict_tier, schema=schema)
    else:
        h = _native.store_create(path, codec, schema=schema, element=element)
    if choice is not None:
        try:
            _native.schema_set_codec_choice(path, choice)
        except BaseException:
            _native.store_close(h)
            raise
    return _Writer(plan, path, h)


def _spill(
    pa: Any, src: _Source, wanted: list[str], plans: list[_Column], rows: int, codec: str, dict_tier: str,
    scratch: str,
) -> tuple[str, int, dict[str, _Decided]]:
    """Copy the columns of ``src`` into an uncompressed Arrow IPC file in
    ``scratch`` that the workers of a sharded conversion map; decide each
    column's codec on its first batch on the way. Returns the file, the row
    count and the decisions."""
    ipc = os.path.join(scratch, "source.arrow")
    n = 0
    decided: dict[str, _Decided] | None = None
    writer = None
    with pa.OSFile(ipc, "wb") as sink:
        try:
            for batch in src.batches(wanted, rows):
                if decided is None:
                    decided = {
                        p.name: _decide(pa, p, batch.column(k), codec, dict_tier, src.num_rows)
                        for k, p in enumerate(plans)
                    }
                if writer is None:
                    writer = pa.ipc.new_file(sink, batch.schema)
                writer.write(batch)
                n += batch.num_rows
            if writer is None:  # an empty source: an empty file of its schema
                schema = pa.schema([src.schema.field(c) for c in wanted])
                writer = pa.ipc.new_file(sink, schema)
        finally:
            if writer is not None:
                writer.close()
    if decided is None:
        decided = {p.name: _decide(pa, p, None, codec, dict_tier, 0) for p in plans}
    return ipc, n, decided


def _arrow_shard(
    path: str, report: Any, ipc: str, start: int, stop: int, wanted: list[str], plans: list[_Column],
    decided: dict[str, _Decided], rows: int,
) -> int:
    """A worker process's shard of :func:`from_arrow`: rows ``[start, stop)``
    of the IPC file ``ipc``, mapped, not read."""
    pa = _require("pyarrow", "arrow")
    mapped = pa.memory_map(ipc, "r")
    try:
        table = pa.ipc.open_file(mapped).read_all().slice(start, stop - start)
        src = _table_source(pa, table, f"rows {start}..{stop - 1}")
        created = _prepare_dir(path, False)
        _write_streams(pa, path, src, wanted, plans, rows, created, report, decided, row0=start)
        del src, table
    finally:
        mapped.close()
    return stop - start
