"""codec="auto", the converters' default: a codec chosen by measuring a
sample, recorded in the schema and shown by stats() and ``loaderx info``."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import loaderx
from loaderx.converter import from_iterator, from_numpy
from loaderx.dataset import DenseDataset, RaggedDataset
from loaderx.store import _autocodec, _native


def _noise(n: int = 300, size: int = 4096) -> np.ndarray:
    return np.random.default_rng(0).integers(0, 256, (n, size), dtype=np.uint8)


def _masks(n: int = 100) -> np.ndarray:
    """64 KiB two-region masks: hundreds of times compressible, and they
    decode at several GiB/s, far above any decode floor."""
    rng = np.random.default_rng(1)
    diag = np.add.outer(np.arange(256), np.arange(256))[None]
    return (diag + rng.integers(0, 256, (n, 1, 1)) > 300).astype(np.uint8)


def _phrases(n: int = 4000, size: int = 512) -> np.ndarray:
    """Small records made of phrases from one shared vocabulary: nothing
    repeats inside a record (zstd alone finds ~1.05x), but a dictionary of the
    vocabulary shrinks them several times."""
    rng = np.random.default_rng(2)
    vocab = [rng.integers(0, 256, int(rng.integers(16, 64)), dtype=np.uint8) for _ in range(64)]
    out = np.empty((n, size), np.uint8)
    for i in range(n):
        parts, filled = [], 0
        while filled < size:
            p = vocab[int(rng.integers(0, len(vocab)))]
            parts.append(p)
            filled += p.size
        out[i] = np.concatenate(parts)[:size]
    return out


def _tokens(n: int = 3000, width: int = 2048, seed: int = 5) -> np.ndarray:
    """Token ids as a language model's data loader reads them: int32 rows of
    Zipf-distributed ids below 50,000."""
    return (np.random.default_rng(seed).zipf(1.1, (n, width)) % 50000).astype(np.int32)


@pytest.fixture
def cold(monkeypatch):
    """A machine with 1 MiB of memory: every store is read cold."""
    monkeypatch.setattr(_autocodec, "physical_memory_bytes", lambda: 1 << 20)


def _choice(path) -> dict:
    with DenseDataset(path) as ds:
        st = ds.stats()
        assert st["codec"] == ds.codec
        return st["codec_choice"]


def _check_figures(choice: dict, n: int, record_bytes: int) -> None:
    assert choice["rule"] == "auto"
    assert 0 < choice["sample_records"] <= min(n, _autocodec.SAMPLE_MAX_RECORDS)
    assert 0 < choice["sample_bytes"] <= _autocodec.SAMPLE_BYTES
    assert choice["record_bytes"] == record_bytes
    assert choice["min_ratio"] == _autocodec.MIN_RATIO
    assert choice["narrow_min_ratio"] == _autocodec.NARROW_MIN_RATIO
    assert choice["storage_mib_s_per_core"] == _autocodec.STORAGE_MIB_S_PER_CORE
    assert choice["in_memory_fraction"] == _autocodec.IN_MEMORY_FRACTION
    assert choice["store_bytes"] == n * record_bytes
    assert choice["regime"] in (_autocodec.IN_MEMORY, _autocodec.COLD_READS)
    assert choice["reason"].startswith(choice["regime_reason"])
    z = choice["candidates"]["zstd"]
    assert z["logical_bytes"] == choice["sample_bytes"]
    assert 0 < z["stored_bytes"] <= z["logical_bytes"]
    assert z["ratio"] == pytest.approx(z["logical_bytes"] / z["stored_bytes"], rel=1e-3)
    assert z["decode_mib_s"] > 0
    assert z["cold_cost_ms_per_gib"] == pytest.approx(_autocodec.cold_cost(z["ratio"], z["decode_mib_s"]), abs=0.1)
    assert choice["candidates"]["raw"]["ratio"] == 1
    for c in choice["candidates"].values():
        assert ("ratio" in c) != ("skipped" in c)


def test_token_ids_get_narrow(tmp_path):
    """The workload zstd lost on: int32 token ids read from the page cache.
    The earlier rule chose zstd (ratio ~2); narrowing stores half the bytes
    and reads back at about a copy's speed."""
    a = _tokens()
    from_numpy(tmp_path / "t", a)
    with DenseDataset(tmp_path / "t") as ds:
        assert ds.codec == "narrow"
        np.testing.assert_array_equal(ds[:], a)
        np.testing.assert_array_equal(ds[[2999, 4, 4, 0]], a[[2999, 4, 4, 0]])
        assert ds.stats()["live_bytes"] <= 0.6 * a.nbytes
    choice = _choice(tmp_path / "t")
    _check_figures(choice, len(a), a[0].nbytes)
    assert choice["codec"] == "narrow" and choice["regime"] == _autocodec.IN_MEMORY
    assert choice["element"] == "int32"
    n = choice["candidates"]["narrow"]
    assert n["ratio"] == pytest.approx(2.0, abs=0.05) and n["records_compressed"] == choice["sample_records"]
    assert "page cache" in choice["reason"] and "narrow stores the sample in 1/2.00" in choice["reason"]
    assert "zstd (ratio" in choice["reason"] and "slower than a copy" in choice["reason"]
    assert "skipped" in choice["candidates"]["zstd_dict"]


def test_in_memory_never_picks_zstd(tmp_path):
    """Masks compress a hundredfold, but a store that fits in memory stays
    raw: a uint8 mask is not narrower than a byte, and zstd would cost
    every warm batch its decoding."""
    a = _masks()
    from_numpy(tmp_path / "s", a)
    with DenseDataset(tmp_path / "s") as ds:
        assert ds.codec == "raw"
        np.testing.assert_array_equal(ds[:], a)
    choice = _choice(tmp_path / "s")
    _check_figures(choice, len(a), a[0].nbytes)
    assert choice["regime"] == _autocodec.IN_MEMORY
    assert choice["candidates"]["zstd"]["ratio"] >= _autocodec.MIN_RATIO
    assert choice["candidates"]["narrow"]["ratio"] < _autocodec.NARROW_MIN_RATIO
    assert "narrow saves too little" in choice["reason"]


def test_uint8_images_stay_raw(tmp_path):
    """Gradients plus noise: zstd finds ~1.2x and narrow nothing."""
    rng = np.random.default_rng(3)
    base = np.linspace(0, 120, 64 * 192).reshape(64, 192)
    a = (base[None] + rng.integers(0, 32, (200, 64, 192))).astype(np.uint8)
    from_numpy(tmp_path / "s", a)
    choice = _choice(tmp_path / "s")
    assert choice["codec"] == "raw" and choice["regime"] == _autocodec.IN_MEMORY
    assert 1.0 < choice["candidates"]["zstd"]["ratio"] < _autocodec.MIN_RATIO
    assert choice["candidates"]["narrow"]["ratio"] < _autocodec.NARROW_MIN_RATIO


def test_float_features_stay_raw(tmp_path):
    a = np.random.default_rng(6).standard_normal((400, 512)).astype(np.float32)
    from_numpy(tmp_path / "f", a)
    choice = _choice(tmp_path / "f")
    assert choice["codec"] == "raw" and choice["element"] is None
    assert choice["candidates"]["narrow"] == {"skipped": "the records are not arrays of integers"}
    assert "not integers" in choice["reason"]


def test_incompressible_records_stay_raw(tmp_path, cold):
    a = _noise()
    from_numpy(tmp_path / "s", a)
    with DenseDataset(tmp_path / "s") as ds:
        assert ds.codec == "raw"
        np.testing.assert_array_equal(ds[:], a)
    choice = _choice(tmp_path / "s")
    assert choice["codec"] == "raw" and choice["regime"] == _autocodec.COLD_READS
    _check_figures(choice, len(a), a[0].nbytes)
    assert choice["candidates"]["zstd"]["ratio"] < _autocodec.MIN_RATIO
    assert "would pay" in choice["reason"] and "ratio" in choice["reason"]


def test_cold_store_of_compressible_int64_takes_the_cold_rule(tmp_path, cold):
    """A store larger than half the memory is read from storage: zstd can
    win there, and narrow competes on the modelled cold-read cost."""
    rng = np.random.default_rng(7)
    # 32 KiB records (too large for a dictionary) of 64 values over the full
    # 64-bit span (nothing to narrow), repeated 64 times: zstd shrinks them
    blocks = rng.integers(-(1 << 62), 1 << 62, (300, 64), dtype=np.int64)
    a = np.tile(blocks, (1, 64))
    from_numpy(tmp_path / "z", a)
    with DenseDataset(tmp_path / "z") as ds:
        assert ds.codec == "zstd"
        np.testing.assert_array_equal(ds[:], a)
    choice = _choice(tmp_path / "z")
    _check_figures(choice, len(a), a[0].nbytes)
    assert choice["regime"] == _autocodec.COLD_READS and "storage" in choice["regime_reason"]
    assert choice["memory_bytes"] == 1 << 20
    assert choice["candidates"]["narrow"]["ratio"] < _autocodec.NARROW_MIN_RATIO
    z = choice["candidates"]["zstd"]
    assert z["ratio"] >= _autocodec.MIN_RATIO and z["decode_mib_s"] >= z["decode_floor_mib_s"]

    # both shrink it (32 KiB records: no dictionary): of those that qualify
    # (zstd's decode speed is timed, so on a busy machine it may not), the
    # lower modelled cost wins
    small = (np.arange(300 * 4096).reshape(300, 4096) % 100 + (1 << 40)).astype(np.int64)
    from_numpy(tmp_path / "b", small)
    choice = _choice(tmp_path / "b")
    cands = {k: v for k, v in choice["candidates"].items() if k != "raw" and _autocodec._qualifies(k, v)}
    assert "narrow" in cands and choice["candidates"]["zstd"]["ratio"] >= _autocodec.MIN_RATIO
    best = min(cands, key=lambda k: cands[k]["cold_cost_ms_per_gib"])
    assert choice["codec"] == best
    if "zstd" in cands:
        assert "modelled cold read" in choice["reason"]
    with DenseDataset(tmp_path / "b") as ds:
        np.testing.assert_array_equal(ds[:], small)


def test_the_regime_follows_the_memory_figure(tmp_path, monkeypatch):
    a = _tokens(200, 512)
    monkeypatch.setattr(_autocodec, "physical_memory_bytes", lambda: 2 * a.nbytes)
    from_numpy(tmp_path / "in", a)  # exactly half: in memory
    assert _choice(tmp_path / "in")["regime"] == _autocodec.IN_MEMORY
    monkeypatch.setattr(_autocodec, "physical_memory_bytes", lambda: 2 * a.nbytes - 2)
    from_numpy(tmp_path / "out", a)
    assert _choice(tmp_path / "out")["regime"] == _autocodec.COLD_READS
    monkeypatch.setattr(_autocodec, "physical_memory_bytes", lambda: None)
    from_numpy(tmp_path / "unknown", a)
    c = _choice(tmp_path / "unknown")
    assert c["regime"] == _autocodec.IN_MEMORY and "does not say" in c["regime_reason"]
    assert _autocodec.physical_memory_bytes() is None
    monkeypatch.undo()
    assert _autocodec.physical_memory_bytes() == os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def test_highly_compressible_records_get_zstd_when_read_cold(tmp_path, cold):
    a = _masks()
    from_numpy(tmp_path / "s", a)
    with DenseDataset(tmp_path / "s") as ds:
        assert ds.codec == "zstd"
        np.testing.assert_array_equal(ds[:], a)
        assert ds.stats()["chunk_bytes"] * _autocodec.MIN_RATIO < a.nbytes
    choice = _choice(tmp_path / "s")
    assert choice["codec"] == "zstd"
    _check_figures(choice, len(a), a[0].nbytes)
    z = choice["candidates"]["zstd"]
    assert z["ratio"] >= _autocodec.MIN_RATIO
    assert z["decode_mib_s"] >= z["decode_floor_mib_s"] == pytest.approx(
        _autocodec.decode_floor(z["ratio"]), abs=0.1)
    # 64 KiB records are past the size where a dictionary is tried
    assert "skipped" in choice["candidates"]["zstd_dict"]


def test_small_records_sharing_content_get_a_dictionary(tmp_path, cold, monkeypatch):
    # 512 B dictionary frames decode at about 355 MiB/s on one 2 GHz core,
    # only 1.27x the 280 MiB/s floor their 9.5x ratio needs at the default
    # storage speed: on a slower or busier core raw is the rule's right
    # answer. Slower storage (a floor of 112 MiB/s) keeps this test on the
    # dictionary's path whatever the core.
    monkeypatch.setattr(_autocodec, "STORAGE_MIB_S_PER_CORE", 100.0)
    a = _phrases()
    from_numpy(tmp_path / "s", a, dict_tier="fast")
    with DenseDataset(tmp_path / "s") as ds:
        assert ds.codec == "zstd_dict" and ds.stats()["dict_bytes"] > 0
        np.testing.assert_array_equal(ds[:], a)
    choice = _choice(tmp_path / "s")
    assert choice["codec"] == "zstd_dict"
    _check_figures(choice, len(a), a[0].nbytes)
    d = choice["candidates"]["zstd_dict"]
    assert d["ratio"] >= _autocodec.MIN_RATIO > choice["candidates"]["zstd"]["ratio"]
    assert d["decode_mib_s"] >= d["decode_floor_mib_s"]
    assert d["dict_bytes"] > 0 and d["dict_tier"] == "fast"
    # measured on the records the dictionary did not train on: half the sample
    assert d["logical_bytes"] == choice["sample_bytes"] // 2


def test_the_choice_is_deterministic(tmp_path):
    """Same data, same sample, same ratios, same codec (only the timings may differ)."""
    for a in (_noise(), _masks(), _tokens(300, 1024)):
        choices = []
        for k in range(2):
            from_numpy(tmp_path / f"s{k}", a, overwrite=True)
            choices.append(_choice(tmp_path / f"s{k}"))
        c0, c1 = choices
        assert c0["codec"] == c1["codec"]
        assert c0["sample_records"] == c1["sample_records"] and c0["sample_bytes"] == c1["sample_bytes"]
        for name in c0["candidates"]:
            for key in ("ratio", "stored_bytes", "logical_bytes"):
                assert c0["candidates"][name].get(key) == c1["candidates"][name].get(key)


def test_an_explicit_codec_is_honoured_and_records_no_choice(tmp_path):
    from_numpy(tmp_path / "z", _noise(), codec="zstd")
    from_numpy(tmp_path / "r", _masks(), codec="raw")
    with DenseDataset(tmp_path / "z") as z, DenseDataset(tmp_path / "r") as r:
        assert z.codec == "zstd" and r.codec == "raw"
        assert z.stats()["codec_choice"] is None and r.stats()["codec_choice"] is None


def test_bad_codec_names_auto(tmp_path):
    ok = np.zeros((4, 2), np.float32)
    with pytest.raises(ValueError, match="'auto', 'raw', 'zstd', 'zstd_dict', 'narrow'; got 'lz4'"):
        from_numpy(tmp_path / "x", ok, codec="lz4")
    with pytest.raises(ValueError, match="'auto'.*got 'gzip'"):
        from_iterator(tmp_path / "x", [np.zeros(3)], codec="gzip")
    with pytest.raises(ValueError, match="dict_size applies to codec 'zstd_dict' only, not 'auto'"):
        from_numpy(tmp_path / "x", ok, dict_size=1024)
    with pytest.raises(ValueError, match="dict_bytes applies to codec 'zstd_dict' only, not 'auto'"):
        from_numpy(tmp_path / "x", ok, dict_bytes=b"\x37\xa4\x30\xec" + bytes(100))
    assert not (tmp_path / "x").exists()


def test_empty_and_scalar_arrays(tmp_path):
    from_numpy(tmp_path / "e", np.zeros((0, 8), np.float32))
    with DenseDataset(tmp_path / "e") as ds:
        assert len(ds) == 0 and ds.codec == "raw"
        assert ds.stats()["codec_choice"]["sample_records"] == 0
    labels = np.random.default_rng(0).integers(0, 10, 5000)
    from_numpy(tmp_path / "l", labels)
    choice = _choice(tmp_path / "l")
    # an 8-byte record cannot shrink inside a zstd frame
    assert choice["codec"] == "raw" and choice["candidates"]["zstd"]["records_compressed"] == 0


def test_from_iterator_chooses_on_the_first_records(tmp_path):
    rng = np.random.default_rng(4)
    noisy = [rng.integers(0, 256, (int(n), 64), dtype=np.uint8) for n in rng.integers(1, 200, 300)]
    from_iterator(tmp_path / "n", iter(noisy))
    flat = [np.repeat(np.uint16(i % 7), int(n) * 4096).reshape(-1, 4096) for i, n in enumerate(rng.integers(1, 9, 60))]
    from_iterator(tmp_path / "f", flat)
    with RaggedDataset(tmp_path / "n") as n, RaggedDataset(tmp_path / "f") as f:
        assert n.codec == "raw" and f.codec == "narrow"
        for got, want in zip(f[list(range(len(flat)))], flat):
            np.testing.assert_array_equal(got, want)
        cn, cf = n.stats()["codec_choice"], f.stats()["codec_choice"]
    assert cn["sampled_from"] == f"the first {len(noisy)} records of the stream"
    # a stream that fit in the sample: its size is known
    assert cn["store_bytes"] == sum(r.nbytes for r in noisy) and "whole stream" in cn["store_bytes_from"]
    assert cf["codec"] == "narrow" and cf["sample_records"] == len(flat) and cf["element"] == "uint16"
    # a list has a length: the size is estimated from it
    assert "the stream's length, 60 records" in cf["store_bytes_from"]


def test_a_stream_of_unknown_length_is_judged_by_the_sample(tmp_path, cold):
    """Even on a machine where nothing fits, a generator longer than the
    sample has no size to judge by: the in-memory rule applies, and says so."""
    rows = _tokens(700, 2048)
    from_iterator(tmp_path / "g", (r for r in rows))
    with RaggedDataset(tmp_path / "g") as g:
        assert g.codec == "narrow"
        c = g.stats()["codec_choice"]
    assert c["store_bytes"] is None and c["store_bytes_from"] == "a stream without a length"
    assert c["regime"] == _autocodec.IN_MEMORY and "not known" in c["regime_reason"]
    from_iterator(tmp_path / "l", list(rows))  # the same rows with a length: read cold
    with RaggedDataset(tmp_path / "l") as g:
        assert g.stats()["codec_choice"]["regime"] == _autocodec.COLD_READS


def test_sample_is_spread_bounded_and_cuts_big_records():
    rows = _autocodec.sample_rows(1_000_000, 2048)
    assert rows[0] == 0 and rows[-1] == 999_999 and len(rows) == _autocodec.SAMPLE_BYTES // 2048
    assert np.all(np.diff(rows) > 0)
    assert len(_autocodec.sample_rows(1_000_000, 8)) == _autocodec.SAMPLE_MAX_RECORDS
    assert len(_autocodec.sample_rows(10, 8)) == 10
    big = _autocodec.sample_rows(100, 64 << 20)
    assert len(big) == _autocodec.SAMPLE_BIG_RECORDS
    rec = np.arange(16 << 20, dtype=np.uint8)
    part = _autocodec.record_sample(rec, len(big))
    assert part.nbytes == _autocodec.SAMPLE_BYTES // len(big)
    np.testing.assert_array_equal(part, rec[: part.nbytes])


def test_decode_floor_is_the_cold_read_break_even():
    s = _autocodec.STORAGE_MIB_S_PER_CORE
    assert _autocodec.decode_floor(2.0) == pytest.approx(2 * s)
    assert _autocodec.decode_floor(3.0) == pytest.approx(1.5 * s)
    assert _autocodec.decode_floor(1000.0) == pytest.approx(s, rel=2e-3)
    assert _autocodec.decode_floor(1.0) == float("inf")


def test_probe_measures_what_a_store_holds(tmp_path):
    a = _masks(20)
    data = a.reshape(-1).view(np.uint8)
    offsets = np.arange(len(a) + 1, dtype=np.int64) * a[0].nbytes
    p = _native.codec_probe("zstd", data, offsets)
    assert p["records"] == 20 and p["logical_bytes"] == a.nbytes and p["compressed"] == 20
    assert p["passes"] >= 3 and p["decode_nanos"] > 0
    from_numpy(tmp_path / "z", a, codec="zstd")
    with DenseDataset(tmp_path / "z") as ds:
        assert ds.stats()["live_bytes"] == p["stored_bytes"]
    raw = _native.codec_probe("raw", data, offsets)
    assert raw["stored_bytes"] == a.nbytes and raw["compressed"] == 0
    with pytest.raises(ValueError, match="needs a dictionary"):
        _native.codec_probe("zstd_dict", data, offsets)


def test_the_choice_survives_reopening_and_shows_in_info(tmp_path):
    from_numpy(tmp_path / "s", _tokens(300, 1024))
    r = subprocess.run([sys.executable, "-m", "loaderx", "info", str(tmp_path / "s"), "--json"],
                       capture_output=True, text=True, env={**os.environ, "PYTHONPATH": os.path.dirname(
                           os.path.dirname(loaderx.__file__))})
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["codec"] == "narrow" and doc["codec_choice"]["codec"] == "narrow"
    assert doc["codec_choice"]["regime"] == "in memory"
    r = subprocess.run([sys.executable, "-m", "loaderx", "info", str(tmp_path / "s")],
                       capture_output=True, text=True, env={**os.environ, "PYTHONPATH": os.path.dirname(
                           os.path.dirname(loaderx.__file__))})
    assert "chosen by auto  the store holds about" in r.stdout and "auto sample" in r.stdout
    assert "auto regime     in memory" in r.stdout


def test_a_schema_without_a_choice_still_opens(tmp_path):
    """Stores written before the choice was recorded: the schema has no
    codec_choice, and everything reads as before."""
    a = np.arange(24, dtype=np.int32).reshape(6, 4)
    from_numpy(tmp_path / "s", a, codec="zstd")
    _native.schema_write(tmp_path / "s", "dense", "<i4", (4,))  # a schema as earlier versions wrote it
    with DenseDataset(tmp_path / "s") as ds:
        np.testing.assert_array_equal(ds[:], a)
        assert ds.stats()["codec_choice"] is None
    _native.schema_set_codec_choice(tmp_path / "s", {"codec": "zstd", "note": "set by hand"})
    assert _native.schema_read(tmp_path / "s") == ("dense", "<i4", (4,))
    assert _native.schema_codec_choice(tmp_path / "s") == {"codec": "zstd", "note": "set by hand"}
    with pytest.raises(FileNotFoundError):
        _native.schema_codec_choice(tmp_path / "nothing")


def test_from_arrow_chooses_per_column(tmp_path):
    pa = pytest.importorskip("pyarrow")
    masks, noise, tokens = _masks(50), _noise(50, 65536), _tokens(50, 1024)
    table = pa.table({
        "mask": pa.FixedSizeListArray.from_arrays(pa.array(masks.reshape(-1)), masks[0].size),
        "noise": pa.FixedSizeListArray.from_arrays(pa.array(noise.reshape(-1)), noise[0].size),
        "tok": pa.FixedSizeListArray.from_arrays(pa.array(tokens.reshape(-1)), tokens[0].size),
    })
    with loaderx.from_arrow(tmp_path / "o", table) as ms:
        assert ms["mask"].codec == "raw" and ms["noise"].codec == "raw" and ms["tok"].codec == "narrow"
        c = ms["tok"].stats()["codec_choice"]
        assert c["sampled_from"] == "the first 50 records of the column"
        assert c["store_bytes"] == tokens.nbytes and c["store_bytes_from"].startswith("50 rows")
        np.testing.assert_array_equal(ms["tok"][:], tokens)
        np.testing.assert_array_equal(ms["mask"][:], masks.reshape(50, -1))


def test_cli_convert_says_what_auto_chose(tmp_path):
    np.save(tmp_path / "m.npy", _tokens(30, 1024))
    env = {**os.environ, "PYTHONPATH": os.path.dirname(os.path.dirname(loaderx.__file__))}
    r = subprocess.run([sys.executable, "-m", "loaderx", "convert", str(tmp_path / "m.npy"), str(tmp_path / "o")],
                       capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    assert "codec narrow (the store holds about" in r.stdout
    np.savez(tmp_path / "d.npz", tok=_tokens(30, 1024), noise=_noise(30))
    r = subprocess.run([sys.executable, "-m", "loaderx", "--json", "convert", str(tmp_path / "d.npz"),
                        str(tmp_path / "z")], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["codec"] == "auto" and doc["chosen"] == {"tok": "narrow", "noise": "raw"}
