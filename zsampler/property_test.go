package zsampler

import (
	"flag"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

var propertySeed = flag.Uint64("zsampler.seed", 0,
	"seed of TestProperties (0: a fresh one, printed by the test)")

// randomSpec returns a valid Spec of the given mode with a random n (spread
// over all magnitudes up to 2^63−1), batch size, world and rank.
func randomSpec(r *rand.Rand, mode Mode) Spec {
	var n int64
	switch r.IntN(4) {
	case 0:
		n = 1 + r.Int64N(20)
	case 1:
		bits := 1 + r.IntN(62)
		n = int64(1)<<bits + r.Int64N(3) - 1 // around a power of two
	default:
		n = 1 + r.Int64N(int64(1)<<(1+r.IntN(62)))
	}
	if r.IntN(20) == 0 {
		n = math.MaxInt64
	}
	world := 1 + r.Int64N(8)
	batch := 1 + r.Int64N(64)
	if mode == Cyclic && batch*world > n {
		world = 1 + r.Int64N(min(n, 8))
		batch = 1 + r.Int64N(n/world)
	}
	return Spec{Mode: mode, N: n, BatchSize: batch, Seed: r.Uint64(), Shard: Shard{r.Int64N(world), world}}
}

// TestProperties checks, on random specs and steps, what every mode
// promises: indices in range; the same answer on every call and through
// Fill; the ranks together making the one-process batch; in cyclic mode no
// index twice in a step, and in sequential mode consecutive indices.
func TestProperties(t *testing.T) {
	seed := *propertySeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (rerun with -zsampler.seed=%d)", seed, seed)
	r := rand.New(rand.NewPCG(seed, 0))

	iterations := 2000
	if testing.Short() {
		iterations = 200
	}
	for it := 0; it < iterations; it++ {
		mode := allModes[r.IntN(len(allModes))]
		s := randomSpec(r, mode)
		if err := s.Validate(); err != nil {
			t.Fatalf("randomSpec gave an invalid spec %+v: %v", s, err)
		}
		step := r.Int64N(1000)
		if r.IntN(4) == 0 {
			step = r.Int64N(math.MaxInt64)
		}

		got := make([]int64, s.BatchSize)
		if err := s.Fill(step, got); err != nil {
			t.Fatalf("%+v step %d: %v", s, step, err)
		}
		for i, x := range got {
			if x < 0 || x >= s.N {
				t.Fatalf("%+v step %d: [%d] = %d out of range", s, step, i, x)
			}
		}

		again := make([]int64, s.BatchSize)
		if err := Fill(s.Mode, s.N, s.BatchSize, s.Seed, step, s.Shard.Rank, s.Shard.World, again); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, again) {
			t.Fatalf("%+v step %d: Spec.Fill %v, Fill %v", s, step, got, again)
		}

		g := s.BatchSize * s.Shard.World
		global := Spec{Mode: s.Mode, N: s.N, BatchSize: g, Seed: s.Seed, Shard: NoShard}
		all := make([]int64, g)
		if err := global.Fill(step, all); err != nil {
			t.Fatal(err)
		}
		first := s.Shard.Rank * s.BatchSize
		if !slices.Equal(got, all[first:first+s.BatchSize]) {
			t.Fatalf("%+v step %d: rank batch %v is not its part of the global batch", s, step, got)
		}

		switch mode {
		case Cyclic:
			sorted := slices.Clone(all)
			slices.Sort(sorted)
			if len(slices.Compact(sorted)) != len(all) {
				t.Fatalf("%+v step %d: global batch repeats an index", s, step)
			}
		case Sequential:
			for i := 1; i < len(all); i++ {
				if all[i] != (all[i-1]+1)%s.N {
					t.Fatalf("%+v step %d: [%d] = %d follows %d", s, step, i, all[i], all[i-1])
				}
			}
		}
	}
}
