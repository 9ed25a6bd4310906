"""The original Zig loaderx (``loaderx==1.5.2`` on PyPI), the implementation
this project replaces, measured on the same data with the same codecs.

Its import name is also ``loaderx``, so it never shares a process with the
project: it is installed into a directory of its own
(``pip install --target DIR loaderx==1.5.2``) and every measurement of it runs
in a child interpreter with ``PYTHONPATH=DIR`` — a long-lived worker
(``original_worker.py``) for the sampler, store and maintenance layers, the
loader layer's own child process for the loader. The directory is, in order:
``--original DIR``, ``$LOADERX_BENCH_ORIG``, or ``~/.cache/loaderx-bench/orig-1.5.2``
(``$XDG_CACHE_HOME`` honoured). ``--install-original`` installs the wheel there
when it is missing; without it, or when the install fails, the original is
skipped with one line. ``--no-original`` leaves it out.
"""

from __future__ import annotations

import atexit
import json
import os
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from data import augment_batch
from report import log

from contenders.base import Batches, LoaderContender, SamplerContender, Store

VERSION_PIN = "loaderx==1.5.2"
ENV_DIR = "LOADERX_BENCH_ORIG"
WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "original_worker.py")

_config: dict[str, Any] = {"dir": None, "enabled": True, "install": False}
_state: dict[str, Any] = {}


def default_dir() -> str:
    """Where the original is looked for (and installed) when nothing else is given."""
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(cache, "loaderx-bench", "orig-1.5.2")


def configure(path: str | None, enabled: bool = True, install: bool = False) -> None:
    """Set from the command line: the install directory, whether to measure the
    original at all, and whether to pip-install it when it is missing."""
    _config.update(dir=path, enabled=enabled, install=install)
    _state.clear()


def orig_dir() -> str:
    """The directory the original is (or will be) installed into."""
    return os.path.abspath(_config["dir"] or os.environ.get(ENV_DIR) or default_dir())


def _installed(d: str) -> bool:
    return os.path.isfile(os.path.join(d, "loaderx", "zrecord.py"))


def _install(d: str) -> str | None:
    """pip install --target d; None on success, else the reason."""
    log(f"[original] pip install --target {d} {VERSION_PIN} ...")
    os.makedirs(d, exist_ok=True)
    try:
        p = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                            "--target", d, VERSION_PIN], capture_output=True, text=True, timeout=600)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"pip failed: {type(e).__name__}: {e}"
    if p.returncode != 0:
        tail = (p.stderr or p.stdout).strip().splitlines()[-1:] or [f"exit code {p.returncode}"]
        return f"pip install --target {d} {VERSION_PIN} failed: {tail[0][:200]}"
    return None


def child_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """An environment whose Python path holds the original and nothing of the project."""
    e = dict(os.environ if env is None else env)
    e["PYTHONPATH"] = orig_dir()
    e.pop("LOADERX_LIB", None)
    return e


class Worker:
    """The long-lived child interpreter that runs the original (one JSON line each way)."""

    def __init__(self, d: str) -> None:
        self.proc = subprocess.Popen([sys.executable, "-P", WORKER], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     cwd=d, env=child_env())
        self.lock = threading.Lock()
        self.err: list[str] = []
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.err = [*self.err, line.rstrip()][-20:]

    def call(self, op: str, **kw: Any) -> dict[str, Any]:
        """One request; the answer's fields, or RuntimeError with the worker's message."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        with self.lock:
            try:
                self.proc.stdin.write(json.dumps({"op": op, **kw}) + "\n")
                self.proc.stdin.flush()
                line = self.proc.stdout.readline()
            except (BrokenPipeError, OSError) as e:
                line = ""
                self.err.append(f"{type(e).__name__}: {e}")
        if not line:
            raise RuntimeError(f"original worker died during {op}: " + " | ".join(self.err[-4:]))
        ans = json.loads(line)
        if not ans.pop("ok"):
            raise RuntimeError(f"original {op}: {ans['error']}")
        return ans

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                assert self.proc.stdin is not None
                self.proc.stdin.write('{"op": "quit"}\n')
                self.proc.stdin.flush()
                self.proc.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()


def status() -> tuple[bool, str]:
    """(usable, version and place, or the skip reason), found out once per run."""
    if "ok" in _state:
        return _state["ok"], _state["why"]
    ok, why = _probe()
    _state["ok"], _state["why"] = ok, why
    return ok, why


def _probe() -> tuple[bool, str]:
    if not _config["enabled"]:
        return False, "left out (--no-original)"
    d = orig_dir()
    if not _installed(d):
        if not _config["install"]:
            return False, (f"{VERSION_PIN} not installed at {d} (add --install-original, or point "
                           f"--original / ${ENV_DIR} at a `pip install --target` directory)")
        err = _install(d)
        if err or not _installed(d):
            return False, err or f"{VERSION_PIN}: nothing installed at {d}"
    try:
        hello = worker().call("hello")
    except Exception as e:
        return False, f"{VERSION_PIN} at {d} does not run: {str(e)[:200]}"
    if not hello["file"].startswith(d):
        return False, f"the worker imported loaderx from {hello['file']}, not from {d}"
    return True, f"{hello['version']} from {hello['file']} (numpy {hello['numpy']})"


def worker() -> Worker:
    """The shared worker process (started on first use, ended at exit)."""
    w = _state.get("worker")
    if w is None or w.proc.poll() is not None:
        w = Worker(orig_dir())
        _state["worker"] = w
        atexit.register(w.close)
    return w


def available() -> bool:
    return status()[0]


def version_line() -> str | None:
    """For the machine block: the original's version and place, or None when it is not measured."""
    ok, why = status()
    return why if ok else None


def _scratch(name: str) -> str:
    d = _state.get("scratch")
    if d is None:
        d = tempfile.mkdtemp(prefix="loaderx-bench-orig-")
        _state["scratch"] = d
        atexit.register(lambda: __import__("shutil").rmtree(d, ignore_errors=True))
    return os.path.join(d, name)


# ---------------------------------------------------------------------------
# sampler


def check_samplers() -> str | None:
    ok, why = status()
    return None if ok else f"original: {why}"


def _sampler(mode: str) -> Callable[[int, int], Callable[[int], float]]:
    def make(n: int, b: int) -> Callable[[int], float]:
        key = f"{mode}-{n}-{b}"
        worker().call("sampler_make", key=key, n=n, batch=b, mode=mode)

        def loop(iters: int) -> float:
            return float(worker().call("sampler_loop", key=key, iters=iters)["seconds"])
        return loop
    return make


SAMPLERS = [
    SamplerContender("original iid", _sampler("iid")),
    SamplerContender("original cyclic", _sampler("cyclic")),
]


# ---------------------------------------------------------------------------
# store


class OriginalStore(Store):
    """A dense store of the original, written, opened and gathered in the worker."""

    codec = "raw"
    how = ("original: Zrecord.gather(idx, buf, offsets) into a preallocated buffer (its fill-in "
           "path), uint64 indices and offsets made outside the timing; timed in its own process")

    @classmethod
    def available(cls) -> tuple[bool, str]:
        ok, why = status()
        return ok, ("" if ok else why)

    def write(self, arr: np.ndarray) -> None:
        npy = self.path + ".src.npy"
        np.save(npy, arr)
        try:
            ans = worker().call("write_dense", path=self.path, npy=npy, codec=self.codec)
        finally:
            os.unlink(npy)
        self.write_seconds = float(ans["seconds"])
        self.train_seconds = float(ans["train_s"])

    def open(self) -> None:
        self.key = os.path.basename(self.path) + f"-{id(self)}"
        worker().call("open", key=self.key, path=self.path)
        self.rec_bytes = int(np.prod(self.shape)) * self.dtype.itemsize
        # the checked batches come back through a file in memory (/dev/shm where there is
        # one), so no dirty page of it is written back while the others are timed
        shm = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
        fd, self.shared = tempfile.mkstemp(prefix="loaderx-bench-orig-", suffix=".out", dir=shm)
        os.close(fd)

    def gather(self, idx: np.ndarray, buf: np.ndarray) -> np.ndarray:
        nbytes = len(idx) * self.rec_bytes
        with open(self.shared, "wb") as fh:
            fh.truncate(nbytes)
        worker().call("gather_shared", key=self.key, idx=[int(i) for i in idx], out=self.shared)
        got = np.fromfile(self.shared, dtype=self.dtype).reshape(len(idx), *self.shape)
        np.copyto(buf[: len(idx)], got)
        return buf[: len(idx)]

    def timed(self, read: str, batches: Sequence[tuple[Any, ...]], buf: np.ndarray, budget_s: float,
              max_batches: int) -> list[float]:
        if read == "gather":
            idx = np.stack([np.asarray(x[0], dtype=np.int64) for x in batches[:max_batches]])
        else:
            idx = np.stack([np.arange(s, e, dtype=np.int64) for s, e in batches[:max_batches]])
        npy = _scratch(f"batches-{self.key}.npy")
        np.save(npy, idx)
        ans = worker().call("timed", key=self.key, npy=npy, budget=budget_s, max=max_batches)
        return [float(t) for t in ans["times"]]

    def close(self) -> None:
        if getattr(self, "key", None):
            worker().call("close", key=self.key)
            self.key = None
        if getattr(self, "shared", None) and os.path.exists(self.shared):
            os.unlink(self.shared)


class OriginalRaw(OriginalStore):
    name = "original-raw"
    codec = "raw"


class OriginalZstd(OriginalStore):
    name = "original-zstd"
    codec = "zstd"
    compresses = True


class OriginalZstdict(OriginalStore):
    name = "original-zstdict"
    codec = "zstd_dict"
    compresses = True


STORES: list[type[Store]] = [OriginalRaw, OriginalZstd, OriginalZstdict]

# The project's store each original store is compared with, row for row.
COUNTERPART = {"original-raw": "zrecord-raw", "original-zstd": "zrecord-zstd",
               "original-zstdict": "zrecord-zstdict"}


# ---------------------------------------------------------------------------
# maintenance and ragged writes (used by maint.py)


def write_dense(path: str, arr: np.ndarray, codec: str) -> float:
    """Convert `arr` with the original's from_numpy in the worker; its seconds."""
    npy = _scratch("dense-src.npy")
    np.save(npy, arr)
    try:
        return float(worker().call("write_dense", path=path, npy=npy, codec=codec)["seconds"])
    finally:
        os.unlink(npy)


def write_ragged(path: str, flat: np.ndarray, lengths: np.ndarray, codec: str) -> float:
    """Convert the records packed in `flat` with the original's from_iterator; its seconds."""
    npy, lnp = _scratch("ragged-src.npy"), _scratch("ragged-len.npy")
    np.save(npy, flat)
    np.save(lnp, lengths)
    try:
        return float(worker().call("write_ragged", path=path, npy=npy, lengths=lnp, codec=codec)["seconds"])
    finally:
        os.unlink(npy)
        os.unlink(lnp)


def maintain(path: str, idx: np.ndarray) -> dict[str, Any]:
    """Delete `idx` from the dense store at `path`, then compact; timings and stats."""
    npy = _scratch("delete-idx.npy")
    np.save(npy, idx)
    return worker().call("maintain", path=path, npy=npy)


def ragged_open(path: str) -> str:
    key = f"ragged-{path}"
    worker().call("open", key=key, path=path, kind="ragged")
    return key


def ragged_timed(key: str, batches: np.ndarray, budget_s: float) -> list[float]:
    npy = _scratch("ragged-batches.npy")
    np.save(npy, batches)
    return [float(t) for t in worker().call("ragged_timed", key=key, npy=npy, budget=budget_s,
                                            max=len(batches))["times"]]


def ragged_check(key: str, idx: np.ndarray) -> dict[str, Any]:
    return worker().call("ragged_check", key=key, idx=[int(i) for i in idx])


def close_key(key: str) -> None:
    worker().call("close", key=key)


# ---------------------------------------------------------------------------
# loader


class OriginalLoader(LoaderContender):
    """The original's DataLoader (cyclic sampler, one gather thread, transform
    workers) over a data store of one codec and a raw label store, in a child
    whose PYTHONPATH is the original's directory."""

    def __init__(self, name: str, codec: str) -> None:
        self.name, self.codec = name, codec

    def available(self) -> str | None:
        ok, why = status()
        return None if ok else why

    def child_env(self, env: dict[str, str]) -> dict[str, str]:
        return child_env(env)

    def prepare(self, ldir: str, data: np.ndarray, labels: np.ndarray) -> dict[str, Any]:
        dpath = os.path.join(ldir, f"orig-data-{self.codec}")
        lpath = os.path.join(ldir, "orig-label")
        log(f"[loader] writing {self.name} store ...")
        write_dense(dpath, data, self.codec)
        if not os.path.exists(lpath):
            write_dense(lpath, labels, "raw")
        return {"data": dpath, "label": lpath}

    def open(self, cfg: dict[str, Any]) -> Batches:
        import loaderx
        from loaderx.dataloader import DataLoader
        from loaderx.dataset import DenseDataset
        from loaderx.sampler import Sampler
        if getattr(loaderx, "__version__", "") != VERSION_PIN.split("==")[1]:
            raise RuntimeError(f"the loader child imported loaderx {loaderx.__version__} from "
                               f"{loaderx.__file__}, not the original")
        data = DenseDataset(cfg["data"])
        label = DenseDataset(cfg["label"])
        kw: dict[str, Any] = {}
        if cfg["transform"] == "augment":
            kw["transform"] = augment_batch
        dl = DataLoader({"data": data, "label": label}, num_workers=cfg["workers"],
                        batch_size=cfg["batch"], mode=Sampler.Mode.CYCLIC, seed=0, **kw)

        def get() -> np.ndarray:
            return next(dl)["data"]

        def close() -> None:
            dl.close()
            data.close()
            label.close()
        return get, close


LOADERS: list[LoaderContender] = [OriginalLoader("original", "zstd"), OriginalLoader("original-raw", "raw")]
