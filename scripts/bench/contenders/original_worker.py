"""The original loaderx, driven in a process of its own.

The original Zig implementation (``loaderx==1.5.2`` on PyPI) has the same
import name as this project, so the benchmark never imports it next to the
project: ``contenders.original`` starts this script with ``python3 -P`` and
``PYTHONPATH`` set to the directory the wheel was installed into, and sends it
one JSON request per line on stdin. Each answer is one JSON line on the
protocol pipe (the process's original stdout; anything the library prints
goes to stderr). Every timing of the original is taken here, around its own
calls, so the pipe's round trips are outside the figures.

This file imports nothing from the benchmark package or from the project.
"""

from __future__ import annotations

import gc
import json
import os
import sys
import time
import traceback
from typing import Any

import numpy as np

# The protocol keeps the real stdout; fd 1 now points at stderr, so a print
# anywhere in the library cannot corrupt an answer.
_PROTO = os.fdopen(os.dup(1), "w", buffering=1)
os.dup2(2, 1)

_open: dict[str, Any] = {}       # key -> DenseDataset / RaggedDataset
_samplers: dict[str, Any] = {}   # key -> Sampler
_bufs: dict[tuple[int, ...], np.ndarray] = {}


def _buffer(nbytes: int) -> np.ndarray:
    """A private, pre-faulted destination of `nbytes` (reused across calls)."""
    key = (nbytes,)
    buf = _bufs.get(key)
    if buf is None:
        buf = np.empty(nbytes, np.uint8)
        buf.fill(0)
        _bufs[key] = buf
    return buf


def op_hello(_req: dict[str, Any]) -> dict[str, Any]:
    import loaderx
    import loaderx.zrecord
    return {"version": loaderx.__version__, "file": os.path.dirname(loaderx.__file__),
            "numpy": np.__version__, "python": sys.version.split()[0]}


def op_write_dense(req: dict[str, Any]) -> dict[str, Any]:
    """from_numpy of the array in req["npy"]; for zstd_dict, train_dict first
    (timed with the conversion, since the original never trains by itself)."""
    from loaderx.utils import from_numpy, train_dict
    arr = np.load(req["npy"])  # into memory, as the parent holds it
    gc.collect()
    t0 = time.perf_counter()
    d = None
    train_s = 0.0
    if req["codec"] == "zstd_dict":
        d = train_dict(arr, tier=req.get("tier"))
        train_s = time.perf_counter() - t0
    from_numpy(req["path"], arr, codec=req["codec"], dict_bytes=d)
    dt = time.perf_counter() - t0
    return {"seconds": dt, "train_s": train_s, "dict_bytes": len(d) if d else 0}


def op_write_ragged(req: dict[str, Any]) -> dict[str, Any]:
    """from_iterator over the records packed in req["npy"] with lengths req["lengths"]."""
    from loaderx.utils import from_iterator
    flat = np.load(req["npy"])
    lengths = np.load(req["lengths"])
    bounds = np.concatenate([[0], np.cumsum(lengths)]).tolist()
    recs = [flat[bounds[i]:bounds[i + 1]] for i in range(len(lengths))]
    gc.collect()
    t0 = time.perf_counter()
    from_iterator(req["path"], recs, dtype=flat.dtype, codec=req["codec"])
    return {"seconds": time.perf_counter() - t0}


def op_open(req: dict[str, Any]) -> dict[str, Any]:
    from loaderx.dataset import DenseDataset, RaggedDataset
    cls = RaggedDataset if req.get("kind") == "ragged" else DenseDataset
    ds = cls(req["path"])
    _open[req["key"]] = ds
    return {"len": len(ds)}


def op_close(req: dict[str, Any]) -> dict[str, Any]:
    ds = _open.pop(req["key"], None)
    if ds is not None:
        ds.close()
    return {}


def _dense_gather(ds: Any, idx: np.ndarray, dst: np.ndarray) -> None:
    """The original's fill-the-caller's-buffer path: Zrecord.gather(idxs, dst, offsets)."""
    offs = np.arange(len(idx), dtype=np.uint64) * np.uint64(ds._row_bytes)
    ds._store.gather(idx, dst, offs)


def op_gather_shared(req: dict[str, Any]) -> dict[str, Any]:
    """Gather req["idx"] into the shared file req["out"] (for the parent's checks)."""
    ds = _open[req["key"]]
    idx = np.asarray(req["idx"], dtype=np.uint64)
    dst = np.memmap(req["out"], dtype=np.uint8, mode="r+", shape=(len(idx) * ds._row_bytes,))
    _dense_gather(ds, idx, dst)
    dst.flush()
    del dst
    return {}


def op_timed(req: dict[str, Any]) -> dict[str, Any]:
    """One timed slice: gather batches (rows of req["npy"]) until req["budget"] seconds
    are spent; per-batch seconds, each around one Zrecord.gather call with the
    offsets made outside the timing (as the parent's store contenders do)."""
    ds = _open[req["key"]]
    batches = np.load(req["npy"]).astype(np.uint64)
    b = batches.shape[1]
    dst = _buffer(b * ds._row_bytes)
    offs = np.arange(b, dtype=np.uint64) * np.uint64(ds._row_bytes)
    store = ds._store
    times = []
    total = 0.0
    for k in range(min(len(batches), req["max"])):
        idx = batches[k]
        t0 = time.perf_counter()
        store.gather(idx, dst, offs)
        dt = time.perf_counter() - t0
        times.append(dt)
        total += dt
        if total >= req["budget"]:
            break
    return {"times": times}


def op_ragged_timed(req: dict[str, Any]) -> dict[str, Any]:
    """Ragged batches through the public read (RaggedDataset.__getitems__: one
    lengths call, one gather, one array per record)."""
    ds = _open[req["key"]]
    batches = np.load(req["npy"]).astype(np.uint64)
    times = []
    total = 0.0
    for k in range(min(len(batches), req["max"])):
        t0 = time.perf_counter()
        ds.__getitems__(batches[k])
        dt = time.perf_counter() - t0
        times.append(dt)
        total += dt
        if total >= req["budget"]:
            break
    return {"times": times}


def op_ragged_check(req: dict[str, Any]) -> dict[str, Any]:
    """Checksums of the records req["idx"] (the parent compares them with the source)."""
    ds = _open[req["key"]]
    recs = ds.__getitems__(np.asarray(req["idx"], dtype=np.uint64))
    return {"sums": [int(np.asarray(r, dtype=np.int64).sum()) for r in recs],
            "lens": [int(r.size) for r in recs]}


def op_sampler_make(req: dict[str, Any]) -> dict[str, Any]:
    from loaderx.sampler import Sampler
    mode = {"sequential": Sampler.Mode.SEQUENTIAL, "iid": Sampler.Mode.IID,
            "cyclic": Sampler.Mode.CYCLIC}[req["mode"]]
    s = Sampler(req["n"], req["batch"], mode, seed=0)
    got = s.next()
    if len(got) != req["batch"] or int(got.max()) >= req["n"]:
        raise RuntimeError(f"sampler returned {len(got)} indices, max {int(got.max())}")
    _samplers[req["key"]] = s
    return {}


def op_sampler_loop(req: dict[str, Any]) -> dict[str, Any]:
    """req["iters"] batches from the sampler's public next(); the loop's seconds."""
    nxt = _samplers[req["key"]].next
    t0 = time.perf_counter()
    for _ in range(req["iters"]):
        nxt()
    return {"seconds": time.perf_counter() - t0}


def op_maintain(req: dict[str, Any]) -> dict[str, Any]:
    """Delete the records in req["npy"] from the dense store at req["path"], then
    compact it; each call timed on its own, with the store's stats around them."""
    from loaderx.dataset import DenseDataset
    idx = np.load(req["npy"]).astype(np.uint64)
    ds = DenseDataset(req["path"])
    try:
        n0 = len(ds)
        t0 = time.perf_counter()
        ds.delete(idx)
        t_del = time.perf_counter() - t0
        mid = ds.stats()
        t0 = time.perf_counter()
        ds.compact()
        t_cmp = time.perf_counter() - t0
        after = ds.stats()
        n1 = len(ds)
    finally:
        ds.close()
    return {"delete_s": t_del, "compact_s": t_cmp, "len_before": n0, "len_after": n1,
            "chunk_bytes_before": int(mid["chunk_bytes"]), "chunk_bytes_after": int(after["chunk_bytes"]),
            "live_bytes": int(after["live_bytes"])}


OPS = {name[3:]: fn for name, fn in globals().items() if name.startswith("op_")}


def main() -> None:
    for line in sys.stdin:
        if not line.strip():
            continue
        req = json.loads(line)
        if req.get("op") == "quit":
            break
        try:
            ans = {"ok": True, **OPS[req["op"]](req)}
        except Exception as e:
            ans = {"ok": False, "error": f"{type(e).__name__}: {e}",
                   "trace": traceback.format_exc()[-1500:]}
        _PROTO.write(json.dumps(ans) + "\n")
        _PROTO.flush()


if __name__ == "__main__":
    main()
