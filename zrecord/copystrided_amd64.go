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

// copyCRCStridedX4 copies stride bytes from each of the 4*groups
// addresses srcs[0:4*groups] to dst back to back, as copyStridedAVX2
// does, and writes the CRC-32C of each record to sums.
//
//go:noescape
func copyCRCStridedX4(dst *byte, srcs *uintptr, sums *uint32, groups int, stride int)

// useCopyCRCStrided says gatherSmall checks records of up to
// copyCRCStridedMax bytes with copyCRCStridedX4: the CPU has the CRC32
// instruction (SSE4.2), and the race detector is off.
var useCopyCRCStrided = cpu.X86.HasSSE42 && !raceBuild

// copyCRCStridedMax is the largest record copyCheckedSmall hands to
// copyCRCStridedX4 rather than to copyCRC one record at a time. The
// folding paths of copyCRC run at about the CRC32 instruction's 8 bytes a
// cycle on long inputs, but each input pays a fold-down and a reduction,
// about 30 cycles of latency, besides a call: on 256-byte records that
// was twice what the copy cost.
const copyCRCStridedMax = 2 << 10

// copyCheckedSmall is copyChecked for the records locs of a batch that
// gatherSmall checked, with srcs the address of each record when
// gatherSmall collected them (see collectSrcs): four records at a time
// through copyCRCStridedX4, the rest through copyChecked. It returns what
// copyChecked returns: how far it got, and the checksum of a record that
// does not match its entry, with bad.
func copyCheckedSmall(dst []byte, srcs []uintptr, locs []entry, chunks []*chunk, stride int, g *gatherScratch) (int, uint32, bool) {
	n := len(locs)
	done := 0
	if useCopyCRCStrided && len(srcs) == n && stride > 0 && stride <= copyCRCStridedMax && n >= 4 {
		groups := n / 4
		done = groups * 4
		if cap(g.sums) < done {
			g.sums = make([]uint32, n)
		}
		sums := g.sums[:done]
		_ = dst[done*stride-1]
		copyCRCStridedX4(&dst[0], &srcs[0], &sums[0], groups, stride)
		for k, sum := range sums {
			if sum != locs[k].sum {
				return k, sum, true
			}
		}
	}
	return copyChecked(false, locs, chunks, dst, stride, done, n, 0, false)
}

// collectSrcs says whether gatherSmall collects the address of each
// record for copySmall (unchecked) or copyCheckedSmall (checked).
func collectSrcs(checked bool, stride int) bool {
	if checked {
		return useCopyCRCStrided && stride <= copyCRCStridedMax
	}
	return useCopyStrided
}
