"""The ``loaderx`` command line, driven as a user drives it: a subprocess."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import loaderx
from loaderx.zrecord import Zrecord

ROOT = Path(__file__).resolve().parent.parent
HAS_ARROW = importlib.util.find_spec("pyarrow") is not None
needs_verify = pytest.mark.skipif(
    not hasattr(Zrecord, "verify"), reason="this build has no Zrecord.verify (store verification is added separately)"
)


def run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run(
        [sys.executable, "-m", "loaderx", *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=300
    )


@pytest.fixture
def dense(tmp_path):
    a = np.arange(60, dtype=np.int16).reshape(20, 3)
    path = tmp_path / "dense"
    loaderx.from_numpy(path, a, codec="zstd")
    return path, a


def test_help_lists_every_command():
    r = run("--help")
    assert r.returncode == 0
    for command in ("info", "verify", "convert", "compact", "delete", "head", "push", "bench"):
        assert command in r.stdout
    assert "exit status" in r.stdout


def test_no_command_is_a_usage_error():
    r = run()
    assert r.returncode == 2
    assert "COMMAND" in r.stderr


def test_info_text_and_json(dense):
    path, a = dense
    r = run("info", str(path))
    assert r.returncode == 0, r.stderr
    assert "dense" in r.stdout and "int16" in r.stdout and "(20, 3)" in r.stdout
    assert "format version" in r.stdout and "ratio" in r.stdout
    r = run("info", str(path), "--json")
    doc = json.loads(r.stdout)
    assert doc["kind"] == "dense" and doc["dtype"] == "int16"
    assert doc["shape"] == [20, 3] and doc["length"] == 20
    assert doc["logical_bytes"] == a.nbytes and doc["codec"] == "zstd"
    assert doc["format_version"] >= 1
    assert doc["ratio"] == pytest.approx(doc["logical_bytes"] / doc["disk_bytes"], rel=1e-2)


def test_json_before_the_command(dense):
    path, _ = dense
    doc = json.loads(run("--json", "info", str(path)).stdout)
    assert doc["length"] == 20


def test_info_of_a_ragged_and_a_raw_store(tmp_path):
    loaderx.from_iterator(tmp_path / "r", [np.arange(n, dtype=np.uint8) for n in (1, 5, 2)])
    doc = json.loads(run("info", str(tmp_path / "r"), "--json").stdout)
    assert doc["kind"] == "ragged" and doc["length"] == 3 and doc["logical_bytes"] == 8
    with Zrecord(tmp_path / "z", create=True) as zr:
        zr.append([b"abc", b"de"])
    doc = json.loads(run("info", str(tmp_path / "z"), "--json").stdout)
    assert doc["kind"] == "raw" and doc["length"] == 2


def test_a_path_that_is_not_a_store(tmp_path):
    r = run("info", str(tmp_path / "missing"))
    assert r.returncode == 3 and "missing" in r.stderr and not r.stdout
    (tmp_path / "empty").mkdir()
    r = run("head", str(tmp_path / "empty"))
    assert r.returncode == 3 and "not a loaderx store" in r.stderr
    r = run("info", str(tmp_path / "missing"), "--json")
    assert r.returncode == 3 and json.loads(r.stdout)["status"] == 3


def test_head(dense):
    path, a = dense
    doc = json.loads(run("head", str(path), "-n", "3", "--json").stdout)
    assert doc == a[:3].tolist()
    r = run("head", str(path), "-n", "2")
    assert r.returncode == 0 and r.stdout.splitlines() == ["[0] [0 1 2]", "[1] [3 4 5]"]
    assert json.loads(run("head", str(path), "-n", "100", "--json").stdout) == a.tolist()


def test_delete_then_compact(dense):
    path, a = dense
    r = run("delete", str(path), "--indices", "0", "-1", "3")
    assert r.returncode == 0, r.stderr
    assert "17" in r.stdout
    ds = loaderx.DenseDataset(path)
    assert len(ds) == 17 and not np.isin(a[[0, 3, 19]], ds[:]).all(axis=1).any()
    ds.close()
    doc = json.loads(run("compact", str(path), "--json").stdout)
    assert doc["reclaimed_bytes"] > 0 and doc["disk_bytes"] < doc["disk_bytes_before"]
    r = run("delete", str(path), "--indices", "99")
    assert r.returncode == 3 and "99" in r.stderr


def test_convert_npy_is_memory_mapped_and_exact(tmp_path):
    a = np.random.default_rng(0).integers(0, 255, size=(100, 7), dtype=np.uint8)
    np.save(tmp_path / "a.npy", a)
    r = run("convert", str(tmp_path / "a.npy"), str(tmp_path / "out"), "--codec", "raw", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["length"] == 100
    with loaderx.DenseDataset(tmp_path / "out") as ds:
        assert ds.codec == "raw" and ds.dtype == np.uint8
        np.testing.assert_array_equal(ds[:], a)
    r = run("convert", str(tmp_path / "a.npy"), str(tmp_path / "out"))
    assert r.returncode == 3 and "overwrite" in r.stderr


def test_convert_npz_and_a_directory_of_npy(tmp_path):
    x = np.arange(30, dtype=np.float32).reshape(10, 3)
    y = np.arange(10, dtype=np.int8)
    np.savez(tmp_path / "d.npz", x=x, y=y)
    assert run("convert", str(tmp_path / "d.npz"), str(tmp_path / "z")).returncode == 0
    (tmp_path / "npys").mkdir()
    np.save(tmp_path / "npys" / "x.npy", x)
    np.save(tmp_path / "npys" / "y.npy", y)
    assert run("convert", str(tmp_path / "npys"), str(tmp_path / "n")).returncode == 0
    for out in ("z", "n"):
        with loaderx.MSDataset(tmp_path / out) as ms:
            assert list(ms) == ["x", "y"] and ms.num_records == 10
            np.testing.assert_array_equal(ms["x"][:], x)
            np.testing.assert_array_equal(ms["y"][:], y)
    doc = json.loads(run("info", str(tmp_path / "z"), "--json").stdout)
    assert doc["kind"] == "multistream" and set(doc["streams"]) == {"x", "y"}


def test_convert_refuses_unaligned_arrays_and_leaves_nothing(tmp_path):
    np.savez(tmp_path / "d.npz", x=np.zeros(3), y=np.zeros(4))
    r = run("convert", str(tmp_path / "d.npz"), str(tmp_path / "z"))
    assert r.returncode == 3 and "aligned" in r.stderr
    assert not (tmp_path / "z").exists()


def test_convert_an_unknown_source(tmp_path):
    (tmp_path / "notes.txt").write_text("hello")
    r = run("convert", str(tmp_path / "notes.txt"), str(tmp_path / "o"))
    assert r.returncode == 3 and "notes.txt" in r.stderr
    assert not (tmp_path / "o").exists()


@pytest.mark.skipif(not HAS_ARROW, reason="pyarrow is not installed (pip install 'loaderx[arrow]')")
def test_convert_parquet(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    t = pa.table({"u": pa.array(np.arange(50) % 256, type=pa.uint8()), "s": pa.array(["x"] * 50)})
    pq.write_table(t, tmp_path / "t.parquet")
    r = run("convert", str(tmp_path / "t.parquet"), str(tmp_path / "o"))
    assert r.returncode == 3 and "'s'" in r.stderr and "string" in r.stderr
    assert not (tmp_path / "o").exists()
    r = run("convert", str(tmp_path / "t.parquet"), str(tmp_path / "o"), "--columns", "u")
    assert r.returncode == 0, r.stderr
    with loaderx.MSDataset(tmp_path / "o") as ms:
        assert ms["u"].dtype == np.uint8 and ms["u"][:].tolist() == list(range(50))


def test_verify_without_verify_support(dense):
    if hasattr(Zrecord, "verify"):
        pytest.skip("this build can verify")
    path, _ = dense
    r = run("verify", str(path))
    assert r.returncode == 2 and "cannot verify" in r.stderr


@needs_verify
def test_verify_a_sound_store(dense):
    path, _ = dense
    r = run("verify", str(path))
    assert r.returncode == 0, r.stderr
    assert "OK" in r.stdout
    assert json.loads(run("verify", str(path), "--json").stdout)["ok"] is True


@needs_verify
def test_verify_reports_damage(dense):
    path, _ = dense
    chunk = next(p for p in path.iterdir() if p.suffix == ".chunk")
    data = bytearray(chunk.read_bytes())
    data[len(data) // 2] ^= 0xFF
    chunk.write_bytes(bytes(data))
    r = run("verify", str(path), "--json")
    assert r.returncode == 1
    doc = json.loads(r.stdout)
    assert doc["ok"] is False
    faults = doc["stores"][str(path)]["faults"]
    assert faults and all(f["what"] for f in faults)


def test_bench_builtin():
    r = run("bench", "--builtin", "--records", "2000", "--record-bytes", "512", "--batch", "64", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["gather"]["loaderx_gib_s"] > 0 and doc["gather"]["numpy_take_gib_s"] > 0
    assert doc["sampler"]["loaderx_us_per_batch"] > 0


def test_console_script_entry_point():
    # the installed metadata declares it (editable install or wheel alike)
    eps = importlib.metadata.entry_points(group="console_scripts", name="loaderx")
    assert [ep.value for ep in eps] == ["loaderx.cli:console_main"]
    from loaderx import cli

    assert callable(cli.console_main)


class _Fault:
    def __init__(self, file: str, index: int | None, what: str) -> None:
        self.file, self.index, self.what = file, index, what


class _Report(list):
    @property
    def ok(self) -> bool:
        return not self


def test_verify_output_and_exit_codes_against_a_stand_in(dense, monkeypatch, capsys):
    # The real Zrecord.verify is built separately; a stand-in with its
    # documented shape pins down what the command does with a report.
    from loaderx import cli

    path, _ = dense
    monkeypatch.setattr(Zrecord, "verify", lambda self: _Report(), raising=False)
    assert cli.main(["verify", str(path)]) == 0
    assert "OK (20 records checked)" in capsys.readouterr().out
    faults = _Report([_Fault("0.chunk", 7, "checksum mismatch"), _Fault("meta.zr", None, "length past the table")])
    monkeypatch.setattr(Zrecord, "verify", lambda self: faults, raising=False)
    assert cli.main(["verify", str(path)]) == 1
    out = capsys.readouterr().out
    assert "DAMAGED, 2 fault(s)" in out and "0.chunk record 7: checksum mismatch" in out
    assert "meta.zr: length past the table" in out
    assert cli.main(["verify", str(path), "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["ok"] is False
    assert doc["stores"][str(path)]["faults"][0] == {"store": str(path), "file": "0.chunk", "index": 7,
                                                       "what": "checksum mismatch"}
