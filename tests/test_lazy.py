"""The native library loads at the first native call, never at import.

A process that only imports loaderx and builds read-only datasets keeps the
Go runtime out of its address space, so it may fork workers (torch's
DataLoader does by default) that open the stores themselves. Each scenario
runs in a fresh interpreter, where nothing has loaded the library yet.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from loaderx.converter import from_numpy
from loaderx.errors import CorruptStoreError
from loaderx.store._store import crc32c, header_length

ROOT = Path(__file__).resolve().parent.parent

MAPPED = "'libloaderx' in open('/proc/self/maps').read()"


def run(code: str, timeout: float = 600) -> str:
    """Run ``code`` in a fresh interpreter from the worktree; return stdout."""
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True, text=True, timeout=timeout, cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


@pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="needs /proc/self/maps")
def test_importing_every_module_loads_no_library() -> None:
    # loaderx.torch and loaderx.jax import their framework: only where it is installed
    extra = "".join(f", loaderx.{m}" for m in ("torch", "jax") if importlib.util.find_spec(m) is not None)
    out = run(f"""
        import loaderx, loaderx.dataset, loaderx.dataloader, loaderx.sampler, loaderx.converter
        import loaderx.zrecord, loaderx.arrow, loaderx.cli, loaderx.dlpack{extra}
        from loaderx.store import _native
        print(_native.loaded(), {MAPPED})
    """)
    assert out.split() == ["False", "False"]


def test_constants_and_functions_load_the_library_on_first_use() -> None:
    out = run("""
        from loaderx.store import _native
        assert not _native.loaded()
        modes = _native.SAMPLER_MODES          # an ABI number: read from the library
        assert _native.loaded()
        print(sorted(modes), _native.CODEC_NAMES, _native.get_threads() > 0)
    """)
    assert "'sequential'" in out and "('raw', 'zstd', 'zstd_dict', 'narrow')" in out and out.strip().endswith("True")


def test_dataset_answers_len_without_the_library(tmp_path: Path) -> None:
    arr = np.arange(50 * 3, dtype=np.float32).reshape(50, 3)
    from_numpy(str(tmp_path / "d"), arr)
    out = run(f"""
        from loaderx.store import _native
        from loaderx.dataset import DenseDataset
        ds = DenseDataset({str(tmp_path / "d")!r})
        print(len(ds), _native.loaded())
        print(ds.dtype, ds.item_shape, _native.loaded())   # the schema file, read in Python
        print(float(ds[49][2]), _native.loaded())          # the first gather loads the library
    """)
    assert out.split("\n")[:3] == ["50 False", "float32 (3,) False", f"{float(arr[49, 2])} True"]


def test_crc32c_of_large_inputs_matches_a_bitwise_crc() -> None:
    # Inputs from 64 KiB on are cut into blocks whose CRCs are computed side
    # by side and chained (a sharded dataset's manifest): the result must be
    # the byte-at-a-time CRC, from any starting value, whatever the tail.
    def bitwise(data: bytes, crc: int = 0) -> int:
        c = crc ^ 0xFFFFFFFF
        for b in data:
            c ^= b
            for _ in range(8):
                c = (c >> 1) ^ (0x82F63B78 & -(c & 1))
        return c ^ 0xFFFFFFFF

    rng = np.random.default_rng(3)
    for n in (65535, 65536, 65537, 70 * 1024 + 5, 200_000):
        data = rng.integers(0, 256, size=n, dtype=np.uint8).tobytes()
        for start in (0, 0x12345678):
            assert crc32c(data, start) == bitwise(data, start), (n, start)
    data = bytes(1 << 17)
    assert crc32c(data) == bitwise(data)  # zeros: the carried register alone


def test_header_length_and_checksum(tmp_path: Path) -> None:
    assert crc32c(b"123456789") == 0xE3069283  # the CRC-32C check value
    path = str(tmp_path / "d")
    from_numpy(path, np.zeros((17, 2), dtype=np.int16), codec="raw")
    assert header_length(path) == 17
    meta = os.path.join(path, "meta.zr")
    b = bytearray(Path(meta).read_bytes())
    assert b[4] == 4
    b[14] ^= 1  # the length changed without its checksum
    Path(meta).write_bytes(bytes(b))
    with pytest.raises(CorruptStoreError, match="meta.zr: header checksum"):
        header_length(path)
    with pytest.raises(FileNotFoundError, match="no meta.zr"):
        header_length(str(tmp_path))


def test_fork_guard_depends_on_the_parent_having_loaded(tmp_path: Path) -> None:
    path = str(tmp_path / "d")
    from_numpy(path, np.arange(40, dtype=np.int64).reshape(20, 2))
    out = run(f"""
        import os
        from loaderx.store import _native
        from loaderx.dataset import DenseDataset
        from loaderx.errors import ForkError

        def child(load_first):
            pid = os.fork()
            if pid == 0:
                try:
                    code = 0 if int(DenseDataset({path!r})[7][1]) == 15 else 3
                except ForkError:
                    code = 2
                os._exit(code)
            return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])

        print(child(False), _native.loaded())   # the parent never loaded: the child may
        _native.get_threads()
        print(child(True))                      # now it has: the child must refuse
    """)
    assert out.split() == ["0", "False", "2"]


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed")
def test_torch_dataloader_forks_workers_over_a_dataset(tmp_path: Path) -> None:
    arr = np.arange(100 * 4, dtype=np.float32).reshape(100, 4)
    path = str(tmp_path / "d")
    from_numpy(path, arr)
    out = run(f"""
        import numpy as np, torch
        from loaderx.store import _native
        from loaderx.dataset import DenseDataset
        assert torch.multiprocessing.get_start_method() == "fork"
        ds = DenseDataset({path!r})
        assert len(ds) == 100
        dl = torch.utils.data.DataLoader(ds, batch_size=8, num_workers=2)
        got = torch.cat(list(dl)).numpy()
        assert np.array_equal(got, np.arange(400, dtype=np.float32).reshape(100, 4)), got
        print("parent loaded:", _native.loaded(), {MAPPED})
    """, timeout=600)
    assert "parent loaded: False False" in out


def _schema_cases(tmp_path: Path) -> list[tuple[str, str]]:
    """Stores of many dtypes and shapes, dense and ragged: (path, kind)."""
    from loaderx.converter import from_iterator

    cases = []
    shapes = [(), (3,), (2, 1, 4), (0,), (1,) * 20, (300, 70000)]
    dtypes = ["bool", "<i1", "<u2", "<i4", "<u8", "<f2", "<f4", ">f8", "<c8", "<c16"]
    if importlib.util.find_spec("ml_dtypes") is not None:
        import ml_dtypes

        dtypes[-1] = ml_dtypes.bfloat16
    for k, (shape, dt) in enumerate(zip(shapes * 2, dtypes, strict=False)):
        path = str(tmp_path / f"dense{k}")
        from_numpy(path, np.zeros((2, *shape) if np.prod(shape) < 1000 else (0, *shape), dtype=dt))
        cases.append((path, "dense"))
    for k, (tail, dt) in enumerate([((), "<i4"), ((3,), "<f4"), ((2, 2), "<u1")]):
        path = str(tmp_path / f"ragged{k}")
        from_iterator(path, [np.zeros((n, *tail), dtype=dt) for n in (1, 4, 0)])
        cases.append((path, "ragged"))
    return cases


def test_python_schema_reader_agrees_with_the_native_one(tmp_path: Path) -> None:
    from loaderx.store import _native
    from loaderx.store._dtypes import from_schema_name
    from loaderx.store._schema import _python_schema

    for path, kind in _schema_cases(tmp_path):
        got = _python_schema(path, kind)
        assert got is not None, path
        nkind, dtype_str, shape = _native.schema_read(path)
        assert nkind == kind
        assert got == (from_schema_name(dtype_str, path), tuple(shape)), path
        other = "ragged" if kind == "dense" else "dense"
        assert _python_schema(path, other) is None  # the wrong kind is the native reader's to report


def test_python_schema_reader_defers_whatever_it_does_not_know(tmp_path: Path) -> None:
    """Damaged or foreign schema files are never answered in Python: either
    the Python reader gives exactly the native answer, or it declines and
    the native reader decides (and reports the damage)."""
    from loaderx.store import _native
    from loaderx.store._dtypes import from_schema_name
    from loaderx.store._schema import _python_schema

    path = str(tmp_path / "d")
    from_numpy(path, np.zeros((3, 5, 2), dtype=np.int32))
    schema = Path(path, "schema.msgpack")
    good = schema.read_bytes()
    rng = np.random.default_rng(7)
    print("seed 7")
    answered = declined = 0
    for trial in range(400):
        b = bytearray(good)
        how = trial % 3
        if how == 0:
            b[rng.integers(len(b))] = rng.integers(256)
        elif how == 1:
            b = b[: rng.integers(len(b))]
        else:
            b += bytes(rng.integers(0, 256, rng.integers(1, 4)).astype(np.uint8))
        schema.write_bytes(bytes(b))
        got = _python_schema(path, "dense")
        try:
            kind, dtype_str, shape = _native.schema_read(path)
            want = (from_schema_name(dtype_str, path), tuple(shape)) if kind == "dense" else None
        except Exception:
            want = None
        if got is None:
            declined += 1
        else:
            answered += 1
            assert got == want, (trial, bytes(b))
    assert answered and declined  # both branches were exercised
    schema.write_bytes(good)
    assert _python_schema(path, "dense") == (np.dtype("<i4"), (5, 2))
    # a schema the original loaderx wrote carries other fields: left to the native reader
    foreign = bytes([good[0] + 1]) + good[1:] + b"\xa6format\xa0"  # one more key
    schema.write_bytes(foreign)
    assert _python_schema(path, "dense") is None
