package zsampler

import (
	"fmt"
	"math"
	"math/big"
	"slices"
	"testing"
)

func TestSequentialValues(t *testing.T) {
	tests := []struct {
		name            string
		n, batch, world int64
		rank, step      int64
		want            []int64
	}{
		{"first batch", 10, 4, 1, 0, 0, []int64{0, 1, 2, 3}},
		{"second batch", 10, 4, 1, 0, 1, []int64{4, 5, 6, 7}},
		{"wraps at n", 10, 4, 1, 0, 2, []int64{8, 9, 0, 1}},
		{"continues after the wrap", 10, 4, 1, 0, 3, []int64{2, 3, 4, 5}},
		{"batch divides n", 8, 4, 1, 0, 2, []int64{0, 1, 2, 3}},
		{"batch larger than n", 3, 7, 1, 0, 1, []int64{1, 2, 0, 1, 2, 0, 1}},
		{"n = 1", 1, 3, 1, 0, 5, []int64{0, 0, 0}},
		{"rank 0 of 2", 10, 3, 2, 0, 1, []int64{6, 7, 8}},
		{"rank 1 of 2 wraps", 10, 3, 2, 1, 1, []int64{9, 0, 1}},
		{"rank 2 of 3", 10, 2, 3, 2, 4, []int64{8, 9}},
		{"huge step", 10, 4, 1, 0, math.MaxInt64, []int64{8, 9, 0, 1}}, // (2^63−1)·4 ≡ 8 mod 10
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := Spec{Mode: Sequential, N: tt.n, BatchSize: tt.batch, Shard: Shard{tt.rank, tt.world}}
			got := make([]int64, tt.batch)
			if err := s.Fill(tt.step, got); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("step %d = %v, want %v", tt.step, got, tt.want)
			}
		})
	}
}

// TestSequentialHugeSteps checks (s·G + k) mod n exactly, against math/big,
// where s·G overflows 64 bits by far.
func TestSequentialHugeSteps(t *testing.T) {
	tests := []struct{ n, batch, world int64 }{
		{1_000_003, 256, 8},
		{math.MaxInt64, 1 << 16, 1 << 40},
		{math.MaxInt64 - 24, 3, 5},
		{1<<62 + 1, 1 << 10, 1 << 31},
		{1 << 62, 1000, 1 << 52},
	}
	steps := []int64{math.MaxInt64, math.MaxInt64 - 1, 1 << 62, 1<<40 + 12345}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("n=%d/batch=%d/world=%d", tt.n, tt.batch, tt.world), func(t *testing.T) {
			got := make([]int64, tt.batch)
			for _, step := range steps {
				for _, rank := range []int64{0, 1, tt.world - 1} {
					s := Spec{Mode: Sequential, N: tt.n, BatchSize: tt.batch, Shard: Shard{rank, tt.world}}
					if err := s.Fill(step, got); err != nil {
						t.Fatal(err)
					}
					// (step·batch·world + rank·batch + i) mod n
					base := new(big.Int).Mul(big.NewInt(step), big.NewInt(tt.batch))
					base.Mul(base, big.NewInt(tt.world))
					base.Add(base, new(big.Int).Mul(big.NewInt(rank), big.NewInt(tt.batch)))
					for i := range tt.batch {
						if i >= 64 && i < tt.batch-64 {
							continue // the ends suffice: the middle steps by one
						}
						want := new(big.Int).Add(base, big.NewInt(i))
						want.Mod(want, big.NewInt(tt.n))
						if got[i] != want.Int64() {
							t.Fatalf("step %d rank %d [%d] = %d, want %v", step, rank, i, got[i], want)
						}
					}
				}
			}
		})
	}
}
