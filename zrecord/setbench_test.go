package zrecord_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/loaderx/loaderx/zrecord"
)

// BenchmarkSetGatherShards is what reading a dataset as many shards costs
// against reading it as one store: batches of 256 random records, warm,
// from one store ("store") and from lazy sets (OpenSet, the process-wide
// cache) of the same records cut into 16, 1,000 and 10,000 shards. The
// ratio of a set's throughput to the store's, side by side in one run, is
// the cost of the shards.
//
//	go test -run XXX -bench SetGatherShards -benchtime 2s ./zrecord/
//
// The stores are written under /dev/shm where there is one (10,000 Creates
// sync less there), else under the test's temporary directory.
//
// Measured on the 2-core development machine (a shared AMD EPYC virtual
// machine), LOADERX_BENCH_ROUNDS=3, the medians of the per-round ratios of
// a set's throughput to the store's, for 16, 1,000 and 10,000 shards, over
// two runs: 4 KiB records 0.96-0.99, 0.85-0.91, 0.82-0.87; 512-byte
// records 0.82-0.83, 0.51-0.55, 0.38-0.41. Small
// records across 10,000 shards are bound by memory: a loop that only loads
// what such a batch must (a table entry and a record from each of 20,000
// small mappings, and a line of each store's cache entry) ran at 0.4 times
// the same loads from one table and one chunk here.
func BenchmarkSetGatherShards(b *testing.B) {
	root := benchShardRoot(b)
	const count = 40000
	for _, size := range []int{512, 4 << 10} {
		recs := benchRecords(count, size)
		batches := benchBatches(64, count)
		name := fmt.Sprintf("%dB", size)
		readers := map[string]interface {
			Gather([]int64, []byte, int) error
		}{}
		one := benchStore(b, filepath.Join(root, name+"-one"), zrecord.Raw, recs)
		readers["store"] = one
		order := []string{"store"}
		for _, parts := range []int{16, 1000, 10000} {
			shards := make([]zrecord.Shard, parts)
			for p := range parts {
				lo, hi := count*p/parts, count*(p+1)/parts
				// A directory of at most 100 stores: Create looks through
				// the parent for what an interrupted Create left.
				dir := filepath.Join(root, fmt.Sprintf("%s-%d", name, parts), fmt.Sprint(p/100), fmt.Sprint(p))
				s, err := zrecord.Create(dir)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := s.Append(recs[lo:hi]); err != nil {
					b.Fatal(err)
				}
				if err := s.CloseUnsynced(); err != nil {
					b.Fatal(err)
				}
				shards[p] = zrecord.Shard{Dir: dir, Len: int64(hi - lo)}
			}
			set, err := zrecord.OpenSet(shards, nil)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { set.Close() })
			// Warm: every store open, every page in the cache.
			dst := make([]byte, 64*size)
			for i := 0; i < count; i += 64 {
				idx := make([]int64, 0, 64)
				for k := i; k < min(i+64, count); k++ {
					idx = append(idx, int64(k))
				}
				if err := set.Gather(idx, dst[:len(idx)*size], size); err != nil {
					b.Fatal(err)
				}
			}
			key := fmt.Sprintf("shards=%d", parts)
			readers[key] = set
			order = append(order, key)
		}
		dst := make([]byte, benchBatch*size)
		for range benchRounds(b) {
			for _, key := range order {
				r := readers[key]
				b.Run(fmt.Sprintf("%s/%s", name, key), func(b *testing.B) {
					b.SetBytes(int64(benchBatch * size))
					b.ResetTimer()
					for i := range b.N {
						if err := r.Gather(batches[i%len(batches)], dst, size); err != nil {
							b.Fatal(err)
						}
					}
				})
			}
		}
		one.Close()
	}
}

// benchShardRoot is a directory for many small stores: under /dev/shm when
// it exists, removed at the end.
func benchShardRoot(b *testing.B) string {
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		dir, err := os.MkdirTemp("/dev/shm", "zrecord-bench-")
		if err == nil {
			b.Cleanup(func() { os.RemoveAll(dir) })
			return dir
		}
	}
	return b.TempDir()
}
