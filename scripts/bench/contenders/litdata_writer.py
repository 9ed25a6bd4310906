"""LitData's ``optimize()`` for the litdata store, in an interpreter of its own.

    python3 -P litdata_writer.py SRC.npy OUT_DIR

writes the records of SRC.npy (one item ``{"x": record}`` each, in order) to
OUT_DIR with one worker and 64 MB chunks, and prints the seconds optimize()
took as the JSON object on its last stdout line.

Why a process of its own: optimize() sets the process-wide multiprocessing
start method to spawn (force=True), which is nobody else's business in the
benchmark, and its spawned worker re-imports the main module to find the
function it runs. Run from inside the benchmark (whose main module is the
whole benchmark), that worker died on three of four workloads while
unpickling its queue ("SemLock._rebuild: FileNotFoundError", then "No
chunks found"); from this small main module it does not. (-P: this
directory must not come first on the path, its adapters are named after the
libraries they drive.)
"""

from __future__ import annotations

import functools
import json
import sys
import time
from collections.abc import Iterator

import numpy as np

SPAN = 1024  # records per optimize() input


def records(span: tuple[int, int], npy: str) -> Iterator[dict[str, np.ndarray]]:
    """optimize()'s function, run in its worker: the records of one span of the
    source, read from its .npy memory map."""
    mm = np.load(npy, mmap_mode="r")
    for i in range(span[0], span[1]):
        yield {"x": np.array(mm[i])}


def main(npy: str, out_dir: str) -> None:
    from litdata import optimize
    n = len(np.load(npy, mmap_mode="r"))
    spans = [(s, min(n, s + SPAN)) for s in range(0, n, SPAN)]
    t0 = time.perf_counter()
    optimize(fn=functools.partial(records, npy=npy), inputs=spans, output_dir=out_dir,
             num_workers=1, chunk_bytes="64MB", mode="overwrite")
    print(json.dumps({"seconds": time.perf_counter() - t0}), flush=True)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit(f"usage: {sys.argv[0]} SRC.npy OUT_DIR")
    main(sys.argv[1], sys.argv[2])
