"""Write NumPy data into a loaderx store.

:func:`from_numpy` turns an array into a *dense* store, one record per slice
along axis 0. :func:`from_iterator` turns a stream of arrays whose first axis
varies into a *ragged* store. Both stream the input in bounded pieces, so an
array opened with ``np.load(..., mmap_mode='r')`` is never materialised, and
both record a ``schema.msgpack`` (kind, dtype, item shape) next to the data.

A conversion interrupted with Ctrl-C stops at the next piece boundary (or,
while a ``zstd_dict`` dictionary trains, within a few milliseconds) and
leaves a valid store holding every record written so far (or no store, if
the interrupt came before the store was created), closed and unlocked, then
re-raises :class:`KeyboardInterrupt`.

A conversion killed outright (SIGKILL, a crash, the machine stopping)
leaves at ``path`` either what was there before or a valid store holding a
prefix of the records, never a directory that is neither: the store is
built in a hidden directory beside ``path`` (in ``.NAME.zrecord-stage``)
and renamed onto ``path`` whole, with its schema, before the first record
is written. A kill before that rename leaves only the hidden directory,
which the next conversion to ``path`` removes (while no other process is
still writing it). With ``overwrite=True`` the previous store stays
readable at ``path`` until the new one takes its place in one step; on
systems without an atomic exchange of two directories (other than Linux)
the swap is two renames, and a kill between them leaves no store at
``path``.

With ``num_shards=`` the path becomes a sharded dataset instead, its shards
written by worker processes (:mod:`loaderx.store._parallel`), each with the
same writers as one store: :func:`_write_dense` and :func:`_ragged_shard`.

Its length: two public conversions share the piece-size control, the
schema and dictionary handling, and :class:`_Output`, the interrupt-safe
owner of the store being written, in one process or in each shard's
worker; the Ctrl-C guarantees above depend on all of it, so it stays in
one module.
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from loaderx._args import CONVERT_CODECS, as_int, check_codec
from loaderx._progress import Progress
from loaderx.errors import StoreExistsError
from loaderx.remote import _cache, upload
from loaderx.store import _autocodec, _native, _parallel
from loaderx.store._dtypes import check_narrow, check_storable, narrow_element, schema_name
from loaderx.store._pages import PageReleaser as _PageReleaser
from loaderx.store._store import packed_offsets

if TYPE_CHECKING:
    from loaderx._args import PathLike

__all__ = ["from_numpy", "from_iterator", "train_dict", "DICT_TIERS"]

#: Dictionary training tiers for ``codec="zstd_dict"``: how much data trains the
#: dictionary ("fast" < "balanced" < "max").
DICT_TIERS = ("fast", "balanced", "max")

#: The largest record a store accepts, in bytes.
MAX_RECORD_BYTES = 1 << 31

_MAX_DICT_SAMPLES = 100_000
_MAX_PIECE_RECORDS = 1 << 20
_FIRST_PIECE_BYTES = 4 << 20
_PIECE_SECONDS = 0.25
#: A compressed piece holds the source rows, their frames and the encoders'
#: working memory at once, and a larger one compresses no faster: pieces of a
#: compressed conversion stay at or below this many bytes.
_MAX_COMPRESSED_PIECE_BYTES = 16 << 20
_MAX_GROUP_RECORDS = 65_536


# ---------------------------------------------------------------------------
# validation


def _check_dtype(dtype: np.dtype) -> np.dtype:
    """The dtype to store: fixed-size numeric or bool in native byte order,
    or an ml_dtypes type (see :mod:`loaderx.store._dtypes`)."""
    return check_storable(dtype)


def _native_order(dtype: np.dtype) -> np.dtype:
    return dtype.newbyteorder("=") if dtype.byteorder not in ("=", "|") else dtype


def _check_options(
    codec: Any, dict_tier: Any, dict_size: Any, piece_bytes: Any, piece_name: str, progress: Any
) -> tuple[int, int]:
    check_codec(codec, CONVERT_CODECS)
    if dict_tier not in DICT_TIERS:
        raise ValueError(
            f"dict_tier must be one of {', '.join(map(repr, DICT_TIERS))}; got {dict_tier!r}"
        )
    if dict_size is None:
        size = 0
    else:
        if codec != "zstd_dict":
            raise ValueError(f"dict_size applies to codec 'zstd_dict' only, not {codec!r}")
        size = as_int(dict_size, "dict_size")
        if size <= 0:
            raise ValueError(f"dict_size must be positive, got {dict_size!r}")
    piece = as_int(piece_bytes, piece_name)
    if piece <= 0:
        raise ValueError(f"{piece_name} must be positive, got {piece_bytes!r}")
    if progress not in (None, True, False):
        raise TypeError(f"progress must be None, True or False, got {progress!r}")
    return size, piece


def _check_sync(sync: Any) -> None:
    if not isinstance(sync, bool):
        raise TypeError(f"sync must be True or False, got {sync!r}")


def _prepare_path(path: str, overwrite: bool) -> None:
    """Refuse to write over anything but an empty directory or, with
    ``overwrite=True``, a directory; whether that holds a previous store
    (and nothing else) the store's creation checks, as it replaces it. A
    directory that may be what an interrupted creation left is also let
    through: the creation clears it if it is, and refuses it if not."""
    if not os.path.lexists(path):
        return
    if os.path.islink(path) or not os.path.isdir(path):
        raise StoreExistsError(f"{path!r} already exists and is not a directory")
    entries = os.listdir(path)
    if not entries or overwrite or _maybe_unfinished(path, entries):
        return
    raise StoreExistsError(
        f"{path!r} already exists and is not empty; pass overwrite=True to replace "
        "a previous loaderx store"
    )


#: The names a store's creation writes before its header.
_CREATE_FILE = re.compile(r"(meta\.zr|dict\.zr|schema\.msgpack|0\.chunk|0\.tab)\Z")


def _maybe_unfinished(path: str, entries: list[str]) -> bool:
    """Whether ``path``, holding ``entries``, looks like a store creation
    cut short (as versions that built the store in place left it): only
    the files a creation writes, and a ``meta.zr`` without a header."""
    if "meta.zr" not in entries or not all(_CREATE_FILE.match(e) for e in entries):
        return False
    try:
        with open(os.path.join(path, "meta.zr"), "rb") as f:
            head = f.read(33)
    except OSError:
        return False
    return len(head) <= 32 and not head.strip(b"\0")


def _create_store(
    path: str,
    codec: str,
    dict_tier: str,
    dict_size: int,
    samples: list[bytes] | None,
    schema: tuple[str, str, tuple[int, ...]],
    overwrite: bool,
    dict_bytes: bytes | None = None,
    element: str | None = None,
    cancel: _native.CancelFlag | None = None,
) -> int:
    """Create the store at ``path`` together with its ``schema`` (kind, dtype
    string, item shape), replacing a previous store when ``overwrite``, and
    return its open handle. A ``"zstd_dict"`` store uses ``dict_bytes`` when
    given, else trains its dictionary on ``samples``; a ``"narrow"`` store's
    records are arrays of the integer type ``element``."""
    if dict_bytes is not None:
        return _native.store_create_dict(
            path, dict_bytes, dict_tier=dict_tier, schema=schema, overwrite=overwrite
        )
    if codec == "narrow":
        return _native.store_create(
            path, codec, element=element, schema=schema, overwrite=overwrite, cancel=cancel
        )
    if codec != "zstd_dict":
        return _native.store_create(path, codec, schema=schema, overwrite=overwrite, cancel=cancel)
    try:
        return _native.store_create(
            path, codec, dict_tier=dict_tier, dict_size=dict_size, samples=samples,
            schema=schema, overwrite=overwrite, cancel=cancel,
        )
    except ValueError as e:
        if "dictionary" not in str(e):
            raise
        raise ValueError(
            f"codec 'zstd_dict' could not train a dictionary on {len(samples or ())} sampled "
            f"records ({e}); with this little data, or records that share no content, a "
            "dictionary gains nothing, so use codec='zstd'"
        ) from e


class _Output:
    """The store a conversion writes, and the one place its handle lives.

    The native create (which trains the dictionary of a ``zstd_dict`` store,
    for seconds) runs on a helper thread while this thread waits in
    interruptible steps: Ctrl-C stops the wait at once, and :meth:`finish`
    cancels the training. The handle goes from that thread straight into
    this object, so no interrupt, wherever it lands, can lose it between
    the native call and its owner; :meth:`finish` syncs and closes it even
    when a second Ctrl-C hits the cleanup, and the finaliser closes it if
    an interrupt lands before :meth:`finish` is even called.
    """

    _WAIT = 0.05  # seconds per interruptible wait
    # what the finaliser sees if an interrupt cuts __init__ short
    _done: list[tuple[bool, Any]] | tuple[()] = ()
    _closed = True

    def __init__(self) -> None:
        self._done: list[tuple[bool, Any]] = []  # (ok, handle or exception), set by the helper
        self._finished = threading.Event()  # the helper has put its result in _done
        self._thread: threading.Thread | None = None
        self._cancel = _native.CancelFlag()
        self._closed = False

    def create(self, *args: Any) -> int:
        """Run :func:`_create_store` with ``args`` and return the handle."""
        done = cast("list[tuple[bool, Any]]", self._done)  # __init__ made it a list
        finished = self._finished

        def run() -> None:
            try:
                done.append((True, _create_store(*args, cancel=self._cancel)))  # type: ignore[misc]  # args end before cancel
            except BaseException as e:  # handed to the waiting thread
                done.append((False, e))
            finally:
                finished.set()

        t = threading.Thread(target=run, name="loaderx-create", daemon=True)
        self._thread = t
        t.start()
        # An Event, not Thread.join: on CPython 3.11 a join cut short by
        # KeyboardInterrupt can leave the thread looking finished while it
        # still runs, and the cleanup must wait for it.
        while not finished.wait(self._WAIT):
            pass
        ok, value = done[0]
        if not ok:
            try:
                raise value
            finally:
                del value, done
        return value

    @property
    def handle(self) -> int:
        """The open handle (after :meth:`create` returned)."""
        return cast("list[tuple[bool, Any]]", self._done)[0][1]

    def finish(self, failed: bool, sync: bool = True) -> None:
        """Close the store, syncing it first when ``sync``; with ``failed``
        (an exception is propagating) never raise anything but a new
        interrupt. A KeyboardInterrupt during the cleanup does not stop it:
        the cleanup starts over (every step may run twice) and the interrupt
        is raised once it is done."""
        interrupt: KeyboardInterrupt | None = None
        while True:
            try:
                self._finish(failed, sync)
                break
            except KeyboardInterrupt as e:
                interrupt = e
                failed = True
        if interrupt is not None:
            raise interrupt

    def _finish(self, failed: bool, sync: bool) -> None:
        t = self._thread
        if t is not None and not self._finished.is_set():  # interrupted while creating
            self._cancel.set()
            # A helper that runs (it has an ident before it runs anything)
            # is waited for; one that has not started yet finds the flag set
            # when it reaches the native create, which then creates nothing.
            if t.ident is not None:
                while not self._finished.wait(self._WAIT):
                    pass
        if self._closed or not self._done or not self._done[0][0]:
            self._closed = True
            return
        handle = self._done[0][1]
        if not sync:
            _native.store_close_unsynced(handle)  # closing twice is harmless
        elif failed:
            with contextlib.suppress(Exception):
                _native.store_sync(handle)
            _native.store_close(handle)
        else:
            try:
                _native.store_sync(handle)
            finally:
                _native.store_close(handle)
        self._closed = True

    def __del__(self) -> None:
        # An interrupt raised in a finaliser is only printed, so it must not
        # stop the close either: try again.
        for _ in range(3):
            try:
                if not self._closed and self._done and self._done[0][0]:
                    _native.store_close(self._done[0][1])
                    self._closed = True
                return
            except BaseException:  # a finaliser cannot raise
                continue


def _next_piece_rows(rows: int, written: int, elapsed: float, max_rows: int) -> int:
    """The size of the next piece: aim at _PIECE_SECONDS per append, growing
    at most 2x per piece, within [1, max_rows]."""
    if written < rows:  # the last, short piece says little
        return rows
    if elapsed <= 0:
        return min(max_rows, rows * 2)
    want = int(rows * _PIECE_SECONDS / elapsed)
    return max(1, min(max_rows, rows * 2, want))


def _published(path: Any, overwrite: bool, storage_options: dict[str, Any] | None, staging: Any,
               write: Callable[[str], Any]) -> bool:
    """For an ``s3://`` ``path``: ``write`` the dataset into a staging
    directory and publish it there (``io.remote.publish``), and True. For a
    local path False, after refusing the options only a URL takes."""
    if _cache.is_url(path):
        upload.publish(str(path), write, overwrite=overwrite, storage_options=storage_options, staging=staging)
        return True
    if storage_options is not None or staging is not None:
        raise ValueError(f"storage_options= and staging= are for s3:// URLs, not {path!r}")
    return False


def from_numpy(
    path: PathLike,
    array: Any,
    codec: str = "auto",
    *,
    dict_tier: str = "balanced",
    dict_size: int | None = None,
    dict_bytes: Any = None,
    chunk_bytes: int = 64 << 20,
    progress: bool | None = None,
    overwrite: bool = False,
    sync: bool = False,
    num_shards: int | None = None,
    storage_options: dict[str, Any] | None = None,
    staging: PathLike | None = None,
) -> None:
    """Write ``array`` to a new dense store at ``path``, one record per slice
    along axis 0 (a 1-D array becomes a dataset of scalars).

    Args:
        path: the store directory to create. It must not exist or be empty
            (or hold only what an interrupted conversion to it left, which
            is cleared). A kill during the conversion leaves no store or a
            valid one holding a prefix of ``array``: see the module's
            docstring.
        array: an array (or anything ``np.asarray`` accepts) with at least one
            dimension and a fixed-size numeric or bool dtype. An ``np.memmap``
            is read piece by piece and its pages are released as it goes.
            Byte-swapped data is stored in native byte order.
        codec: ``"auto"`` (default), ``"raw"`` (no compression), ``"zstd"``
            (each record compressed on its own), ``"zstd_dict"`` (records
            compressed against one dictionary trained on a strided sample of
            them) or ``"narrow"`` (integer dtypes only, else ValueError: each
            record's values minus its smallest, in the fewest bytes, 1, 2 or
            4, that hold them; it reads back at about the speed of a copy).
            ``"auto"`` measures the codecs on an evenly spread sample of up
            to 4 MiB of records and first asks where the store will be read
            from. If its raw size is at most half the machine's memory,
            reads after the first epoch come from the page cache, where
            only a codec that decodes near memory speed pays: ``"narrow"``
            for integer records it shrinks 1.25x or more, else ``"raw"``,
            never zstd. A larger store is read from storage, and gets the
            codec with the lowest modelled cold-read cost among those that
            shrink the sample enough (zstd 2x, narrow 1.25x) and decode at
            ``250 * r / (r - 1)`` MiB/s per core or more (ratio ``r``: the
            speed at which decoding costs no more than reading the bytes
            it saves from 250 MiB/s of storage per core), ``"raw"`` when
            none does; a dictionary is preferred to zstd when it stores the
            records in 1/1.2 of zstd's bytes. The choice, the regime, the
            reasons and the sample's figures are kept in the schema and
            shown by ``stats()["codec_choice"]`` (see ``loaderx.store._autocodec``
            for the reasoning behind the thresholds).
        dict_tier: for ``"zstd_dict"``, how much data trains the dictionary:
            ``"fast"``, ``"balanced"`` (default) or ``"max"``.
        dict_size: for ``"zstd_dict"``, an upper bound on the dictionary size
            in bytes; by default it adapts to the data.
        dict_bytes: for ``"zstd_dict"``, a ready dictionary (as
            :func:`train_dict` returns it) to compress against instead of
            training a new one, so stores of the same kind of data share it.
            ``dict_tier`` still picks the compression level.
        chunk_bytes: the largest piece handed to the store in one call; it
            bounds the extra memory the conversion needs. Pieces start
            smaller and are sized to take about a quarter second each, so
            Ctrl-C is honoured promptly whatever the codec.
        progress: draw a progress line on stderr: None (default) when stderr
            is a terminal, True or False to force.
        overwrite: replace a previous loaderx store at ``path``. Only a
            directory that holds a ``meta.zr`` and nothing but store files is
            ever removed, and only once the new store has taken its place:
            a conversion that fails or is killed before that leaves the
            previous store as it was.
        sync: make the store durable (fsync) before returning. By default,
            as ``np.save`` does, the store is complete and readable by any
            process when this returns, but a power cut before the system
            writes it back to disk may lose it; pass True when the source
            will not be kept.
        num_shards: None (default) writes one store. An int ``N`` makes
            ``path`` a sharded dataset (see :mod:`loaderx.store.shards`) of
            ``N`` shards, each a contiguous range of the records, each
            written by a worker process of its own, one per CPU at a time
            (started with ``spawn``: a script must guard its entry point
            with ``if __name__ == "__main__":``); read it back with
            :class:`~loaderx.dataset.DenseDataset`, record for record the
            same as one store. ``codec="auto"`` and a dictionary are
            decided once, on the whole array, for every shard. A memmap is
            read by the workers from its file; an array in memory is first
            copied to a raw file inside ``path`` (removed at the end). The
            dataset appears whole in one commit or not at all: a failure or
            Ctrl-C ends the workers and leaves no new shard behind. ``path``
            must be absent, empty or (with ``overwrite``) a sharded dataset.
        storage_options: for an ``s3://bucket/prefix`` ``path``: the S3
            client's options (``endpoint_url``, credentials, ``region``,
            ``profile``...; see :func:`loaderx.io.remote.client`). The
            store is written into a local staging directory and pushed
            (verified) when it is complete, as
            :func:`loaderx.io.remote.publish` does; ``overwrite`` applies
            to the objects under the URL.
        staging: where that staging directory goes (default
            ``$LOADERX_STAGING_DIR``, else the system's temporary directory).

    Raises:
        TypeError: unsupported dtype (object, str, void, structured, ...).
        ValueError: a 0-d array, a bad option, a record over 2 GiB, or a
            ``dict_bytes`` that is not a zstd dictionary.
        loaderx.errors.StoreExistsError: ``path`` exists and is not empty.
        loaderx.errors.WorkerError: with ``num_shards``, a worker failed or
            died; the message names the shard and its records.
        KeyboardInterrupt: re-raised after closing a valid, shorter store
            (with ``num_shards``: after removing the unfinished shards).

    Example::

        from_numpy("train_data", np.load("data.npy", mmap_mode="r"))
        DenseDataset("train_data").shape   # == the array's shape
    """
    if _published(path, overwrite, storage_options, staging, lambda local: from_numpy(
            local, array, codec, dict_tier=dict_tier, dict_size=dict_size, dict_bytes=dict_bytes,
            chunk_bytes=chunk_bytes, progress=progress, num_shards=num_shards)):
        return
    path = os.fspath(path)
    dict_size_n, chunk = _check_options(
        codec, dict_tier, dict_size, chunk_bytes, "chunk_bytes", progress
    )
    _check_sync(sync)
    num = _parallel.check_num_shards(num_shards)
    ready_dict = _check_dict_bytes(dict_bytes, codec, dict_size)
    if not isinstance(array, np.ndarray):
        array = np.asarray(array)
    target = _check_dtype(array.dtype)
    if array.ndim == 0:
        raise ValueError(
            "from_numpy needs an array with at least one dimension (records are its "
            f"slices along axis 0); got a 0-d array {array!r}"
        )
    n = int(array.shape[0])
    item_shape = tuple(int(d) for d in array.shape[1:])
    item_nbytes = int(np.prod(item_shape, dtype=np.int64)) * target.itemsize
    if item_nbytes > MAX_RECORD_BYTES:
        raise ValueError(
            f"a record of shape {item_shape} and dtype {target} is {item_nbytes} bytes; "
            f"a record may be at most {MAX_RECORD_BYTES} bytes (2 GiB)"
        )
    if codec == "zstd_dict" and n == 0 and ready_dict is None:
        raise ValueError("codec 'zstd_dict' needs at least one record to train the dictionary on")
    element = check_narrow(target, "the array") if codec == "narrow" else None
    if num is None:
        _prepare_path(path, overwrite)
    created = num is not None and _parallel.prepare_dir(path, overwrite)

    choice = None
    if codec == "auto":
        picks = _autocodec.sample_rows(n, item_nbytes)
        sample = [
            _autocodec.record_sample(np.ascontiguousarray(array[i], dtype=target), len(picks))
            for i in picks.tolist()
        ]
        _release_rows(array, picks)
        choice = _autocodec.choose(
            sample, item_nbytes, dict_tier, f"{len(picks)} of {n} records, evenly spread",
            element=narrow_element(target), store_bytes=n * item_nbytes,
            store_bytes_from=f"{n} records of {item_nbytes} bytes",
        )
        del sample
        codec = choice["codec"]
        element = choice["element"] if codec == "narrow" else None

    samples = None
    if codec == "zstd_dict" and ready_dict is None:
        budget = int(_native.dict_sample_budget(dict_tier))
        count = min(n, max(1, budget // max(item_nbytes, 1)), _MAX_DICT_SAMPLES)
        picks = np.unique(np.linspace(0, n - 1, count).round().astype(np.int64))
        samples = [np.ascontiguousarray(array[i], dtype=target).tobytes() for i in picks.tolist()]
        _release_rows(array, picks)
    if codec != "raw":
        chunk = min(chunk, _MAX_COMPRESSED_PIECE_BYTES)
    spec = _Spec(target, item_shape, codec, dict_tier, dict_size_n, ready_dict, element, choice, sync)

    if num is not None:
        if samples is not None:
            spec.ready_dict = _train_in_parent(samples, dict_tier, dict_size_n)
            del samples

        def make_tasks(scratch: Any) -> tuple[list, int, int]:
            source = _parallel.export_array(array, target, scratch)
            tasks = [
                (_dense_shard, (source, a, b, spec, chunk), _records(a, b))
                for a, b in _parallel.ranges(n, num)
            ]
            return tasks, n, n * item_nbytes

        _parallel.run(path, num, make_tasks, created=created, label=f"from_numpy {path}", progress=progress, sync=sync)
        return

    bar = Progress(f"from_numpy {path}", n, n * item_nbytes, enabled=progress)
    try:
        _write_dense(path, array, spec, chunk, samples, overwrite, bar.update)
    finally:
        bar.close()


def _release_rows(array: Any, picks: np.ndarray) -> None:
    """Drop the pages that reading the sampled rows ``picks`` of a
    memory-mapped ``array`` mapped. The samples lie far apart, and a page
    cache holding large folios maps a whole folio (up to 2 MiB) for one row
    read from it, so 16 sampled rows could keep 32 MiB resident until the
    pieces that hold them are written."""
    _PageReleaser(array).release_rows(array, picks)


class _Spec:
    """What a conversion decided before writing, the same for every shard:
    the element type, item shape (a ragged store's trailing shape), codec,
    dictionary tier and size or ready dictionary, narrow element, the
    record of an ``auto`` choice, and whether to sync."""

    def __init__(
        self, target: np.dtype, item_shape: tuple[int, ...], codec: str, dict_tier: str, dict_size: int,
        ready_dict: bytes | None, element: str | None, choice: dict | None, sync: bool,
    ) -> None:
        self.target = target
        self.item_shape = item_shape
        self.codec = codec
        self.dict_tier = dict_tier
        self.dict_size = dict_size
        self.ready_dict = ready_dict
        self.element = element
        self.choice = choice
        self.sync = sync

    def create(self, out: _Output, path: str, kind: str, samples: list[bytes] | None, overwrite: bool) -> int:
        """Create the store at ``path`` through ``out`` and record the choice."""
        handle = out.create(
            path, self.codec, self.dict_tier, self.dict_size, samples,
            (kind, schema_name(self.target), self.item_shape), overwrite, self.ready_dict, self.element,
        )
        if self.choice is not None:
            _native.schema_set_codec_choice(path, self.choice)
        return handle


def _records(a: int, b: int) -> str:
    return f"records {a}..{b - 1}" if b > a else f"no records (at {a})"


def _write_dense(
    path: str, array: Any, spec: _Spec, chunk: int, samples: list[bytes] | None, overwrite: bool,
    on_piece: Any,
) -> None:
    """Write the records of ``array`` into a new dense store at ``path``,
    calling ``on_piece(records, bytes)`` after each piece."""
    target = spec.target
    n = int(array.shape[0])
    item_nbytes = int(np.prod(spec.item_shape, dtype=np.int64)) * target.itemsize
    # Pieces are sized by time as well as bytes: each should take about
    # _PIECE_SECONDS, so Ctrl-C is honoured promptly even with a slow codec,
    # and never exceed chunk_bytes (the memory bound) or _MAX_PIECE_RECORDS
    # (the offsets array costs 8 bytes per record).
    max_rows = max(1, min(chunk // max(item_nbytes, 1), _MAX_PIECE_RECORDS))
    rows = max(1, min(max_rows, _FIRST_PIECE_BYTES // max(item_nbytes, 1)))
    offsets = np.arange(min(max_rows, max(n, 1)) + 1, dtype=np.int64) * item_nbytes
    releaser = _PageReleaser(array)

    out = _Output()
    failed = True
    try:
        handle = spec.create(out, path, "dense", samples, overwrite)
        del samples
        start = 0
        while start < n:
            stop = min(n, start + rows)
            src = array[start:stop]
            piece = np.ascontiguousarray(src, dtype=target)
            m = stop - start
            t0 = time.perf_counter()
            _native.store_append_packed(handle, piece.reshape(-1).view(np.uint8), offsets[: m + 1])
            elapsed = time.perf_counter() - t0
            del piece
            releaser.release(src)
            del src
            on_piece(m, m * item_nbytes)
            start = stop
            rows = _next_piece_rows(rows, m, elapsed, max_rows)
        failed = False
    finally:
        out.finish(failed, spec.sync)


def _dense_shard(path: str, report: Any, source: tuple, start: int, stop: int, spec: _Spec, chunk: int) -> int:
    """A worker process's shard of :func:`from_numpy`: records
    ``[start, stop)`` of the array ``source`` describes."""
    array = _parallel.open_array(source)
    _write_dense(path, array[start:stop], spec, chunk, None, False, report)
    return stop - start


def _train_in_parent(samples: list[bytes], dict_tier: str, dict_size: int) -> bytes:
    """Train the dictionary every shard shares, on a helper thread so that
    Ctrl-C is not held up by the training (which then finishes unheard)."""
    done: list[tuple[bool, Any]] = []
    finished = threading.Event()

    def work() -> None:
        try:
            done.append((True, _native.dict_train(samples, dict_tier, dict_size)))
        except BaseException as e:  # handed to the waiting thread
            done.append((False, e))
        finally:
            finished.set()

    threading.Thread(target=work, name="loaderx-train-dict", daemon=True).start()
    while not finished.wait(_Output._WAIT):
        pass
    ok, value = done[0]
    if ok:
        return value
    if isinstance(value, ValueError):
        raise ValueError(
            f"codec 'zstd_dict' could not train a dictionary on {len(samples)} sampled records "
            f"({value}); with this little data, or records that share no content, a dictionary "
            "gains nothing, so use codec='zstd'"
        ) from value
    raise value


def from_iterator(
    path: PathLike,
    arrays: Iterable[Any],
    codec: str = "auto",
    *,
    dict_tier: str = "balanced",
    dict_size: int | None = None,
    dict_bytes: Any = None,
    group_bytes: int = 16 << 20,
    progress: bool | None = None,
    overwrite: bool = False,
    sync: bool = False,
    num_shards: int | None = None,
    storage_options: dict[str, Any] | None = None,
    staging: PathLike | None = None,
) -> None:
    """Write a stream of arrays to a new ragged store at ``path``, one record
    per array.

    Every array must have the same dtype and the same trailing shape
    (``shape[1:]``); the first axis is the one that varies, and may be 0. The
    schema records ``kind="ragged"`` and the trailing shape. Records are
    appended in groups of about ``group_bytes`` bytes, so memory stays bounded
    whatever the length of the stream.

    Args:
        path: the store directory to create; it must not exist or be empty.
            A kill leaves no store or a prefix, as for :func:`from_numpy`.
        arrays: any iterable of arrays (or ``np.asarray``-able values) with at
            least one dimension. Consumed once.
        codec: ``"auto"`` (default), ``"raw"``, ``"zstd"``, ``"zstd_dict"``
            or ``"narrow"`` (integer dtypes only); with ``"zstd_dict"`` the
            dictionary trains on the first records of the stream, about the
            tier's sample budget of them. ``"auto"`` applies
            :func:`from_numpy`'s rule to the first records of the stream (up
            to 4 MiB of them); the store's size is estimated from
            ``len(arrays)`` when the iterable has one, and a stream of
            unknown length is judged as one that fits in memory (the
            record of the choice says so).
        dict_tier: see :func:`from_numpy`.
        dict_size: see :func:`from_numpy`.
        dict_bytes: see :func:`from_numpy`.
        group_bytes: the size of each append group.
        progress: see :func:`from_numpy`.
        overwrite: see :func:`from_numpy`.
        sync: see :func:`from_numpy`.
        num_shards: None (default) writes one store; an int ``N`` makes
            ``path`` a sharded dataset of ``N`` shards written by worker
            processes, as for :func:`from_numpy`. The stream
            is read once, checked and spooled (raw, into a scratch
            directory inside ``path``) until it ends, since shard ``i``
            must hold a contiguous range and where the ranges split is
            known only then; then every shard is encoded from the spool at
            once. The spool costs a sequential write and read of the raw
            records and as much disk until the call returns.
        storage_options: for an ``s3://`` ``path``, as for
            :func:`from_numpy`.
        staging: for an ``s3://`` ``path``, as for :func:`from_numpy`.

    Raises:
        TypeError: an unsupported dtype, or an array whose dtype differs from
            the first one's.
        ValueError: an empty stream, a 0-d array, or an array whose trailing
            shape differs from the first one's.
        loaderx.errors.StoreExistsError: ``path`` exists and is not empty.
        loaderx.errors.WorkerError: with ``num_shards``, a worker failed or
            died; the message names the shard and its records.

    Example::

        from_iterator("tokens", [np.arange(n, dtype=np.int32) for n in (3, 1, 4)])
        RaggedDataset("tokens")[2]      # array([0, 1, 2, 3], dtype=int32)
    """
    if _published(path, overwrite, storage_options, staging, lambda local: from_iterator(
            local, arrays, codec, dict_tier=dict_tier, dict_size=dict_size, dict_bytes=dict_bytes,
            group_bytes=group_bytes, progress=progress, num_shards=num_shards)):
        return
    path = os.fspath(path)
    dict_size_n, group = _check_options(
        codec, dict_tier, dict_size, group_bytes, "group_bytes", progress
    )
    _check_sync(sync)
    num = _parallel.check_num_shards(num_shards)
    ready_dict = _check_dict_bytes(dict_bytes, codec, dict_size)
    if num is None:
        _prepare_path(path, overwrite)
    created = num is not None and _parallel.prepare_dir(path, overwrite)
    try:
        total = len(arrays)  # type: ignore[arg-type]
    except TypeError:
        total = None
    it = iter(arrays)
    check = _RaggedCheck()

    pending: list[np.ndarray] = []
    count = 0
    first = next(it, _END)
    if first is _END:
        raise ValueError("from_iterator needs at least one array to fix the dtype and trailing shape")
    pending.append(check(0, first))
    count = 1
    del first
    element = check_narrow(check.dtype, "the first record") if codec == "narrow" else None

    samples = None
    choice = None
    if codec == "auto" or (codec == "zstd_dict" and ready_dict is None):
        if codec == "auto":
            budget, most = _autocodec.SAMPLE_BYTES, _autocodec.SAMPLE_MAX_RECORDS
        else:
            budget, most = int(_native.dict_sample_budget(dict_tier)), _MAX_DICT_SAMPLES
        buffered = pending[0].nbytes
        exhausted = False
        while buffered < budget and len(pending) < most:
            value = next(it, _END)
            if value is _END:
                exhausted = True
                break
            rec = check(count, value)
            count += 1
            pending.append(rec)
            buffered += rec.nbytes
        if codec == "auto":
            sample = [_autocodec.record_sample(r, len(pending)) for r in pending]
            mean = buffered / len(pending)
            if total is not None:
                store_bytes: int | None = int(total * mean)
                basis = f"the stream's length, {total} records, times the sample's mean record size"
            elif exhausted:
                store_bytes, basis = buffered, f"the whole stream, {len(pending)} records, was sampled"
            else:
                store_bytes, basis = None, "a stream without a length"
            choice = _autocodec.choose(
                sample, mean, dict_tier, f"the first {len(pending)} records of the stream",
                element=narrow_element(check.dtype), store_bytes=store_bytes, store_bytes_from=basis,
            )
            del sample
            codec = choice["codec"]
            element = choice["element"] if codec == "narrow" else None
        if codec == "zstd_dict":
            samples = [r.tobytes() for r in pending]
    spec = _Spec(check.dtype, check.trailing, codec, dict_tier, dict_size_n, ready_dict, element, choice, sync)

    def records() -> Iterator[tuple[list[np.ndarray], int]]:
        """The rest of the stream in append groups, the sampled records first."""
        nonlocal count, pending
        pending_bytes = sum(r.nbytes for r in pending)
        while True:
            value = next(it, _END)
            done = value is _END
            if not done:
                rec = check(count, value)
                count += 1
                pending.append(rec)
                pending_bytes += rec.nbytes
                del value, rec
            if pending and (done or pending_bytes >= group or len(pending) >= _MAX_GROUP_RECORDS):
                yield pending, pending_bytes
                pending = []
                pending_bytes = 0
            if done:
                return

    if num is not None:
        if samples is not None:
            spec.ready_dict = _train_in_parent(samples, dict_tier, dict_size_n)
            del samples

        def make_tasks(scratch: Any) -> tuple[list, int, int]:
            spool = _parallel.RaggedSpool(scratch())
            bar = Progress(f"from_iterator {path} (spooling)", total, None, enabled=progress)
            try:
                for recs, nbytes in records():
                    spool.write(recs)
                    bar.update(len(recs), nbytes)
            finally:
                spool.close()
                bar.close()
            source = spool.finish()
            tasks = [
                (_ragged_shard, (source, a, b, spec, group), _records(a, b))
                for a, b in _parallel.ranges(spool.count, num)
            ]
            return tasks, spool.count, spool.nbytes

        _parallel.run(path, num, make_tasks, created=created, label=f"from_iterator {path}", progress=progress,
                      sync=sync)
        return

    bar = Progress(f"from_iterator {path}", total, None, enabled=progress)
    out = _Output()
    failed = True
    try:
        handle = spec.create(out, path, "ragged", samples, overwrite)
        del samples
        for recs, nbytes in records():
            _append_group(handle, recs)
            bar.update(len(recs), nbytes)
        failed = False
    finally:
        try:
            bar.close()
        finally:
            out.finish(failed, sync)


class _RaggedCheck:
    """Checks each record of a stream against the first one (dtype, trailing
    shape, size) and returns it C-contiguous in the stored dtype."""

    def __init__(self) -> None:
        self.dtype: Any = None
        self.source: Any = None
        self.trailing: tuple[int, ...] = ()

    def __call__(self, i: int, value: Any) -> np.ndarray:
        a = value if isinstance(value, np.ndarray) else np.asarray(value)
        if self.dtype is None:
            target = _check_dtype(a.dtype)
            if a.ndim == 0:
                raise ValueError(
                    f"record {i} is a 0-d array; ragged records vary along their first axis"
                )
            trailing = tuple(int(d) for d in a.shape[1:])
            row = int(np.prod(trailing, dtype=np.int64)) * target.itemsize
            if row == 0:
                raise ValueError(
                    f"record {i} has trailing shape {trailing} with a zero dimension: every "
                    "record would be empty and its length could not be read back"
                )
            self.dtype, self.source, self.trailing = target, a.dtype, trailing
        elif a.dtype != self.source and _native_order(a.dtype) != self.dtype:
            raise TypeError(
                f"record {i} has dtype {a.dtype}, but the first record fixed the dtype "
                f"to {self.dtype}"
            )
        if a.ndim == 0:
            raise ValueError(f"record {i} is a 0-d array; ragged records vary along their first axis")
        if a.shape[1:] != self.trailing:
            raise ValueError(
                f"record {i} has shape {a.shape}, whose trailing shape {a.shape[1:]} differs "
                f"from the first record's {self.trailing}"
            )
        if a.nbytes > MAX_RECORD_BYTES:
            raise ValueError(f"record {i} is {a.nbytes} bytes; a record may be at most 2 GiB")
        return np.ascontiguousarray(a, dtype=self.dtype)


def _ragged_shard(path: str, report: Any, source: tuple, start: int, stop: int, spec: _Spec, group: int) -> int:
    """A worker process's shard of :func:`from_iterator`: records ``[start,
    stop)`` of the spool ``source``, appended straight from its mapping in
    groups of about ``group`` bytes."""
    values, offsets = _parallel.open_spool(source)
    out = _Output()
    failed = True
    try:
        handle = spec.create(out, path, "ragged", None, False)
        a = start
        while a < stop:
            lo = int(offsets[a])
            # the first record past the group's bytes, at least one record
            b = int(np.searchsorted(offsets, lo + group, side="left"))
            b = max(a + 1, min(stop, b, a + _MAX_GROUP_RECORDS))
            hi = int(offsets[b])
            _native.store_append_packed(handle, values[lo:hi], offsets[a : b + 1] - lo)
            report(b - a, hi - lo)
            a = b
        failed = False
    finally:
        out.finish(failed, spec.sync)
    return stop - start


_END = object()


def _append_group(handle: int, records: list[np.ndarray]) -> None:
    sizes = np.fromiter((r.nbytes for r in records), dtype=np.int64, count=len(records))
    offsets = packed_offsets(sizes)
    data = np.empty(int(offsets[-1]), dtype=np.uint8)
    bounds = offsets.tolist()
    for k, r in enumerate(records):
        if r.nbytes:
            data[bounds[k] : bounds[k + 1]] = r.reshape(-1).view(np.uint8)
    _native.store_append_packed(handle, data, offsets)


# ---------------------------------------------------------------------------
# dictionaries

#: The first four bytes of a zstd dictionary (0xEC30A437, little-endian).
_ZSTD_DICT_MAGIC = b"\x37\xa4\x30\xec"


def _check_dict_bytes(dict_bytes: Any, codec: str, dict_size: Any) -> bytes | None:
    """A ready dictionary as bytes, or None; refuses one that cannot apply or
    is not a zstd dictionary (zstd itself checks the rest on creation)."""
    if dict_bytes is None:
        return None
    if codec != "zstd_dict":
        raise ValueError(f"dict_bytes applies to codec 'zstd_dict' only, not {codec!r}")
    if dict_size is not None:
        raise ValueError("dict_size and dict_bytes contradict each other: a ready dictionary has its size")
    try:
        data = bytes(memoryview(dict_bytes))
    except TypeError:
        raise TypeError(f"dict_bytes must be bytes-like, got {type(dict_bytes).__name__}") from None
    if data[:4] != _ZSTD_DICT_MAGIC:
        raise ValueError(
            f"dict_bytes is not a zstd dictionary: it starts with {data[:4]!r} ({len(data)} bytes), "
            f"not the dictionary magic {_ZSTD_DICT_MAGIC!r}; pass what train_dict returns"
        )
    return data


def train_dict(
    samples: Iterable[Any],
    tier: str = "balanced",
    *,
    dict_size: int | None = None,
    progress: bool | None = None,
) -> bytes:
    """Train a zstd dictionary once, to share between stores of one kind of
    data (``from_numpy(..., codec="zstd_dict", dict_bytes=d)``).

    Args:
        samples: records representative of the data: arrays (each one is a
            sample; pass ``list(array[:k])`` to sample the rows of an array)
            or bytes-like objects. At least 8 samples of 8 bytes or more.
            About the tier's sample budget of bytes is used (an evenly
            strided subset if more is given).
        tier: ``"fast"``, ``"balanced"`` (default) or ``"max"``: the
            dictionary size and training effort, as for ``from_numpy``.
        dict_size: an upper bound on the dictionary size in bytes.
        progress: draw a progress line on stderr: None (default) when stderr
            is a terminal.

    Returns:
        The dictionary, a zstd dictionary that any zstd tool also reads.

    Raises:
        ValueError: a bad tier, too few usable samples, or too few sample
            bytes to build a dictionary from (the content is at most a
            tenth of them).

    Example::

        d = train_dict(list(images[:5000]))
        from_numpy("part1", images, codec="zstd_dict", dict_bytes=d)
    """
    if tier not in DICT_TIERS:
        raise ValueError(f"tier must be one of {', '.join(map(repr, DICT_TIERS))}; got {tier!r}")
    size = 0
    if dict_size is not None:
        size = as_int(dict_size, "dict_size")
        if size <= 0:
            raise ValueError(f"dict_size must be positive, got {dict_size!r}")
    if isinstance(samples, (bytes, bytearray, memoryview, str)):
        raise TypeError(f"samples must be a list of records, not a single {type(samples).__name__}")
    records = []
    total = 0
    for i, value in enumerate(samples):
        rec: np.ndarray | memoryview
        if isinstance(value, np.ndarray):
            rec = np.ascontiguousarray(value).reshape(-1).view(np.uint8)
        else:
            try:
                rec = memoryview(value)
            except TypeError:
                raise TypeError(f"samples[{i}] must be an array or bytes-like, got {type(value).__name__}") from None
        records.append(rec)
        total += rec.nbytes
    bar = Progress(f"train_dict ({tier})", len(records), total, enabled=progress)
    try:
        d = _native.dict_train(records, tier, size)
        bar.update(len(records), total)
    except ValueError as e:
        raise ValueError(
            f"could not train a dictionary on {len(records)} samples ({total} bytes): {e}"
        ) from e
    finally:
        bar.close()
    return d
