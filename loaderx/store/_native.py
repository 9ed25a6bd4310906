"""The binding to the native library: the only module that knows the C ABI.

It stays one file past 700 lines because it is the whole boundary: each
export's argument checks sit next to its call, so that what crosses the ABI
is reviewed in one place. The declarations and the status-to-exception
table are not split off either: they are read from the library at the first
native call and bound as this module's globals (the names held back below),
which the hot paths read as plain globals; in another module every call
would look them up there, and the held-back names would span two modules.

It loads ``libloaderx`` (built from the Go sources in ``capi/``) with cffi in
ABI mode, declares its functions from ``cdef.h`` (the ``lx_*`` prototypes
extracted at build time from the header that ``go build`` emits), and turns
every call into a plain Python function: arguments are checked and converted,
a failing status becomes an exception (see :mod:`loaderx.errors`), and results
come back as Python values or are written into caller-owned NumPy buffers.

Conventions:

* Stores are named by integer handles from :func:`store_create` and
  :func:`store_open`; :func:`store_close` retires one (closing twice is
  harmless, any other use of a closed handle raises :class:`ClosedError`).
* Arrays of indices, offsets and sizes are ``int64`` NumPy arrays, C-contiguous
  (they are read flat, whatever their shape). Output buffers must also be
  writable. A wrong dtype or type raises ``TypeError``; a non-contiguous,
  read-only or too small buffer raises ``ValueError``. Nothing is copied: the
  library reads and writes the caller's memory in place during the call and
  keeps no reference to it afterwards.
* The GIL is released for the duration of every native call, so several
  threads may gather from one store at once.
* All functions are thread-safe; each thread has its own error buffer.
* After ``os.fork()`` of a process that had loaded the library, every
  function raises :class:`ForkError` in the child: the Go runtime does not
  survive a fork. Use worker processes started with
  the ``spawn`` or ``forkserver`` method, or threads.

* Every number that crosses the ABI (status codes, codec tags, sampler
  modes, the order of the stats, the layout of the sample spec, the limits)
  is read from the loaded library, which defines them once (capi's cgo
  preamble, copied into ``cdef.h`` by the build); nothing here repeats them.
* Cold-path functions go through one wrapper, :func:`_call` (fork check,
  per-thread error buffer, status to exception, the ``int64_t``
  out-parameter); the hot paths (gather, sample, len) spell it out.

Importing this module loads nothing: the library is loaded at the first
native call, or the first lookup of a number read from it (once, whichever
thread gets there first), and :func:`loaded` tells whether that happened.
A process that never loaded it may fork children that load it themselves.

The library is looked up as ``loaderx/lib/libloaderx.so`` (``.dylib`` on
macOS, ``loaderx.dll`` on Windows) unless the environment variable
``LOADERX_LIB`` names another file; its declarations are read from
``cdef.h`` in the same directory.
"""

from __future__ import annotations

import contextlib
import dis
import hashlib
import importlib.util
import json
import os
import struct
import sys
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from cffi import FFI

from ..errors import (
    ClosedError,
    CorruptStoreError,
    ForkError,
    LoaderxError,
    NotResidentError,
    StoreExistsError,
    StoreLockedError,
)

__all__ = [
    "ABI_VERSION",
    "loaded",
    "library_path",
    "check_fork",
    "CancelFlag",
    "store_create",
    "store_open",
    "store_close",
    "store_close_unsynced",
    "set_open",
    "set_open_shards",
    "store_len",
    "store_codec",
    "store_append_packed",
    "store_append",
    "store_gather",
    "store_sizes",
    "store_gather_packed",
    "store_gather_ragged",
    "store_delete",
    "store_compact",
    "store_stats",
    "store_sync",
    "store_upgrade",
    "store_set_verify",
    "store_verify",
    "verify_dir",
    "dict_sample_budget",
    "dict_train",
    "store_create_dict",
    "schema_write",
    "schema_read",
    "schema_set_codec_choice",
    "schema_codec_choice",
    "codec_probe",
    "sample",
    "set_threads",
    "get_threads",
    "StepPipe",
    "pipe_live",
]

#: The version of the C ABI this module is written for (LX_ABI_VERSION).
ABI_VERSION = 9

#: Bytes of the per-thread error buffer (struct lx_error: the error number,
#: then the message).
ERRLEN = 4096

FORK_MESSAGE = (
    "loaderx cannot be used in a forked child process: the Go runtime does not "
    "survive fork(); open datasets inside workers started with the 'spawn' or "
    "'forkserver' method, or use DataLoader's threads"
)

_BUILD_HINT = (
    "build it with `python3 python/build_native.py` (needs Go 1.26 and a C compiler) "
    "from the repository root, or point LOADERX_LIB at a built library"
)


def _library_filename() -> str:
    if sys.platform == "darwin":
        return "libloaderx.dylib"
    if sys.platform == "win32":
        return "loaderx.dll"
    return "libloaderx.so"


def _parsed_ffi(lib_dir: str, cdef: str) -> FFI:
    """An FFI that knows the declarations ``cdef``: the out-of-line module
    the build made of them (``_lx_ffi.py`` beside the library, see
    python/build_native.py), imported in about a millisecond, when it exists
    and was made from exactly ``cdef``; else ``cdef`` parsed here, which
    costs pycparser some 50 ms in every process."""
    module_path = os.path.join(lib_dir, "_lx_ffi.py")
    if os.path.isfile(module_path):
        try:
            spec = importlib.util.spec_from_file_location("_lx_ffi", module_path)
            if spec is not None and spec.loader is not None:
                module = importlib.util.module_from_spec(spec)
                spec.loader.exec_module(module)
                if getattr(module, "CDEF_SHA256", None) == hashlib.sha256(cdef.encode("utf-8")).hexdigest():
                    return module.ffi
        except Exception:  # stale, damaged or refused by this cffi: parse instead
            pass
    ffi = FFI()
    ffi.cdef(cdef)
    return ffi


def _load() -> tuple[FFI, Any, str]:
    """Find, declare and open the library, and check its ABI version."""
    path = os.environ.get("LOADERX_LIB") or os.path.join(
        os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "lib", _library_filename()
    )
    path = os.path.abspath(path)
    if not os.path.isfile(path):
        raise ImportError(f"loaderx native library not found at {path}: {_BUILD_HINT}")
    cdef_path = os.path.join(os.path.dirname(path), "cdef.h")
    try:
        with open(cdef_path, encoding="utf-8") as f:
            cdef = f.read()
    except OSError as e:
        raise ImportError(f"loaderx declarations not found at {cdef_path} ({e.strerror}): {_BUILD_HINT}") from None
    ffi = _parsed_ffi(os.path.dirname(path), cdef)
    try:
        lib = ffi.dlopen(path)
    except OSError as e:
        raise ImportError(f"cannot load the loaderx native library {path}: {e}; {_BUILD_HINT}") from None
    version = ffi.new("int64_t *")
    err = ffi.new("char[]", ERRLEN)
    try:
        status = lib.lx_abi_version(version, err, ERRLEN)
    except AttributeError:
        raise ImportError(f"{path} is not a loaderx library (no lx_abi_version): {_BUILD_HINT}") from None
    if status or version[0] != ABI_VERSION:
        raise ImportError(
            f"{path} implements loaderx ABI version {version[0]}, this binding needs {ABI_VERSION}: {_BUILD_HINT}"
        )
    return ffi, lib, path




# --- the ABI's numbers, read from the library --------------------------------------
#
# capi's cgo preamble defines every number that crosses the ABI; the build
# copies it into cdef.h, so these come from the library this module loaded.


def _enum(name: str, prefix: str, end: str | None = None) -> dict[str, int]:
    """The members of ``enum name`` as {lower-cased name after prefix: value},
    in value order; with ``end``, only the members below that member's value."""
    members = ffi.typeof(f"enum {name}").relements
    limit = members[end] if end is not None else None
    out = {}
    for member, value in sorted(members.items(), key=lambda kv: kv[1]):
        if member == end or (limit is not None and value >= limit):
            continue
        if not member.startswith(prefix):
            raise ImportError(f"{library_path}: enum {name} member {member} lacks the prefix {prefix}")
        out[member[len(prefix):].lower()] = value
    return out


def _dense(names: dict[str, int], what: str) -> tuple[str, ...]:
    """Names numbered 0..n-1, in number order."""
    if sorted(names.values()) != list(range(len(names))):
        raise ImportError(f"{library_path}: {what} are not numbered 0..{len(names) - 1}: {names}")
    return tuple(names)

if TYPE_CHECKING:
    # What _bind sets once the library is loaded, declared for type checkers
    # (at run time these names do not exist until the first native call).
    ffi: FFI
    lib: Any
    library_path: str
    OK: int
    INVALID: int
    OUT_OF_RANGE: int
    NOT_FOUND: int
    CORRUPT: int
    CLOSED: int
    IO: int
    BUSY: int
    INTERNAL: int
    EXISTS: int
    CANCELED: int
    NOT_RESIDENT: int
    STATUS_EXCEPTIONS: dict[int, type[BaseException]]
    _EXCEPTIONS: tuple[type[BaseException], ...]
    CODEC_NAMES: tuple[str, ...]
    SAMPLER_MODES: dict[str, int]
    STATS_FIELDS: tuple[str, ...]
    PROBE_FIELDS: tuple[str, ...]
    MAX_DIMS: int
    MAX_RECORD_SIZE: int
    _ERROR_HEAD: int
    _CREATE_REPLACE: int
    SAMPLE_SPEC_FIELDS: tuple[str, ...]
    _from_buffer: Any
    _cast: Any
    _new: Any
    _string: Any
    _I64: np.dtype[np.int64]
    _I64_ARRAY: Any
    _CHAR_ARRAY: Any
    _NULL: Any
    _lx_sample: Any
    _lx_store_gather: Any
    _lx_store_gather_packed: Any
    _lx_store_gather_ragged: Any
    _lx_store_len: Any
    _SAMPLE_SPEC: struct.Struct
    _pack_spec: Any
    PIPE_CONFIG_FIELDS: tuple[str, ...]
    _PIPE: dict[str, int]
    PIPE_GOT: tuple[str, ...]
    PIPE_META_LEN: int
    _lx_pipe_next: Any


def _bind() -> None:
    """Load the library and read the ABI's numbers from it (once, under
    :data:`_LOAD_LOCK`, at the first native call)."""
    global ffi, lib, library_path, OK, INVALID, OUT_OF_RANGE, NOT_FOUND, CORRUPT, CLOSED, IO, BUSY, INTERNAL
    global EXISTS, CANCELED, NOT_RESIDENT, STATUS_EXCEPTIONS, _EXCEPTIONS, CODEC_NAMES, SAMPLER_MODES, STATS_FIELDS
    global MAX_DIMS, MAX_RECORD_SIZE, _ERROR_HEAD, _CREATE_REPLACE, SAMPLE_SPEC_FIELDS, _from_buffer, _cast
    global PROBE_FIELDS, PIPE_CONFIG_FIELDS, PIPE_GOT, PIPE_META_LEN, _PIPE, _lx_pipe_next
    global _new, _string, _I64, _I64_ARRAY, _CHAR_ARRAY, _NULL, _lx_sample, _lx_store_gather
    global _lx_store_gather_packed, _lx_store_gather_ragged, _lx_store_len, _SAMPLE_SPEC, _pack_spec
    ffi, lib, library_path = _load()

    #: Status codes (enum lx_status).
    OK = lib.LX_OK
    INVALID = lib.LX_INVALID
    OUT_OF_RANGE = lib.LX_OUT_OF_RANGE
    NOT_FOUND = lib.LX_NOT_FOUND
    CORRUPT = lib.LX_CORRUPT
    CLOSED = lib.LX_CLOSED
    IO = lib.LX_IO
    BUSY = lib.LX_BUSY
    INTERNAL = lib.LX_INTERNAL
    EXISTS = lib.LX_EXISTS
    CANCELED = lib.LX_CANCELED
    NOT_RESIDENT = lib.LX_NOT_RESIDENT

    #: The exception class for each failing status (LoaderxError for one the
    #: binding does not know).
    STATUS_EXCEPTIONS = {
        INVALID: ValueError,
        OUT_OF_RANGE: IndexError,
        NOT_FOUND: FileNotFoundError,
        CORRUPT: CorruptStoreError,
        CLOSED: ClosedError,
        IO: OSError,
        BUSY: StoreLockedError,
        INTERNAL: LoaderxError,
        EXISTS: StoreExistsError,
        CANCELED: KeyboardInterrupt,  # only ever asked for by a Ctrl-C (see CancelFlag)
        NOT_RESIDENT: NotResidentError,
    }

    #: The exception class raised for each status, indexed by status.
    _EXCEPTIONS = tuple(
        STATUS_EXCEPTIONS.get(s, LoaderxError) for s in range(max(_enum("lx_status", "LX_").values()) + 1)
    )

    #: Codec names by on-disk tag (enum lx_codec); the store reports codecs as tags.
    CODEC_NAMES = _dense(_enum("lx_codec", "LX_CODEC_"), "codec tags")

    #: Sampler mode numbers by name (enum lx_sampler_mode).
    SAMPLER_MODES = _enum("lx_sampler_mode", "LX_MODE_")

    #: Field names of store_stats, in the order lx_store_stats writes them (enum lx_stat).
    STATS_FIELDS = _dense(_enum("lx_stat", "LX_STAT_", end="LX_STATS_LEN"), "stats fields")

    #: Field names of codec_probe, in the order lx_codec_probe writes them (enum lx_probe).
    PROBE_FIELDS = _dense(_enum("lx_probe", "LX_PROBE_", end="LX_PROBE_LEN"), "probe fields")

    #: Largest number of dimensions an item shape may have (LX_MAX_DIMS).
    MAX_DIMS = lib.LX_MAX_DIMS

    #: The largest record a store holds, in bytes (LX_MAX_RECORD_SIZE).
    MAX_RECORD_SIZE = lib.LX_MAX_RECORD_SIZE

    #: Offset of the message in the error buffer (LX_ERROR_HEAD); the int64_t
    #: error number sits before it.
    _ERROR_HEAD = lib.LX_ERROR_HEAD

    #: Flags of lx_store_create (enum lx_create_flag).
    _CREATE_REPLACE = lib.LX_CREATE_REPLACE

    #: The fields of lx_sample's spec in their positions (enum lx_sample_spec).
    #: sample() packs its arguments in this order, so a library that lays the
    #: spec out otherwise is refused.
    SAMPLE_SPEC_FIELDS = _dense(_enum("lx_sample_spec", "LX_SPEC_", end="LX_SPEC_LEN"), "spec fields")
    if SAMPLE_SPEC_FIELDS != ("mode", "n", "batch", "seed", "step", "rank", "world", "out_len"):
        raise ImportError(
            f"{library_path}: lx_sample's spec is laid out as {SAMPLE_SPEC_FIELDS}, not as this binding packs it"
        )

    #: The fields of lx_pipe_new's config in their positions (enum lx_pipe_config).
    PIPE_CONFIG_FIELDS = _dense(_enum("lx_pipe_config", "LX_PIPE_", end="LX_PIPE_CONFIG_LEN"), "pipeline config")
    #: The pipeline's other numbers by name: the io positions (IO_*), what
    #: lx_pipe_next handed out (GOT_*), the draws (DRAW_*), the stream layout
    #: (STREAM_*) and kinds (DENSE, RAGGED, PACKED), a packed stream's
    #: buffers (AUX_*, PACKED_AUX) and meta values (META_*).
    _PIPE = {}
    for enum, prefix in (("lx_pipe_io", "LX_PIPE_IO_"), ("lx_pipe_got", "LX_PIPE_GOT_"),
                         ("lx_pipe_draw", "LX_PIPE_DRAW_"), ("lx_pipe_stream", "LX_PIPE_STREAM_"),
                         ("lx_pipe_kind", "LX_PIPE_"), ("lx_pipe_aux", "LX_PIPE_"), ("lx_pipe_meta", "LX_PIPE_")):
        tag = prefix[len("LX_PIPE_"):]
        _PIPE.update({f"{tag}{k}".upper(): v for k, v in _enum(enum, prefix).items()})
    want = {"IO_TIMEOUT": 0, "IO_NRELEASE": 1, "IO_KIND": 2, "IO_STEP": 3, "IO_SLOT": 4, "IO_ROWS": 5}
    if any(_PIPE.get(k) != v for k, v in want.items()):
        raise ImportError(f"{library_path}: lx_pipe_next's io is laid out otherwise than this binding reads it")
    want = {"AUX_IDX": 0, "AUX_SEG": 1, "AUX_POS": 2, "AUX_CU": 3, "AUX_NSEG": 4, "AUX_REC": 5, "AUX_AT": 6,
            "AUX_SRC": 7, "AUX_META": 8, "PACKED_AUX": 9, "META_RECORDS": 0, "META_SKIP": 1, "META_SEGMENTS": 2}
    if any(_PIPE.get(k) != v for k, v in want.items()):
        raise ImportError(f"{library_path}: packed buffers are laid out otherwise than this binding lays them")
    #: The values of a packed stream's meta array (records, skip, segments).
    PIPE_META_LEN = _PIPE["META_LEN"]
    #: What lx_pipe_next handed out, by its number (enum lx_pipe_got).
    PIPE_GOT = _dense({k[4:].lower(): v for k, v in _PIPE.items() if k.startswith("GOT_")}, "pipeline results")
    _lx_pipe_next = lib.lx_pipe_next

    # Hot-path names, bound once.
    _from_buffer = ffi.from_buffer
    _cast = ffi.cast
    _new = ffi.new
    _string = ffi.string
    _I64 = np.dtype(np.int64)
    _I64_ARRAY = ffi.typeof("int64_t[]")
    _CHAR_ARRAY = ffi.typeof("char[]")
    _NULL = ffi.NULL
    _lx_sample = lib.lx_sample
    _lx_store_gather = lib.lx_store_gather
    _lx_store_gather_packed = lib.lx_store_gather_packed
    _lx_store_gather_ragged = lib.lx_store_gather_ragged
    _lx_store_len = lib.lx_store_len

    #: The layout of lx_sample's spec: LX_SPEC_LEN int64 values, the seed as uint64.
    _SAMPLE_SPEC = struct.Struct("=" + "".join("Q" if f == "seed" else "q" for f in SAMPLE_SPEC_FIELDS))
    _pack_spec = _SAMPLE_SPEC.pack_into



# --- fork guard --------------------------------------------------------------

_forked = False

#: Whether this process (or the parent it was forked from) loaded the library.
_loaded = False

#: Taken by the first native call while it loads the library.
_LOAD_LOCK = threading.Lock()


def _after_fork_in_child() -> None:
    # Only a library loaded before the fork is unusable here: a child of a
    # process that never loaded it may load it itself.
    global _forked, _LOAD_LOCK
    if _loaded:
        _forked = True
    _LOAD_LOCK = threading.Lock()  # another thread of the parent may have held it


os.register_at_fork(after_in_child=_after_fork_in_child)


def loaded() -> bool:
    """Whether the native library has been loaded in this process (or in the
    parent it was forked from). Importing loaderx never loads it; the first
    native call does."""
    return _loaded


# --- per-thread state and errors ----------------------------------------------

_tls = threading.local()


class _Context:
    """Per-thread call state: the error buffer and the reusable sample() arguments."""

    __slots__ = ("err", "cell", "spec", "spec_buf", "out", "out_buf")

    def __init__(self) -> None:
        self.err = _new(_CHAR_ARRAY, ERRLEN)
        self.cell = _new("int64_t[1]")  # the out-parameter of scalar getters
        self.spec = bytearray(_SAMPLE_SPEC.size)
        self.spec_buf = _from_buffer(_I64_ARRAY, self.spec, True)
        self.out: Any = None
        self.out_buf: Any = None


def _new_context() -> _Context:
    ctx = _tls.ctx = _Context()
    return ctx


def _errbuf() -> Any:
    """This thread's error buffer."""
    try:
        return _tls.ctx.err
    except AttributeError:
        return _new_context().err


def _raise(status: int, err: Any) -> None:
    """Raise the exception for a failing status, with the library's message.

    An ``OSError`` (and its subclasses) carries the error number the library
    reported, so ``e.errno`` is ``errno.ENOSPC``, ``errno.EACCES`` ...; for
    the plain ``OSError`` of ``LX_IO`` the number also picks the subclass
    (``PermissionError``, ``IsADirectoryError`` ...) as ``OSError`` does.
    """
    msg = _string(err + _ERROR_HEAD).decode("utf-8", "replace")
    if 0 < status < len(_EXCEPTIONS):
        cls = _EXCEPTIONS[status]
        if issubclass(cls, OSError):
            errnum = int(_cast("int64_t *", err)[0])
            if errnum:
                raise cls(errnum, msg)
        raise cls(msg)
    raise LoaderxError(f"unknown status {status} from the native library: {msg}")


def _check(status: int, err: Any) -> None:
    if status:
        _raise(status, err)


def _fork_check() -> None:
    if _forked:
        raise ForkError(FORK_MESSAGE)


def check_fork() -> None:
    """Raise :class:`ForkError` in a child of ``os.fork()`` (of a process that
    had loaded the library); do nothing elsewhere. For callers that must
    refuse before reaching a native call, such as a loader whose worker
    threads did not survive the fork."""
    if _forked:
        raise ForkError(FORK_MESSAGE)


#: Marks where _call puts its int64_t out-parameter.
_OUT: Any = object()


def _call(fn: Any, *args: Any) -> int:
    """Call the cold-path export ``fn`` with ``args``, then this thread's error
    buffer and its length.

    Raises :class:`ForkError` in a forked child and the status's exception
    when the call fails. One argument may be ``_OUT``: it becomes an
    ``int64_t *`` whose value is returned (0 without one). The hot paths
    (gather, sample, len) inline the same steps instead.
    """
    if _forked:
        raise ForkError(FORK_MESSAGE)
    try:
        ctx = _tls.ctx
    except AttributeError:
        ctx = _new_context()
    out = any(a is _OUT for a in args)
    if out:
        args = tuple(ctx.cell if a is _OUT else a for a in args)
    status = fn(*args, ctx.err, ERRLEN)
    if status:
        _raise(status, ctx.err)
    return int(ctx.cell[0]) if out else 0


# --- argument conversion -------------------------------------------------------


def _cstr(value: Any, name: str) -> bytes:
    """A str argument as UTF-8 bytes for a char* parameter."""
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, not {type(value).__name__}")
    b = value.encode("utf-8")
    if b"\0" in b:
        raise ValueError(f"{name} must not contain NUL characters: {value!r}")
    return b


def _cpath(path: Any, name: str = "path") -> bytes:
    """A path argument (str, bytes or os.PathLike) as bytes for a char* parameter."""
    try:
        b = os.fsencode(path)
    except TypeError:
        raise TypeError(f"{name} must be a str, bytes or os.PathLike, not {type(path).__name__}") from None
    if b"\0" in b:
        raise ValueError(f"{name} must not contain NUL characters: {path!r}")
    return b


def _buffer_error(name: str, obj: Any, exc: BaseException, writable: bool) -> Exception:
    """The exception to raise when ffi.from_buffer rejected obj."""
    kind = "a writable C-contiguous buffer" if writable else "a C-contiguous buffer"
    try:
        view = memoryview(obj)
    except TypeError:
        return TypeError(
            f"{name} must be {kind} (numpy array, bytearray or memoryview), not {type(obj).__name__}"
        )
    if not view.c_contiguous:
        return ValueError(f"{name} must be C-contiguous")
    if writable and view.readonly:
        return ValueError(f"{name} must be writable, but it is read-only")
    return ValueError(f"{name} is not usable as {kind}: {exc}")


def _i64_dtype_error(name: str, arr: Any) -> TypeError:
    dt = getattr(arr, "dtype", None)
    if dt is None:
        return TypeError(f"{name} must be a numpy.ndarray of int64, not {type(arr).__name__}")
    return TypeError(f"{name} must have dtype int64 (native byte order), not {dt}")


def _i64_view(arr: Any, name: str, writable: bool = False) -> Any:
    """An int64_t[] view of a C-contiguous int64 ndarray."""
    try:
        dt = arr.dtype
    except AttributeError:
        raise _i64_dtype_error(name, arr) from None
    if dt is not _I64 and dt != _I64:
        raise _i64_dtype_error(name, arr)
    try:
        return _from_buffer(_I64_ARRAY, arr, writable)
    except Exception as e:  # BufferError, ValueError or TypeError, by cffi/numpy version
        raise _buffer_error(name, arr, e, writable) from None


def _byte_view(obj: Any, name: str, writable: bool = False) -> Any:
    """A char[] view of any C-contiguous buffer."""
    try:
        return _from_buffer(_CHAR_ARRAY, obj, writable)
    except Exception as e:
        raise _buffer_error(name, obj, e, writable) from None


def _release(*views: Any) -> None:
    """End cffi's exports of the buffers behind ``views`` (``_byte_view``'s
    results), for a call that failed over a caller's buffer. The exception
    raised next keeps the failing frame, and with it the buffer, alive; a
    memoryview still exported when the garbage collector breaks such a
    cycle crashes CPython before 3.13 (its tp_clear frees what the export
    still uses), so the exports end before the exception leaves."""
    for v in views:
        with contextlib.suppress(Exception):  # not a from_buffer view, or released already
            ffi.release(v)


def _pack(records: Sequence[Any], name: str) -> tuple[bytes, np.ndarray]:
    """Pack a list of bytes-like records into one buffer and n+1 offsets."""
    if isinstance(records, (bytes, bytearray, memoryview, str, np.ndarray)):
        raise TypeError(f"{name} must be a list of bytes-like records, not {type(records).__name__}")
    views = []
    for i, rec in enumerate(records):
        try:
            view = memoryview(rec)
        except TypeError:
            raise TypeError(f"{name}[{i}] must be bytes-like, not {type(rec).__name__}") from None
        if not view.c_contiguous:
            raise ValueError(f"{name}[{i}] must be C-contiguous")
        views.append(view)
    offsets = np.zeros(len(views) + 1, dtype=np.int64)
    if views:
        np.cumsum(np.fromiter((v.nbytes for v in views), dtype=np.int64, count=len(views)), out=offsets[1:])
    return b"".join(views), offsets


# --- stores --------------------------------------------------------------------


class CancelFlag:
    """A flag that a long native call polls: :meth:`set`, from any thread,
    asks the call to stop. :func:`store_create` honours it while it trains a
    dictionary, and then raises ``KeyboardInterrupt`` having created
    nothing."""

    __slots__ = ("_cell",)

    def __init__(self) -> None:
        self._cell = _new("int64_t[1]")

    def set(self) -> None:
        """Ask the call to stop."""
        self._cell[0] = 1

    def is_set(self) -> bool:
        """Whether :meth:`set` was called."""
        return bool(self._cell[0])



def store_create(
    path: str | os.PathLike[str],
    codec: str = "zstd",
    *,
    dict_tier: str = "balanced",
    dict_size: int = 0,
    samples: list[Any] | None = None,
    schema: tuple[str, str, Sequence[int]] | None = None,
    overwrite: bool = False,
    cancel: CancelFlag | None = None,
    element: str | None = None,
) -> int:
    """Create a record store in the directory ``path`` and return its handle.

    ``path`` must not already hold a store (:class:`StoreExistsError`); its
    parent must exist. ``codec`` is ``"raw"``, ``"zstd"``, ``"zstd_dict"`` or
    ``"narrow"``; for ``"narrow"``, ``element`` names the integer type the
    records are arrays of (``"int8"`` to ``"uint64"``; the library's default,
    int32, when None), and it must be None for the other codecs.
    For ``"zstd_dict"`` the dictionary is trained on ``samples`` (a list of
    bytes-like records, see :func:`dict_sample_budget` for how many bytes are
    useful) at the given ``dict_tier`` (``"fast"``, ``"balanced"`` or
    ``"max"``), its size capped at ``dict_size`` bytes when positive; other
    codecs ignore the samples.

    ``schema``, a ``(kind, dtype, shape)`` triple as :func:`schema_write`
    takes it, is written with the store, before the store becomes visible:
    no failure or interruption leaves the store without it. The store is
    built beside ``path`` and renamed onto it complete, so a process killed
    during the call leaves ``path`` as it was; the next create of ``path``
    clears what such a call left. With ``overwrite=True`` a previous store
    in ``path`` is replaced, and stays readable until the new one takes its
    place; a directory that holds anything besides a store's files and its
    schema still raises :class:`StoreExistsError`, naming what it found,
    and is left alone.

    With a ``cancel`` flag (see :class:`CancelFlag`) another thread can stop
    the call while the dictionary trains: it then returns within a few
    milliseconds, raising ``KeyboardInterrupt``, and creates nothing.
    """
    p = _cpath(path)
    c = _cstr(_codec_spec(codec, element), "codec")
    t = _cstr(dict_tier, "dict_tier")
    if isinstance(dict_size, bool) or not isinstance(dict_size, int):
        raise TypeError(f"dict_size must be an int, not {type(dict_size).__name__}")
    data, offsets = _pack(samples if samples is not None else [], "samples")
    kind, dtype, shape, ndim = _create_schema_args(schema)
    return _call(
        lib.lx_store_create, p, c, t, dict_size, _byte_view(data, "samples"), len(data),
        _from_buffer(_I64_ARRAY, offsets), len(offsets) - 1, kind, dtype, shape, ndim,
        _CREATE_REPLACE if overwrite else 0, _NULL if cancel is None else cancel._cell, _OUT,
    )


def store_open(path: str | os.PathLike[str], *, readonly: bool = False) -> int:
    """Open the record store in the directory ``path`` and return its handle.

    A store has at most one writable handle at a time (in any process); a
    second raises :class:`StoreLockedError`. Read-only handles take no lock.
    """
    return _call(lib.lx_store_open, _cpath(path), 1 if readonly else 0, _OUT)


def store_close(h: int) -> None:
    """Close a store handle. Closing a closed handle does nothing."""
    _call(lib.lx_store_close, h)


def set_open(handles: list[int]) -> int:
    """One read-only dataset of the open stores ``handles``, in order: the
    records of the first, then those of the second, and so on. The handle it
    returns takes global indices in the read calls (len, codec, stats,
    set_verify, sizes, the gathers) and :func:`store_close` closes it and its
    stores. On success the store handles are retired (the set owns their
    stores); on failure they stay open and the caller still owns them."""
    hs = np.ascontiguousarray(handles, dtype=np.int64)
    return _call(lib.lx_set_open, _from_buffer(_I64_ARRAY, hs), len(hs), _OUT)


def set_open_shards(
    root: str | os.PathLike[str],
    stream: str,
    names: Sequence[str],
    lengths: np.ndarray,
    schema: tuple[str, str, Sequence[int]],
    max_open: int = 0,
) -> int:
    """One read-only dataset of the shards ``names`` (in order) of the
    sharded dataset at ``root``, shard ``k`` being the store
    ``root/names[k]/stream`` (``stream`` ``""``: ``root/names[k]``) of
    ``lengths[k]`` records (int64), every one of the ``(kind, dtype,
    shape)`` ``schema``. No shard is opened here: each opens when a read
    needs it and is checked then against the schema and its length
    (:class:`CorruptStoreError` naming the shard), and at most ``max_open``
    stay open at once (0: the library's process-wide default). The handle
    takes global indices in the read calls, as :func:`set_open`'s does."""
    r = _cpath(root, "root")
    st = _cstr(stream, "stream")
    if isinstance(max_open, bool) or not isinstance(max_open, int):
        raise TypeError(f"max_open must be an int, not {type(max_open).__name__}")
    joined = "\0".join(names).encode("utf-8")
    lens = _i64_view(lengths, "lengths")
    if len(lens) != len(names):
        raise ValueError(f"lengths must hold len(names) = {len(names)} values, not {len(lens)}")
    kind, dtype, shape, ndim = _create_schema_args(schema)
    return _call(
        lib.lx_set_open_shards, r, st, _byte_view(joined, "names"), len(joined), len(names), lens, kind, dtype,
        shape, ndim, max_open, _OUT,
    )


def store_close_unsynced(h: int) -> None:
    """Close a store handle without syncing it first: what was appended stays
    readable, but a power cut before the system writes it back may lose what
    followed the last :func:`store_sync`. Closing a closed handle does nothing."""
    _call(lib.lx_store_close_unsynced, h)


def store_len(h: int) -> int:
    """The number of records in the store."""
    if _forked:
        raise ForkError(FORK_MESSAGE)
    try:
        ctx = _tls.ctx
    except AttributeError:
        ctx = _new_context()
    status = _lx_store_len(h, ctx.cell, ctx.err, ERRLEN)
    if status:
        _raise(status, ctx.err)
    return ctx.cell[0]


def _codec_spec(codec: str, element: str | None) -> str:
    """The codec argument of lx_store_create and lx_codec_probe: the codec's
    name, and a narrow store's element type after a colon."""
    if element is None:
        return codec
    if not isinstance(element, str):
        raise TypeError(f"element must be a str such as 'int32', not {type(element).__name__}")
    if codec != "narrow":
        raise ValueError(f"element={element!r} applies to codec 'narrow' only, not {codec!r}")
    return f"{codec}:{element}"


def store_codec(h: int) -> str:
    """The store's codec: ``"raw"``, ``"zstd"``, ``"zstd_dict"`` or ``"narrow"``."""
    return _codec_name(_call(lib.lx_store_codec, h, _OUT))


def _codec_name(tag: int) -> str:
    if 0 <= tag < len(CODEC_NAMES):
        return CODEC_NAMES[tag]
    raise LoaderxError(f"the store reports an unknown codec tag {tag}")


def store_append_packed(h: int, data: Any, offsets: np.ndarray) -> int:
    """Append ``len(offsets) - 1`` records and return the index of the first.

    ``data`` is any C-contiguous buffer (bytes, bytearray, memoryview or a NumPy
    array of any dtype, read as bytes); record ``i`` is
    ``data[offsets[i]:offsets[i+1]]``, so ``offsets`` (int64) must be
    nondecreasing and within ``data``.
    """
    d = _byte_view(data, "data")
    o = _i64_view(offsets, "offsets")
    if len(o) == 0:
        _release(d)
        raise ValueError("offsets must hold n+1 values for n records, at least one")
    try:
        return _call(lib.lx_store_append, h, d, len(d), o, len(o) - 1, _OUT)
    except BaseException:
        _release(d)
        raise


def store_append(h: int, records: Sequence[Any]) -> int:
    """Append a list of bytes-like records and return the index of the first."""
    _fork_check()
    data, offsets = _pack(records, "records")
    return store_append_packed(h, data, offsets)


def store_gather(h: int, indices: np.ndarray, out: Any, stride: int) -> None:
    """Copy the records at ``indices`` into ``out``, record ``i`` at byte ``i*stride``.

    Every record must be exactly ``stride`` bytes; ``out`` is a writable
    C-contiguous buffer of at least ``len(indices) * stride`` bytes.
    """
    if _forked:
        raise ForkError(FORK_MESSAGE)
    try:
        dt = indices.dtype
    except AttributeError:
        raise _i64_dtype_error("indices", indices) from None
    if dt is not _I64 and dt != _I64:
        raise _i64_dtype_error("indices", indices)
    try:
        ib = _from_buffer(_I64_ARRAY, indices)
    except Exception as e:
        raise _buffer_error("indices", indices, e, False) from None
    try:
        ob = _from_buffer(_CHAR_ARRAY, out, True)
    except Exception as e:
        raise _buffer_error("out", out, e, True) from None
    try:
        err = _tls.ctx.err
    except AttributeError:
        err = _new_context().err
    status = _lx_store_gather(h, ib, len(ib), ob, len(ob), stride, err, ERRLEN)
    if status:
        _release(ob)
        _raise(status, err)


def store_gather_into(h: int, indices: np.ndarray, out: np.ndarray, stride: int) -> bool:
    """:func:`store_gather` for a caller with a general path to fall back on
    (``DenseDataset.gather``): returns False, having written nothing, where
    the arguments rather than the store are at fault (``indices`` not of
    dtype int64, a buffer cffi refuses: not C-contiguous, or ``out``
    read-only; an index out of range or negative), so the caller can report
    it in its own words or read negative indices from the end. Raises as
    :func:`store_gather` does otherwise. Its checks are the cheap ones: the
    buffers' contiguity and writability are left to ``ffi.from_buffer``,
    which requires both."""
    if _forked:
        raise ForkError(FORK_MESSAGE)
    if indices.dtype is not _I64:
        return False
    try:
        ib = _from_buffer(_I64_ARRAY, indices)
        ob = _from_buffer(_CHAR_ARRAY, out, True)
    except Exception:
        return False
    try:
        err = _tls.ctx.err
    except AttributeError:
        err = _new_context().err
    status = _lx_store_gather(h, ib, len(ib), ob, len(ob), stride, err, ERRLEN)
    if status:
        _release(ob)
        if status == OUT_OF_RANGE:
            return False
        _raise(status, err)
    return True


def store_sizes(h: int, indices: np.ndarray) -> np.ndarray:
    """The size in bytes of each record at ``indices``, as an int64 array of the same shape."""
    ib = _i64_view(indices, "indices")
    sizes = np.empty(np.shape(indices), dtype=np.int64)
    _call(lib.lx_store_sizes, h, ib, len(ib), _from_buffer(_I64_ARRAY, sizes, True))
    return sizes


def store_spans(h: int, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Where the stored bytes of each record at ``indices`` lie: four uint32
    arrays (store, chunk, offset, length), ``store`` being the position of
    the shard in a sharded dataset's handle (0 for one store)."""
    ib = _i64_view(indices, "indices")
    n = len(ib)
    outs = [np.empty(n, dtype=np.uint32) for _ in range(4)]
    ptrs = [ffi.cast("uint32_t *", ffi.from_buffer(o, require_writable=True)) for o in outs]
    _call(lib.lx_store_spans, h, ib, n, *ptrs)
    return outs[0], outs[1], outs[2], outs[3]


def store_set_residency(h: int, store: int, held: Any, chunk_base: np.ndarray | None, chunk_page: int,
                        table_base: np.ndarray | None = None, table_page: int = 0) -> None:
    """Give store ``store`` of handle ``h`` the residency map ``held`` (one
    byte per page, nonzero where reads may go; a bool or uint8 array the
    caller keeps alive, as it keeps the bases): page ``p`` of chunk file
    ``c`` is ``held[chunk_base[c] + p]``, chunk files cut into pages of
    ``chunk_page`` bytes, and page ``p`` of table segment ``s`` is
    ``held[table_base[s] + p]``, segments cut into pages of ``table_page``
    bytes (``table_base=None``: the table's files are whole).
    ``held=None`` removes the map. A read that needs a page not held then
    raises :class:`loaderx.errors.NotResidentError` before it reads the
    page or writes a byte, and every record read is checked against its
    checksum."""
    if held is None:
        _call(lib.lx_store_set_residency, h, store, _NULL, 0, ffi.NULL, 0, 0, ffi.NULL, 0, 0)
        return
    hb = _byte_view(held, "held")
    cb = _i64_view(chunk_base, "chunk_base")
    if table_base is None:
        _call(lib.lx_store_set_residency, h, store, hb, len(hb), cb, len(cb), chunk_page, ffi.NULL, 0, 0)
        return
    tb = _i64_view(table_base, "table_base")
    _call(lib.lx_store_set_residency, h, store, hb, len(hb), cb, len(cb), chunk_page, tb, len(tb), table_page)


def set_require_residency(h: int) -> None:
    """Make every store of the set handle ``h`` refuse its reads with
    :class:`loaderx.errors.NotResidentError` until
    :func:`store_set_residency` gives its position a map (a lazily opened
    store is refused before it is opened)."""
    _call(lib.lx_set_require_residency, h)


def store_check_table(h: int, store: int, seg: int, base: int, buf: Any) -> None:
    """Check table bytes fetched from elsewhere: ``buf`` holds bytes ``[base,
    base + len(buf))`` of table segment ``seg`` of store ``store`` of handle
    ``h``; every entry wholly inside them and below the store's length is
    checked against its own checksum and the chunk files. Raises
    CorruptStoreError naming the segment file and the first bad record."""
    bb = _byte_view(buf, "buf")
    try:
        _call(lib.lx_store_check_table, h, store, seg, base, bb, len(bb))
    finally:
        _release(bb)


def store_check_bytes(h: int, store: int, indices: np.ndarray, chunk: int, base: int, buf: Any) -> None:
    """Check the records at ``indices`` (of store ``store`` of a sharded
    handle, else 0) against their table checksums, their stored bytes read
    from ``buf``, which holds bytes ``[base, base + len(buf))`` of chunk file
    ``chunk``. Raises CorruptStoreError naming the first record that does not
    match, ValueError for a record outside that range."""
    ib = _i64_view(indices, "indices")
    bb = _byte_view(buf, "buf")
    try:
        _call(lib.lx_store_check_bytes, h, store, ib, len(ib), chunk, base, bb, len(bb))
    finally:
        _release(bb)


def store_gather_packed(h: int, indices: np.ndarray, out: Any, offsets: np.ndarray) -> None:
    """Copy the records at ``indices`` into ``out``, record ``i`` at ``out[offsets[i]:offsets[i+1]]``.

    ``offsets`` (int64, ``len(indices) + 1`` values) must give each record
    exactly its size (see :func:`store_sizes`).
    """
    if _forked:
        raise ForkError(FORK_MESSAGE)
    ib = _i64_view(indices, "indices")
    ob = _byte_view(out, "out", True)
    offs = _i64_view(offsets, "offsets")
    if len(offs) != len(ib) + 1:
        _release(ob)
        raise ValueError(f"offsets must hold len(indices) + 1 = {len(ib) + 1} values, not {len(offs)}")
    err = _errbuf()
    status = _lx_store_gather_packed(h, ib, len(ib), ob, len(ob), offs, err, ERRLEN)
    if status:
        _release(ob)
        _raise(status, err)


def store_gather_ragged(h: int, indices: np.ndarray, sizes: np.ndarray, out: Any) -> int:
    """Read the records at ``indices`` back to back into ``out`` from one
    consistent view of the store, and return the bytes they need.

    Each record's size goes to ``sizes`` (a writable int64 array of
    ``len(indices)`` values). When the returned total fits in ``out`` (a
    writable C-contiguous buffer), record ``k`` is in ``out`` at the sum of
    the sizes before it; otherwise ``out`` is untouched: call again with a
    buffer of at least the returned size (the store may change in between,
    so check again).
    """
    if _forked:
        raise ForkError(FORK_MESSAGE)
    ib = _i64_view(indices, "indices")
    sb = _i64_view(sizes, "sizes", True)
    if len(sb) != len(ib):
        raise ValueError(f"sizes must hold len(indices) = {len(ib)} values, not {len(sb)}")
    ob = _byte_view(out, "out", True)
    try:
        ctx = _tls.ctx
    except AttributeError:
        ctx = _new_context()
    status = _lx_store_gather_ragged(h, ib, len(ib), sb, ob, len(ob), ctx.cell, ctx.err, ERRLEN)
    if status:
        _release(ob)
        _raise(status, ctx.err)
    return ctx.cell[0]


def store_delete(h: int, indices: np.ndarray) -> None:
    """Delete the records at ``indices`` (distinct). The tail records move into
    the holes, so other indices may change."""
    ib = _i64_view(indices, "indices")
    _call(lib.lx_store_delete, h, ib, len(ib))


def store_compact(h: int) -> None:
    """Reclaim the space of deleted records. Needs exclusive access to the store."""
    _call(lib.lx_store_compact, h)


def store_stats(h: int) -> dict[str, Any]:
    """Store statistics: ``length``, ``live_bytes``, ``chunk_bytes``,
    ``logical_bytes``, ``codec`` (a name), ``dict_bytes`` and ``chunks``."""
    out = _new("int64_t[]", len(STATS_FIELDS))
    _call(lib.lx_store_stats, h, out, len(STATS_FIELDS))
    stats: dict[str, Any] = {name: int(out[i]) for i, name in enumerate(STATS_FIELDS)}
    stats["codec"] = _codec_name(stats["codec"])
    for flag in ("checksummed", "verified"):
        if flag in stats:
            stats[flag] = bool(stats[flag])
    return stats


def store_upgrade(h: int) -> None:
    """Rewrite a store of an earlier format version (1, or 3 as loaderx 1.5.2
    wrote it) to the current one, so its records are verified from then on.
    Crash-safe; a store of the current version is left alone. Needs exclusive
    access to the store."""
    _call(lib.lx_store_upgrade, h)


def store_set_verify(h: int, on: bool) -> None:
    """Turn checking raw records against their checksums on gather on (the
    default) or off for this handle. Compressed records are always checked."""
    _call(lib.lx_store_set_verify, h, 1 if on else 0)


#: The first buffer a verify report is written into; a larger one is
#: allocated (and the scan run again) only when the report needs it.
_REPORT_BYTES = 256 << 10


def _report(fn: Any, arg: Any) -> dict[str, Any]:
    """Run a verify export ``fn`` on ``arg`` and decode its JSON report."""
    size = _REPORT_BYTES
    while True:
        buf = _new("char[]", size)
        needed = _call(fn, arg, buf, size, _OUT)
        if needed <= size:
            report: dict[str, Any] = json.loads(_string(buf).decode("utf-8"))
            return report
        size = needed


def store_verify(h: int) -> dict[str, Any]:
    """Read the whole store and report what is damaged, without stopping at
    the first fault: a dict with ``dir``, ``version``, ``codec``,
    ``checksummed``, ``records``, ``checked``, ``faults`` (a list of dicts
    with ``file``, ``index`` (-1 if no record's) and ``what``),
    ``more_faults`` and ``pending`` (journals of an interrupted delete or
    compact). Raises only when the scan itself fails (I/O)."""
    return _report(lib.lx_store_verify, h)


def verify_dir(path: str | os.PathLike[str]) -> dict[str, Any]:
    """:func:`store_verify` for the store in ``path``, which need not open:
    its files are read read-only, without taking the store's lock."""
    return _report(lib.lx_verify_dir, _cpath(path))


def store_sync(h: int) -> None:
    """Make every record appended so far durable."""
    _call(lib.lx_store_sync, h)


def dict_sample_budget(tier: str) -> int:
    """How many bytes of samples a dictionary of ``tier`` trains on."""
    return _call(lib.lx_dict_sample_budget, _cstr(tier, "tier"), _OUT)


def dict_train(samples: list[Any], dict_tier: str = "balanced", dict_size: int = 0) -> bytes:
    """Train a zstd dictionary on ``samples`` (bytes-like records) for the
    tier ``dict_tier``, capped at ``dict_size`` bytes when positive, as
    :func:`store_create` does for a ``"zstd_dict"`` store; return its bytes."""
    t = _cstr(dict_tier, "dict_tier")
    if isinstance(dict_size, bool) or not isinstance(dict_size, int):
        raise TypeError(f"dict_size must be an int, not {type(dict_size).__name__}")
    data, offsets = _pack(samples, "samples")
    out = bytearray(_DICT_OUT_BYTES)
    n = _call(
        lib.lx_dict_train, t, dict_size, _byte_view(data, "samples"), len(data),
        _from_buffer(_I64_ARRAY, offsets), len(offsets) - 1, _byte_view(out, "out", True), len(out), _OUT,
    )
    return bytes(out[:n])


#: Room for a trained dictionary: the largest tier aims at 112 KiB.
_DICT_OUT_BYTES = 1 << 20


def store_create_dict(
    path: str | os.PathLike[str],
    dictionary: Any,
    *,
    dict_tier: str = "balanced",
    schema: tuple[str, str, Sequence[int]] | None = None,
    overwrite: bool = False,
) -> int:
    """Create a ``"zstd_dict"`` store in ``path`` that compresses against the
    ready zstd ``dictionary`` (bytes-like, as :func:`dict_train` returns it)
    at the level of ``dict_tier``, and return its handle. ``schema`` and
    ``overwrite`` mean what they mean for :func:`store_create`; a dictionary
    zstd rejects raises ``ValueError`` and creates nothing."""
    p = _cpath(path)
    t = _cstr(dict_tier, "dict_tier")
    d = _byte_view(dictionary, "dictionary")
    try:
        kind, dtype, shape, ndim = _create_schema_args(schema)
        return _call(
            lib.lx_store_create_dict, p, t, d, len(d), kind, dtype, shape, ndim,
            _CREATE_REPLACE if overwrite else 0, _OUT,
        )
    except BaseException:
        _release(d)
        raise


# --- schema --------------------------------------------------------------------


def _create_schema_args(schema: Any) -> tuple[Any, Any, Any, int]:
    """The schema arguments of a create call: NULLs for no schema, else a
    ``(kind, dtype, shape)`` tuple converted by :func:`_schema_args`."""
    if schema is None:
        return _NULL, _NULL, _NULL, 0
    try:
        kind_s, dtype_s, shape_s = schema
    except (TypeError, ValueError):
        raise TypeError(f"schema must be a (kind, dtype, shape) tuple, not {schema!r}") from None
    return _schema_args(kind_s, dtype_s, shape_s)


def _schema_args(kind: str, dtype: str, shape: Sequence[int]) -> tuple[bytes, bytes, Any, int]:
    """The kind, dtype, shape and ndim arguments of a schema, for C."""
    k = _cstr(kind, "kind")
    t = _cstr(dtype, "dtype")
    try:
        dims = [int(d) for d in shape]
    except TypeError:
        raise TypeError(f"shape must be a sequence of ints, not {type(shape).__name__}") from None
    return k, t, (_new("int64_t[]", dims) if dims else _NULL), len(dims)


def schema_write(path: str | os.PathLike[str], kind: str, dtype: str, shape: tuple[int, ...]) -> None:
    """Write ``path/schema.msgpack``: ``kind`` (``"dense"`` or ``"ragged"``), the
    NumPy dtype string ``dtype`` (``numpy.dtype.str``, such as ``"<f4"``) and
    the item ``shape``. The directory must exist; an existing schema is
    replaced atomically. :func:`store_create` writes a new store's schema itself."""
    _call(lib.lx_schema_write, _cpath(path), *_schema_args(kind, dtype, shape))


def schema_read(path: str | os.PathLike[str]) -> tuple[str, str, tuple[int, ...]]:
    """Read ``path/schema.msgpack`` and return ``(kind, dtype, shape)``."""
    kind = _new("char[]", 32)
    dtype = _new("char[]", 64)
    shape = _new("int64_t[]", MAX_DIMS)
    ndim = _call(lib.lx_schema_read, _cpath(path), kind, len(kind), dtype, len(dtype), shape, MAX_DIMS, _OUT)
    return (
        _string(kind).decode("utf-8"),
        _string(dtype).decode("utf-8"),
        tuple(int(shape[i]) for i in range(ndim)),
    )


def schema_set_codec_choice(path: str | os.PathLike[str], choice: dict[str, Any]) -> None:
    """Record ``choice`` (a JSON-safe dict saying how the codec was chosen) as
    the ``codec_choice`` entry of ``path/schema.msgpack``, which must exist;
    the file is replaced atomically."""
    doc = json.dumps(choice, allow_nan=False, separators=(",", ":")).encode("utf-8")
    _call(lib.lx_schema_set_codec_choice, _cpath(path), _byte_view(doc, "choice"), len(doc))


#: Room for a codec choice read back: the library accepts at most 16 KiB of JSON.
_CHOICE_OUT_BYTES = 1 << 16


def schema_codec_choice(path: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The ``codec_choice`` entry of ``path/schema.msgpack``, or None for a
    schema without one (stores converted with an explicit codec, or by an
    earlier version)."""
    out = bytearray(_CHOICE_OUT_BYTES)
    n = _call(lib.lx_schema_codec_choice, _cpath(path), _byte_view(out, "out", True), len(out), _OUT)
    if n == 0:
        return None
    return json.loads(out[:n].decode("utf-8"))


def codec_probe(
    codec: str, data: Any, offsets: np.ndarray, *, dict_tier: str = "balanced", dictionary: Any = None,
    element: str | None = None,
) -> dict[str, int]:
    """Compress the records packed in ``data`` (delimited by the int64
    ``offsets``, one more than the records) in memory as a store of ``codec``
    would, against ``dictionary`` for ``"zstd_dict"``, as arrays of
    ``element`` for ``"narrow"`` (see :func:`store_create`), and time reading
    them back on this thread; return the figures named by
    :data:`PROBE_FIELDS` (``records``, ``logical_bytes``, ``stored_bytes``,
    ``compressed``, ``decode_nanos``: the fastest of ``passes`` timed
    passes)."""
    c = _cstr(_codec_spec(codec, element), "codec")
    t = _cstr(dict_tier, "dict_tier")
    offs = _i64_view(offsets, "offsets")
    d = b"" if dictionary is None else dictionary
    out = _new("int64_t[]", len(PROBE_FIELDS))
    dv = _byte_view(d, "dictionary")
    bv = _byte_view(data, "data")
    try:
        _call(lib.lx_codec_probe, c, t, dv, len(dv), bv, len(bv), offs, len(offsets) - 1, out, len(PROBE_FIELDS))
    finally:
        _release(dv, bv)
    return {name: int(out[i]) for i, name in enumerate(PROBE_FIELDS)}


# --- sampler and threads -------------------------------------------------------


def _mode_number(mode: str) -> int:
    """Look a sampler mode name up in the library (the slow path of sample)."""
    return _call(lib.lx_sampler_mode, _cstr(mode, "mode"), _OUT)


def sample(
    mode: str,
    n: int,
    batch_size: int,
    seed: int,
    step: int,
    rank: int,
    world: int,
    out: np.ndarray,
) -> np.ndarray:
    """Fill ``out[:batch_size]`` with the indices of one step and return ``out``.

    ``mode`` is ``"sequential"``, ``"iid"`` or ``"cyclic"``; indices lie in
    ``[0, n)``; ``seed`` is an unsigned 64-bit integer; ``rank`` of ``world``
    names this process's shard. ``out`` is a writable C-contiguous int64 array
    of exactly ``batch_size`` values. The result is a pure function of the
    arguments.

    Each thread remembers the last ``out`` it was given (and keeps it alive
    until its next call), so filling the same array step after step skips the
    buffer checks.
    """
    if _forked:
        raise ForkError(FORK_MESSAGE)
    m = SAMPLER_MODES.get(mode)
    if m is None:
        m = _mode_number(mode)
    try:
        ctx = _tls.ctx
    except AttributeError:
        ctx = _new_context()
    if out is ctx.out:
        buf = ctx.out_buf
    else:
        buf = _sample_out(ctx, out)
    try:
        _pack_spec(ctx.spec, 0, m, n, batch_size, seed, step, rank, world, len(buf))
    except struct.error:
        raise _spec_error(n=n, batch_size=batch_size, seed=seed, step=step, rank=rank, world=world) from None
    status = _lx_sample(ctx.spec_buf, buf, ctx.err, ERRLEN)
    if status:
        _raise(status, ctx.err)
    return out


def _sample_out(ctx: _Context, out: Any) -> Any:
    """Check sample()'s out array and make it the thread's current one."""
    buf = _i64_view(out, "out", True)
    ctx.out, ctx.out_buf = out, buf
    return buf


def _spec_error(**args: Any) -> Exception:
    """The exception for sample() arguments that do not fit their C types."""
    for name, value in args.items():
        if isinstance(value, bool) or not hasattr(value, "__index__"):
            return TypeError(f"{name} must be an int, not {type(value).__name__}")
    for name, value in args.items():
        lo, hi = (0, 2**64 - 1) if name == "seed" else (-(2**63), 2**63 - 1)
        if not lo <= int(value) <= hi:
            return OverflowError(f"{name} = {value} does not fit in {'uint64' if name == 'seed' else 'int64'}")
    return ValueError(f"invalid sample() arguments: {args}")


def set_threads(n: int) -> None:
    """Set how many threads one store operation may use (0: the library's default)."""
    _call(lib.lx_set_threads, n)


def get_threads() -> int:
    """How many threads one store operation may use."""
    return _call(lib.lx_get_threads, _OUT)


# --- the step pipeline -------------------------------------------------------


class StepPipe:
    """A native step pipeline (lx_pipe_*): the steps of a loader drawn and
    gathered ahead on worker goroutines into caller-owned slots, handed out
    in step order, one call per step.

    Args:
        draw: ``("sampler", mode, n, batch, seed, rank, world)`` or
            ``("epoch", n, batch, rank, world, order)`` (``order`` an int64
            permutation of ``n``, or None for the records in order), or
            ``("none", batch)`` when every stream is packed.
        streams: ``(store handle, "dense" or "ragged", record bytes)`` each,
            or ``(store handle, "packed", token bytes, rows, length, rank,
            world, wide, base, sources, step)`` for a stream packed in
            concat mode (its records come from :meth:`plan`; ``wide``:
            int64 ``cu_seqlens``; ``base``: the token its plan starts at,
            the first of sampler step ``step``; ``sources``: the handle is a
            set of a mixture's sources).
        slots: per slot, the list ``[indices, data_0, sizes_0, data_1, ...]``
            of C-contiguous NumPy arrays (``sizes_i`` None for a dense
            stream; a packed stream's other :data:`PACKED_AUX` arrays
            after its sizes, in the order of enum lx_pipe_aux); the native
            workers write them until :meth:`close`.
        workers, prefetch, start: as the pipeline's config; ``end`` the
            first step not made, or None.

    The arrays must stay alive until :meth:`close` returns (the caller keeps
    them) and a slot is the caller's only between the :meth:`next` that
    hands it out and the one that gives it back.
    """

    __slots__ = ("handle", "kinds", "nstreams", "io", "_io_len", "_head", "_keep", "_err", "_stash", "sent",
                 "__weakref__")

    def __init__(
        self,
        draw: tuple[Any, ...],
        streams: Sequence[tuple[Any, ...]],
        slots: Sequence[Sequence[np.ndarray | None]],
        workers: int,
        prefetch: int,
        start: int,
        end: int | None,
    ) -> None:
        self.handle = 0
        cfg = dict.fromkeys(PIPE_CONFIG_FIELDS, 0)
        order = None
        n = rank = 0
        world = 1
        if draw[0] == "none":
            batch = draw[1]
            cfg.update(draw=_PIPE["DRAW_NONE"])
        elif draw[0] == "sampler":
            _, mode, n, batch, seed, rank, world = draw
            signed = seed - (1 << 64) if seed >= 1 << 63 else seed  # the bits of a uint64 in an int64_t
            cfg.update(draw=_PIPE["DRAW_SAMPLER"], mode=SAMPLER_MODES[mode], seed=signed)
        elif draw[0] == "epoch":
            _, n, batch, rank, world, order = draw
            cfg.update(draw=_PIPE["DRAW_EPOCH"])
        else:
            raise ValueError(f"unknown draw {draw[0]!r}")
        cfg.update(n=n, batch=batch, rank=rank, world=world, workers=workers, prefetch=prefetch, start=start,
                   end=-1 if end is None else end)
        config = _new("int64_t[]", [int(cfg[f]) for f in PIPE_CONFIG_FIELDS])
        width = _PIPE["STREAM_LEN"]
        kinds = [_PIPE[s[1].upper()] for s in streams]
        st = [0] * (width * len(streams))
        fields = ("HANDLE", "KIND", "STRIDE", "ROWS", "LENGTH", "RANK", "WORLD", "WIDE", "BASE", "SOURCES", "STEP")
        for i, row in enumerate(streams):
            values = [row[0], kinds[i], *row[2:]]
            for f, v in zip(fields, values):
                st[i * width + _PIPE["STREAM_" + f]] = int(v)
        self.kinds = _new("int64_t[]", kinds or [0])
        self.nstreams = len(streams)
        ptrs, lens = self._buffers([a for slot in slots for a in slot])
        ob = _NULL if order is None else _from_buffer(_I64_ARRAY, order)
        #: what the native side writes (and reads) until close: kept alive here
        # per slot the arrays the native side holds (after hold(), the old ones too), then the order
        self._keep: list[Any] = [list(slot) for slot in slots] + [order]
        cell = _new("int64_t[1]")
        _call(lib.lx_pipe_new, config, len(config), _new("int64_t[]", st or [0]), len(streams), ptrs, lens,
              len(slots), ob, 0 if order is None else len(order), cell)
        self.handle = int(cell[0])
        self._head = _PIPE["IO_HEAD"]
        self._io_len = self._head + len(streams) + len(slots) * 2 + 1
        self.io = _new("int64_t[]", self._io_len)
        self._err = _new(_CHAR_ARRAY, ERRLEN)
        #: what a call interrupted as it returned handed out (a result, or
        #: the exception of a failed step), for the next call to return
        self._stash: Any = None
        #: the slots the last call that returned (or was interrupted as it
        #: returned) gave back
        self.sent: Sequence[int] = ()

    @staticmethod
    def _buffers(arrays: Sequence[np.ndarray | None]) -> tuple[Any, Any]:
        """The addresses and byte lengths of ``arrays`` (the caller keeps the
        arrays alive: only their addresses cross)."""
        ptrs = _new("void *[]", max(1, len(arrays)))
        lens = _new("int64_t[]", max(1, len(arrays)))
        for j, a in enumerate(arrays):
            if a is None or a.nbytes == 0:
                continue
            if not a.flags.c_contiguous or not a.flags.writeable:
                raise ValueError("a pipeline buffer must be a writable C-contiguous array")
            ptrs[j] = _cast("void *", _from_buffer(_CHAR_ARRAY, a, True))
            lens[j] = a.nbytes
        return ptrs, lens

    @property
    def stashed(self) -> bool:
        """Whether the next :meth:`next` returns what an interrupted call
        handed out (it then gives nothing back: pass no slots)."""
        return self._stash is not None

    def next(self, timeout_us: int, release: Sequence[int]) -> tuple[str, int, int, int]:
        """Give back the slots ``release`` and take the next step, waiting
        up to ``timeout_us``: ``(got, step, slot, rows)``, ``got`` one of
        :data:`PIPE_GOT` (``"batch"``, ``"pending"``, ``"end"``,
        ``"starved"``); :attr:`sent` says which slots went back. A failed
        step raises its exception (the status's class, the native message);
        :meth:`failed` then names its step and stream.

        A KeyboardInterrupt raised as the native call returns (a signal
        that arrived while it waited) would lose the step it handed out:
        that step is kept and the next call returns it, without a native
        call."""
        if _forked:
            raise ForkError(FORK_MESSAGE)
        stash = self._stash
        if stash is not None:
            self._stash = None
            if isinstance(stash, BaseException):
                raise stash
            return stash
        io = self.io
        io[0] = timeout_us
        io[2] = -1
        n = len(release)
        io[1] = n
        if n:
            at = self._head + self.nstreams
            for k in range(n):
                io[at + k] = release[k]
        err = self._err
        try:
            status = _lx_pipe_next(self.handle, io, self._io_len, err, ERRLEN)
        except KeyboardInterrupt:
            if io[2] >= 0:  # the call completed: keep what it handed out
                self.sent = release
                self._stash = self._result(int(io[_PIPE["IO_STATUS"]]))
            raise
        self.sent = release
        if status:
            _raise(status, err)
        return PIPE_GOT[io[2]], io[3], io[4], io[5]

    def _result(self, status: int) -> Any:
        """What the last call handed out: its result, or its failure."""
        if status:
            try:
                _raise(status, self._err)
            except Exception as e:
                return e
        io = self.io
        return PIPE_GOT[io[2]], io[3], io[4], io[5]

    def plan(self, stream: int, step: int = 0, idx: np.ndarray | None = None,
             lens: np.ndarray | None = None, steps: int = 0) -> tuple[int, int]:
        """Append records ``idx`` of ``lens`` tokens each (int64 arrays),
        the records of the sampler steps ``[step, step + steps)``, to packed
        ``stream``'s plan (none with ``steps`` 0); returns ``(limit, next)``:
        the first step the plan does not hold to the end (the workers'
        claim limit) and the sampler step the next append starts at. Steps
        the plan holds already are passed over: an append repeated because
        an interrupt lost what the first returned does no harm."""
        state = _new("int64_t[2]")
        if not steps:
            _call(lib.lx_pipe_plan, self.handle, stream, 0, 0, _NULL, _NULL, 0, state)
            return int(state[0]), int(state[1])
        assert idx is not None and lens is not None
        idx = np.ascontiguousarray(idx, dtype=np.int64)
        lens = np.ascontiguousarray(lens, dtype=np.int64)
        if idx.shape != lens.shape or idx.ndim != 1:
            raise ValueError(f"a plan of {idx.shape} records with {lens.shape} lengths")
        _call(lib.lx_pipe_plan, self.handle, stream, step, steps, _from_buffer(_I64_ARRAY, idx),
              _from_buffer(_I64_ARRAY, lens), idx.size, state)
        return int(state[0]), int(state[1])

    def needed(self, stream: int) -> int:
        """The bytes ragged ``stream`` needed at the step :meth:`next` handed out."""
        return int(self.io[self._head + stream])

    def failed(self) -> tuple[int, int] | None:
        """``(step, stream)`` of the step whose failure :meth:`next` raised
        (``stream`` -1: its draw); None when what it raised was no step's."""
        io = self.io
        if PIPE_GOT[io[_PIPE["IO_KIND"]]] != "failed":
            return None
        return int(io[_PIPE["IO_STEP"]]), int(io[_PIPE["IO_STREAM"]])

    def replace(self, slot: int, arrays: Sequence[np.ndarray | None]) -> None:
        """Give back ``slot`` with new buffers (``arrays`` as one slot of the
        constructor's ``slots``); the old ones are never touched again."""
        ptrs, lens = self._buffers(arrays)
        _call(lib.lx_pipe_replace, self.handle, slot, self.kinds, ptrs, lens, len(arrays))
        self._keep[slot] = list(arrays)  # the old ones are the caller's alone now

    def hold(self, slot: int, arrays: Sequence[np.ndarray | None]) -> None:
        """Note the arrays a held ``slot`` has now (one grew while the caller
        held it); the native side keeps its old ones, kept alive here too,
        until :meth:`replace` gives the slot back with these."""
        old = self._keep[slot]
        stale = [a for a in old if not any(a is b for b in arrays)]
        self._keep[slot] = [*arrays, stale]

    def close(self) -> None:
        """Stop the workers and wait for them; afterwards no buffer is
        touched. Twice is harmless."""
        h, self.handle = self.handle, 0
        if h and not _forked:
            _call(lib.lx_pipe_close, h)
            self._keep = []


def pipe_live() -> int:
    """The worker goroutines of every step pipeline still running."""
    return _call(lib.lx_pipe_live, _OUT)


# --- loading on first use ----------------------------------------------------
#
# Importing this module loads nothing, so a process that only imports loaderx
# (or builds datasets from their headers) can still fork workers that use the
# library. The names that need the library are held back here and become
# module attributes when the first of them is looked up: module __getattr__
# loads the library (once, whichever thread gets there first), then puts them
# back, so every later lookup is a plain attribute read with no added cost.

#: The names that need the library: the ABI's numbers (set by _bind) and the
#: functions that call it (held back below until the library is loaded).
_HELD_NAMES = frozenset(__all__) - {"ABI_VERSION", "loaded", "check_fork", "library_path"}
_NEEDS_LIBRARY = _HELD_NAMES | frozenset(
    ins.argval for ins in dis.get_instructions(_bind) if ins.opname == "STORE_GLOBAL"
)

_held: dict[str, Any] = {name: globals().pop(name) for name in _HELD_NAMES}


def _ensure_loaded() -> None:
    """Load the library and bind the names that need it, once."""
    global _loaded
    with _LOAD_LOCK:
        if _loaded:
            return
        _fork_check()
        _bind()
        globals().update(_held)
        _loaded = True


def __getattr__(name: str) -> Any:
    if name in _NEEDS_LIBRARY:
        _ensure_loaded()
        return globals()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
