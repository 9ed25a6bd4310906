package zrecord_test

import (
	"encoding/binary"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/loaderx/loaderx/zrecord"
)

// BenchmarkGatherNarrow gathers random batches of 256 token rows from a
// warm Narrow store and from a raw one holding the same rows: int32[2048]
// Zipf token ids below 50,000 (narrowed to 2 bytes a value) and the same
// ids as int64[1024]. The ratio of the two MB/s figures of a row type is
// what narrowing costs or gains on a store read from the page cache, and
// stored-B/rec what it saves on disk.
//
//	go test -run XXX -bench GatherNarrow -benchtime 3s ./zrecord/
//
// LOADERX_BENCH_ROWS sets the rows per store (default 32768: 256 MiB of
// raw rows per store).
func BenchmarkGatherNarrow(b *testing.B) {
	rows := 32768
	if v := os.Getenv("LOADERX_BENCH_ROWS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < benchBatch {
			b.Fatalf("LOADERX_BENCH_ROWS=%q: want a row count of at least %d", v, benchBatch)
		}
		rows = n
	}
	const rowBytes = 8 << 10
	root := b.TempDir()
	batches := benchBatches(64, rows)
	for _, kind := range []struct {
		name string
		size int // element size
	}{{"tokens-int32", 4}, {"ids-int64", 8}} {
		recs := zipfRows(rows, rowBytes, kind.size)
		stores := map[zrecord.Codec]*zrecord.Store{}
		for _, codec := range []zrecord.Codec{zrecord.Raw, zrecord.Narrow} {
			var opts []zrecord.Option
			if codec == zrecord.Narrow {
				opts = append(opts, zrecord.WithElement(kind.size, true))
			}
			stores[codec] = benchStore(b, filepath.Join(root, kind.name+codec.String()), codec, recs, opts...)
		}
		recs = nil
		for _, codec := range []zrecord.Codec{zrecord.Raw, zrecord.Narrow} {
			s := stores[codec]
			st, err := s.Stats()
			if err != nil {
				b.Fatal(err)
			}
			b.Run(kind.name+"/"+codec.String(), func(b *testing.B) {
				dst := make([]byte, benchBatch*rowBytes)
				b.SetBytes(int64(benchBatch * rowBytes))
				b.ResetTimer()
				cpu := processCPU()
				for i := range b.N {
					if err := s.Gather(batches[i%len(batches)], dst, rowBytes); err != nil {
						b.Fatal(err)
					}
				}
				reportCPU(b, cpu)
				b.ReportMetric(float64(st.LiveBytes)/float64(st.Length), "stored-B/rec")
			})
		}
		for _, s := range stores {
			s.Close()
		}
	}
}

// zipfRows returns rows of rowBytes bytes of Zipf-distributed token ids
// below 50,000 (s = 1.1), as signed elements of size bytes.
func zipfRows(rows, rowBytes, size int) [][]byte {
	rng := rand.New(rand.NewPCG(11, 12))
	z := rand.NewZipf(rng, 1.1, 1, 49999)
	buf := make([]byte, rows*rowBytes)
	recs := make([][]byte, rows)
	for i := range recs {
		r := buf[i*rowBytes : (i+1)*rowBytes : (i+1)*rowBytes]
		for k := 0; k < rowBytes; k += size {
			v := z.Uint64()
			if size == 4 {
				binary.LittleEndian.PutUint32(r[k:], uint32(v))
			} else {
				binary.LittleEndian.PutUint64(r[k:], v)
			}
		}
		recs[i] = r
	}
	return recs
}

// BenchmarkAppendSmallNarrow appends 4 Mi records of int32[4] (16 bytes,
// narrowed) in one batch to a fresh store: the per-record cost of a
// conversion of small records, reported as millions of records a second.
//
//	go test -run XXX -bench AppendSmallNarrow -count 5 ./zrecord/
func BenchmarkAppendSmallNarrow(b *testing.B) {
	const n = 1 << 22
	data := make([]byte, n*16)
	for i := range n * 4 {
		binary.LittleEndian.PutUint32(data[4*i:], uint32(i))
	}
	recs := make([][]byte, n)
	for i := range recs {
		recs[i] = data[i*16 : i*16+16]
	}
	for b.Loop() {
		b.StopTimer()
		dir := filepath.Join(b.TempDir(), "s")
		s, err := zrecord.Create(dir, zrecord.WithCodec(zrecord.Narrow))
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		if _, err := s.Append(recs); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if err := s.CloseUnsynced(); err != nil {
			b.Fatal(err)
		}
		if err := os.RemoveAll(dir); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds()/1e6, "Mrec/s")
}
