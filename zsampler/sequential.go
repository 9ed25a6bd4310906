package zsampler

import "math/bits"

// fillSequential writes positions first, first+1, ... of the global batch of
// step: position k maps to (step·g + k) mod n. All inputs are below 2^63.
func fillSequential(dst []int64, n, g, step, first uint64) {
	// step·g as a 128-bit product, reduced exactly: no step overflows.
	hi, lo := bits.Mul64(step, g)
	base := bits.Rem64(hi, lo, n)
	idx := base + first%n // both below n < 2^63: no overflow
	if idx >= n {
		idx -= n
	}
	for i := range dst {
		dst[i] = int64(idx)
		idx++
		if idx == n {
			idx = 0
		}
	}
}
