package zsampler

import (
	"math"
	"math/bits"
	"testing"
)

// reducer maps the word stream of a step to [0, n): draw(key, k, n) is the
// value at position k.
type reducer func(key, k, n uint64) uint64

// lemire is fillIID for one position: the reduction the package uses.
func lemire(key, k, n uint64) uint64 {
	hi, lo := bits.Mul64(iidWord(key, k), n)
	if lo < n {
		hi = iidRetry(key, k, n, lo, hi)
	}
	return hi
}

// Deliberately biased reductions of the same word stream, to show that the
// bias battery can tell them from lemire.

// modulo64 is w mod n on the full 64-bit word. Its bias is about n/2^64, so
// it shows only for large n whose multiples do not line up with 2^64.
func modulo64(key, k, n uint64) uint64 { return iidWord(key, k) % n }

// maskModulo masks the word to the bit length of n and reduces by modulo:
// for n = 2^k+1 the two largest values get half the weight of the others.
func maskModulo(key, k, n uint64) uint64 {
	return (iidWord(key, k) & (1<<bits.Len64(n) - 1)) % n
}

// drawer returns the values of steps 0, 1, ... of a stream, per positions
// 0..perStep-1, reduced by r.
func drawer(seed, n uint64, perStep int64, r reducer) func(i int64) uint64 {
	return func(i int64) uint64 {
		step, k := uint64(i/perStep), uint64(i%perStep)
		return r(iidKey(seed, step), k, n)
	}
}

// Large index spaces for the bias battery. At 0.4·2^64 a 64-bit word covers
// the space 2.5 times, the worst case for modulo reduction below 2^63: it
// gives the low half of the space 3/2 the weight of the high half. Lemire
// rejects a fifth of the words there, so the rejection path is exercised.
const (
	n04   = 7378697629483820646 // ⌊0.4 · 2^64⌋
	n62p1 = 1<<62 + 1
)

func TestIIDUniform(t *testing.T) {
	tests := []struct {
		name  string
		n     uint64
		draws int64
	}{
		{"n=2", 2, 200_000},
		{"n=7", 7, 200_000},
		{"n=1000", 1000, 1_000_000},
		{"n=2^4+1", 1<<4 + 1, 1_000_000},
		{"n=2^10", 1 << 10, 1_000_000},
		{"n=2^10+1", 1<<10 + 1, 1_000_000},
		{"n=2^20+1", 1<<20 + 1, 1_000_000},
		{"n=2^32+1", 1<<32 + 1, 1_000_000},
		{"n=2^62+1", n62p1, 1_000_000},
		{"n=0.4*2^64", n04, 1_000_000},
		{"n=2^63-1", math.MaxInt64, 1_000_000},
	}
	// The p-values form one family, each held to alpha/(2·cases).
	level := alpha / float64(2*len(tests))
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u := testUniform(tt.n, tt.draws, drawer(7, tt.n, 1000, lemire))
			t.Logf("p: chi-square %.3g, half %.3g (z %+.2f)", u.chi2P, u.halfP, u.halfZ)
			if u.worst() < level {
				t.Errorf("uniformity rejected at p < %.2g: %+v", level, u)
			}
		})
	}
}

// TestIIDBiasDetected is the negative control of TestIIDUniform: the same
// battery, on the same word stream, must reject each biased reduction.
func TestIIDBiasDetected(t *testing.T) {
	tests := []struct {
		name   string
		n      uint64
		draws  int64
		reduce reducer
		by     func(uniformity) float64 // the test that must catch it
	}{
		// The top two of 2^10+1 values at half weight: only the per-value
		// chi-square sees two cells out of 1025.
		{"mask-modulo n=2^10+1", 1<<10 + 1, 1_000_000, maskModulo,
			func(u uniformity) float64 { return u.chi2P }},
		// With few values the same shift of weight moves the halves too.
		{"mask-modulo n=2^4+1", 1<<4 + 1, 1_000_000, maskModulo,
			func(u uniformity) float64 { return u.halfP }},
		{"modulo n=0.4*2^64", n04, 100_000, modulo64,
			func(u uniformity) float64 { return u.halfP }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u := testUniform(tt.n, tt.draws, drawer(7, tt.n, 1000, tt.reduce))
			t.Logf("p: chi-square %.3g, half %.3g (z %+.2f)", u.chi2P, u.halfP, u.halfZ)
			if p := tt.by(u); p >= alpha {
				t.Errorf("bias not detected: p = %.3g, want < %v", p, alpha)
			}
		})
	}
}

// TestIIDMatchesReference checks fillIID, rank by rank, against the
// position-by-position definition.
func TestIIDMatchesReference(t *testing.T) {
	for _, n := range []uint64{1, 2, 1000, 1<<20 + 1, n04, math.MaxInt64} {
		for _, step := range []uint64{0, 1, 99, math.MaxInt64} {
			const batch, world = 64, 3
			for rank := uint64(0); rank < world; rank++ {
				dst := make([]int64, batch)
				fillIID(dst, n, 11, step, rank*batch)
				key := iidKey(11, step)
				for i, got := range dst {
					want := lemire(key, rank*batch+uint64(i), n)
					if uint64(got) != want {
						t.Fatalf("n %d step %d rank %d [%d] = %d, want %d", n, step, rank, i, got, want)
					}
				}
			}
		}
	}
}

// TestIIDRejection checks the rejection path at n = 0.4·2^64, where a fifth
// of the first draws fail: the redraw is deterministic, in range, and the
// rate of first-draw rejections is as predicted.
func TestIIDRejection(t *testing.T) {
	n := uint64(n04)
	threshold := -n % n
	key := iidKey(3, 5)
	const draws = 100_000
	var rejected int64
	for k := uint64(0); k < draws; k++ {
		if _, lo := bits.Mul64(iidWord(key, k), n); lo < threshold {
			rejected++
		}
		a, b := lemire(key, k, n), lemire(key, k, n)
		if a != b || a >= n {
			t.Fatalf("position %d: draws %d and %d", k, a, b)
		}
	}
	q := float64(threshold) / math.Exp2(64)
	if _, p := binomialP(rejected, draws, q); p < alpha {
		t.Errorf("%d of %d first draws rejected, want about %.0f", rejected, draws, q*float64(draws))
	}
}

// TestIIDStreamsDiffer checks that neighbouring seeds, steps and positions
// give unrelated words: among draws from a space of 2^62+1 no two coincide.
func TestIIDStreamsDiffer(t *testing.T) {
	seen := make(map[uint64]string)
	for seed := uint64(0); seed < 8; seed++ {
		for step := uint64(0); step < 8; step++ {
			for k := uint64(0); k < 64; k++ {
				v := lemire(iidKey(seed, step), k, n62p1)
				if _, ok := seen[v]; ok {
					t.Fatalf("seed %d step %d position %d repeats a value", seed, step, k)
				}
				seen[v] = ""
			}
		}
	}
}
