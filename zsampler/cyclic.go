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
	if p.f.rounds != 4 || !p.f.mul {
		for i := range dst {
			dst[i] = int64(p.at(x0 + uint64(i)))
		}
		return
	}
	// Four mum rounds, the case of every n above 2^15: p.at by hand, so
	// that the rounds inline and the keys stay in registers.
	wb, ma, mb := p.f.wb&63, p.f.ma, p.f.mb
	k, m := &p.f.k, &p.f.m
	perm := func(x uint64) uint64 {
		l, r := x>>wb, x&mb
		l ^= mum(r^k[0], m[0]) & ma
		r ^= mum(l^k[1], m[1]) & mb
		l ^= mum(r^k[2], m[2]) & ma
		r ^= mum(l^k[3], m[3]) & mb
		return l<<wb | r
	}
	// The first application, to every position: four lanes at a time in
	// the AVX2 kernel where there is one (wide_amd64.s), the rest in a loop
	// of independent iterations with nothing else in it, which the
	// processor overlaps.
	done := permWide(dst, x0, &p.f)
	x := x0 + uint64(done)
	for i := done; i < len(dst); i++ {
		dst[i] = int64(perm(x))
		x++
	}
	if (ma+1)<<wb == n {
		return // n is the power of two itself: nothing walks
	}
	// Cycle walking applies perm a data-dependent number of times, and a
	// branch per index on "x < n" would be mispredicted whenever n is well
	// below the power of two. So the walks advance in passes instead: a
	// scan collects, without a branch, the positions still out of range,
	// and each pass applies perm once to every one of them and collects
	// those still out. Every pass is a loop of independent iterations.
	var pending [256]uint16 // positions in dst[lo:hi] still walking
	for lo := 0; lo < len(dst); lo += len(pending) {
		chunk := dst[lo:min(lo+len(pending), len(dst))]
		m := 0
		for i, y := range chunk {
			pending[m] = uint16(i)
			m += int(1 ^ (uint64(y)-n)>>63) // y ≥ n: y, n < 2^63, so y−n has no top bit
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
