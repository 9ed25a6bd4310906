"""What a contender adapter provides to each layer.

An adapter module (one per library) defines any of:

* ``SAMPLERS``: a list of :class:`SamplerContender`, with an optional
  ``check_samplers() -> str | None`` that returns a skip line when the family
  cannot run;
* ``STORES``: a list of :class:`Store` subclasses;
* ``LOADERS``: a list of :class:`LoaderContender`;
* ``VERSION``: ``(import name, distribution)`` for the machine block.

Adapters import their library inside methods, never at module level: the
registry imports every adapter, and a loader's child process must not carry
another contender's imports in its memory figure.

A library that cannot share this process (one with loaderx's own import name,
say) still fits: a sampler's loop, ``Store.timed`` (one timed slice of
batches) and ``LoaderContender.child_env`` are where it can run in a process
of its own (``original`` does so: a sampler loop returns the seconds it
measured, and a store that times its own conversion sets ``write_seconds``).
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import os
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

MiB = 1 << 20


def try_import(name: str) -> tuple[bool, str]:
    """Whether `name` imports, and if not, a one-line reason."""
    try:
        importlib.import_module(name)
        return True, ""
    except Exception as e:
        return False, f"{type(e).__name__}: {str(e).splitlines()[0][:100] if str(e) else ''}"


def installed(name: str) -> bool:
    """Whether a top-level module can be found, without importing it."""
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


@contextlib.contextmanager
def stdout_to_stderr() -> Iterator[None]:
    """Send file descriptor 1 to stderr for the block: stdout is the report, and
    a library converting data may print its progress there, from native code
    or a child process as well as through sys.stdout."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        os.dup2(2, 1)
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


# ---------------------------------------------------------------------------
# sampler layer


@dataclass(frozen=True)
class SamplerContender:
    """An index generator. `make(space, batch)` returns `loop(iters)`, which
    draws `iters` batches of `batch` indices in [0, space). A loop that runs
    elsewhere (another process) returns the seconds it measured there; one
    that returns None is timed around the call."""

    name: str
    make: Callable[[int, int], Callable[[int], float | None]]


# ---------------------------------------------------------------------------
# store layer
#
# Each store writes the same in-memory array, then answers two reads:
# gather(idx) for sorted random indices and window(start, stop) for a
# consecutive run. Where the library can fill a caller's buffer, that path is
# the one timed (`allocates` says which do not). What a read returns must be
# the rows written, byte for byte, in their dtype and shape: the store layer
# checks one batch of each read before timing, and a store that returns other
# bytes, another dtype or another shape gets a row that says so, untimed.


def timed_batches(fn: Callable[..., Any], batches: Sequence[tuple[Any, ...]], buf: np.ndarray,
                  budget_s: float, max_batches: int) -> list[float]:
    """Run fn(*batch, buf) over batches until the time budget is spent; returns per-batch seconds."""
    times = []
    total = 0.0
    for args in batches[:max_batches]:
        t0 = time.perf_counter()
        fn(*args, buf)
        dt = time.perf_counter() - t0
        times.append(dt)
        total += dt
        if total >= budget_s:
            break
    return times


class Store:
    """A record store under test. Subclasses set the class attributes and
    implement write, open, gather and, where the library has a faster path,
    window."""

    name = ""
    module: str | None = None     # import needed, for the skip line
    pip: str | None = None        # what to pip install when it is missing
    allocates = "no"
    how = ""                      # the read path, for the notes
    shares: str | None = None     # reads the files another contender wrote
    ext = ""                      # file name suffix
    compresses = False            # a compressing store (checked for stored-raw data)

    def __init__(self, path: str, shape: tuple[int, ...], dtype: Any, threads: int) -> None:
        self.path = path
        self.shape = tuple(shape)
        self.dtype = np.dtype(dtype)
        self.threads = threads

    @classmethod
    def available(cls) -> tuple[bool, str]:
        """(usable, reason when not)."""
        if cls.module is None:
            return True, ""
        return try_import(cls.module)

    @classmethod
    def unsupported(cls, shape: tuple[int, ...], dtype: np.dtype[Any]) -> str | None:
        """Why this store cannot hold records of this shape and dtype (the skip
        line), or None when it can."""
        return None

    def write(self, arr: np.ndarray) -> None:
        raise NotImplementedError

    def open(self) -> None:
        pass

    def gather(self, idx: np.ndarray, buf: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def window(self, start: int, stop: int, buf: np.ndarray) -> np.ndarray:
        return self.gather(np.arange(start, stop, dtype=np.int64), buf)

    def close(self) -> None:
        pass

    def note(self) -> str | None:
        """What the store decided by itself for this data (a codec it chose, a
        decode window), for a line under the table; called once, after open()."""
        return None

    def disk_path(self) -> str:
        return self.path

    def timed(self, read: str, batches: Sequence[tuple[Any, ...]], buf: np.ndarray, budget_s: float,
              max_batches: int) -> list[float]:
        """One timed slice: `read` ("gather" or "window") over batches; per-batch seconds.
        A library that cannot share this process (one with loaderx's import name,
        say) overrides this to run the slice in its own process and return the
        times measured there."""
        return timed_batches(getattr(self, read), batches, buf, budget_s, max_batches)


# ---------------------------------------------------------------------------
# loader layer
#
# The parent calls available() and prepare() (writes the files the loader
# reads); the child process (`_loader-child`) calls open() with the config
# built from prepare()'s dict and runs get() in a loop.

Batches = tuple[Callable[[], np.ndarray], Callable[[], None]]


class LoaderContender:
    """A data loader under test."""

    name = ""

    def available(self) -> str | None:
        """None when it can run, else the skip line (without the leading name)."""
        return None

    def child_env(self, env: dict[str, str]) -> dict[str, str]:
        """The environment of this loader's child process (e.g. a PYTHONPATH of its own)."""
        return env

    def prepare(self, ldir: str, data: np.ndarray, labels: np.ndarray) -> dict[str, Any]:
        """Write the files this loader reads under `ldir`; return {"data": ..., "label": ...}."""
        raise NotImplementedError

    def open(self, cfg: dict[str, Any]) -> Batches:
        """In the child: start the loader; return (get, close), get() giving the next batch's data."""
        raise NotImplementedError
