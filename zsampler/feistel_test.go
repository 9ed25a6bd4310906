package zsampler

import (
	"fmt"
	"math"
	"math/bits"
	"slices"
	"testing"
)

// TestFeistelBijection checks the raw network over [0, 2^b) for every width
// up to 20, odd and even, forward and inverse.
func TestFeistelBijection(t *testing.T) {
	for b := uint(0); b <= 20; b++ {
		f := newFeistel(b, mix64(uint64(b)))
		size := uint64(1) << b
		seen := make([]bool, size)
		for x := uint64(0); x < size; x++ {
			y := f.forward(x)
			if y >= size {
				t.Fatalf("b=%d: forward(%d) = %d, out of range", b, x, y)
			}
			if seen[y] {
				t.Fatalf("b=%d: forward(%d) = %d, already taken", b, x, y)
			}
			seen[y] = true
			if z := f.inverse(y); z != x {
				t.Fatalf("b=%d: inverse(forward(%d)) = %d", b, x, z)
			}
		}
	}
}

// TestPermutationBijection checks perm_c on [0, n) in full: every image in
// range, no image taken twice, and index undoing at. Several seeds and
// cycles per n; n just above a power of two makes the cycle walks longest.
func TestPermutationBijection(t *testing.T) {
	tests := []struct {
		name string
		n    uint64
		keys int
	}{
		{"n=1", 1, 4},
		{"n=2", 2, 4},
		{"n=3", 3, 4},
		{"n=7", 7, 4},
		{"n=2^10", 1 << 10, 4},
		{"n=2^10+1", 1<<10 + 1, 4},
		{"n=1000", 1000, 4},
		{"n=2^16", 1 << 16, 2},
		{"n=2^17+1", 1<<17 + 1, 2},
		{"n=1_000_003", 1_000_003, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for key := 0; key < tt.keys; key++ {
				seed, c := uint64(key/2), uint64(key%2)
				p := cyclePermutation(tt.n, seed, c)
				seen := make([]bool, tt.n)
				for x := uint64(0); x < tt.n; x++ {
					y := p.at(x)
					if y >= tt.n {
						t.Fatalf("seed %d cycle %d: perm(%d) = %d, out of range", seed, c, x, y)
					}
					if seen[y] {
						t.Fatalf("seed %d cycle %d: perm(%d) = %d, already taken", seed, c, x, y)
					}
					seen[y] = true
					if z := p.index(y); z != x {
						t.Fatalf("seed %d cycle %d: index(perm(%d)) = %d", seed, c, x, z)
					}
				}
			}
		})
	}
}

// TestPermutationLarge samples permutations far too large to check in full:
// 10^5 points of each map into range without collision, and the inverse
// takes every image back.
func TestPermutationLarge(t *testing.T) {
	tests := []struct {
		name string
		n    uint64
	}{
		{"n=2^40", 1 << 40},
		{"n=2^40+1", 1<<40 + 1},
		{"n=2^62", 1 << 62},
		{"n=2^62+1", 1<<62 + 1},
		{"n=2^63-1", math.MaxInt64},
	}
	const samples = 100_000
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := cyclePermutation(tt.n, 17, 3)
			images := make(map[uint64]uint64, samples)
			// Half the points are consecutive from 0, half spread out.
			for i := uint64(0); i < samples; i++ {
				x := i
				if i%2 == 1 {
					x = mix64(i) % tt.n
				}
				y := p.at(x)
				if y >= tt.n {
					t.Fatalf("perm(%d) = %d, out of range", x, y)
				}
				if prev, ok := images[y]; ok && prev != x {
					t.Fatalf("perm(%d) = perm(%d) = %d", x, prev, y)
				}
				images[y] = x
				if z := p.index(y); z != x {
					t.Fatalf("index(perm(%d)) = %d", x, z)
				}
			}
		})
	}
}

// neighbourStats draws the permutations of cycles 0..cycles-1 and tests two
// things with chi-square: that the image of position x is uniform over
// [0, n), and that the difference between the images of x and x+1 (two
// indices a batch puts side by side) is uniform over [1, n). It returns the
// two p-values.
func neighbourStats(n, x, cycles uint64, perm func(c uint64) permutation) (pImage, pGap float64) {
	image := make([]int64, n)
	gap := make([]int64, n-1)
	for c := range cycles {
		p := perm(c)
		a, b := p.at(x), p.at(x+1)
		image[a]++
		gap[(b+n-a)%n-1]++
	}
	expImage := make([]float64, n)
	for i := range expImage {
		expImage[i] = float64(cycles) / float64(n)
	}
	expGap := make([]float64, n-1)
	for i := range expGap {
		expGap[i] = float64(cycles) / float64(n-1)
	}
	_, pImage = chiSquare(image, expImage)
	_, pGap = chiSquare(gap, expGap)
	return pImage, pGap
}

// TestPermutationUniform checks that the permutations look random from one
// cycle to the next, for domains of 2 to 12 bits, and so that the number of
// rounds roundsFor gives each width suffices. The 52 p-values form one
// family: each is held to alpha/52, so that the whole test has a false
// alarm rate of alpha.
func TestPermutationUniform(t *testing.T) {
	ns := []uint64{3, 5, 7, 8, 16, 17, 31, 64, 100, 257, 1000, 1025, 4096}
	positions := func(n uint64) []uint64 { return []uint64{0, n - 2} }
	level := alpha / float64(len(ns)*2*2)
	for _, n := range ns {
		t.Run(fmt.Sprintf("n=%d", n), func(t *testing.T) {
			for _, x := range positions(n) {
				pImage, pGap := neighbourStats(n, x, 100_000, func(c uint64) permutation {
					return cyclePermutation(n, 5, c)
				})
				t.Logf("position %d: p = %.3g for the image, %.3g for the gap to the next", x, pImage, pGap)
				if pImage < level || pGap < level {
					t.Errorf("position %d: p = %.3g for the image, %.3g for the gap to the next, want both ≥ %.2g",
						x, pImage, pGap, level)
				}
			}
		})
	}
}

// TestFourRoundsTooFewForSmallDomains is the negative control of
// TestPermutationUniform: with four rounds, small domains fail it, which is
// why roundsFor adds rounds there.
func TestFourRoundsTooFewForSmallDomains(t *testing.T) {
	for _, n := range []uint64{5, 7, 16, 31} {
		t.Run(fmt.Sprintf("n=%d", n), func(t *testing.T) {
			if roundsFor(domainBits(n)) <= 4 {
				t.Fatalf("roundsFor(%d) = %d, want more than 4", domainBits(n), roundsFor(domainBits(n)))
			}
			pImage, pGap := neighbourStats(n, n-2, 100_000, func(c uint64) permutation {
				return permutation{f: newFeistelRounds(domainBits(n), cycleKey(5, c), 4), n: n}
			})
			t.Logf("four rounds: p = %.3g for the image, %.3g for the gap", pImage, pGap)
			if min(pImage, pGap) >= alpha {
				t.Errorf("four rounds not detected: p = %.3g for the image, %.3g for the gap", pImage, pGap)
			}
		})
	}
}

// TestRoundsFor pins the round schedule: even, at least four, four from
// 16-bit domains on.
func TestRoundsFor(t *testing.T) {
	for b := uint(0); b <= 64; b++ {
		r := roundsFor(b)
		if r%2 != 0 || r < 4 || r > maxRounds {
			t.Errorf("roundsFor(%d) = %d", b, r)
		}
		if b >= 16 && r != 4 {
			t.Errorf("roundsFor(%d) = %d, want 4", b, r)
		}
	}
}

// wideStats is neighbourStats for domains too wide for a bin per value: the
// image of position x and the gap to the image of x+1 are each counted in
// 256 bins twice, once by their top bits (v·256/n) and once by their low
// byte (v mod 256), where the bits of a product are least mixed. It returns
// the four p-values: image by top bits, image by low byte, gap likewise.
func wideStats(n, x, cycles uint64, perm func(c uint64) permutation) [4]float64 {
	const bins = 256
	top := func(v, m uint64) uint64 { hi, lo := bits.Mul64(v, bins); q, _ := bits.Div64(hi, lo, m); return q }
	var obs [4][]int64
	var exp [4][]float64
	for i := range obs {
		obs[i] = make([]int64, bins)
		exp[i] = make([]float64, bins)
	}
	// Expected counts: how many values of [0, n) (image) or [0, n−1) (gap
	// minus one) fall in each bin, times cycles over their number.
	for v := range n {
		exp[0][top(v, n)] += float64(cycles) / float64(n)
		exp[1][v%bins] += float64(cycles) / float64(n)
		if v < n-1 {
			exp[2][top(v, n-1)] += float64(cycles) / float64(n-1)
			exp[3][v%bins] += float64(cycles) / float64(n-1)
		}
	}
	for c := range cycles {
		p := perm(c)
		a, b := p.at(x), p.at(x+1)
		g := (b+n-a)%n - 1
		obs[0][top(a, n)]++
		obs[1][a%bins]++
		obs[2][top(g, n-1)]++
		obs[3][g%bins]++
	}
	var ps [4]float64
	for i := range ps {
		_, ps[i] = chiSquare(obs[i], exp[i])
	}
	return ps
}

// TestPermutationUniformWide is TestPermutationUniform for the widths that
// use the mum round function, with four rounds: the images of neighbouring
// positions look independent and uniform from one cycle to the next. 2^16
// is the narrowest such domain, 2^16+1 walks half the time, 10^6 is a
// typical dataset.
func TestPermutationUniformWide(t *testing.T) {
	ns := []uint64{1 << 16, 1<<16 + 1, 1_000_000}
	cycles := uint64(200_000)
	if testing.Short() {
		cycles = 50_000
	}
	level := alpha / float64(len(ns)*2*4)
	for _, n := range ns {
		t.Run(fmt.Sprintf("n=%d", n), func(t *testing.T) {
			if p := cyclePermutation(n, 5, 0); p.f.rounds != 4 || !p.f.mul {
				t.Fatalf("n=%d: %d rounds, mum %v; want 4 mum rounds", n, p.f.rounds, p.f.mul)
			}
			for _, x := range []uint64{0, n - 2} {
				ps := wideStats(n, x, cycles, func(c uint64) permutation { return cyclePermutation(n, 5, c) })
				t.Logf("position %d: p = %.3g", x, ps)
				if slices.Min(ps[:]) < level {
					t.Errorf("position %d: p = %.3g (image top, image low, gap top, gap low), want all ≥ %.2g", x, ps, level)
				}
			}
		})
	}
}

// TestLinearRoundsDetectedWide is the negative control of
// TestPermutationUniformWide: the same four rounds with every multiplier set
// to 1, which leaves F_i(v) = v ^ k_i and the whole network affine, are
// detected in the images of neighbouring positions.
func TestLinearRoundsDetectedWide(t *testing.T) {
	for _, n := range []uint64{1 << 16, 1_000_000} {
		t.Run(fmt.Sprintf("n=%d", n), func(t *testing.T) {
			ps := wideStats(n, 0, 50_000, func(c uint64) permutation {
				p := cyclePermutation(n, 5, c)
				p.f.m = [4]uint64{1, 1, 1, 1}
				return p
			})
			t.Logf("multipliers 1: p = %.3g", ps)
			if slices.Min(ps[:]) >= alpha {
				t.Errorf("affine rounds not detected: p = %.3g", ps)
			}
		})
	}
}

// TestPermWideMatchesForward checks the vector kernel against the scalar
// network, lane by lane: every wide width, odd and even, starting points
// near 0 and near the top of the domain, and lengths that are not multiples
// of the vector width.
func TestPermWideMatchesForward(t *testing.T) {
	t.Logf("vector kernel: %v", hasWideKernel)
	for b := uint(mulBits); b <= 63; b++ {
		f := newFeistel(b, mix64(uint64(b)*7+1))
		size := uint64(1) << b
		for _, x0 := range []uint64{0, 12345 % size, size - 37} {
			for _, length := range []int{0, 1, 4, 5, 33} {
				dst := make([]int64, length)
				done := permWide(dst, x0, &f)
				if hasWideKernel && done != length&^3 || !hasWideKernel && done != 0 {
					t.Fatalf("b=%d: permWide covered %d of %d", b, done, length)
				}
				for i := range done {
					if want := f.forward(x0 + uint64(i)); uint64(dst[i]) != want {
						t.Fatalf("b=%d x0=%d: lane %d = %d, want forward(%d) = %d", b, x0, i, dst[i], x0+uint64(i), want)
					}
				}
			}
		}
	}
}
