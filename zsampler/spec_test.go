package zsampler

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
)

var allModes = []Mode{Sequential, IID, Cyclic}

func TestErrors(t *testing.T) {
	ok := Spec{Mode: Cyclic, N: 1000, BatchSize: 10, Seed: 1, Shard: Shard{1, 4}}
	tests := []struct {
		name    string
		edit    func(*Spec)
		step    int64
		dstLen  int
		mention []string // the field and the value the message must name
	}{
		{"unknown mode", func(s *Spec) { s.Mode = 3 }, 0, 10, []string{"mode", "Mode(3)"}},
		{"n zero", func(s *Spec) { s.N = 0 }, 0, 10, []string{"n", "0"}},
		{"n negative", func(s *Spec) { s.N = -5 }, 0, 10, []string{"n", "-5"}},
		{"batch zero", func(s *Spec) { s.BatchSize = 0 }, 0, 0, []string{"batch size", "0"}},
		{"batch negative", func(s *Spec) { s.BatchSize = -1 }, 0, 10, []string{"batch size", "-1"}},
		{"world zero", func(s *Spec) { s.Shard = Shard{} }, 0, 10, []string{"world", "0"}},
		{"world negative", func(s *Spec) { s.Shard = Shard{0, -2} }, 0, 10, []string{"world", "-2"}},
		{"rank negative", func(s *Spec) { s.Shard.Rank = -1 }, 0, 10, []string{"rank", "-1"}},
		{"rank equal to world", func(s *Spec) { s.Shard.Rank = 4 }, 0, 10, []string{"rank", "4"}},
		{"step negative", nil, -1, 10, []string{"step", "-1"}},
		{"cyclic global batch above n", func(s *Spec) { s.BatchSize = 251 }, 0, 251,
			[]string{"global batch", "1004", "1000"}},
		{"global batch overflows", func(s *Spec) { s.Mode, s.BatchSize, s.Shard = IID, 1<<32, Shard{0, 1 << 31} }, 0, 10,
			[]string{"global batch", strconv.Itoa(1 << 32), strconv.Itoa(1 << 31)}},
		{"dst too short", nil, 0, 9, []string{"dst length", "9", "10"}},
		{"dst too long", nil, 0, 11, []string{"dst length", "11"}},
		{"dst nil", nil, 0, -1, []string{"dst length", "0"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := ok
			if tt.edit != nil {
				tt.edit(&s)
			}
			var dst []int64
			if tt.dstLen >= 0 {
				dst = make([]int64, tt.dstLen)
				for i := range dst {
					dst[i] = -7
				}
			}
			check := func(how string, err error) {
				t.Helper()
				if !errors.Is(err, ErrInvalid) {
					t.Fatalf("%s: error %v, want one wrapping ErrInvalid", how, err)
				}
				for _, m := range tt.mention {
					if !strings.Contains(err.Error(), m) {
						t.Errorf("%s: error %q does not mention %q", how, err, m)
					}
				}
			}
			check("Spec.Fill", s.Fill(tt.step, dst))
			check("Fill", Fill(s.Mode, s.N, s.BatchSize, s.Seed, tt.step, s.Shard.Rank, s.Shard.World, dst))
			for i, x := range dst {
				if x != -7 {
					t.Fatalf("dst[%d] written (%d) by a failing call", i, x)
				}
			}
			// Validate sees every error that does not involve the step or dst.
			err := s.Validate()
			if tt.step >= 0 && !strings.HasPrefix(tt.name, "dst") {
				check("Validate", err)
			} else if err != nil {
				t.Errorf("Validate() = %v, want nil", err)
			}
		})
	}
}

func TestValidateAccepts(t *testing.T) {
	for _, s := range []Spec{
		{Mode: Sequential, N: 1, BatchSize: 1, Shard: NoShard},
		{Mode: IID, N: 1, BatchSize: 1 << 20, Shard: Shard{7, 8}}, // batch above n: fine with replacement
		{Mode: Sequential, N: 3, BatchSize: 100, Shard: Shard{2, 3}},
		{Mode: Cyclic, N: 1000, BatchSize: 250, Shard: Shard{3, 4}}, // G = n
		{Mode: IID, N: math.MaxInt64, BatchSize: math.MaxInt64, Shard: NoShard},
		{Mode: Cyclic, N: math.MaxInt64, BatchSize: 1 << 31, Shard: Shard{0, 1 << 31}},
	} {
		if err := s.Validate(); err != nil {
			t.Errorf("%+v: Validate() = %v", s, err)
		}
	}
}

// TestShardsMakeTheGlobalBatch checks, for every mode, that the batches of
// the ranks of a world, put side by side, are exactly the batch of one
// process with BatchSize × World, and in cyclic mode share no index.
func TestShardsMakeTheGlobalBatch(t *testing.T) {
	for _, mode := range allModes {
		for _, world := range []int64{1, 2, 3, 8} {
			t.Run(fmt.Sprintf("%v/world=%d", mode, world), func(t *testing.T) {
				const n, batch = 1009, 16
				global := Spec{Mode: mode, N: n, BatchSize: batch * world, Seed: 77, Shard: NoShard}
				want := make([]int64, batch*world)
				got := make([]int64, batch)
				for _, step := range []int64{0, 1, 7, 62, 63, 1000, 1 << 50} {
					if err := global.Fill(step, want); err != nil {
						t.Fatal(err)
					}
					var union []int64
					for rank := range world {
						s := Spec{Mode: mode, N: n, BatchSize: batch, Seed: 77, Shard: Shard{rank, world}}
						if err := s.Fill(step, got); err != nil {
							t.Fatal(err)
						}
						union = append(union, got...)
					}
					if !slices.Equal(union, want) {
						t.Fatalf("step %d: ranks give %v, one process %v", step, union, want)
					}
					if mode == Cyclic {
						sorted := slices.Clone(union)
						slices.Sort(sorted)
						if len(slices.Compact(sorted)) != len(union) {
							t.Fatalf("step %d: ranks share an index: %v", step, union)
						}
					}
				}
			})
		}
	}
}

// TestSeek checks, for every mode, that a step computed on its own equals
// the same step reached by computing every step before it, whatever order
// the steps are asked in.
func TestSeek(t *testing.T) {
	for _, mode := range allModes {
		t.Run(mode.String(), func(t *testing.T) {
			s := Spec{Mode: mode, N: 997, BatchSize: 32, Seed: 5, Shard: Shard{1, 3}}
			const steps = 200 // twenty cycles of ten steps in cyclic mode
			walked := make([][]int64, steps)
			buf := make([]int64, s.BatchSize)
			for step := range int64(steps) {
				if err := s.Fill(step, buf); err != nil {
					t.Fatal(err)
				}
				walked[step] = slices.Clone(buf)
			}
			for _, step := range []int64{199, 0, 150, 10, 11, 10, 31, 32, 33} {
				fresh := Spec{Mode: mode, N: 997, BatchSize: 32, Seed: 5, Shard: Shard{1, 3}}
				got := make([]int64, s.BatchSize)
				if err := fresh.Fill(step, got); err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(got, walked[step]) {
					t.Errorf("step %d: fresh %v, walked %v", step, got, walked[step])
				}
			}
			if mode != Sequential && slices.Equal(walked[0], walked[1]) {
				t.Errorf("steps 0 and 1 are equal: %v", walked[0])
			}
		})
	}
}

// TestSeedMatters checks that the random modes depend on the seed and that
// sequential mode ignores it.
func TestSeedMatters(t *testing.T) {
	for _, mode := range allModes {
		a, b := make([]int64, 64), make([]int64, 64)
		s := Spec{Mode: mode, N: 1 << 30, BatchSize: 64, Seed: 1, Shard: NoShard}
		if err := s.Fill(3, a); err != nil {
			t.Fatal(err)
		}
		s.Seed = 2
		if err := s.Fill(3, b); err != nil {
			t.Fatal(err)
		}
		if differ := !slices.Equal(a, b); differ != (mode != Sequential) {
			t.Errorf("%v: seeds 1 and 2 differ: %v", mode, differ)
		}
	}
}

// TestGolden pins exact outputs. The indices of a step are part of a
// training run's record: a change here means that resuming a run under a
// new version would draw different data, so it must be deliberate.
func TestGolden(t *testing.T) {
	tests := []struct {
		spec Spec
		step int64
		want []int64
	}{
		{Spec{Mode: Sequential, N: 1_000_003, BatchSize: 8, Seed: 42, Shard: Shard{1, 2}}, 125_000, []int64{2, 3, 4, 5, 6, 7, 8, 9}},
		{Spec{Mode: IID, N: 1_000_003, BatchSize: 8, Seed: 42, Shard: NoShard}, 0, []int64{664019, 496543, 847539, 179657, 887980, 120859, 200474, 228747}},
		{Spec{Mode: IID, N: 1_000_003, BatchSize: 8, Seed: 42, Shard: Shard{1, 2}}, 1 << 40, []int64{290489, 862871, 490157, 972538, 48605, 198148, 454432, 292070}},
		{Spec{Mode: Cyclic, N: 1_000_003, BatchSize: 8, Seed: 42, Shard: NoShard}, 0, []int64{41875, 831131, 931306, 806575, 195181, 13411, 297731, 619299}},
		{Spec{Mode: Cyclic, N: 1_000_003, BatchSize: 8, Seed: 42, Shard: Shard{1, 2}}, 1 << 40, []int64{989258, 345676, 579620, 52629, 230568, 896339, 958058, 621868}},
		{Spec{Mode: Cyclic, N: 10, BatchSize: 3, Seed: 42, Shard: NoShard}, 4, []int64{3, 6, 1}},
	}
	for _, tt := range tests {
		got := make([]int64, tt.spec.BatchSize)
		if err := tt.spec.Fill(tt.step, got); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, tt.want) {
			t.Errorf("%+v step %d = %#v, want %#v", tt.spec, tt.step, got, tt.want)
		}
	}
}

func TestFillDoesNotAllocate(t *testing.T) {
	for _, mode := range allModes {
		s := Spec{Mode: mode, N: 1<<20 + 1, BatchSize: 256, Seed: 1, Shard: Shard{1, 2}}
		dst := make([]int64, s.BatchSize)
		step := int64(0)
		allocs := testing.AllocsPerRun(100, func() {
			if err := s.Fill(step, dst); err != nil {
				t.Fatal(err)
			}
			if err := Fill(s.Mode, s.N, s.BatchSize, s.Seed, step, 1, 2, dst); err != nil {
				t.Fatal(err)
			}
			step++
		})
		if allocs != 0 {
			t.Errorf("%v: %v allocations per call", mode, allocs)
		}
	}
}

// TestConcurrentFill runs the same specs from several goroutines at once
// (meaningful under -race): Fill shares nothing between calls.
func TestConcurrentFill(t *testing.T) {
	const steps = 64
	specs := []Spec{
		{Mode: Sequential, N: 1000, BatchSize: 32, Shard: NoShard},
		{Mode: IID, N: 1000, BatchSize: 32, Seed: 1, Shard: Shard{1, 2}},
		{Mode: Cyclic, N: 1 << 20, BatchSize: 300, Seed: 1, Shard: Shard{2, 3}},
		{Mode: Cyclic, N: 1000, BatchSize: 32, Seed: 1, Shard: NoShard},
	}
	want := make([][][]int64, len(specs))
	for i, s := range specs {
		for step := range int64(steps) {
			dst := make([]int64, s.BatchSize)
			if err := s.Fill(step, dst); err != nil {
				t.Fatal(err)
			}
			want[i] = append(want[i], dst)
		}
	}
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i, s := range specs {
				dst := make([]int64, s.BatchSize)
				for step := range int64(steps) {
					step := (step + int64(w)*17) % steps
					if err := s.Fill(step, dst); err != nil {
						t.Error(err)
						return
					}
					if !slices.Equal(dst, want[i][step]) {
						t.Errorf("goroutine %d: spec %d step %d differs", w, i, step)
						return
					}
				}
			}
		})
	}
	wg.Wait()
}
