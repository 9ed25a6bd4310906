"""The ``loaderx`` command line: inspect, check, convert and maintain stores.

It stays one file past 700 lines: one small function per command plus their
shared text and JSON output; each command is short, and they read best side
by side.

Run as ``loaderx COMMAND ...`` (the console script) or ``python -m loaderx
COMMAND ...``. Every command prints readable text, or one JSON document with
``--json`` (placed before or after the command). Commands:

``info PATH``
    kind, dtype, shape, length, codec, dictionary size, on-disk and logical
    bytes, compression ratio and format version of a store (or of every
    stream of a multi-stream directory); of a sharded dataset, its shard
    count and the shards' summed figures.
``verify PATH``
    a full integrity scan; lists what is damaged (every shard of a sharded
    dataset, its faults at the dataset's global indices).
``convert SRC DST``
    from ``.npy`` (memory-mapped), ``.npz``, a directory of ``.npy`` files,
    Parquet, Arrow IPC / Feather files or a saved Hugging Face dataset.
``compact PATH`` / ``delete PATH --indices ...``
    reclaim space / delete records.
``head PATH [-n N]``
    print the first records.
``push PATH URL``
    upload a store, multi-stream directory or sharded dataset to
    ``s3://bucket/prefix`` (manifest last) and read every object back to
    check it (``--no-verify`` skips that).
``cache warm URL`` / ``cache info`` / ``cache clear [URL]``
    fetch a dataset in object storage into the local cache (checking every
    byte), list what the cache holds, or remove cached datasets no process
    has open.
``bench``
    a quick performance check on this machine.

``info``, ``verify`` and ``head`` take an ``s3://bucket/prefix`` URL as well
as a path; they read through the local cache (``--cache-dir``,
``--cache-limit``; default ``$LOADERX_CACHE_DIR`` or ``~/.cache/loaderx``),
``info`` fetches the record tables (its byte sums cover every entry), and
``verify`` checks every table page and every record the server holds.

Exit codes (:data:`EXIT_CODES`): 0 success; 1 ``verify`` found damage; 2 a
usage error, or a command this build cannot run; 3 the input is at fault (no
store at the path, a source the store cannot represent, an index out of
range, ...); 4 the store is locked by another writer or damaged beyond
opening; 5 a request to object storage failed (no bucket, refused
credentials, server unreachable); 130 interrupted with Ctrl-C.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from loaderx._args import CONVERT_CODECS
from loaderx._progress import Progress
from loaderx.errors import CorruptStoreError, RemoteError, StoreExistsError, StoreLockedError
from loaderx.io.arrow import MSDataset, arrow_source, from_arrow, is_multistream
from loaderx.remote import _cache, _tree, upload
from loaderx.store import _native, shards
from loaderx.store.converter import DICT_TIERS, from_numpy
from loaderx.store.dataset import DenseDataset, RaggedDataset, verify_sharded
from loaderx.store.zrecord import Zrecord

__all__ = ["main", "EXIT_CODES"]

EXIT_OK = 0
EXIT_DAMAGED = 1
EXIT_USAGE = 2
EXIT_BAD_INPUT = 3
EXIT_STORE = 4
EXIT_REMOTE = 5
EXIT_INTERRUPTED = 130

#: What each exit status means.
EXIT_CODES = {
    EXIT_OK: "success",
    EXIT_DAMAGED: "verify found damage",
    EXIT_USAGE: "usage error, or a command this build cannot run",
    EXIT_BAD_INPUT: "the input is at fault (no store at the path, an unsupported source, a bad index)",
    EXIT_STORE: "the store is locked by another writer or too damaged to open",
    EXIT_REMOTE: "a request to object storage failed (no bucket, refused credentials, unreachable)",
    EXIT_INTERRUPTED: "interrupted (Ctrl-C)",
}


class CommandError(Exception):
    """A failure to report on stderr with an exit status."""

    def __init__(self, message: str, status: int = EXIT_BAD_INPUT) -> None:
        super().__init__(message)
        self.status = status


# ---------------------------------------------------------------------------
# opening what a path holds


def _store_kind(path: str) -> str:
    """``"dense"``, ``"ragged"``, ``"raw"`` (a Zrecord without schema) or
    ``"multistream"``, for a store or a sharded dataset (or one stream of a
    sharded multi-stream one, a path that need not exist); raises
    CommandError when ``path`` holds no store."""
    resolved = shards.resolve(path)
    if resolved is not None:
        _, stream, m = resolved
        return "multistream" if m.layout == "streams" and not stream else m.streams[stream].kind
    if not os.path.exists(path):
        raise CommandError(f"{path}: no such file or directory")
    if not os.path.isdir(path):
        raise CommandError(f"{path}: not a loaderx store (a store is a directory)")
    if os.path.exists(os.path.join(path, "meta.zr")):
        if not os.path.exists(os.path.join(path, "schema.msgpack")):
            return "raw"
        try:
            kind, _, _ = _native.schema_read(path)
        except (ValueError, CorruptStoreError) as e:
            raise CommandError(f"{path}: unreadable schema: {e}", EXIT_STORE) from None
        return kind
    if is_multistream(path):
        return "multistream"
    raise CommandError(f"{path}: not a loaderx store (no meta.zr, and no stores inside)")


def _open(path: str, kind: str, writable: bool = False) -> Any:
    if kind == "dense":
        return DenseDataset(path, writable=writable)
    if kind == "ragged":
        return RaggedDataset(path, writable=writable)
    return Zrecord(path, readonly=not writable)


def _format_version(path: str, stats: dict[str, Any]) -> int | None:
    """The on-disk format version: from the store's stats when this build
    reports it, else from byte 4 of the ``meta.zr`` header."""
    for key in ("format_version", "version"):
        if key in stats:
            return int(stats[key])
    try:
        with open(os.path.join(path, "meta.zr"), "rb") as f:
            head = f.read(5)
    except OSError:
        return None
    return head[4] if len(head) == 5 and head[:4] == b"ZREC" else None


# ---------------------------------------------------------------------------
# commands


def _store_info(path: str, kind: str) -> dict[str, Any]:
    with _open(path, kind) as s:
        stats = s.stats()
        info: dict[str, Any] = {"path": path, "kind": kind, "length": len(s), "codec": s.codec}
        if kind in ("dense", "ragged"):
            info["dtype"] = str(s.dtype)
            info["item_shape"] = list(s.item_shape)
            if kind == "dense":
                info["shape"] = list(s.shape)
    logical = int(stats["logical_bytes"])
    on_disk = int(stats["chunk_bytes"])
    info.update(
        dict_bytes=int(stats["dict_bytes"]),
        disk_bytes=on_disk,
        live_bytes=int(stats["live_bytes"]),
        logical_bytes=logical,
        ratio=round(logical / on_disk, 3) if on_disk else None,
        chunks=int(stats["chunks"]),
        format_version=_format_version(path, stats),
        codec_choice=stats.get("codec_choice"),
        checksummed=bool(stats.get("checksummed", False)),
        verified_reads=bool(stats.get("verified", False)),
    )
    if "shards" in stats:  # a sharded dataset: its figures are the shards' sums
        info["shards"] = int(stats["shards"])
    return info


def _reads_text(info: dict[str, Any]) -> str:
    """What a gather through a handle opened with the defaults checks."""
    if not info.get("checksummed"):
        return ("unchecked: this format version has no checksums; a writable open and "
                "Zrecord.upgrade() rewrite it to the checksummed one")
    if info.get("verified_reads"):
        return "every record checked against its CRC-32C on each gather (set_verify(False) opts out)"
    return "compressed records checked on each gather, raw ones not (verification turned off)"


def _human(n: int) -> str:
    x = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if x < 1024 or unit == "TiB":
            return f"{int(x)} B" if unit == "B" else f"{x:,.1f} {unit}"
        x /= 1024
    return f"{n} B"


def _info_text(info: dict[str, Any]) -> list[str]:
    lines = [f"{info['path']}"]
    lines.append(f"  kind            {info['kind']}")
    if "dtype" in info:
        lines.append(f"  dtype           {info['dtype']}")
        if "shape" in info:
            lines.append(f"  shape           {tuple(info['shape'])}")
        else:
            lines.append(f"  item shape      (L, {', '.join(map(str, info['item_shape']))})".replace(", )", ")"))
    lines.append(f"  length          {info['length']:,}")
    if "shards" in info:
        lines.append(f"  shards          {info['shards']:,}")
    codec = info["codec"]
    if info["dict_bytes"]:
        codec += f" (dictionary {_human(info['dict_bytes'])})"
    lines.append(f"  codec           {codec}")
    choice = info.get("codec_choice")
    if choice:
        lines.append(f"  chosen by auto  {choice.get('reason', '')}")
        if choice.get("regime"):
            lines.append(f"  auto regime     {choice['regime']}: {choice.get('regime_reason', '')}")
        figures = [
            f"{name} {c['ratio']:.2f}x at {c['decode_mib_s']:,.0f} MiB/s per core"
            for name, c in choice.get("candidates", {}).items() if "ratio" in c
        ]
        lines.append(f"  auto sample     {choice.get('sample_records', 0):,} records, "
                     f"{_human(int(choice.get('sample_bytes', 0)))}" + "".join(f"; {f}" for f in figures))
    lines.append(f"  on disk         {_human(info['disk_bytes'])} in {info['chunks']} chunk file(s)")
    lines.append(f"  logical         {_human(info['logical_bytes'])}")
    ratio = info["ratio"]
    lines.append(f"  ratio           {ratio:.2f}x" if ratio is not None else "  ratio           -")
    version = info["format_version"]
    lines.append(f"  format version  {version if version is not None else 'unknown'}")
    lines.append(f"  reads           {_reads_text(info)}")
    return lines


#: trees opened for URLs by this command, kept open until it ends
_TREES: list[Any] = []


def _storage(args: argparse.Namespace) -> dict[str, Any]:
    return {k: getattr(args, k) for k in ("endpoint_url", "profile", "region") if getattr(args, k, None) is not None}


def _cache_options(args: argparse.Namespace) -> _cache.CacheOptions:
    limit = getattr(args, "cache_limit", None)
    return _cache.CacheOptions(dir=getattr(args, "cache_dir", None),
                               limit=None if limit is None else _cache.parse_size(limit, "--cache-limit"))


def _local(args: argparse.Namespace) -> str:
    """``args.path``, or for an ``s3://`` URL the path of its mirror in the
    local cache (the datasets opened on it read through the cache)."""
    if not _cache.is_url(args.path):
        return args.path
    tree, local = _tree.open_tree(args.path, _cache_options(args), _storage(args), holder=_TREES)
    _TREES.append(tree)
    return local


def _shown(args: argparse.Namespace, local: str, path: str) -> str:
    """``path`` (inside the mirror ``local`` of a URL) as the user named it."""
    if local == args.path:
        return path
    rel = os.path.relpath(path, local)
    return args.path if rel == "." else f"{args.path.rstrip('/')}/{rel}"


def cmd_info(args: argparse.Namespace) -> tuple[int, Any, list[str]]:
    local = _local(args)
    if local != args.path:
        code, doc, lines = cmd_info(argparse.Namespace(**{**vars(args), "path": local}))
        text = json.dumps(doc).replace(json.dumps(local)[1:-1], args.path.rstrip("/"))
        return code, json.loads(text), [line.replace(local, args.path.rstrip("/")) for line in lines]
    kind = _store_kind(args.path)
    if kind == "multistream":
        with MSDataset(args.path) as ms:
            names = list(ms)
        infos = [_store_info(os.path.join(args.path, n), _store_kind(os.path.join(args.path, n))) for n in names]
        doc = {"path": args.path, "kind": "multistream", "streams": dict(zip(names, infos))}
        lines = [f"{args.path}: {len(names)} aligned streams ({', '.join(names)})"]
        for name, info in zip(names, infos):
            lines.append("")
            lines.extend(_info_text({**info, "path": f"[{name}] {info['path']}"}))
        return EXIT_OK, doc, lines
    info = _store_info(args.path, kind)
    return EXIT_OK, info, _info_text(info)


def _fault_fields(item: Any) -> dict[str, Any]:
    """``file``, ``index`` and ``what`` of one fault of a verify report
    (attributes, or keys of a mapping)."""
    if isinstance(item, dict):
        return {k: item.get(k) for k in ("file", "index", "what")}
    return {k: getattr(item, k, None) for k in ("file", "index", "what")}


def cmd_verify(args: argparse.Namespace) -> tuple[int, Any, list[str]]:
    local = _local(args)
    kind = _store_kind(local)
    if not hasattr(Zrecord, "verify"):
        raise CommandError("this build cannot verify stores (Zrecord.verify is missing)", EXIT_USAGE)
    paths = [local]
    if kind == "multistream":
        with MSDataset(local) as ms:
            paths = [os.path.join(local, n) for n in ms]
    results: dict[str, dict[str, Any]] = {}
    faults: list[dict[str, Any]] = []
    for p in paths:
        bar = Progress(f"verify {p}", None, None, enabled=args.progress)
        try:
            if local != args.path:  # every page of record bytes fetched or read from the cache, checked
                sk = _store_kind(p)
                if sk not in ("dense", "ragged"):
                    raise CommandError(f"{_shown(args, local, p)}: a store without a schema cannot be read "
                                       "from object storage")
                with _open(p, sk) as ds:
                    report = ds.verify()
                    n = len(ds)
            elif shards.resolve(p) is not None:  # every shard scanned, faults at global indices
                report = verify_sharded(p)
                n = report.records
            else:
                with Zrecord(p, readonly=True) as zr:
                    report = zr.verify()
                    n = len(zr)
        finally:
            bar.close()
        found = [{"store": _shown(args, local, p), **_fault_fields(item)} for item in report]
        results[_shown(args, local, p)] = {"records": n, "ok": bool(report.ok) if hasattr(report, "ok") else not found,
                      "faults": found}
        faults.extend(found)
    ok = all(r["ok"] for r in results.values())
    lines = []
    for p, r in results.items():
        if r["ok"]:
            lines.append(f"{p}: OK ({r['records']:,} records checked)")
        else:
            lines.append(f"{p}: DAMAGED, {len(r['faults'])} fault(s)")
            for f in r["faults"]:
                where = f["file"] if f["index"] is None else f"{f['file']} record {f['index']}"
                lines.append(f"  {where}: {f['what']}")
    return (EXIT_OK if ok else EXIT_DAMAGED), {"ok": ok, "stores": results}, lines


def _npy_paths(src: str) -> list[Path]:
    return sorted(p for p in Path(src).iterdir() if p.suffix == ".npy" and p.is_file())


def _stream_name(name: str, src: str) -> str:
    if not name or name in (".", "..") or "/" in name or "\0" in name or name.startswith("."):
        raise CommandError(f"{src}: array {name!r} cannot name a stream directory")
    return name


def _convert_arrays(items: list[tuple[str, Any]], dst: str, args: argparse.Namespace, src: str) -> dict[str, Any]:
    """Write several named arrays as aligned dense streams under ``dst``."""
    lengths = {name: (int(a.shape[0]) if a.ndim else None) for name, a in items}
    if len(set(lengths.values())) != 1 or None in lengths.values():
        raise CommandError(f"{src}: the arrays are not aligned (lengths along axis 0: {lengths})")
    if os.path.exists(dst) and (not os.path.isdir(dst) or os.listdir(dst)) and not args.overwrite:
        raise CommandError(f"{dst}: already exists and is not empty; pass --overwrite to replace it")
    made = not os.path.exists(dst)
    os.makedirs(dst, exist_ok=True)
    try:
        for name, a in items:
            from_numpy(os.path.join(dst, _stream_name(name, src)), a, args.codec, dict_tier=args.dict_tier,
                       progress=args.progress, overwrite=args.overwrite)
    except KeyboardInterrupt:
        raise
    except BaseException:
        if made:
            _remove_tree(dst)
        raise
    return {"streams": [n for n, _ in items], "length": next(iter(lengths.values()))}


def _remove_tree(path: str) -> None:
    import shutil

    shutil.rmtree(path, ignore_errors=True)


def cmd_convert(args: argparse.Namespace) -> tuple[int, Any, list[str]]:
    src, dst = args.src, args.dst
    if not os.path.exists(src):
        raise CommandError(f"{src}: no such file or directory")
    columns = args.columns.split(",") if args.columns else None
    t0 = time.perf_counter()
    if src.endswith(".npy"):
        arr = np.load(src, mmap_mode="r", allow_pickle=False)
        from_numpy(dst, arr, args.codec, dict_tier=args.dict_tier, progress=args.progress, overwrite=args.overwrite)
        what: dict[str, Any] = {"kind": "dense", "length": int(arr.shape[0]) if arr.ndim else 0}
    elif src.endswith(".npz"):
        with np.load(src, allow_pickle=False) as z:
            names = [n for n in z.files if columns is None or n in columns]
            what = _convert_arrays([(n, z[n]) for n in names], dst, args, src)
    elif os.path.isdir(src) and _npy_paths(src):
        paths = [p for p in _npy_paths(src) if columns is None or p.stem in columns]
        items = [(p.stem, np.load(p, mmap_mode="r", allow_pickle=False)) for p in paths]
        what = _convert_arrays(items, dst, args, src)
    else:
        try:
            source = arrow_source(src)
        except ValueError as e:
            raise CommandError(str(e)) from None
        ms = from_arrow(dst, source, columns=columns, codec=args.codec, dict_tier=args.dict_tier,
                        progress=args.progress, overwrite=args.overwrite)
        with ms:
            what = {"streams": list(ms), "length": ms.num_records}
    seconds = time.perf_counter() - t0
    doc = {"src": src, "dst": dst, "codec": args.codec, "seconds": round(seconds, 3), **what}
    streams = f" ({len(what['streams'])} streams: {', '.join(what['streams'])})" if "streams" in what else ""
    lines = [f"{src} -> {dst}: {what['length']:,} records{streams} in {seconds:.2f} s"]
    if args.codec == "auto":
        stream_names = what.get("streams")
        stores = {n: os.path.join(dst, n) for n in stream_names} if stream_names else {"": dst}
        chosen = {n: _native.schema_codec_choice(p) for n, p in stores.items()}
        doc["chosen"] = {n: (c or {}).get("codec") for n, c in chosen.items()} if stream_names else (
            (chosen[""] or {}).get("codec"))
        for n, c in chosen.items():
            if c:
                lines.append(f"  {n + ': ' if n else ''}codec {c['codec']} ({c['reason']})")
    return EXIT_OK, doc, lines


def _refuse_sharded(path: str, op: str) -> None:
    if shards.resolve(path) is not None:
        raise CommandError(f"{path}: a sharded dataset is read-only, so it cannot {op}; write new shards and "
                           "commit them (loaderx.store.shards) instead")


def cmd_compact(args: argparse.Namespace) -> tuple[int, Any, list[str]]:
    _refuse_sharded(args.path, "compact")
    kind = _store_kind(args.path)
    if kind == "multistream":
        raise CommandError(f"{args.path}: a multi-stream directory; compact each stream's store")
    with Zrecord(args.path) as zr:
        before = zr.stats()["chunk_bytes"]
        reclaimed = zr.compact(progress=args.progress)
        after = zr.stats()["chunk_bytes"]
    doc = {"path": args.path, "reclaimed_bytes": reclaimed, "disk_bytes_before": before, "disk_bytes": after}
    return EXIT_OK, doc, [f"{args.path}: reclaimed {_human(reclaimed)} ({_human(before)} -> {_human(after)})"]


def cmd_delete(args: argparse.Namespace) -> tuple[int, Any, list[str]]:
    _refuse_sharded(args.path, "delete records")
    kind = _store_kind(args.path)
    store: Any = MSDataset(args.path, writable=True) if kind == "multistream" else Zrecord(args.path)

    def records() -> int:
        return store.num_records if kind == "multistream" else len(store)

    with store:
        before = records()
        try:
            store.delete(args.indices)
        except IndexError as e:
            raise CommandError(f"{args.path}: {e}") from None
        n = records()
    doc = {"path": args.path, "deleted": before - n, "length": n}
    return EXIT_OK, doc, [f"{args.path}: deleted {doc['deleted']} record(s), {n:,} left"]


def _jsonable(a: Any) -> Any:
    if isinstance(a, bytes):
        return a.hex()
    a = np.asarray(a)
    if a.dtype.kind not in "biufc":  # ml_dtypes: show the values as floats / ints
        a = a.astype(np.float64) if "float" in a.dtype.name else a.astype(np.int64)
    if a.dtype.kind == "c":
        return [[z.real, z.imag] for z in a.reshape(-1).tolist()]
    return a.tolist()


def _text_of(a: Any) -> str:
    if isinstance(a, bytes):
        return repr(a[:64]) + (f"... ({len(a)} bytes)" if len(a) > 64 else "")
    return np.array2string(np.asarray(a), threshold=32, edgeitems=4, max_line_width=120)


def cmd_head(args: argparse.Namespace) -> tuple[int, Any, list[str]]:
    if args.n < 0:
        raise CommandError(f"-n must not be negative, got {args.n}", EXIT_USAGE)
    path = _local(args)
    kind = _store_kind(path)
    lines: list[str] = []
    if kind == "multistream":
        with MSDataset(path) as ms:
            k = min(args.n, ms.num_records)
            stores = {name: ms[name] for name in ms}
            recs = {name: [s[i] for i in range(k)] for name, s in stores.items()}
        doc: Any = [{name: _jsonable(recs[name][i]) for name in recs} for i in range(k)]
        for i in range(k):
            lines.append(f"[{i}]")
            lines.extend(f"  {name}: {_text_of(recs[name][i])}" for name in recs)
        return EXIT_OK, doc, lines
    with _open(path, kind) as s:
        k = min(args.n, len(s))
        rows = [s[i] for i in range(k)]
    for i, r in enumerate(rows):
        text = _text_of(r)
        lines.append(f"[{i}] " + text.replace("\n", "\n    "))
    return EXIT_OK, [_jsonable(r) for r in rows], lines


def _bench_script() -> Path | None:
    """``scripts/bench`` (a package) or ``scripts/bench.py`` of a source
    checkout, if it has a quick mode."""
    root = Path(__file__).resolve().parent.parent / "scripts"
    for p in (root / "bench.py", root / "bench" / "__main__.py"):
        if p.is_file() and "--quick" in p.read_text(errors="replace"):
            return p if p.name == "bench.py" else p.parent
    return None


def _best(fn: Any, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def _builtin_bench(records: int, record_bytes: int, batch: int) -> dict[str, Any]:
    """Gather and sampling against NumPy on the same data, in one run."""
    from loaderx.loader.sampler import Sampler

    rng = np.random.default_rng(0)
    data = rng.integers(0, 256, size=(records, record_bytes), dtype=np.uint8)
    steps = 50
    idx = [np.sort(rng.integers(0, records, size=batch)) for _ in range(steps)]
    out = np.empty((batch, record_bytes), dtype=np.uint8)
    result: dict[str, Any] = {"records": records, "record_bytes": record_bytes, "batch": batch}
    with tempfile.TemporaryDirectory(prefix="loaderx-bench-") as tmp:
        path = os.path.join(tmp, "store")
        from_numpy(path, data, "raw", progress=False)
        with DenseDataset(path) as ds:
            ds.gather(idx[0], out=out)  # warm the mapping

            def lx() -> None:
                for i in idx:
                    ds.gather(i, out=out)

            def npy() -> None:
                for i in idx:
                    np.take(data, i, axis=0, out=out)

            t_lx, t_np = _best(lx, 5), _best(npy, 5)
    nbytes = steps * batch * record_bytes
    result["gather"] = {
        "loaderx_gib_s": round(nbytes / t_lx / 2**30, 3),
        "numpy_take_gib_s": round(nbytes / t_np / 2**30, 3),
        "ratio_loaderx_over_numpy": round(t_np / t_lx, 3),
    }
    sampler = Sampler("iid", n=records, batch_size=batch, seed=1)
    buf = np.empty(batch, dtype=np.int64)
    gen = np.random.default_rng(1)
    draws = 2000

    def lx_sample() -> None:
        for s in range(draws):
            sampler(s, out=buf)

    def np_sample() -> None:
        for _ in range(draws):
            gen.integers(0, records, size=batch)

    t_ls, t_ns = _best(lx_sample, 3), _best(np_sample, 3)
    result["sampler"] = {
        "loaderx_us_per_batch": round(t_ls / draws * 1e6, 2),
        "numpy_us_per_batch": round(t_ns / draws * 1e6, 2),
        "ratio_loaderx_over_numpy": round(t_ns / t_ls, 3),
    }
    return result


def cmd_bench(args: argparse.Namespace) -> tuple[int, Any, list[str]]:
    script = None if args.builtin else _bench_script()
    if script is not None:
        cmd = [sys.executable, str(script), "--quick"]
        status = subprocess.call(cmd)
        return status, {"command": cmd, "status": status}, []
    r = _builtin_bench(args.records, args.record_bytes, args.batch)
    g, s = r["gather"], r["sampler"]
    lines = [
        f"built-in check: {r['records']:,} records of {r['record_bytes']} B, batches of {r['batch']} "
        "(best of 5; ratios > 1 favour loaderx)",
        f"  gather   loaderx {g['loaderx_gib_s']:.2f} GiB/s   numpy take {g['numpy_take_gib_s']:.2f} GiB/s"
        f"   ratio {g['ratio_loaderx_over_numpy']:.2f}",
        f"  sampler  loaderx {s['loaderx_us_per_batch']:.1f} us/batch  numpy rng {s['numpy_us_per_batch']:.1f} us/batch"
        f"   ratio {s['ratio_loaderx_over_numpy']:.2f}",
    ]
    return EXIT_OK, r, lines


def cmd_cache_warm(args: argparse.Namespace) -> tuple[int, Any, list[str]]:
    local = _local(args)
    kind = _store_kind(local)
    paths = [local]
    if kind == "multistream":
        with MSDataset(local) as ms:
            paths = [os.path.join(local, n) for n in ms]
    t0 = time.perf_counter()
    fetched, stats = 0, {}
    for p in paths:
        sk = _store_kind(p)
        if sk not in ("dense", "ragged"):
            raise CommandError(f"{_shown(args, local, p)}: a store without a schema cannot be read from object storage")
        with _open(p, sk) as ds:
            fetched += ds.warm()
            stats = ds.cache_stats()
    took = time.perf_counter() - t0
    doc = {"url": args.path, "fetched_bytes": fetched, "seconds": round(took, 3), "cache": stats}
    rate = f", {fetched / took / 1e6:,.0f} MB/s" if took > 0 and fetched else ""
    lines = [f"{args.path}: fetched {_human(fetched)} in {took:.1f} s{rate}; the cache holds "
             f"{_human(stats.get('cache_used_bytes', 0))} of its {_human(stats.get('cache_limit_bytes', 0))} limit"]
    return EXIT_OK, doc, lines


def cmd_cache_info(args: argparse.Namespace) -> tuple[int, Any, list[str]]:
    opts = _cache_options(args)
    entries = _cache.describe(opts.root)
    total = sum(e["bytes"] for e in entries)
    doc = {"dir": opts.root, "bytes": total, "datasets": entries}
    lines = [f"{opts.root}: {_human(total)} of pages (record bytes and record tables) in {len(entries)} "
             "cached dataset version(s)"]
    for e in entries:
        state = "open" if e["open"] else "idle"
        lines.append(f"  {e['url']}  {_human(e['bytes'])}  ({state}, {e['generation']})")
    return EXIT_OK, doc, lines


def cmd_cache_clear(args: argparse.Namespace) -> tuple[int, Any, list[str]]:
    opts = _cache_options(args)
    removed, busy = _cache.clear(opts.root, args.url)
    doc = {"dir": opts.root, "removed": removed, "in_use": busy}
    lines = [f"{opts.root}: removed {len(removed)} cached dataset version(s)"]
    lines += [f"  kept {u} (open in a process)" for u in busy]
    return EXIT_OK, doc, lines


def cmd_push(args: argparse.Namespace) -> tuple[int, Any, list[str]]:
    if not os.path.exists(args.path):
        raise CommandError(f"{args.path}: no such file or directory")
    options = {k: getattr(args, k) for k in ("endpoint_url", "profile", "region") if getattr(args, k) is not None}
    t0 = time.perf_counter()
    files = upload.push(args.path, args.url, verify=not args.no_verify, **options)
    took = time.perf_counter() - t0
    total = sum(f.size for f in files)
    checked = "" if args.no_verify else ", each read back and checked"
    doc = {"url": args.url, "files": [{"key": f.key, "size": f.size} for f in files], "bytes": total,
           "verified": not args.no_verify, "seconds": round(took, 3)}
    lines = [f"{args.path} -> {args.url}: {len(files)} files, {total:,} bytes in {took:.1f} s{checked}"]
    return EXIT_OK, doc, lines


# ---------------------------------------------------------------------------
# argument parsing


def _index(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer index: {text!r}") from None


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``loaderx`` command."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--json", action="store_true", default=argparse.SUPPRESS,
                        help="print one JSON document instead of text")
    codes = "\n".join(f"  {k:<4} {v}" for k, v in EXIT_CODES.items())
    ap = argparse.ArgumentParser(
        prog="loaderx",
        description="Inspect, check, convert and maintain loaderx stores.",
        epilog=f"exit status:\n{codes}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        parents=[common],
    )
    progress = ap.add_mutually_exclusive_group()
    progress.add_argument("--progress", dest="progress", action="store_const", const=True, default=None,
                          help="always draw progress lines (default: only on a terminal)")
    progress.add_argument("--no-progress", dest="progress", action="store_const", const=False,
                          help="never draw progress lines")
    sub = ap.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    s3 = argparse.ArgumentParser(add_help=False)
    s3.add_argument("--endpoint-url", default=None,
                    help="an S3-compatible endpoint (default: AWS_ENDPOINT_URL, the profile)")
    s3.add_argument("--profile", default=None, help="a profile of the AWS shared files (default: AWS_PROFILE)")
    s3.add_argument("--region", default=None, help="the bucket's region (default: AWS_REGION, the profile)")
    s3.add_argument("--cache-dir", default=None, help="the local cache of s3:// datasets "
                    "(default: LOADERX_CACHE_DIR, else ~/.cache/loaderx)")
    s3.add_argument("--cache-limit", default=None, help="bytes of pages (record bytes and record tables) the "
                    "cache keeps, such as 50GiB (default: LOADERX_CACHE_LIMIT, else half the free space)")

    p = sub.add_parser("info", parents=[common, s3],
                       help="describe a store: kind, dtype, shape, size, codec, ratio (a path or s3:// URL)")
    p.add_argument("path")
    p.set_defaults(func=cmd_info)

    p = sub.add_parser("verify", parents=[common, s3],
                       help="scan a store for damage (exit 1 if damaged; a path or s3:// URL)")
    p.add_argument("path")
    p.set_defaults(func=cmd_verify)

    p = sub.add_parser("cache", parents=[common], help="the local cache of datasets in object storage")
    csub = p.add_subparsers(dest="cache_command", metavar="ACTION")
    csub.required = True
    c = csub.add_parser("warm", parents=[common, s3], help="fetch a dataset at an s3:// URL into the cache")
    c.add_argument("path", metavar="url")
    c.set_defaults(func=cmd_cache_warm)
    c = csub.add_parser("info", parents=[common, s3], help="what the cache holds, per dataset")
    c.set_defaults(func=cmd_cache_info)
    c = csub.add_parser("clear", parents=[common, s3], help="remove cached datasets no process has open")
    c.add_argument("url", nargs="?", default=None, help="only this dataset (default: all)")
    c.set_defaults(func=cmd_cache_clear)

    p = sub.add_parser("convert", parents=[common],
                       help="convert .npy, .npz, a directory of .npy, Parquet, Arrow or a saved HF dataset")
    p.add_argument("src")
    p.add_argument("dst")
    p.add_argument("--codec", choices=CONVERT_CODECS, default="auto",
                   help="auto (default) measures a sample and keeps raw unless compression pays")
    p.add_argument("--dict-tier", choices=DICT_TIERS, default="balanced",
                   help="dictionary training effort for --codec zstd_dict")
    p.add_argument("--columns", default=None, help="comma-separated columns / array names to convert")
    p.add_argument("--overwrite", action="store_true", help="replace a previous store at DST")
    p.set_defaults(func=cmd_convert)

    p = sub.add_parser("compact", parents=[common], help="reclaim the space of deleted records")
    p.add_argument("path")
    p.set_defaults(func=cmd_compact)

    p = sub.add_parser("delete", parents=[common], help="delete records (the last ones move into the holes)")
    p.add_argument("path")
    p.add_argument("--indices", type=_index, nargs="+", required=True, metavar="I")
    p.set_defaults(func=cmd_delete)

    p = sub.add_parser("head", parents=[common, s3], help="print the first records (a path or s3:// URL)")
    p.add_argument("path")
    p.add_argument("-n", type=int, default=5, help="how many records (default 5)")
    p.set_defaults(func=cmd_head)

    p = sub.add_parser("push", parents=[common],
                       help="upload a store, multi-stream directory or sharded dataset to s3://bucket/prefix")
    p.add_argument("path")
    p.add_argument("url", help="s3://bucket/prefix")
    p.add_argument("--no-verify", action="store_true", help="do not read the objects back to check them")
    p.add_argument("--endpoint-url", default=None,
                   help="an S3-compatible endpoint (default: AWS_ENDPOINT_URL, the profile)")
    p.add_argument("--profile", default=None, help="a profile of the AWS shared files (default: AWS_PROFILE)")
    p.add_argument("--region", default=None, help="the bucket's region (default: AWS_REGION, the profile)")
    p.set_defaults(func=cmd_push)

    p = sub.add_parser("bench", parents=[common], help="a quick gather and sampler check against NumPy")
    p.add_argument("--builtin", action="store_true", help="run the built-in check even in a source checkout")
    p.add_argument("--records", type=int, default=20_000)
    p.add_argument("--record-bytes", type=int, default=3072)
    p.add_argument("--batch", type=int, default=256)
    p.set_defaults(func=cmd_bench)
    return ap


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line with ``argv`` (``sys.argv[1:]`` by default) and
    return the exit status."""
    ap = build_parser()
    args = ap.parse_args(argv)
    as_json = getattr(args, "json", False)
    try:
        status, doc, lines = args.func(args)
    except KeyboardInterrupt:
        print("loaderx: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except CommandError as e:
        return _fail(str(e), e.status, as_json)
    except StoreLockedError as e:
        return _fail(str(e), EXIT_STORE, as_json)
    except CorruptStoreError as e:
        return _fail(str(e), EXIT_STORE, as_json)
    except RemoteError as e:
        return _fail(str(e), EXIT_REMOTE, as_json)
    except (FileNotFoundError, NotADirectoryError, StoreExistsError, ValueError, TypeError, IndexError,
            ImportError) as e:
        return _fail(str(e), EXIT_BAD_INPUT, as_json)
    try:
        if as_json:
            print(json.dumps(doc, indent=2, default=str))
        else:
            for line in lines:
                print(line)
        sys.stdout.flush()
    except BrokenPipeError:  # the reader went away (``loaderx head ... | head -1``)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    return status


def _fail(message: str, status: int, as_json: bool) -> int:
    print(f"loaderx: error: {message}", file=sys.stderr)
    if as_json:
        print(json.dumps({"error": message, "status": status}))
    return status


def console_main() -> None:
    """Entry point of the ``loaderx`` console script."""
    sys.exit(main())
