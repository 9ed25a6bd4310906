"""Zrecord: raw byte records."""

from __future__ import annotations

import io
import threading

import numpy as np
import pytest

from loaderx.errors import ClosedError, StoreExistsError
from loaderx.zrecord import Zrecord


def payload(i: int) -> bytes:
    """Record i: a recognisable, variable-length byte string."""
    return (i.to_bytes(4, "little") + bytes([i % 251])) * (i % 7 + 1)


@pytest.mark.parametrize("codec", ["raw", "zstd"])
def test_append_gather_round_trip(tmp_path, codec):
    recs = [b"abc", b"", b"hello world" * 50, bytes(range(256)), bytearray(b"xy")]
    with Zrecord(tmp_path / "z", create=True, codec=codec) as zr:
        assert zr.codec == codec
        assert len(zr) == 0
        assert zr.append(recs) == 0
        assert zr.append([memoryview(b"mv"), np.arange(3, dtype=np.int16)]) == 5
        assert len(zr) == 7
        assert zr.gather([0, 1, 2, 3, 4]) == [bytes(r) for r in recs]
        assert zr.gather([6, 5, 0]) == [np.arange(3, dtype=np.int16).tobytes(), b"mv", b"abc"]
        assert zr.gather([-1]) == [np.arange(3, dtype=np.int16).tobytes()]
        assert zr[2] == recs[2]
        assert zr[-2] == b"mv"
        assert zr[1:3] == [b"", recs[2]]
        assert zr.gather([]) == []
        np.testing.assert_array_equal(zr.sizes([0, 1, 2]), [3, 0, 550])
        assert zr.sizes([0, 1, 2]).dtype == np.int64
        assert zr.append([]) == 7
    # persisted
    with Zrecord(tmp_path / "z", readonly=True) as zr:
        assert len(zr) == 7
        assert zr.codec == codec
        assert zr.gather([2]) == [recs[2]]


def test_zstd_dict_store(tmp_path):
    samples = [b"{\"id\": %d, \"kind\": \"token-sequence\", \"values\": [%s]}" % (i, b", ".join(b"%d" % (j % 13) for j in range(i % 40 + 10))) for i in range(300)]
    with Zrecord(tmp_path / "z", create=True, codec="zstd_dict", samples=samples) as zr:
        zr.append(samples[:50])
        assert zr.gather([49, 0]) == [samples[49], samples[0]]
        stats = zr.stats()
        assert stats["codec"] == "zstd_dict" and stats["dict_bytes"] > 0
    with pytest.raises(ValueError, match="needs samples="):
        Zrecord(tmp_path / "y", create=True, codec="zstd_dict")
    with pytest.raises(ValueError, match="apply to codec 'zstd_dict' only"):
        Zrecord(tmp_path / "y", create=True, codec="zstd", samples=[b"x"])


def test_gather_into(tmp_path):
    with Zrecord(tmp_path / "z", create=True) as zr:
        zr.append([b"aa", b"bbbb", b"c"])
        sizes = zr.sizes([2, 1])
        offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        out = bytearray(int(offsets[-1]))
        assert zr.gather_into([2, 1], out, offsets) is None
        assert bytes(out) == b"cbbbb"
        buf = np.zeros(8, dtype=np.uint8)
        zr.gather_into([0], buf, [0, 2])
        assert buf[:2].tobytes() == b"aa"
        with pytest.raises(ValueError, match="len\\(indices\\) \\+ 1 = 3"):
            zr.gather_into([0, 1], out, [0, 2])
        with pytest.raises(ValueError, match="non-decreasing"):
            zr.gather_into([0, 1], bytearray(10), [0, 4, 2])
        with pytest.raises(ValueError, match="read-only"):
            zr.gather_into([0], b"12", [0, 2])
        with pytest.raises(ValueError, match="out holds 1 bytes but offsets need 2"):
            zr.gather_into([0], bytearray(1), [0, 2])
        with pytest.raises(TypeError, match="buffer protocol"):
            zr.gather_into([0], 12, [0, 2])
        with pytest.raises(ValueError):  # offsets disagree with the record size
            zr.gather_into([0], bytearray(5), [0, 5])


def test_delete_swaps_the_tail_and_compact_reclaims(tmp_path):
    big = [bytes([i]) * 10_000 for i in range(6)]
    with Zrecord(tmp_path / "z", create=True, codec="raw") as zr:
        zr.append(big)
        zr.delete([1])
        assert len(zr) == 5
        # the last record moved into the hole
        assert zr.gather(range(5)) == [big[0], big[5], big[2], big[3], big[4]]
        zr.delete([0, -1, 0])  # duplicates are ignored, negatives count from the end
        assert len(zr) == 3
        assert sorted(zr.gather(range(3))) == sorted([big[5], big[2], big[3]])
        before = zr.stats()
        assert before["length"] == 3
        assert before["live_bytes"] == 30_000
        assert before["chunk_bytes"] >= 60_000
        zr.compact()
        after = zr.stats()
        assert after["live_bytes"] == 30_000
        assert after["chunk_bytes"] < before["chunk_bytes"]
        assert sorted(zr.gather(range(3))) == sorted([big[5], big[2], big[3]])
        with pytest.raises(IndexError, match="index 3 "):
            zr.delete([3])
    with Zrecord(tmp_path / "z") as zr:
        assert sorted(zr.gather(range(3))) == sorted([big[5], big[2], big[3]])


def test_stats_fields(tmp_path):
    with Zrecord(tmp_path / "z", create=True, codec="zstd") as zr:
        zr.append([b"a" * 10_000])
        stats = zr.stats()
        assert set(stats) == {
            "length", "live_bytes", "chunk_bytes", "logical_bytes", "codec", "dict_bytes", "chunks",
            "version", "checksummed", "verified",
        }
        assert stats["version"] == 4 and stats["checksummed"] is True and stats["verified"] is True
        assert stats["length"] == 1
        assert stats["logical_bytes"] == 10_000
        assert stats["live_bytes"] < 10_000  # compressed
        assert stats["codec"] == "zstd"
        assert stats["dict_bytes"] == 0
        assert stats["chunks"] >= 1
        zr.sync()


def test_errors(tmp_path):
    with pytest.raises(FileNotFoundError):
        Zrecord(tmp_path / "missing")
    Zrecord(tmp_path / "z", create=True).close()
    with pytest.raises(StoreExistsError):
        Zrecord(tmp_path / "z", create=True)
    with pytest.raises(ValueError, match="'snappy'"):
        Zrecord(tmp_path / "q", create=True, codec="snappy")
    with pytest.raises(ValueError, match="contradict"):
        Zrecord(tmp_path / "q", create=True, readonly=True)
    with pytest.raises(ValueError, match="only with create=True"):
        Zrecord(tmp_path / "z", dict_size=10)
    with Zrecord(tmp_path / "z") as zr:
        zr.append([b"one", b"two"])
        with pytest.raises(TypeError, match="not a single bytes"):
            zr.append(b"abc")
        with pytest.raises(IndexError, match="index 2 "):
            zr.gather([0, 2])
        with pytest.raises(IndexError, match="index -3 "):
            zr[-3]
        with pytest.raises(TypeError, match="integers"):
            zr.gather(["a"])
    with Zrecord(tmp_path / "z", readonly=True) as zr:
        assert zr.readonly
        for op in (lambda: zr.append([b"x"]), lambda: zr.delete([0]), zr.compact):
            with pytest.raises(io.UnsupportedOperation, match="read-only"):
                op()
        assert zr.gather([1]) == [b"two"]


def test_close_and_repr(tmp_path):
    zr = Zrecord(tmp_path / "z", create=True, codec="zstd")
    zr.append([b"x"])
    assert repr(zr) == f"Zrecord({str(tmp_path / 'z')!r}, len=1, codec='zstd')"
    zr.close()
    zr.close()
    assert zr.closed
    assert repr(zr) == f"Zrecord({str(tmp_path / 'z')!r}, closed)"
    for op in (lambda: len(zr), lambda: zr.gather([0]), lambda: zr.append([b"y"]), zr.stats, zr.sync):
        with pytest.raises(ClosedError):
            op()
    ro = Zrecord(tmp_path / "z", readonly=True)
    assert repr(ro) == f"Zrecord({str(tmp_path / 'z')!r}, len=1, codec='zstd', readonly)"
    ro.close()


@pytest.mark.parametrize("codec", ["raw", "zstd"])
def test_gather_while_another_thread_appends(tmp_path, codec):
    """Readers only see complete records below the published length, while
    the writer keeps appending."""
    zr = Zrecord(tmp_path / "z", create=True, codec=codec)
    zr.append([payload(i) for i in range(100)])
    stop = threading.Event()
    problems = []
    reads = [0]

    def writer():
        i = 100
        try:
            while i < 3000:
                zr.append([payload(j) for j in range(i, i + 50)])
                i += 50
        except Exception as e:  # pragma: no cover - reported below
            problems.append(("writer", e))
        finally:
            stop.set()

    def reader(seed):
        rng = np.random.default_rng(seed)
        try:
            while not stop.is_set() or reads[0] < 50:
                n = len(zr)
                idx = rng.integers(0, n, 32)
                got = zr.gather(idx)
                reads[0] += 1
                for i, g in zip(idx.tolist(), got):
                    if g != payload(i):
                        problems.append(("mismatch", i))
                        return
        except Exception as e:  # pragma: no cover - reported below
            problems.append(("reader", e))

    threads = [threading.Thread(target=writer)] + [
        threading.Thread(target=reader, args=(s,)) for s in range(3)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert problems == []
    assert len(zr) == 3000
    assert zr.gather([2999]) == [payload(2999)]
    zr.close()
