"""The workloads: the records every contender stores (photo-like arrays and
LLM token rows), the per-sample transform of `--transform augment`, and file
helpers (disk usage, page-cache warming).
"""

from __future__ import annotations

import contextlib
import os
from typing import Any

import numpy as np

MiB = 1 << 20


def make_data(n: int, shape: tuple[int, ...], dtype: Any, seed: int = 0) -> np.ndarray:
    """n records of smooth gradients plus 5 bits of noise, so zstd finds about
    1.15-1.25x, like photos."""
    rng = np.random.default_rng(seed)
    if len(shape) >= 2:
        h, w = shape[0], int(np.prod(shape[1:]))
    else:
        h, w = 1, int(np.prod(shape))
    spread, noise, nbase = 128, 32, 32
    yy = np.linspace(0, 1, h, dtype=np.float32)[:, None]
    xx = np.linspace(0, 1, w, dtype=np.float32)[None, :]
    bases = np.empty((nbase, h, w), np.uint8)
    for k in range(nbase):
        a, b, c = rng.uniform(-1, 1, 3).astype(np.float32)
        g = a * xx + b * yy + c * xx * yy
        g = (g - g.min()) / max(float(np.ptp(g)), 1e-3)
        bases[k] = (spread * g).astype(np.uint8)
    raw = np.empty((n, h, w), np.uint8)
    step = max(1, (16 * MiB) // (h * w))
    tmp = np.empty((step, h, w), np.uint8)
    for s in range(0, n, step):
        e = min(n, s + step)
        m = e - s
        blk = raw[s:e]
        np.take(bases, rng.integers(0, nbase, m), axis=0, out=blk, mode="clip")
        blk += rng.integers(0, 256 - spread - noise, m, dtype=np.uint8)[:, None, None]
        nz = np.frombuffer(rng.bytes(m * h * w), np.uint8).reshape(m, h, w)
        np.bitwise_and(nz, noise - 1, out=tmp[:m])
        blk += tmp[:m]
    raw = raw.reshape((n, *shape))
    dt = np.dtype(dtype)
    return raw if dt == np.uint8 else raw.astype(dt)


#: the token workload: ids below VOCAB with Zipf weights (id k drawn with
#: probability proportional to (k + 1) ** -ZIPF_A): a few ids are most of the
#: text and the long tail is rare, as in a tokenised corpus
TOKEN_LEN, VOCAB, ZIPF_A = 2048, 50_000, 1.2
_TABLE_BITS = 24


def _zipf_table() -> np.ndarray:
    """The 2**24-entry inverse-CDF table of Zipf(ZIPF_A) ids below VOCAB: each
    id holds a run of entries in proportion to its probability, rounded (the
    rarest id still gets several)."""
    weights = np.arange(1, VOCAB + 1, dtype=np.float64) ** -ZIPF_A
    cum = np.rint(np.cumsum(weights) / weights.sum() * (1 << _TABLE_BITS)).astype(np.int64)
    counts = np.diff(cum, prepend=0)
    if counts.min() < 1:
        raise ValueError(f"a {1 << _TABLE_BITS}-entry table cannot hold every id of Zipf({ZIPF_A}) below {VOCAB}")
    return np.repeat(np.arange(VOCAB, dtype=np.int32), counts)


def make_token_rows(n: int, length: int = TOKEN_LEN, seed: int = 0) -> np.ndarray:
    """n int32 rows of `length` Zipf-distributed token ids below VOCAB: a
    tokenised corpus cut into fixed-length training rows.

    Draws go through the table of `_zipf_table`, so a draw is one uniform
    integer and one lookup: the default 50,000 rows take about 8 s here,
    against 29 s for numpy's rejection-sampling `zipf`."""
    table = _zipf_table()
    rng = np.random.default_rng(seed)
    out = np.empty((n, length), np.int32)
    step = max(1, (16 << 20) // length)
    for s in range(0, n, step):
        e = min(n, s + step)
        np.take(table, rng.integers(0, len(table), size=(e - s, length), dtype=np.intp), out=out[s:e])
    return out


#: the packing workload's document lengths (inclusive): up to one packed row
DOC_MIN, DOC_MAX = 16, TOKEN_LEN


def make_documents(n: int, seed: int = 5) -> tuple[np.ndarray, np.ndarray]:
    """n tokenised documents for the packing rows: Zipf ids below VOCAB (as in
    `make_token_rows`), lengths uniform in DOC_MIN..DOC_MAX. Returns the flat
    int32 tokens and the n + 1 int64 offsets."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(DOC_MIN, DOC_MAX, size=n, endpoint=True)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    table = _zipf_table()
    tokens = np.take(table, rng.integers(0, len(table), size=int(offsets[-1]), dtype=np.intp))
    return tokens, offsets


def augment_sample(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """A per-sample Python-side augmentation: horizontal flip and intensity scale."""
    return np.floor_divide(x[..., ::-1], 2, out=out)


def augment_batch(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """augment_sample applied to each sample of a batch, in a Python loop."""
    data = batch["data"]
    res = np.empty_like(data)
    for i in range(len(data)):
        augment_sample(data[i], out=res[i])
    return {"data": res, "label": batch["label"]}


def _files(path: str) -> list[str]:
    if os.path.isfile(path):
        return [path]
    return [os.path.join(r, f) for r, _d, fs in os.walk(path) for f in fs]


def allocated_bytes(path: str) -> int:
    """Allocated blocks (st_blocks * 512) of a file or of every file under a dir."""
    total = 0
    for p in _files(path):
        with contextlib.suppress(FileNotFoundError):
            total += os.lstat(p).st_blocks * 512
    return total


def apparent_bytes(path: str) -> int:
    """Sum of file sizes; a sparse file is charged at most its allocated blocks."""
    total = 0
    for p in _files(path):
        try:
            st = os.stat(p)
        except OSError:
            continue
        total += min(st.st_size, st.st_blocks * 512)
    return total


def read_files_allocated(path: str) -> int:
    """Read every allocated byte under `path` once, pulling it into the page
    cache; holes of sparse files are skipped (SEEK_DATA/SEEK_HOLE)."""
    buf = bytearray(8 * MiB)
    mv = memoryview(buf)
    total = 0
    for p in _files(path):
        try:
            fd = os.open(p, os.O_RDONLY)
        except OSError:
            continue
        try:
            size = os.fstat(fd).st_size
            pos = 0
            while pos < size:
                try:
                    data = os.lseek(fd, pos, os.SEEK_DATA)
                    hole = os.lseek(fd, data, os.SEEK_HOLE)
                except OSError:
                    break
                off = data
                while off < hole:
                    n = os.preadv(fd, [mv[: min(len(buf), hole - off)]], off)
                    if n <= 0:
                        break
                    off += n
                    total += n
                pos = hole
        finally:
            os.close(fd)
    return total
