package zsampler

// stepsPerCycle returns P = ⌊n/g⌋, the number of steps in one cycle of
// Cyclic mode; g ≤ n, so P ≥ 1.
func stepsPerCycle(n, g uint64) uint64 { return n / g }

// cycleKey returns the key of the permutation of cycle c.
func cycleKey(seed, c uint64) uint64 {
	return mix64(mix64(seed^cyclicDomain) + c*golden)
}

// cyclePermutation returns perm_c, the permutation of [0, n) that cycle c
// traverses.
func cyclePermutation(n, seed, c uint64) permutation {
	return newPermutation(n, cycleKey(seed, c))
}

// fillCyclic writes positions first, first+1, ... of the global batch of
// step: with P = ⌊n/g⌋, step s is batch j = s mod P of cycle c = s/P, and
// position k maps to perm_c(j·g + k). j·g + k < P·g ≤ n, so nothing
// overflows.
func fillCyclic(dst []int64, n, g, seed, step, first uint64) {
	per := stepsPerCycle(n, g)
	c, j := step/per, step%per
	p := cyclePermutation(n, seed, c)
	x0 := j*g + first
	if p.f.rounds != 4 {
		for i := range dst {
			dst[i] = int64(p.at(x0 + uint64(i)))
		}
		return
	}
	// Four rounds, the case of every large n: p.at by hand, so that the
	// rounds inline and the keys stay in registers.
	wb, ma, mb := p.f.wb, p.f.ma, p.f.mb
	k0, k1, k2, k3 := p.f.k[0], p.f.k[1], p.f.k[2], p.f.k[3]
	perm := func(x uint64) uint64 {
		l, r := x>>wb, x&mb
		l ^= mix64(r^k0) & ma
		r ^= mix64(l^k1) & mb
		l ^= mix64(r^k2) & ma
		r ^= mix64(l^k3) & mb
		return l<<wb | r
	}
	// Cycle walking applies perm a data-dependent number of times, and a
	// branch per index on "x < n" would be mispredicted whenever n is well
	// below the power of two. So the walks advance in passes instead: each
	// pass applies perm once to every index whose walk is unfinished and
	// collects, without a branch, those still out of range. Every pass is
	// a loop of independent iterations that the processor overlaps.
	var pending [256]uint16 // positions in dst[lo:hi] still walking
	for lo := 0; lo < len(dst); lo += len(pending) {
		chunk := dst[lo:min(lo+len(pending), len(dst))]
		x := x0 + uint64(lo)
		m := 0
		for i := range chunk {
			y := perm(x + uint64(i))
			chunk[i] = int64(y)
			pending[m] = uint16(i)
			m += int(1 ^ (y-n)>>63) // y ≥ n: y, n < 2^63, so y−n has no top bit
		}
		for m > 0 {
			k := 0
			for _, i := range pending[:m] {
				y := perm(uint64(chunk[i]))
				chunk[i] = int64(y)
				pending[k] = i
				k += int(1 ^ (y-n)>>63)
			}
			m = k
		}
	}
}
