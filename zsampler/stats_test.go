package zsampler

import (
	"math"
	"math/bits"
	"testing"
)

// alpha is the significance level of every statistical test here: a test
// fails when its p-value falls below alpha. All seeds are fixed, so a test
// that passes once passes forever; alpha bounds how lucky a biased generator
// would have to be to slip through.
const alpha = 0.001

// gammaQ returns the regularized upper incomplete gamma function Q(a, x),
// by the series for P when x < a+1 and by the continued fraction for Q
// otherwise (Numerical Recipes, 6.2).
func gammaQ(a, x float64) float64 {
	if x <= 0 {
		return 1
	}
	lg, _ := math.Lgamma(a)
	front := math.Exp(-x + a*math.Log(x) - lg)
	if x < a+1 {
		sum, del, ap := 1/a, 1/a, a
		for i := 0; i < 100000; i++ {
			ap++
			del *= x / ap
			sum += del
			if math.Abs(del) < math.Abs(sum)*1e-16 {
				break
			}
		}
		return 1 - sum*front
	}
	const tiny = 1e-300
	b := x + 1 - a
	c := 1 / tiny
	d := 1 / b
	h := d
	for i := 1; i < 100000; i++ {
		an := -float64(i) * (float64(i) - a)
		b += 2
		d = an*d + b
		if math.Abs(d) < tiny {
			d = tiny
		}
		c = b + an/c
		if math.Abs(c) < tiny {
			c = tiny
		}
		d = 1 / d
		del := d * c
		h *= del
		if math.Abs(del-1) < 1e-16 {
			break
		}
	}
	return front * h
}

// chiSquareP returns the probability that a chi-square variable with df
// degrees of freedom is at least stat.
func chiSquareP(stat float64, df int) float64 {
	return gammaQ(float64(df)/2, stat/2)
}

// chiSquare returns the statistic and p-value of observed counts against
// expected counts.
func chiSquare(observed []int64, expected []float64) (stat, p float64) {
	for i, o := range observed {
		d := float64(o) - expected[i]
		stat += d * d / expected[i]
	}
	return stat, chiSquareP(stat, len(observed)-1)
}

// binomialP returns the two-sided p-value of k successes in trials draws of
// success probability q, by the normal approximation (trials·q is large in
// every use here).
func binomialP(k, trials int64, q float64) (z, p float64) {
	mean := float64(trials) * q
	sd := math.Sqrt(float64(trials) * q * (1 - q))
	z = (float64(k) - mean) / sd
	return z, math.Erfc(math.Abs(z) / math.Sqrt2)
}

func TestChiSquareCriticalValues(t *testing.T) {
	// Tabulated 0.999 quantiles of the chi-square distribution.
	tests := []struct {
		df   int
		crit float64
	}{
		{1, 10.828},
		{2, 13.816},
		{10, 29.588},
		{100, 149.449},
		{1000, 1143.917},
	}
	for _, tt := range tests {
		p := chiSquareP(tt.crit, tt.df)
		if math.Abs(p-0.001) > 0.00001 {
			t.Errorf("chiSquareP(%v, %d) = %.6f, want 0.001", tt.crit, tt.df, p)
		}
	}
	if p := chiSquareP(0, 5); p != 1 {
		t.Errorf("chiSquareP(0, 5) = %v, want 1", p)
	}
}

// uniformity is the outcome of the bias battery on one sample.
type uniformity struct {
	chi2P, halfP float64
	halfZ        float64
}

func (u uniformity) worst() float64 { return min(u.chi2P, u.halfP) }

// testUniform draws `draws` values in [0, n) and runs two tests of
// uniformity against them:
//
//   - chi-square over cells: one per value when n ≤ 4096, otherwise 1024
//     cells of (almost) equal width, each expected in proportion to its width;
//   - low half against high half: values below ⌊n/2⌋ should make up exactly
//     ⌊n/2⌋/n of the sample; modulo reduction of a word whose range is not a
//     multiple of n over-weights the low values.
func testUniform(n uint64, draws int64, draw func(i int64) uint64) uniformity {
	cells := uint64(1024)
	if n <= 4096 {
		cells = n
	}
	cell := func(x uint64) uint64 { // ⌊x·cells/n⌋
		hi, lo := bits.Mul64(x, cells)
		q, _ := bits.Div64(hi, lo, n)
		return q
	}
	start := func(c uint64) uint64 { // the first value of cell c: ⌈c·n/cells⌉
		hi, lo := bits.Mul64(c, n)
		lo, carry := bits.Add64(lo, cells-1, 0)
		q, _ := bits.Div64(hi+carry, lo, cells)
		return q
	}
	observed := make([]int64, cells)
	var low int64
	half := n / 2
	for i := int64(0); i < draws; i++ {
		x := draw(i)
		if x >= n {
			panic("draw out of range")
		}
		observed[cell(x)]++
		if x < half {
			low++
		}
	}
	expected := make([]float64, cells)
	for c := range cells {
		width := start(c+1) - start(c)
		expected[c] = float64(draws) * float64(width) / float64(n)
	}
	var u uniformity
	_, u.chi2P = chiSquare(observed, expected)
	if n >= 2 {
		u.halfZ, u.halfP = binomialP(low, draws, float64(half)/float64(n))
	} else {
		u.halfP = 1
	}
	return u
}
