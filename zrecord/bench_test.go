package zrecord_test

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/loaderx/loaderx/zrecord"
	"github.com/loaderx/loaderx/zrecord/internal/faultfs"
)

// Benchmarks measure the warm gather path against its physical ceiling: a
// copy of the same records, from memory, with the same number of goroutines.
//
//	go test -run XXX -bench . -benchtime 2s ./zrecord/
//
// The file is past 700 lines and stays one: its benchmarks share the
// record generators, the store builders and the batch makers above, and
// the figures quoted in the package's comments come from runs of this one
// file side by side, which a split would only scatter.

const benchBatch = 256

// benchSizes are the record sizes gathered: a small (latency-bound) and an
// image-sized (bandwidth-bound) one, with enough records that a batch of
// 256 random picks is scattered.
var benchSizes = []struct {
	name  string
	size  int
	count int
}{
	{"12KiB", 12 << 10, 4096},
	{"256KiB", 256 << 10, 768},
}

// benchRecords returns count mildly compressible records of size bytes.
func benchRecords(count, size int) [][]byte {
	recs := make([][]byte, count)
	for i := range recs {
		recs[i] = ztRecord(i, size)
	}
	return recs
}

// benchBatches returns n batches of random indices below count.
func benchBatches(n, count int) [][]int64 {
	rng := rand.New(rand.NewPCG(1, 2))
	out := make([][]int64, n)
	for i := range out {
		out[i] = make([]int64, benchBatch)
		for k := range out[i] {
			out[i][k] = rng.Int64N(int64(count))
		}
	}
	return out
}

// benchStore builds a store holding recs and warms the page cache and the
// mappings by gathering every record once.
func benchStore(b *testing.B, dir string, codec zrecord.Codec, recs [][]byte, opts ...zrecord.Option) *zrecord.Store {
	b.Helper()
	s, err := zrecord.Create(dir, append([]zrecord.Option{zrecord.WithCodec(codec)}, opts...)...)
	if err != nil {
		b.Fatal(err)
	}
	for i := 0; i < len(recs); i += 64 {
		if _, err := s.Append(recs[i:min(i+64, len(recs))]); err != nil {
			b.Fatal(err)
		}
	}
	size := len(recs[0])
	dst := make([]byte, 64*size)
	for i := 0; i < len(recs); i += 64 {
		idx := make([]int64, 0, 64)
		for k := i; k < min(i+64, len(recs)); k++ {
			idx = append(idx, int64(k))
		}
		if err := s.Gather(idx, dst[:len(idx)*size], size); err != nil {
			b.Fatal(err)
		}
	}
	return s
}

func BenchmarkGather(b *testing.B) {
	root := b.TempDir()
	for _, sz := range benchSizes {
		recs := benchRecords(sz.count, sz.size)
		batches := benchBatches(64, sz.count)
		for _, codec := range []zrecord.Codec{zrecord.Raw, zrecord.Zstd} {
			s := benchStore(b, filepath.Join(root, codec.String()+sz.name), codec, recs)
			b.Run(codec.String()+"/"+sz.name, func(b *testing.B) {
				dst := make([]byte, benchBatch*sz.size)
				b.SetBytes(int64(benchBatch * sz.size))
				b.ResetTimer()
				for i := range b.N {
					if err := s.Gather(batches[i%len(batches)], dst, sz.size); err != nil {
						b.Fatal(err)
					}
				}
			})
			s.Close()
		}
	}
}

// verifiedSizes are the record sizes of BenchmarkGatherVerified: a token
// row, an image, a 147 KiB image (no power of two, so records start off a
// page) and a large one; each fills a store of about verifiedStoreBytes,
// which is beyond the CPU's caches.
var verifiedSizes = []int{2 << 10, 12 << 10, 147 << 10, 256 << 10}

const verifiedStoreBytes = 256 << 20

// benchRounds is how many times BenchmarkGatherVerified and
// BenchmarkCopyCRC run their whole set of cells in turn
// (LOADERX_BENCH_ROUNDS, default 1): on a shared machine the load changes
// by the second, and cells run one after another, round after round, see
// the same spells of it, where -count runs each cell's repeats back to back.
func benchRounds(b *testing.B) int {
	n := 1
	if v := os.Getenv("LOADERX_BENCH_ROUNDS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 {
			b.Fatalf("LOADERX_BENCH_ROUNDS=%q: want a positive count", v)
		}
	}
	return n
}

// BenchmarkGatherVerified is what checking raw records costs a gather: for
// each record size, batches of 256 random ("rnd") and 256 consecutive
// ("seq") records from a warm raw store of 256 MiB, gathered unchecked
// ("off", SetVerify(false)) and checked on each path of copyCRC this CPU
// runs (the first is the default). Their ratio, side by side in one run,
// is the cost.
//
//	LOADERX_BENCH_ROUNDS=5 nice -n 10 go test -run XXX -bench GatherVerified ./zrecord/
func BenchmarkGatherVerified(b *testing.B) {
	root := b.TempDir()
	paths := zrecord.CopyCRCPaths()
	for _, size := range verifiedSizes {
		count := verifiedStoreBytes / size
		s := benchStore(b, filepath.Join(root, strconv.Itoa(size)), zrecord.Raw, benchRecords(count, size))
		// Enough batches that they touch far more than the caches hold.
		rnd := benchBatches(max(64, (128<<20)/(benchBatch*size)), count)
		rng := rand.New(rand.NewPCG(5, 6))
		seq := make([][]int64, len(rnd))
		for i := range seq {
			start := rng.Int64N(int64(count - benchBatch + 1))
			seq[i] = make([]int64, benchBatch)
			for k := range seq[i] {
				seq[i][k] = start + int64(k)
			}
		}
		dst := make([]byte, benchBatch*size)
		for range benchRounds(b) {
			for _, mode := range []struct {
				name    string
				batches [][]int64
			}{{"rnd", rnd}, {"seq", seq}} {
				for _, v := range append([]string{"off"}, paths...) {
					b.Run(fmt.Sprintf("%dKiB/%s/%s", size>>10, mode.name, v), func(b *testing.B) {
						if v == "off" {
							s.SetVerify(false)
							defer s.SetVerify(true)
						} else {
							defer zrecord.UseCopyCRCPath(v)()
						}
						b.SetBytes(int64(benchBatch * size))
						b.ResetTimer()
						cpu := processCPU()
						for i := range b.N {
							if err := s.Gather(mode.batches[i%len(mode.batches)], dst, size); err != nil {
								b.Fatal(err)
							}
						}
						reportCPU(b, cpu)
					})
				}
			}
		}
		s.Close()
	}
}

// BenchmarkCopyCRC is copyCRC alone against a plain copy of the same
// bytes ("copy") and against the copy followed by a checksum of the copy
// ("copy+crc", what a checked gather did before copyCRC): records of each
// size taken at random from 256 MiB, beyond the caches, into one
// destination, on each path.
//
//	LOADERX_BENCH_ROUNDS=5 nice -n 10 go test -run XXX -bench CopyCRC ./zrecord/
func BenchmarkCopyCRC(b *testing.B) {
	const pool = 256 << 20
	src := make([]byte, pool)
	rng := rand.New(rand.NewPCG(7, 8))
	for i := 0; i < pool; i += 8 {
		binary.LittleEndian.PutUint64(src[i:], rng.Uint64())
	}
	table := crc32.MakeTable(crc32.Castagnoli)
	for _, size := range verifiedSizes {
		dst := make([]byte, size)
		offs := make([]int, 4096)
		for i := range offs {
			offs[i] = rng.IntN(pool/size) * size
		}
		run := func(name string, f func(d, s []byte)) {
			b.Run(fmt.Sprintf("%dKiB/%s", size>>10, name), func(b *testing.B) {
				b.SetBytes(int64(size))
				for i := range b.N {
					o := offs[i%len(offs)]
					f(dst, src[o:o+size])
				}
			})
		}
		for range benchRounds(b) {
			run("copy", func(d, s []byte) { copy(d, s) })
			run("copy+crc", func(d, s []byte) { copy(d, s); crc32.Update(0, table, d) })
			for _, p := range zrecord.CopyCRCPaths() {
				restore := zrecord.UseCopyCRCPath(p)
				run(p, func(d, s []byte) { zrecord.CopyCRC(d, s, 0) })
				restore()
			}
		}
	}
}

// BenchmarkCopy is the ceiling for BenchmarkGather: the same 256 records
// copied from memory into one buffer, in contiguous blocks over Threads()
// goroutines.
func BenchmarkCopy(b *testing.B) {
	for _, sz := range benchSizes {
		recs := benchRecords(sz.count, sz.size)
		batches := benchBatches(64, sz.count)
		b.Run(sz.name, func(b *testing.B) {
			dst := make([]byte, benchBatch*sz.size)
			workers := zrecord.Threads()
			b.SetBytes(int64(benchBatch * sz.size))
			b.ResetTimer()
			for i := range b.N {
				idx := batches[i%len(batches)]
				var wg sync.WaitGroup
				for w := 1; w < workers; w++ {
					wg.Go(func() { benchCopyBlock(recs, idx, dst, sz.size, w, workers) })
				}
				benchCopyBlock(recs, idx, dst, sz.size, 0, workers)
				wg.Wait()
			}
		})
	}
}

func benchCopyBlock(recs [][]byte, idx []int64, dst []byte, size, w, workers int) {
	lo, hi := len(idx)*w/workers, len(idx)*(w+1)/workers
	for k := lo; k < hi; k++ {
		copy(dst[k*size:(k+1)*size], recs[idx[k]])
	}
}

// BenchmarkAppend measures page-cache ingestion: the store is replaced
// (timer stopped) every 256 MiB, so the disk's write-back speed, which
// throttles a writer that dirties gigabytes, stays out of the figure.
// freshStore closes and removes s (when not nil) and creates an empty store
// with opts under root in its place.
func freshStore(b *testing.B, root string, s *zrecord.Store, opts ...zrecord.Option) *zrecord.Store {
	b.Helper()
	if s != nil {
		s.Close()
		os.RemoveAll(s.Dir())
	}
	s, err := zrecord.Create(filepath.Join(root, strconv.Itoa(rand.Int())), opts...)
	if err != nil {
		b.Fatal(err)
	}
	return s
}

func BenchmarkAppend(b *testing.B) {
	for _, sz := range benchSizes {
		recs := benchRecords(64, sz.size)
		b.Run("raw/"+sz.name, func(b *testing.B) {
			root := b.TempDir()
			var s *zrecord.Store
			fresh := func() { s = freshStore(b, root, s) }
			fresh()
			defer func() { s.Close() }()
			batch := int64(len(recs) * sz.size)
			b.SetBytes(batch)
			b.ResetTimer()
			written := int64(0)
			for range b.N {
				if written += batch; written > 256<<20 {
					b.StopTimer()
					fresh()
					written = batch
					b.StartTimer()
				}
				if _, err := s.Append(recs); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkGatherVerifyCost measures what the checks of format 4 cost a
// gather, side by side in one run: for each codec and record size, the same
// records in an unchecked version-1 store ("v1"), in a version-4 store with
// its default checks ("v4": table entries, frames before decoding, raw
// records as they are copied), and, for raw records, with the raw check
// turned off ("v4noverify", WithVerify(false)).
//
//	go test -run XXX -bench GatherVerifyCost -count 3 ./zrecord/
func BenchmarkGatherVerifyCost(b *testing.B) {
	root := b.TempDir()
	for _, sz := range benchSizes {
		recs := benchRecords(sz.count, sz.size)
		batches := benchBatches(64, sz.count)
		for _, codec := range []zrecord.Codec{zrecord.Raw, zrecord.Zstd} {
			name := codec.String() + "/" + sz.name
			old := filepath.Join(root, "v1-"+codec.String()+sz.name)
			if err := zrecord.WriteOldStore(old, 1, codec, nil, recs, 0); err != nil {
				b.Fatal(err)
			}
			v1, err := zrecord.Open(old, zrecord.WithReadOnly())
			if err != nil {
				b.Fatal(err)
			}
			variants := []struct {
				name string
				s    *zrecord.Store
			}{
				{"v1", v1},
				{"v4", benchStore(b, filepath.Join(root, "v4-"+codec.String()+sz.name), codec, recs)},
			}
			if codec == zrecord.Raw {
				variants = append(variants, struct {
					name string
					s    *zrecord.Store
				}{"v4noverify", benchStore(b, filepath.Join(root, "v4n-"+sz.name), codec, recs, zrecord.WithVerify(false))})
			}
			for _, v := range variants {
				b.Run(name+"/"+v.name, func(b *testing.B) {
					dst := make([]byte, benchBatch*sz.size)
					b.SetBytes(int64(benchBatch * sz.size))
					b.ResetTimer()
					for i := range b.N {
						if err := v.s.Gather(batches[i%len(batches)], dst, sz.size); err != nil {
							b.Fatal(err)
						}
					}
				})
			}
			for _, v := range variants {
				v.s.Close()
			}
		}
	}
}

// BenchmarkGatherSmall gathers batches of 256 records of 2 KiB, where the
// per-record cost (table entry, checks, frame set-up) rather than bandwidth
// decides the speed, for each codec. ns/op divided by 256 is the cost of
// one record.
//
//	go test -run XXX -bench GatherSmall -count 5 ./zrecord/
func BenchmarkGatherSmall(b *testing.B) {
	const size, count = 2 << 10, 16384
	root := b.TempDir()
	recs := benchRecords(count, size)
	batches := benchBatches(64, count)
	for _, codec := range []zrecord.Codec{zrecord.Raw, zrecord.Zstd, zrecord.ZstdDict} {
		var opts []zrecord.Option
		if codec == zrecord.ZstdDict {
			d, err := zrecord.TrainDict(recs[:2048], zrecord.TierFast, 0)
			if err != nil {
				b.Fatal(err)
			}
			opts = append(opts, zrecord.WithDict(d), zrecord.WithDictTier(zrecord.TierBalanced))
		}
		s := benchStore(b, filepath.Join(root, codec.String()), codec, recs, opts...)
		b.Run(codec.String()+"/2KiB", func(b *testing.B) {
			dst := make([]byte, benchBatch*size)
			b.SetBytes(int64(benchBatch * size))
			b.ResetTimer()
			cpu := processCPU()
			for i := range b.N {
				if err := s.Gather(batches[i%len(batches)], dst, size); err != nil {
					b.Fatal(err)
				}
			}
			reportCPU(b, cpu)
		})
		s.Close()
	}
}

// BenchmarkGatherFile gathers records read from a file, for comparing the
// decoder with the zstd command line on the same frames:
//
//	LOADERX_BENCH_RECORDS=/tmp/rec.bin:2048 go test -run XXX -bench GatherFile ./zrecord/
//	zstd -b3 -B2048 /tmp/rec.bin
//
// The file is cut into records of the given size (at most 256 MiB of them);
// threads=1 is the per-core figure. It is skipped without the variable.
func BenchmarkGatherFile(b *testing.B) {
	spec := os.Getenv("LOADERX_BENCH_RECORDS")
	path, sizeText, ok := strings.Cut(spec, ":")
	if !ok {
		b.Skip("LOADERX_BENCH_RECORDS=path:recordsize not set")
	}
	size, err := strconv.Atoi(sizeText)
	if err != nil || size <= 0 {
		b.Fatalf("LOADERX_BENCH_RECORDS=%q: bad record size", spec)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		b.Fatal(err)
	}
	data = data[:min(len(data), 256<<20)/size*size]
	recs := make([][]byte, len(data)/size)
	for i := range recs {
		recs[i] = data[i*size : (i+1)*size]
	}
	batches := benchBatches(64, len(recs))
	root := b.TempDir()
	defer zrecord.SetThreads(0)
	for _, codec := range []zrecord.Codec{zrecord.Raw, zrecord.Zstd} {
		s := benchStore(b, filepath.Join(root, codec.String()), codec, recs)
		for _, threads := range []int{1, 0} {
			b.Run(fmt.Sprintf("%s/threads=%d", codec, threads), func(b *testing.B) {
				zrecord.SetThreads(threads)
				dst := make([]byte, benchBatch*size)
				b.SetBytes(int64(benchBatch * size))
				b.ResetTimer()
				for i := range b.N {
					if err := s.Gather(batches[i%len(batches)], dst, size); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
		s.Close()
	}
}

// BenchmarkGatherStore gathers from existing stores, for profiling the read
// path on the data and frames another writer produced (the Python
// converter, the original loaderx):
//
//	LOADERX_BENCH_STORES=/tmp/a,/tmp/b go test -run XXX -bench GatherStore ./zrecord/
//
// Each store gets batches of 256 sorted random indices without repeats
// ("rnd") and of 256 consecutive ones ("seq"), with one thread and with the
// default fan-out. Every record must have the size of the first. It is
// skipped without the variable.
func BenchmarkGatherStore(b *testing.B) {
	spec := os.Getenv("LOADERX_BENCH_STORES")
	if spec == "" {
		b.Skip("LOADERX_BENCH_STORES=dir[,dir...] not set")
	}
	defer zrecord.SetThreads(0)
	for _, dir := range strings.Split(spec, ",") {
		s, err := zrecord.Open(dir, zrecord.WithReadOnly())
		if err != nil {
			b.Fatal(err)
		}
		n := s.Len()
		sizes := make([]int64, 1)
		if err := s.Sizes([]int64{0}, sizes); err != nil {
			b.Fatal(err)
		}
		size := int(sizes[0])
		batch := int(min(benchBatch, n))
		rng := rand.New(rand.NewPCG(3, 4))
		var rnd, seq [][]int64
		for range 64 {
			perm := rng.Perm(int(n))[:batch]
			idx := make([]int64, batch)
			for k, v := range perm {
				idx[k] = int64(v)
			}
			sort.Slice(idx, func(i, j int) bool { return idx[i] < idx[j] })
			rnd = append(rnd, idx)
			start := rng.Int64N(n - int64(batch) + 1)
			w := make([]int64, batch)
			for k := range w {
				w[k] = start + int64(k)
			}
			seq = append(seq, w)
		}
		dst := make([]byte, batch*size)
		for _, batches := range [][][]int64{rnd, seq} { // warm the page cache and the mappings
			for _, idx := range batches {
				if err := s.Gather(idx, dst, size); err != nil {
					b.Fatal(err)
				}
			}
		}
		for _, mode := range []struct {
			name    string
			batches [][]int64
		}{{"rnd", rnd}, {"seq", seq}} {
			for _, threads := range []int{1, 0} {
				b.Run(fmt.Sprintf("%s/%s/threads=%d", filepath.Base(dir), mode.name, threads), func(b *testing.B) {
					zrecord.SetThreads(threads)
					b.SetBytes(int64(batch * size))
					b.ResetTimer()
					cpu := processCPU()
					for i := range b.N {
						if err := s.Gather(mode.batches[i%len(mode.batches)], dst, size); err != nil {
							b.Fatal(err)
						}
					}
					reportCPU(b, cpu)
				})
			}
		}
		s.Close()
	}
}

// maintCase is the maintenance benchmarks' store: 64 MiB of 256 KiB
// records (mildly compressible, stored with zstd), of which 10 % are
// deleted, at random, before the compaction.
const (
	maintRecords = 256
	maintSize    = 256 << 10
)

// maintMaster writes the benchmarks' store once into dir and returns the
// indices to delete.
func maintMaster(b *testing.B, dir string) []int64 {
	b.Helper()
	s, err := zrecord.Create(dir, zrecord.WithCodec(zrecord.Zstd))
	if err != nil {
		b.Fatal(err)
	}
	if _, err := s.Append(benchRecords(maintRecords, maintSize)); err != nil {
		b.Fatal(err)
	}
	if err := s.Close(); err != nil {
		b.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	perm := rng.Perm(maintRecords)[:maintRecords/10]
	idx := make([]int64, len(perm))
	for k, p := range perm {
		idx[k] = int64(p)
	}
	return idx
}

// maintCounts sums what a file system log holds: bytes written and fsyncs.
func maintCounts(log []faultfs.Op) (written int64, syncs int) {
	for _, op := range log {
		switch op.Kind {
		case "write":
			written += int64(op.N)
		case "sync":
			syncs++
		}
	}
	return written, syncs
}

// benchMaint runs op on a fresh copy of the master store per iteration,
// timing op alone (before runs untimed on the same handle first). It
// reports the bytes op writes and the fsyncs it makes, and the same for
// the Close that follows (which syncs what op left unsynced).
func benchMaint(b *testing.B, before, op func(s *zrecord.Store, idx []int64) error) {
	root := b.TempDir()
	master := filepath.Join(root, "master")
	idx := maintMaster(b, master)
	var opBytes, closeBytes int64
	var opSyncs, closeSyncs int
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		dir := filepath.Join(root, fmt.Sprint("s", i))
		copyTree(b, master, dir)
		fs := faultfs.New(zrecord.OSFS)
		s, err := zrecord.Open(dir, zrecord.WithFS(fs))
		if err != nil {
			b.Fatal(err)
		}
		if before != nil {
			if err := before(s, idx); err != nil {
				b.Fatal(err)
			}
		}
		fs.KeepLog(true)
		b.StartTimer()
		if err := op(s, idx); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		w, n := maintCounts(fs.Log())
		opBytes, opSyncs = opBytes+w, opSyncs+n
		fs.KeepLog(true)
		if err := s.Close(); err != nil {
			b.Fatal(err)
		}
		w, n = maintCounts(fs.Log())
		closeBytes, closeSyncs = closeBytes+w, closeSyncs+n
		os.RemoveAll(dir)
		b.StartTimer()
	}
	b.StopTimer()
	n := float64(b.N)
	b.ReportMetric(float64(opBytes)/n/(1<<20), "MiB-written/op")
	b.ReportMetric(float64(opSyncs)/n, "fsyncs/op")
	b.ReportMetric(float64(closeBytes)/n/(1<<20), "close-MiB-written/op")
	b.ReportMetric(float64(closeSyncs)/n, "close-fsyncs/op")
}

// BenchmarkDelete deletes 10 % of a 64 MiB store (25 records at random)
// and reports the time, bytes written and fsyncs of the Delete alone and
// of the Close after it.
//
//	go test -run XXX -bench 'Delete|Compact' -benchtime 20x ./zrecord/
func BenchmarkDelete(b *testing.B) {
	benchMaint(b, nil, func(s *zrecord.Store, idx []int64) error { return s.Delete(idx) })
}

// BenchmarkCompact compacts the 64 MiB store after that delete (made in
// the same handle, untimed): "compact" times Compact alone, "compact+sync"
// Compact and a Sync, which makes the moved records durable and frees the
// old copies.
func BenchmarkCompact(b *testing.B) {
	del := func(s *zrecord.Store, idx []int64) error { return s.Delete(idx) }
	b.Run("compact", func(b *testing.B) {
		benchMaint(b, del, func(s *zrecord.Store, _ []int64) error { return s.Compact() })
	})
	b.Run("compact+sync", func(b *testing.B) {
		benchMaint(b, del, func(s *zrecord.Store, _ []int64) error {
			if err := s.Compact(); err != nil {
				return err
			}
			return s.Sync()
		})
	})
}

// pieceRecord returns record id of n bytes shaped like a photo: a smooth
// gradient, a per-record brightness and five bits of noise, which zstd at
// level 3 shrinks about 1.2x (the data of the Python benchmark).
func pieceRecord(id, n int) []byte {
	b := make([]byte, n)
	r := rand.New(rand.NewPCG(uint64(id), 7))
	a, c := r.IntN(64), byte(r.IntN(96))
	w := max(1, min(n, 512))
	for i := range b {
		x, y := i%w, i/w
		b[i] = c + byte((a*x+y)*128/(64*w+n/w+1)) + byte(r.IntN(32))
	}
	return b
}

// BenchmarkAppendPieces measures what a conversion does: 16 MiB pieces of
// records appended one after another to one store, with every codec, at the
// record sizes of the Python benchmark. The store is replaced (timer
// stopped) every 256 MiB. For zstd_dict the dictionary (tier balanced, the
// converter's default) is trained once, outside the timing. Every batch
// runs twice: "whole" (compressed, or for raw checksummed, in full, then
// written) and "pipelined" (the next part compresses while the previous one
// is written), the default.
//
//	go test -run XXX -bench AppendPieces -benchtime 20x ./zrecord/
func BenchmarkAppendPieces(b *testing.B) {
	const piece = 16 << 20
	for _, size := range []int{2 << 10, 12 << 10, 256 << 10} {
		n := piece / size
		recs := make([][]byte, n)
		for i := range recs {
			recs[i] = pieceRecord(i, size)
		}
		for _, codec := range []zrecord.Codec{zrecord.Raw, zrecord.Zstd, zrecord.ZstdDict} {
			var opts []zrecord.Option
			for _, mode := range []string{"whole", "pipelined"} {
				b.Run(fmt.Sprintf("%s/%dKiB/%s", codec, size>>10, mode), func(b *testing.B) {
					if codec == zrecord.ZstdDict && opts == nil { // trained once, for the runs selected
						d, err := zrecord.TrainDict(recs[:min(n, 2048)], zrecord.TierBalanced, 0)
						if err != nil {
							b.Fatal(err)
						}
						opts = []zrecord.Option{zrecord.WithDict(d), zrecord.WithDictTier(zrecord.TierBalanced)}
					}
					// Larger than any batch, so the pipeline is off; not so large
					// that twice the step times the threads overflows (1<<62
					// did, and "whole" ran pipelined with a record per part).
					step := int64(1 << 40)
					if mode == "pipelined" {
						step = 0
					}
					defer zrecord.SetPipeStepPerThread(zrecord.SetPipeStepPerThread(step))
					root := b.TempDir()
					var s *zrecord.Store
					fresh := func() {
						s = freshStore(b, root, s, append([]zrecord.Option{zrecord.WithCodec(codec)}, opts...)...)
					}
					fresh()
					defer func() { s.Close() }()
					b.SetBytes(int64(n * size))
					b.ResetTimer()
					written := 0
					for range b.N {
						if written += n * size; written > 256<<20 {
							b.StopTimer()
							fresh()
							written = n * size
							b.StartTimer()
						}
						if _, err := s.Append(recs); err != nil {
							b.Fatal(err)
						}
					}
				})
			}
		}
	}
}

// BenchmarkAppendRawVsWrite compares a raw Append of 64 MiB of records
// (what from_numpy(codec="raw") does per piece) with one write of the same
// 64 MiB into a plain file (what np.save does): both land in the page cache
// unsynced, and both replace their file or store every 256 MiB with the
// timer stopped, so they fill fresh page-cache pages alike. cpu-ns/op is
// the process's CPU time in the timed part only, the steadier figure on a
// shared machine; the ratio of the two MB/s figures is the conversion's
// throughput against the plain write's.
//
//	go test -run XXX -bench AppendRawVsWrite -benchtime 40x ./zrecord/
func BenchmarkAppendRawVsWrite(b *testing.B) {
	const batch, replaceAfter = 64 << 20, 256 << 20
	data := make([]byte, batch)
	for off := 0; off < batch; off += 1 << 20 {
		copy(data[off:], pieceRecord(off, 1<<20))
	}
	// run times op b.N times and reports the CPU time of the timed part;
	// fresh replaces the target every replaceAfter bytes, untimed.
	run := func(b *testing.B, fresh func(), op func() error) {
		fresh()
		b.SetBytes(batch)
		var cpu time.Duration
		b.ResetTimer()
		start := processCPU()
		written := 0
		for range b.N {
			if written += batch; written > replaceAfter {
				cpu += processCPU() - start
				b.StopTimer()
				fresh()
				written = batch
				b.StartTimer()
				start = processCPU()
			}
			if err := op(); err != nil {
				b.Fatal(err)
			}
		}
		cpu += processCPU() - start
		b.ReportMetric(float64(cpu)/float64(b.N), "cpu-ns/op")
	}
	b.Run("write", func(b *testing.B) {
		p := filepath.Join(b.TempDir(), "plain")
		var f *os.File
		defer func() { f.Close() }()
		off := int64(0)
		run(b, func() {
			if f != nil {
				f.Close()
			}
			os.Remove(p)
			var err error
			if f, err = os.Create(p); err != nil {
				b.Fatal(err)
			}
			off = 0
		}, func() error {
			_, err := f.WriteAt(data, off)
			off += batch
			return err
		})
	})
	for _, size := range []int{2 << 10, 12 << 10, 256 << 10} {
		recs := make([][]byte, batch/size)
		for i := range recs {
			recs[i] = data[i*size : (i+1)*size]
		}
		b.Run(fmt.Sprintf("append/%dKiB", size>>10), func(b *testing.B) {
			root := b.TempDir()
			var s *zrecord.Store
			defer func() { s.Close() }()
			run(b, func() {
				if s != nil {
					s.Close()
					os.RemoveAll(s.Dir())
				}
				var err error
				if s, err = zrecord.Create(filepath.Join(root, strconv.Itoa(rand.Int())), zrecord.WithCodec(zrecord.Raw)); err != nil {
					b.Fatal(err)
				}
			}, func() error {
				_, err := s.Append(recs)
				return err
			})
		})
	}
}

// featureRows returns count records of 512 little-endian int32 values
// taken from photo-like bytes: the 2 KiB feature rows of the Python
// benchmark, three zero bytes after each value.
func featureRows(count int) [][]byte {
	recs := make([][]byte, count)
	for i := range recs {
		p := pieceRecord(i, 512)
		r := make([]byte, 4*len(p))
		for k, v := range p {
			r[4*k] = v
		}
		recs[i] = r
	}
	return recs
}

// BenchmarkDecodeLiterals decodes batches of 256 records of 2 KiB stored
// each way a Zstd store may keep them: every frame with entropy-coded
// literals ("huffman"), every frame with plain literals ("plain"), and
// the frame the store chooses for each record ("chosen"); a record whose
// frame would not be smaller is copied, as a gather does. Frames are
// decoded on one goroutine into one buffer through capped slices.
// stored-B/rec is the mean stored size. The kinds run in turn, round after
// round (LOADERX_BENCH_ROUNDS), so they see the same load.
//
//	LOADERX_BENCH_ROUNDS=5 nice -n 10 go test -run XXX -bench DecodeLiterals ./zrecord/
func BenchmarkDecodeLiterals(b *testing.B) {
	const size, count = 2 << 10, 4096
	dec, err := zstd.NewReader(nil, zstd.WithDecodeAllCapLimit(true), zstd.WithDecoderConcurrency(1))
	if err != nil {
		b.Fatal(err)
	}
	defer dec.Close()
	for _, data := range []struct {
		name string
		recs [][]byte
	}{
		{"features", featureRows(count)},
		{"tokens", tokenRows(count, size)},
	} {
		chosen, huff, plain, err := zrecord.LiteralForms(data.recs)
		if err != nil {
			b.Fatal(err)
		}
		batches := benchBatches(64, count)
		dst := make([]byte, benchBatch*size)
		kinds := []struct {
			name   string
			frames [][]byte
		}{{"huffman", huff}, {"plain", plain}, {"chosen", chosen}}
		for range benchRounds(b) {
			for _, kind := range kinds {
				b.Run(data.name+"/"+kind.name, func(b *testing.B) {
					stored := 0
					for i, f := range kind.frames {
						stored += len(f)
						if f == nil {
							stored += len(data.recs[i])
						}
					}
					b.SetBytes(int64(benchBatch * size))
					b.ResetTimer()
					cpu := processCPU()
					for i := range b.N {
						for k, j := range batches[i%len(batches)] {
							out := dst[k*size : k*size : (k+1)*size]
							if f := kind.frames[j]; f == nil {
								copy(out[:size], data.recs[j])
							} else if _, err := dec.DecodeAll(f, out); err != nil {
								b.Fatal(err)
							}
						}
					}
					reportCPU(b, cpu)
					b.ReportMetric(float64(stored)/float64(count), "stored-B/rec")
				})
			}
		}
	}
}

// BenchmarkEncodeLiterals encodes records of 2 KiB one at a time on one
// goroutine, each way of RecordEncoders: as the store does ("store"), the
// encoder's frame alone ("huffman") and every literal plain ("plain").
// ns/op is per record; stored-B/rec the mean stored size. It measures the
// encoder's floor under a small record's conversion: the encoder, not the
// store around it, is what a Zstd conversion of 2 KiB rows spends its time
// in. The kinds run in turn, round after round (LOADERX_BENCH_ROUNDS).
//
//	LOADERX_BENCH_ROUNDS=4 go test -run XXX -bench EncodeLiterals ./zrecord/
func BenchmarkEncodeLiterals(b *testing.B) {
	const size, count = 2 << 10, 4096
	encode, closeAll, err := zrecord.RecordEncoders()
	if err != nil {
		b.Fatal(err)
	}
	defer closeAll()
	for _, data := range []struct {
		name string
		recs [][]byte
	}{
		{"features", featureRows(count)},
		{"tokens", tokenRows(count, size)},
	} {
		for range benchRounds(b) {
			for _, kind := range []string{"store", "huffman", "plain"} {
				fn := encode[kind]
				b.Run(data.name+"/"+kind, func(b *testing.B) {
					b.SetBytes(size)
					stored := 0
					for i := range b.N {
						r := data.recs[i%count]
						if f := fn(r); f != nil {
							stored += len(f)
						} else {
							stored += len(r)
						}
					}
					b.ReportMetric(float64(stored)/float64(b.N), "stored-B/rec")
				})
			}
		}
	}
}

// tokenRows returns count records of size bytes of little-endian int32
// ids with Zipf-like weights below 50,000, whose literals entropy coding
// shrinks by a third: the store keeps them Huffman-coded.
func tokenRows(count, size int) [][]byte {
	rng := rand.New(rand.NewPCG(9, 10))
	recs := make([][]byte, count)
	for i := range recs {
		r := make([]byte, size)
		for k := 0; k+4 <= size; k += 4 {
			f := rng.Float64()
			binary.LittleEndian.PutUint32(r[k:], uint32(50000*f*f*f*f*f*f))
		}
		recs[i] = r
	}
	return recs
}

// BenchmarkGatherSet is what reading one dataset as shards costs: the same
// records in one store ("1") and split in order over 4 and 16 stores read
// through a Set, gathered in random batches of 256, checked (the default)
// and, for raw, unchecked. Cells alternate round by round
// (LOADERX_BENCH_ROUNDS); the ratio of a Set's cell to the single store's
// in the same round is the cost of the shards.
//
//	LOADERX_BENCH_ROUNDS=5 nice -n 10 go test -run XXX -bench GatherSet ./zrecord/
func BenchmarkGatherSet(b *testing.B) {
	root := b.TempDir()
	for _, sz := range []struct {
		name        string
		size, count int
	}{{"4KiB", 4 << 10, 16384}, {"64KiB", 64 << 10, 2048}} {
		recs := benchRecords(sz.count, sz.size)
		batches := benchBatches(64, sz.count)
		for _, codec := range []zrecord.Codec{zrecord.Raw, zrecord.Zstd} {
			readers := map[int]interface {
				Gather([]int64, []byte, int) error
				SetVerify(bool)
			}{}
			for _, parts := range []int{1, 4, 16} {
				var stores []*zrecord.Store
				for p := range parts {
					lo, hi := len(recs)*p/parts, len(recs)*(p+1)/parts
					dir := filepath.Join(root, fmt.Sprintf("%s-%s-%d-%d", sz.name, codec, parts, p))
					stores = append(stores, benchStore(b, dir, codec, recs[lo:hi]))
				}
				if parts == 1 {
					readers[1] = stores[0]
					continue
				}
				set, err := zrecord.NewSet(stores)
				if err != nil {
					b.Fatal(err)
				}
				readers[parts] = set
			}
			dst := make([]byte, benchBatch*sz.size)
			for range benchRounds(b) {
				for _, verify := range []bool{true, false} {
					if !verify && codec != zrecord.Raw {
						continue
					}
					for _, parts := range []int{1, 4, 16} {
						r := readers[parts]
						b.Run(fmt.Sprintf("%s/%s/verify=%v/shards=%d", sz.name, codec, verify, parts), func(b *testing.B) {
							r.SetVerify(verify)
							defer r.SetVerify(true)
							b.SetBytes(int64(benchBatch * sz.size))
							b.ResetTimer()
							for i := range b.N {
								if err := r.Gather(batches[i%len(batches)], dst, sz.size); err != nil {
									b.Fatal(err)
								}
							}
						})
					}
				}
			}
		}
	}
}
