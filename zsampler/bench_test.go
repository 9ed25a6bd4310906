package zsampler

import (
	"fmt"
	"testing"
)

// BenchmarkFill measures one Fill call per iteration, as the C ABI makes
// one call per batch, on consecutive steps; ns/index is the cost of one
// index.
func BenchmarkFill(b *testing.B) {
	const n = 1 << 20
	for _, mode := range []Mode{Sequential, IID, Cyclic} {
		for _, batch := range []int64{256, 8192} {
			b.Run(fmt.Sprintf("mode=%v/batch=%d", mode, batch), func(b *testing.B) {
				benchmarkFill(b, Spec{Mode: mode, N: n, BatchSize: batch, Seed: 1, Shard: NoShard})
			})
		}
	}
	// Cycle walking: n = 2^20 never walks; 0.75·2^21 walks a third of the
	// time, and 2^20+1, just above a power of two, half the time.
	for _, nn := range []struct {
		name string
		n    int64
	}{{"0.75*2^21", 3 << 19}, {"2^20+1", n + 1}} {
		b.Run("mode=cyclic/batch=8192/n="+nn.name, func(b *testing.B) {
			benchmarkFill(b, Spec{Mode: Cyclic, N: nn.n, BatchSize: 8192, Seed: 1, Shard: NoShard})
		})
	}
}

func benchmarkFill(b *testing.B, s Spec) {
	dst := make([]int64, s.BatchSize)
	b.ReportAllocs()
	step := int64(0)
	for b.Loop() {
		if err := s.Fill(step, dst); err != nil {
			b.Fatal(err)
		}
		step++
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(int64(b.N)*s.BatchSize), "ns/index")
}
