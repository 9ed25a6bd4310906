"""loaderx itself, through its public API: zsampler (`loaderx.sampler`),
zrecord stores (`loaderx.converter` + `loaderx.dataset`) and the DataLoader.

loaderx must be importable: installed (`make bench` installs it), or the repo
root on PYTHONPATH (`PYTHONPATH=. python3 scripts/bench ...`). When it is not,
its contenders are skipped with the import error.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import numpy as np
from data import augment_batch
from report import log

from contenders.base import Batches, LoaderContender, SamplerContender, Store

_status: dict[str, Any] = {}


def loaderx_status() -> str:
    """The version and location of loaderx, or why it does not import."""
    if not _status:
        try:
            import loaderx
            import loaderx.dataset  # loads the native library
            _status["ok"] = True
            _status["why"] = f"{loaderx.__version__} from {os.path.dirname(loaderx.__file__)}"
        except Exception as e:  # ImportError, OSError from dlopen, ...
            _status["ok"] = False
            _status["why"] = (f"not importable ({type(e).__name__}: {str(e).splitlines()[0][:120]}; "
                              "install it or run with PYTHONPATH=<repo root>)")
    return _status["why"]


def have_loaderx() -> bool:
    loaderx_status()
    return bool(_status["ok"])


def gather_threads(requested: int | None) -> int:
    """Threads a zrecord gather fans out to (the threaded memcpy row uses as many):
    `requested` is passed to loaderx.set_num_threads."""
    if have_loaderx():
        import loaderx
        if requested:
            loaderx.set_num_threads(requested)
        return int(loaderx.get_num_threads())
    if requested:
        return requested
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


# ---------------------------------------------------------------------------
# sampler


def check_samplers() -> str | None:
    if not have_loaderx():
        return f"zsampler: loaderx {loaderx_status()}"
    try:
        from loaderx import sampler as zs
        o = np.empty(256, np.int64)
        zs.sample("iid", 1000, 256, 0, seed=0, out=o)
        assert int(o.min()) >= 0 and int(o.max()) < 1000
    except Exception as e:
        return f"zsampler: loaderx.sampler failed: {type(e).__name__}: {e}"
    return None


def _sample_fn(mode: str) -> Callable[[int, int], Callable[[int], None]]:
    def make(n: int, b: int) -> Callable[[int], None]:
        from loaderx.sampler import sample
        buf = np.empty(b, np.int64)
        state = {"step": 0}

        def loop(iters: int) -> None:
            s0 = state["step"]
            for s in range(s0, s0 + iters):
                sample(mode, n, b, s, seed=0, out=buf)
            state["step"] = s0 + iters
        return loop
    return make


def _sampler_object(n: int, b: int) -> Callable[[int], None]:
    from loaderx.sampler import Sampler
    buf = np.empty(b, np.int64)
    f = Sampler("iid", n, b, seed=0)
    state = {"step": 0}

    def loop(iters: int) -> None:
        s0 = state["step"]
        for s in range(s0, s0 + iters):
            f(s, out=buf)
        state["step"] = s0 + iters
    return loop


SAMPLERS = [
    SamplerContender("zsampler iid", _sample_fn("iid")),
    SamplerContender("zsampler iid, Sampler()", _sampler_object),
    SamplerContender("zsampler cyclic", _sample_fn("cyclic")),
]


# ---------------------------------------------------------------------------
# store


class ZrecordStore(Store):
    codec: str | None = "raw"      # None: from_numpy's default (codec "auto")
    verify: bool | None = None     # None: the library's default, set_verify not called
    how = "DenseDataset.gather(idx, out=buf): one native call per batch"

    @classmethod
    def available(cls) -> tuple[bool, str]:
        if not have_loaderx():
            return False, f"loaderx {loaderx_status()}"
        return True, ""

    def write(self, arr: np.ndarray) -> None:
        from loaderx.converter import from_numpy
        if self.codec is None:
            from_numpy(self.path, arr)
        else:
            from_numpy(self.path, arr, codec=self.codec)

    def open(self) -> None:
        from loaderx.dataset import DenseDataset
        self.ds: Any = DenseDataset(self.path)
        assert len(self.ds) > 0
        if self.verify is not None:
            self.ds.set_verify(self.verify)

    def gather(self, idx: np.ndarray, buf: np.ndarray) -> np.ndarray:
        self.ds.gather(idx, out=buf)
        return buf

    def close(self) -> None:
        ds = getattr(self, "ds", None)
        if ds is not None:
            ds.close()
            self.ds = None

    def note(self) -> str | None:
        """What the store chose or checks by itself, for the line under the table."""
        st = self.ds.stats()
        parts = []
        choice = st.get("codec_choice")
        if self.codec is None and choice:
            parts.append(f"codec \"auto\" chose {choice['codec']}: {choice['reason']}")
        if self.verify is None and st.get("codec") == "raw":
            parts.append("raw gathers are " + ("verified" if st.get("verified") else "not verified")
                         + " by default (stats()['verified'])")
        return "; ".join(parts) or None


class _Indexed:
    """Mixin: the same store read as most code reads an array, ds[idx] and
    ds[a:b], each a new array."""

    allocates = "yes (ds[idx] returns a new array)"

    def gather(self, idx: np.ndarray, buf: np.ndarray) -> np.ndarray:
        return self.ds[idx]  # type: ignore[attr-defined]

    def window(self, start: int, stop: int, buf: np.ndarray) -> np.ndarray:
        return self.ds[start:stop]  # type: ignore[attr-defined]


class ZrecordDefaults(ZrecordStore):
    """The README's path: from_numpy(path, arr) and DenseDataset(path) with every
    default left alone; codec "auto" decides raw or a codec itself."""

    name = "zrecord (defaults)"
    codec = None
    how = ("from_numpy(path, arr) and DenseDataset(path), every default left alone (codec \"auto\", "
           "the library's verification default); gather(idx, out=buf)")


class ZrecordDefaultsIndexed(_Indexed, ZrecordDefaults):
    name = "zrecord (defaults) ds[idx]"
    shares = "zrecord (defaults)"
    how = "the zrecord (defaults) store read with ds[idx] / ds[a:b]"


class ZrecordRaw(ZrecordStore):
    name = "zrecord-raw"
    codec = "raw"
    how = ("from_numpy(codec=\"raw\"), set_verify not called (the library's default); "
           "DenseDataset.gather(idx, out=buf): one native call per batch")


class ZrecordRawIndexed(_Indexed, ZrecordRaw):
    name = "zrecord-raw ds[idx]"
    shares = "zrecord-raw"
    how = "the zrecord-raw store read with ds[idx] / ds[a:b]"


class ZrecordRawUnverified(ZrecordRaw):
    """zrecord-raw with raw verification switched off explicitly, whatever the default is."""

    name = "zrecord-raw-unverified"
    shares = "zrecord-raw"
    verify = False
    how = "the zrecord-raw store with set_verify(False); gather(idx, out=buf)"


class ZrecordRawUnverifiedIndexed(_Indexed, ZrecordRawUnverified):
    name = "zrecord-raw-unverified ds[idx]"
    how = "the zrecord-raw store with set_verify(False); ds[idx] / ds[a:b]"


class ZrecordRawVerify(ZrecordRaw):
    """zrecord-raw with every record checked against its checksum on gather
    (set_verify(True)): with the unverified rows, what raw verification costs."""

    name = "zrecord-raw-verify"
    shares = "zrecord-raw"
    verify = True
    how = "the zrecord-raw store with set_verify(True): every record checked against its CRC-32C"


class ZrecordRawVerifyIndexed(_Indexed, ZrecordRawVerify):
    name = "zrecord-raw-verify ds[idx]"
    how = "the zrecord-raw store with set_verify(True); ds[idx] / ds[a:b]"


class ZrecordZstd(ZrecordStore):
    name = "zrecord-zstd"
    codec = "zstd"
    compresses = True


class ZrecordZstdict(ZrecordStore):
    name = "zrecord-zstdict"
    codec = "zstd_dict"
    compresses = True


class ZrecordNarrow(ZrecordStore):
    """Integer records narrowed to the fewest bytes per value; refused
    (skipped with the converter's message) for a float --dtype."""

    name = "zrecord-narrow"
    codec = "narrow"
    compresses = True


STORES: list[type[Store]] = [
    ZrecordDefaults, ZrecordDefaultsIndexed, ZrecordRaw, ZrecordRawIndexed, ZrecordRawUnverified,
    ZrecordRawUnverifiedIndexed, ZrecordRawVerify, ZrecordRawVerifyIndexed, ZrecordZstd, ZrecordZstdict,
    ZrecordNarrow,
]

#: (verified, unverified) row pairs: the report's verified / unverified ratio per read form
VERIFY_PAIRS = [
    ("gather(out=)", ZrecordRawVerify.name, ZrecordRawUnverified.name),
    ("ds[idx]", ZrecordRawVerifyIndexed.name, ZrecordRawUnverifiedIndexed.name),
]


# ---------------------------------------------------------------------------
# loader


class LoaderxLoader(LoaderContender):
    """loaderx's DataLoader over a data store of one codec and a raw label store.
    With codec None, both stores are converted as the README's quick start
    does, with every default left alone (codec "auto"), and the loader is
    built with the quick start's arguments only (workers "auto" included).
    ``workers`` is the loader's own default ("auto") unless a row names one."""

    def __init__(self, name: str, codec: str | None, workers: str = "auto") -> None:
        self.name, self.codec, self.workers = name, codec, workers

    def available(self) -> str | None:
        return None if have_loaderx() else f"loaderx {loaderx_status()}"

    def prepare(self, ldir: str, data: np.ndarray, labels: np.ndarray) -> dict[str, Any]:
        from loaderx.converter import from_numpy
        log(f"[loader] writing {self.name} store ...")
        if self.codec is None:
            dpath = os.path.join(ldir, "data-defaults")
            lpath = os.path.join(ldir, "label-defaults")
            from_numpy(dpath, data)
            from_numpy(lpath, labels)
            from loaderx.dataset import DenseDataset
            with DenseDataset(dpath) as ds:
                choice = ds.stats()["codec_choice"]
            log(f"[loader] {self.name}: codec {choice['codec']}: {choice['reason']}")
            return {"data": dpath, "label": lpath, "defaults": True, "codec_choice": choice}
        dpath = os.path.join(ldir, f"data-{self.codec}")
        lpath = os.path.join(ldir, "label")
        if not os.path.exists(dpath):  # the thread and process rows of a codec read one store
            from_numpy(dpath, data, codec=self.codec)
        if not os.path.exists(lpath):  # shared by every loaderx variant
            from_numpy(lpath, labels, codec="zstd")
        return {"data": dpath, "label": lpath}

    def open(self, cfg: dict[str, Any]) -> Batches:
        import loaderx
        from loaderx.dataloader import DataLoader
        from loaderx.dataset import DenseDataset
        if cfg.get("threads"):
            loaderx.set_num_threads(cfg["threads"])
        data = DenseDataset(cfg["data"])
        label = DenseDataset(cfg["label"])
        transform = augment_batch if cfg["transform"] == "augment" else None
        if cfg.get("defaults"):  # the quick start's call: every other argument left alone
            dl = DataLoader({"data": data, "label": label}, batch_size=cfg["batch"], transform=transform)
        else:
            dl = DataLoader({"data": data, "label": label}, batch_size=cfg["batch"], transform=transform,
                            num_workers=cfg["workers"], sampler="cyclic", seed=0, workers=self.workers)
        it = iter(dl)

        def get() -> np.ndarray:
            return next(it)["data"]

        def settled() -> bool:
            """Whether workers="auto" has judged, and any move to processes is
            done and checked (kept, or undone)."""
            return bool(dl.stats()["workers_settled"])

        def mode() -> dict[str, Any]:
            s = dl.stats()
            return {k: s[k] for k in ("workers_chosen", "workers_reason", "workers_switch_step")}

        get.settled = settled  # type: ignore[attr-defined]
        get.mode = mode  # type: ignore[attr-defined]

        def close() -> None:
            dl.close()
            data.close()
            label.close()
        return get, close


LOADERS: list[LoaderContender] = [
    LoaderxLoader("loaderx", "zstd"),
    LoaderxLoader("loaderx-raw", "raw"),
    LoaderxLoader("loaderx (defaults)", None),
    # worker threads whatever the transform: what workers="auto" starts on
    LoaderxLoader("loaderx-raw-thread", "raw", workers="thread"),
    # worker processes, for a Python transform (spawned; batches come back in shared memory)
    LoaderxLoader("loaderx-process", "zstd", workers="process"),
    LoaderxLoader("loaderx-raw-process", "raw", workers="process"),
]
