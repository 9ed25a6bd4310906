package zrecord_test

import (
	"fmt"
	"path/filepath"
	"testing"
	"unsafe"

	"github.com/loaderx/loaderx/zrecord"
)

// BenchmarkGather256 gathers batches of 256 records of 256 bytes from 64
// MiB of them, the case where the work per record decides the speed: the
// same batch again and again (hot: the work that is not a cache miss) and
// random batches (rand), checked and not, the same random batches from a
// lazy set of the same records cut into 16 stores (set16), next to a
// plain copy of the same records out of one slice (rand/copy, what
// np.take does), and the cost of a call for one record (one).
//
//	go test -run XXX -bench Gather256 -count 5 ./zrecord/
func BenchmarkGather256(b *testing.B) {
	const size, count = 256, 262144
	recs := benchRecords(count, size)
	s := benchStore(b, filepath.Join(b.TempDir(), "raw"), zrecord.Raw, recs)
	defer s.Close()
	batches := benchBatches(2000, count)
	const parts = 16
	shards := make([]zrecord.Shard, parts)
	for p := range parts {
		lo, hi := count*p/parts, count*(p+1)/parts
		dir := filepath.Join(b.TempDir(), fmt.Sprint(p))
		benchStore(b, dir, zrecord.Raw, recs[lo:hi]).Close()
		shards[p] = zrecord.Shard{Dir: dir, Len: int64(hi - lo)}
	}
	set, err := zrecord.OpenSet(shards, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer set.Close()
	raw := make([]byte, benchBatch*size+64)
	dst := raw[int(-uintptr(unsafe.Pointer(&raw[0]))&63):][:benchBatch*size]
	for _, verify := range []bool{true, false} {
		s.SetVerify(verify)
		set.SetVerify(verify)
		what := map[bool]string{true: "verified", false: "unverified"}[verify]
		for _, c := range []struct {
			name    string
			batches [][]int64
		}{{"hot", batches[:1]}, {"rand", batches}} {
			b.Run(c.name+"/"+what, func(b *testing.B) {
				b.SetBytes(benchBatch * size)
				for i := range b.N {
					if err := s.Gather(c.batches[i%len(c.batches)], dst, size); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
		b.Run("set16/"+what, func(b *testing.B) {
			b.SetBytes(benchBatch * size)
			for i := range b.N {
				if err := set.Gather(batches[i%len(batches)], dst, size); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("one/"+what, func(b *testing.B) {
			idx := []int64{12345}
			for range b.N {
				if err := s.Gather(idx, dst[:size], size); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	b.Run("rand/copy", func(b *testing.B) {
		flat := make([]byte, count*size)
		for i, r := range recs {
			copy(flat[i*size:], r)
		}
		b.SetBytes(benchBatch * size)
		b.ResetTimer()
		for i := range b.N {
			for k, j := range batches[i%len(batches)] {
				copy(dst[k*size:(k+1)*size], flat[int(j)*size:int(j+1)*size])
			}
		}
	})
}
