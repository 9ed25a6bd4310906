"""Exceptions raised by loaderx.

Every failure of the native library reaches Python as one of these, or as the
built-in exception that matches it best (``ValueError`` for an invalid
argument, ``IndexError`` for an index out of range, ``FileNotFoundError`` for a
missing path, ``OSError`` for an I/O error). The message is the one the native
library wrote; it names the file, index or value at fault. An ``OSError``
carries the operating system's error number as ``errno`` (``ENOSPC``,
``EACCES`` ...), and damage to a store, a file of it missing included, is
always :class:`CorruptStoreError`; a failed request to object storage is
:class:`RemoteError`. One warning lives here too:
:class:`WorkersWarning`, from a ``workers="auto"`` loader that stays on
threads although it measured that processes would be faster.
"""

from __future__ import annotations

__all__ = [
    "LoaderxError",
    "CorruptStoreError",
    "ClosedError",
    "ForkError",
    "StoreLockedError",
    "StoreExistsError",
    "WorkerError",
    "WorkersWarning",
    "RemoteError",
    "NotResidentError",
]


class LoaderxError(Exception):
    """Base class of the errors specific to loaderx.

    Raised as such for an internal error (a bug in the native library that it
    recovered from).
    """


class CorruptStoreError(LoaderxError):
    """A store or schema file cannot be read: bad magic, unsupported format
    version, damaged data or a missing dictionary."""


class ClosedError(LoaderxError, ValueError):
    """An operation on a store that has been closed."""


class ForkError(LoaderxError, RuntimeError):
    """loaderx was called in a child process created by ``os.fork()``.

    The Go runtime inside the native library does not survive ``fork()``, so
    a forked child must not call into it.
    """


class StoreLockedError(LoaderxError):
    """The store is held by another writer (in this or another process)."""


class StoreExistsError(LoaderxError, FileExistsError):
    """Creating a store where one (or some other file) already exists."""


class WorkerError(LoaderxError, RuntimeError):
    """A step of a ``DataLoader(..., workers="process")`` failed in a worker
    process: an exception while making it (chained as the cause, with the
    worker's traceback as its own cause), or the process died. The message
    names the step. A conversion with ``num_shards=`` raises it the same way
    for a shard whose worker failed or died, naming the shard and its
    records; nothing is committed then."""


class RemoteError(LoaderxError, OSError):
    """A request to object storage failed: the bucket does not exist, the
    server refused the credentials, or it cannot be reached within the
    client's timeouts and retries. The message names the URL or object and
    which of these it was; ``url`` is the URL the operation was given."""

    def __init__(self, message: str, url: str = "") -> None:
        super().__init__(message)
        self.url = url


class NotResidentError(LoaderxError):
    """A read of a dataset in object storage needed a page of record bytes
    or of a record table that its process does not hold in the local cache
    (or a shard it has not mirrored yet). The cache raises it to itself,
    fetches the page and reads again; it reaches a caller only through a
    store handle used beside its dataset."""


class WorkersWarning(UserWarning):
    """A loader with ``workers="auto"`` measured that worker processes would
    make its steps faster but cannot use them (the message gives the figures
    and what ``workers="process"`` would need)."""
