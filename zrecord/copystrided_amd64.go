package zrecord

import "golang.org/x/sys/cpu"

// copyStridedAVX2 copies stride bytes from each of the n addresses
// srcs[0:n] to dst back to back (record k at dst + k*stride).
//
//go:noescape
func copyStridedAVX2(dst *byte, srcs *uintptr, n int, stride int)

// useCopyStrided says gatherSmall copies with copyStridedAVX2, from the
// addresses its checking loop collects: the CPU has AVX2, and the race
// detector, which does not see copies made in assembly, is off.
var useCopyStrided = cpu.X86.HasAVX2 && !raceBuild

// copySmall copies the raw records locs, checked by gatherSmall, into dst
// at a fixed stride, and returns how many it copied (see copyPlain). With
// useCopyStrided, srcs holds the address of each record in its chunk's
// mapping and one assembly loop copies the batch: on records of a few
// hundred bytes, a call of the runtime's copy per record, with the checks
// around it, cost about as much again as the bytes.
func copySmall(dst []byte, srcs []uintptr, locs []entry, chunks []*chunk, stride int) int {
	if !useCopyStrided || len(srcs) != len(locs) {
		return copyPlain(false, false, locs, chunks, dst, stride, 0, len(locs), 0)
	}
	if len(srcs) > 0 && stride > 0 {
		_ = dst[len(srcs)*stride-1]
		copyStridedAVX2(&dst[0], &srcs[0], len(srcs), stride)
	}
	return len(locs)
}
