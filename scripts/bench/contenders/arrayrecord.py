"""ArrayRecord: Google's record file, one record per group (random access)."""

from __future__ import annotations

from typing import Any

import numpy as np

from contenders.base import Store

VERSION = ("array_record", "array-record")
MODULE = "array_record.python.array_record_module"


def writer(path: str) -> Any:
    """An ArrayRecordWriter with one record per group, so any record reads alone."""
    from array_record.python import array_record_module as arm
    return arm.ArrayRecordWriter(path, "group_size:1")


class ArrayRecord(Store):
    name = "arrayrecord"
    module = MODULE
    pip = "array-record"
    ext = ".array_record"
    compresses = True
    allocates = "yes (bytes per record, copied into buf)"
    how = ("ArrayRecordWriter 'group_size:1' (default zstd:3); "
           "ArrayRecordReader('readahead_buffer_size:0').read(indices), np.frombuffer copied into buf")

    def write(self, arr: np.ndarray) -> None:
        w = writer(self.path)
        for x in arr:
            w.write(x.tobytes())
        w.close()

    def open(self) -> None:
        from array_record.python import array_record_module as arm
        self.r: Any = arm.ArrayRecordReader(self.path, "readahead_buffer_size:0")

    def gather(self, idx: np.ndarray, buf: np.ndarray) -> np.ndarray:
        recs = self.r.read(idx.tolist())
        flat = buf.reshape(len(buf), -1).view(np.uint8)
        for k, b in enumerate(recs):
            flat[k] = np.frombuffer(b, np.uint8)
        return buf

    def close(self) -> None:
        r = getattr(self, "r", None)
        if r is not None:
            r.close()
            self.r = None


STORES: list[type[Store]] = [ArrayRecord]
