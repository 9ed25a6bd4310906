package steppipe

import (
	"fmt"
	"testing"
	"time"
)

// nopSource gathers nothing: what is left of a step is the pipeline's own
// cost (claim, draw, publish, hand-over).
type nopSource struct{}

func (nopSource) Gather([]int64, []byte, int) error { return nil }

// BenchmarkStep is the cost of one step handed over when the gather costs
// nothing, by workers and batch size (the draw is a cyclic sampler's).
func BenchmarkStep(b *testing.B) {
	for _, workers := range []int{1, 2, 4} {
		for _, batch := range []int{1, 256} {
			b.Run(fmt.Sprintf("workers=%d/batch=%d", workers, batch), func(b *testing.B) {
				p, err := New(Config{Draw: cyclic(1<<20, int64(batch)), Batch: batch, Workers: workers,
					Prefetch: 2 * workers, End: -1, Slots: slots(2*workers+4, batch, []int{8}, 0),
					Streams: []Stream{{Name: "x", Dense: nopSource{}, Stride: 8}}})
				if err != nil {
					b.Fatal(err)
				}
				p.Start()
				defer p.Close()
				var release []int
				b.ResetTimer()
				for range b.N {
					got, err := p.Next(time.Second, release)
					if err != nil {
						b.Fatal(err)
					}
					release = append(release[:0], got.Slot)
				}
			})
		}
	}
}
