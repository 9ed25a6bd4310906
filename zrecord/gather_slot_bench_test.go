package zrecord_test

import (
	"fmt"
	"math"
	"path/filepath"
	"sync"
	"testing"

	"github.com/loaderx/loaderx/zrecord"
)

// BenchmarkGatherSlots is a data loader's workers in Go: two goroutines,
// each filling a ring of slots (buffers of one batch each, taken in turn)
// with GatherSlot from a warm store of 64 MiB of random records, verified.
// Each case runs with the slots written through the caches ("cached") and
// past them ("streamed"), whatever streamSlotMin says, so that the two
// MB/s figures side by side say where the threshold belongs on this CPU.
// A ring of one or two slots is a loader whose consumer keeps up (the
// workers reuse the slot given back last); one of 12 is a loader whose
// prefetch window is full, every slot written in turn.
//
//	go test -run XXX -bench GatherSlots -count 3 ./zrecord/
func BenchmarkGatherSlots(b *testing.B) {
	const storeBytes = 64 << 20
	root := b.TempDir()
	for _, tc := range []struct {
		name   string
		size   int
		batch  int
		narrow bool
	}{
		{"256B", 256, 256, false},
		{"1KiB", 1 << 10, 256, false},
		{"2KiB", 2 << 10, 256, false},
		{"4KiB", 4 << 10, 256, false},
		{"tokens-int32-8KiB", 8 << 10, 256, true},
		{"64KiB", 64 << 10, 64, false},
		{"1MiB", 1 << 20, 16, false},
	} {
		count := storeBytes / tc.size
		var s *zrecord.Store
		if tc.narrow {
			s = benchStore(b, filepath.Join(root, tc.name), zrecord.Narrow, zipfRows(count, tc.size, 4), zrecord.WithElement(4, true))
		} else {
			s = benchStore(b, filepath.Join(root, tc.name), zrecord.Raw, benchRecords(count, tc.size))
		}
		batches := slotBatches(64, tc.batch, count)
		for _, slots := range []int{1, 2, 12} {
			for _, mode := range []struct {
				name string
				min  int64
			}{{"cached", math.MaxInt64}, {"streamed", 0}} {
				b.Run(fmt.Sprintf("%s/slots=%d/%s", tc.name, slots, mode.name), func(b *testing.B) {
					defer zrecord.SetStreamSlotMin(zrecord.SetStreamSlotMin(mode.min))
					const workers = 2
					rings := make([][][]byte, workers)
					for w := range rings {
						for range slots {
							rings[w] = append(rings[w], make([]byte, tc.batch*tc.size))
						}
					}
					b.SetBytes(int64(workers * tc.batch * tc.size))
					b.ResetTimer()
					var wg sync.WaitGroup
					errs := make([]error, workers)
					for w := range workers {
						wg.Add(1)
						go func() {
							defer wg.Done()
							for i := range b.N {
								idx := batches[(i*workers+w)%len(batches)]
								if err := s.GatherSlot(idx, rings[w][i%slots], tc.size); err != nil {
									errs[w] = err
									return
								}
							}
						}()
					}
					wg.Wait()
					for _, err := range errs {
						if err != nil {
							b.Fatal(err)
						}
					}
				})
			}
		}
		s.Close()
	}
}

// slotBatches returns n batches of size random indices below count.
func slotBatches(n, size, count int) [][]int64 {
	all := benchBatches(n, count)
	for i := range all {
		all[i] = all[i][:min(size, len(all[i]))]
	}
	return all
}
