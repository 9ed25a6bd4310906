package zsampler

import (
	"fmt"
	"slices"
	"testing"
)

// cycleOf returns the global batches of every step of cycle c, in order,
// as one slice of P·G indices.
func cycleOf(t *testing.T, s Spec, c int64) []int64 {
	t.Helper()
	g := s.BatchSize * s.Shard.World
	per := s.N / g
	var all []int64
	global := Spec{Mode: Cyclic, N: s.N, BatchSize: g, Seed: s.Seed, Shard: NoShard}
	dst := make([]int64, g)
	for j := range per {
		if err := global.Fill(c*per+j, dst); err != nil {
			t.Fatal(err)
		}
		all = append(all, dst...)
	}
	return all
}

// TestFillCyclicMatchesPermutation checks the batch loop, in both its
// four-round and its general form, against perm_c(j·G + k) position by
// position.
func TestFillCyclicMatchesPermutation(t *testing.T) {
	tests := []struct {
		n, batch, world int64
	}{
		{1, 1, 1},
		{2, 1, 2},
		{1000, 7, 3},     // 8 rounds
		{1 << 16, 64, 2}, // 4 rounds, no walking
		{1<<16 + 1, 64, 2},
		{1_000_003, 100, 8},
		{1 << 40, 256, 4},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("n=%d/batch=%d/world=%d", tt.n, tt.batch, tt.world), func(t *testing.T) {
			g := uint64(tt.batch * tt.world)
			per := uint64(tt.n) / g
			dst := make([]int64, tt.batch)
			for _, step := range []uint64{0, 1, per - 1, per, 3*per + per/2, 1<<62 + 5} {
				c, j := step/per, step%per
				p := cyclePermutation(uint64(tt.n), 9, c)
				for rank := int64(0); rank < tt.world; rank++ {
					s := Spec{Mode: Cyclic, N: tt.n, BatchSize: tt.batch, Seed: 9, Shard: Shard{rank, tt.world}}
					if err := s.Fill(int64(step), dst); err != nil {
						t.Fatal(err)
					}
					for i, got := range dst {
						pos := j*g + uint64(rank*tt.batch) + uint64(i)
						if want := p.at(pos); uint64(got) != want {
							t.Fatalf("step %d rank %d [%d] = %d, want perm_%d(%d) = %d", step, rank, i, got, c, pos, want)
						}
					}
				}
			}
		})
	}
}

// TestCyclicCycle checks one cycle in full: P·G indices, none repeated.
func TestCyclicCycle(t *testing.T) {
	tests := []struct {
		n, batch, world int64
	}{
		{1, 1, 1},
		{7, 2, 3},       // G = 6: one step per cycle, one index dropped
		{1000, 1, 1},    // G = 1: every index
		{1000, 1000, 1}, // G = n
		{1000, 7, 3},    // 47 steps, 13 dropped
		{1025, 32, 4},   // walking over 2048
		{1<<16 + 1, 256, 8},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("n=%d/batch=%d/world=%d", tt.n, tt.batch, tt.world), func(t *testing.T) {
			s := Spec{Mode: Cyclic, N: tt.n, BatchSize: tt.batch, Seed: 3, Shard: Shard{0, tt.world}}
			g := tt.batch * tt.world
			for c := int64(0); c < 3; c++ {
				all := cycleOf(t, s, c)
				if want := (tt.n / g) * g; int64(len(all)) != want {
					t.Fatalf("cycle %d has %d indices, want %d", c, len(all), want)
				}
				seen := make([]bool, tt.n)
				for i, x := range all {
					if x < 0 || x >= tt.n {
						t.Fatalf("cycle %d: index %d out of range", c, x)
					}
					if seen[x] {
						t.Fatalf("cycle %d: index %d repeated at position %d", c, x, i)
					}
					seen[x] = true
				}
			}
		})
	}
}

// TestCyclicCyclesDiffer checks that each cycle has its own order and its
// own first batch.
func TestCyclicCyclesDiffer(t *testing.T) {
	s := Spec{Mode: Cyclic, N: 1000, BatchSize: 10, Seed: 4, Shard: NoShard}
	prev := cycleOf(t, s, 0)
	for c := int64(1); c < 10; c++ {
		cur := cycleOf(t, s, c)
		if slices.Equal(cur[:10], prev[:10]) {
			t.Errorf("cycles %d and %d start with the same batch %v", c-1, c, cur[:10])
		}
		same := 0
		for i := range cur {
			if cur[i] == prev[i] {
				same++
			}
		}
		// A fresh random order agrees with the last at about one position.
		if same > 10 {
			t.Errorf("cycles %d and %d agree at %d of %d positions", c-1, c, same, len(cur))
		}
		prev = cur
	}
}

// TestCyclicEveryIndexReached checks that the dropped remainder moves from
// cycle to cycle, so that every index is drawn within a few cycles.
func TestCyclicEveryIndexReached(t *testing.T) {
	tests := []struct {
		n, batch, world int64
		cycles          int64 // enough that a miss is vanishingly unlikely
	}{
		{10, 3, 1, 40},     // 1 of 10 dropped per cycle
		{10, 2, 2, 40},     // 2 of 10 dropped
		{1000, 333, 3, 10}, // 1 of 1000 dropped
		{1000, 26, 1, 10},  // 12 of 1000 dropped
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("n=%d/batch=%d/world=%d", tt.n, tt.batch, tt.world), func(t *testing.T) {
			s := Spec{Mode: Cyclic, N: tt.n, BatchSize: tt.batch, Seed: 8, Shard: Shard{0, tt.world}}
			reached := make([]bool, tt.n)
			dropped := make(map[string]bool)
			for c := range tt.cycles {
				inCycle := make([]bool, tt.n)
				for _, x := range cycleOf(t, s, c) {
					reached[x] = true
					inCycle[x] = true
				}
				var rest []int64
				for x, in := range inCycle {
					if !in {
						rest = append(rest, int64(x))
					}
				}
				dropped[fmt.Sprint(rest)] = true
			}
			for x, ok := range reached {
				if !ok {
					t.Errorf("index %d never drawn in %d cycles", x, tt.cycles)
				}
			}
			if len(dropped) < 2 {
				t.Errorf("every cycle dropped the same indices")
			}
		})
	}
}
