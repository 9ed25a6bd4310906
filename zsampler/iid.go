package zsampler

import "math/bits"

// The IID generator. The word for global position k of step s at attempt a
// is
//
//	wymix(key(seed, s, a) + (k+1)·wyInc)
//
// that is, word k+1 of a wyrand stream whose starting state is a hash of
// (seed, step, attempt): one 64×64→128-bit multiply per word, against two
// for a SplitMix64 finalizer. Every word is computed directly from its
// coordinates, so a rank computes its own positions without touching the
// others, and a step is as cheap to compute first as last.

// iidKey returns the stream key of attempt 0 of step.
func iidKey(seed, step uint64) uint64 {
	return mix64(mix64(seed^iidDomain) + step*golden)
}

// retryKey returns the stream key of attempt a ≥ 1, given the key of
// attempt 0.
func retryKey(key, a uint64) uint64 {
	return mix64(key ^ a*attemptDomain)
}

// iidWord returns the word of position k in the stream with the given key.
func iidWord(key, k uint64) uint64 {
	return wymix(key + (k+1)*wyInc)
}

// wyrand's constants: the stream increment and the key of the output mix.
const (
	wyInc = 0xa0761d6478bd642f
	wyKey = 0xe7037ed1a0b428db
)

// wymix is wyrand's output function: the two halves of c·(c^wyKey),
// folded together with xor.
func wymix(c uint64) uint64 {
	hi, lo := bits.Mul64(c, c^wyKey)
	return hi ^ lo
}

// fillIID writes the draws of positions first, first+1, ... of step.
func fillIID(dst []int64, n, seed, step, first uint64) {
	key := iidKey(seed, step)
	ctr := key + first*wyInc // the counter of position first, minus one step
	for i := range dst {
		ctr += wyInc
		// Lemire: the high word of w·n is uniform on [0, n) once the low
		// word has passed the rejection threshold (2^64 − n) mod n, which
		// only a low word below n can fail.
		hi, lo := bits.Mul64(wymix(ctr), n)
		if lo < n {
			hi = iidRetry(key, first+uint64(i), n, lo, hi)
		}
		dst[i] = int64(hi)
	}
}

// iidRetry finishes Lemire's rejection for position k, whose first draw gave
// (hi, lo) with lo < n: it keeps the draw if lo reaches the threshold, and
// otherwise draws again from attempts 1, 2, ... It runs with probability
// below n/2^64 per index.
//
//go:noinline
func iidRetry(key, k, n, lo, hi uint64) uint64 {
	t := -n % n // (2^64 − n) mod n
	for a := uint64(1); lo < t; a++ {
		hi, lo = bits.Mul64(iidWord(retryKey(key, a), k), n)
	}
	return hi
}
