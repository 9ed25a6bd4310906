package zrecord_test

import (
	"fmt"
	"math/rand"
	"path/filepath"
	"testing"
	"unsafe"

	"github.com/loaderx/loaderx/zrecord"
)

// BenchmarkGatherSplit gathers random batches of 16 KiB to 240 KiB of raw
// records of 256 B and 4 KiB from 64 MiB of them, checked and not, on one
// goroutine and split over two (every batch of 32 records or more), the
// cells in an order shuffled per round, for the threshold in
// gather_split.go. Compare the medians of each pair:
//
//	go test -run XXX -bench GatherSplit -benchtime 2000x ./zrecord/
func BenchmarkGatherSplit(b *testing.B) {
	type cell struct {
		size, n int
		verify  bool
		split   bool
	}
	defer zrecord.SetSplitSmallBytes(zrecord.SetSplitSmallBytes(0))
	stores := map[int]*zrecord.Store{}
	for _, size := range []int{256, 4096} {
		count := (64 << 20) / size
		s := benchStore(b, filepath.Join(b.TempDir(), fmt.Sprint(size)), zrecord.Raw, benchRecords(count, size))
		defer s.Close()
		stores[size] = s
	}
	var cells []cell
	for _, size := range []int{256, 4096} {
		for _, by := range []int{16 << 10, 32 << 10, 64 << 10, 128 << 10, 240 << 10} {
			for _, v := range []bool{true, false} {
				for _, sp := range []bool{false, true} {
					cells = append(cells, cell{size, by / size, v, sp})
				}
			}
		}
	}
	raw := make([]byte, 256<<10+64)
	dst := raw[int(-uintptr(unsafe.Pointer(&raw[0]))&63):]
	r := rand.New(rand.NewSource(1))
	for round := 0; round < 4; round++ {
		r.Shuffle(len(cells), func(i, j int) { cells[i], cells[j] = cells[j], cells[i] })
		for _, c := range cells {
			s := stores[c.size]
			s.SetVerify(c.verify)
			count := (64 << 20) / c.size
			batches := make([][]int64, 500)
			for i := range batches {
				batches[i] = make([]int64, c.n)
				for k := range batches[i] {
					batches[i][k] = r.Int63n(int64(count))
				}
			}
			if c.split {
				zrecord.SetSplitSmallBytes(1)
			} else {
				zrecord.SetSplitSmallBytes(1 << 62)
			}
			b.Run(fmt.Sprintf("size=%d/n=%d/v=%v/split=%v", c.size, c.n, c.verify, c.split), func(b *testing.B) {
				for i := range b.N {
					if err := s.Gather(batches[i%len(batches)], dst[:c.n*c.size], c.size); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
