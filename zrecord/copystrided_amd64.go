package zrecord

import (
	"unsafe"

	"golang.org/x/sys/cpu"
)

// copyStridedAVX2 copies stride bytes from each of the n addresses
// srcs[0:n] to dst back to back (record k at dst + k*stride).
//
//go:noescape
func copyStridedAVX2(dst *byte, srcs *unsafe.Pointer, n int, stride int)

// copyCRCStridedX4 copies stride bytes from each of the 4*groups
// addresses srcs[0:4*groups] to dst back to back, as copyStridedAVX2
// does, and writes the CRC-32C of each record to sums.
//
//go:noescape
func copyCRCStridedX4(dst *byte, srcs *unsafe.Pointer, sums *uint32, groups int, stride int)

// useCopyStrided says copyStrided copies with copyStridedAVX2: the CPU
// has AVX2, and the race detector, which does not see copies made in
// assembly, is off. On records of a few hundred bytes, a call of the
// runtime's copy per record, with the checks around it, cost about as
// much again as the bytes.
var useCopyStrided = cpu.X86.HasAVX2 && !raceBuild

// useCopyCRCStrided says copyCRCStrided checks with copyCRCStridedX4: the
// CPU has the CRC32 instruction (SSE4.2), and the race detector is off.
var useCopyCRCStrided = cpu.X86.HasSSE42 && !raceBuild

// copyCRCStridedMax is the largest record copySrcs hands to
// copyCRCStrided rather than to copyCRC one record at a time, on the paths
// whose stridedMax it is (all but sse42 on AMD's family 0x17). The folding
// paths of copyCRC run at about the CRC32 instruction's 8 bytes a cycle
// on long inputs, but each input pays a fold-down and a reduction, about
// 30 cycles of latency, besides a call: on 256-byte records that was
// twice what the copy cost (avx2-vpclmul, AMD Zen 5). At 2 KiB the two
// tied, at 4 KiB the fold was ahead.
const copyCRCStridedMax = 2 << 10

// copyStrided copies stride bytes from each of srcs to dst back to back
// in one call, and reports false where it cannot here.
func copyStrided(dst []byte, srcs []unsafe.Pointer, stride int) bool {
	if !useCopyStrided {
		return false
	}
	if len(srcs) > 0 && stride > 0 {
		_ = dst[len(srcs)*stride-1]
		copyStridedAVX2(&dst[0], &srcs[0], len(srcs), stride)
	}
	return true
}

// copyCRCStrided copies, as copyStrided does, the first records of srcs,
// four at a time, and writes each one's CRC-32C to sums; it returns how
// many it did (none where it cannot here).
func copyCRCStrided(dst []byte, srcs []unsafe.Pointer, sums []uint32, stride int) int {
	groups := len(srcs) / 4
	if !useCopyCRCStrided || groups == 0 || stride <= 0 {
		return 0
	}
	_ = dst[groups*4*stride-1]
	_ = sums[groups*4-1]
	copyCRCStridedX4(&dst[0], &srcs[0], &sums[0], groups, stride)
	return groups * 4
}
