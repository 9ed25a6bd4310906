package zsampler

import "math/bits"

// maxRounds bounds the number of Feistel rounds, reached by the smallest
// domains.
const maxRounds = 24

// roundsFor returns the number of Feistel rounds used over [0, 2^b): four
// when each half has 8 bits or more, and more below that, 2·⌈32/b⌉ up to
// maxRounds. Four rounds of a pseudorandom function make a pseudorandom
// permutation (Luby–Rackoff), but the bound is asymptotic in the width of
// the halves: with halves of a few bits a round function has only a handful
// of inputs, and four rounds leave the images of neighbouring positions
// visibly correlated (TestPermutationUniform measures this). Small domains
// mean small batches, so the extra rounds cost little. The count is even,
// so the halves end where they started.
func roundsFor(b uint) int {
	if b == 0 {
		return 4
	}
	r := 2 * int((32+b-1)/b)
	return min(max(r, 4), maxRounds)
}

// feistel is a keyed permutation of [0, 2^b): an unbalanced Feistel
// network over a word split into a high part l of wa = ⌈b/2⌉ bits and a low
// part r of wb = ⌊b/2⌋ bits. The rounds alternate between
//
//	l ^= F_i(r) mod 2^wa   (even i)
//	r ^= F_i(l) mod 2^wb   (odd i)
//
// each of which is its own inverse, so an odd b needs no special case, and
// b = 0 (the domain {0}) and b = 1 work too.
//
// The round function depends on the width. From b = mulBits on (halves of
// 8 to 32 bits, four rounds: every domain a training run shuffles) it is
// F_i(v) = mum(v ^ k_i, m_i): the low 32 bits of v ^ k_i times a keyed odd
// 32-bit multiplier m_i, the high half of the 64-bit product xored into its
// low half. Bit j of the low half depends on input bits 0..j only; the high
// half depends on every input bit through the carries, so the kept bits
// depend on the whole input non-linearly. That is one multiply and a shift
// instead of a full-avalanche mixer's two multiplies and three shifts, and
// four such rounds over halves this wide pass TestPermutationUniformWide.
// Below mulBits, where a half has a few bits only, F_i(v) = mix64(v ^ k_i),
// the SplitMix64 output function, whose every output bit depends on every
// input bit.
type feistel struct {
	k      [maxRounds]uint64 // round keys; the first rounds are used
	m      [4]uint64         // multipliers of the mum rounds: odd, below 2^32
	rounds int               // even, at least 4
	mul    bool              // round function mum (b ≥ mulBits), else mix64
	wb     uint              // width of the low part
	ma, mb uint64            // 2^wa − 1 and 2^wb − 1
}

// mulBits is the least domain width whose rounds use mum.
const mulBits = 16

// mum multiplies the low 32 bits of a by m, which is below 2^32, and
// folds the high half of the 64-bit product into its low half: the low 32
// bits of the result are lo ^ hi.
func mum(a, m uint64) uint64 {
	p := uint64(uint32(a)) * m
	return p ^ p>>32
}

// newFeistel returns the permutation of [0, 2^b) with round keys drawn from
// key; b is at most 64.
func newFeistel(b uint, key uint64) feistel {
	return newFeistelRounds(b, key, roundsFor(b))
}

// newFeistelRounds is newFeistel with a given even number of rounds, at
// most maxRounds.
func newFeistelRounds(b uint, key uint64, rounds int) feistel {
	wa, wb := (b+1)/2, b/2
	f := feistel{rounds: rounds, mul: b >= mulBits, wb: wb, ma: 1<<wa - 1, mb: 1<<wb - 1}
	for i := range f.rounds {
		key += golden
		f.k[i] = mix64(key)
	}
	if f.mul {
		for i := range f.m {
			key += golden
			f.m[i] = mix64(key)>>32 | 1
		}
	}
	return f
}

// round is F_i(v).
func (f *feistel) round(i int, v uint64) uint64 {
	if f.mul {
		return mum(v^f.k[i], f.m[i&3])
	}
	return mix64(v ^ f.k[i])
}

// forward applies the permutation.
func (f *feistel) forward(x uint64) uint64 {
	l, r := x>>f.wb, x&f.mb
	for i := 0; i < f.rounds; i += 2 {
		l ^= f.round(i, r) & f.ma
		r ^= f.round(i+1, l) & f.mb
	}
	return l<<f.wb | r
}

// inverse undoes forward: inverse(forward(x)) == x for x in [0, 2^b).
func (f *feistel) inverse(x uint64) uint64 {
	l, r := x>>f.wb, x&f.mb
	for i := f.rounds - 1; i > 0; i -= 2 {
		r ^= f.round(i, l) & f.mb
		l ^= f.round(i-1, r) & f.ma
	}
	return l<<f.wb | r
}

// domainBits returns b such that 2^b is the smallest power of two at least
// n, which must be positive.
func domainBits(n uint64) uint {
	return uint(bits.Len64(n - 1))
}

// permutation is a keyed bijection of [0, n): the Feistel permutation of
// [0, 2^b) restricted to [0, n) by cycle walking, that is, applied again
// until the value falls below n. Since 2^b < 2n, a walk takes fewer than two
// applications on average.
type permutation struct {
	f feistel
	n uint64
}

func newPermutation(n, key uint64) permutation {
	return permutation{f: newFeistel(domainBits(n), key), n: n}
}

// at returns the image of x, which must be below n.
func (p *permutation) at(x uint64) uint64 {
	for {
		x = p.f.forward(x)
		if x < p.n {
			return x
		}
	}
}

// index returns the preimage of y, which must be below n: index(at(x)) == x.
func (p *permutation) index(y uint64) uint64 {
	for {
		y = p.f.inverse(y)
		if y < p.n {
			return y
		}
	}
}
