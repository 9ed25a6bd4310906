package zrecord

import "golang.org/x/sys/cpu"

// hasVPCLMULQDQ says the CPU multiplies carry-less in 256-bit registers
// (VEX-encoded VPCLMULQDQ, as on AMD Zen 3 and Intel Ice Lake). It is read
// from CPUID leaf 7 (ECX bit 10) here because golang.org/x/sys/cpu reports
// the bit only together with AVX-512, which the Zen 3 cores lack although
// they run the 256-bit form. HasAVX2 implies the leaf exists and that the
// OS saves the YMM registers.
var hasVPCLMULQDQ = cpu.X86.HasAVX2 && cpuid7ECX()&(1<<10) != 0

// cpuid7ECX returns ECX of CPUID leaf 7, sub-leaf 0.
func cpuid7ECX() uint32

// copyCRCPaths lists the paths of copyCRC this CPU runs, fastest first:
// "avx2-vpclmul" folds 128 bytes an iteration in four YMM registers,
// "sse42" 64 bytes in four XMM registers (it needs PCLMULQDQ as well as
// SSE4.2, which every x86-64 CPU with SSE4.2 since 2010 has), and
// "generic" copies and checksums a cache-sized block at a time.
//
// The folding runs at about 8 bytes a cycle on Zen 3, where a 256-bit
// VPCLMULQDQ issues every other cycle. Sending half of each 256-byte
// block through four CRC32Q chains beside the multiplier, their results
// XORed into the folded data, passed the tests but measured slower here
// (2 KiB in the L1 cache: 183 against 113 ns), so the path folds only.
func copyCRCPaths() []crcPath {
	var p []crcPath
	if cpu.X86.HasSSE42 && cpu.X86.HasPCLMULQDQ {
		if cpu.X86.HasAVX2 && hasVPCLMULQDQ {
			p = append(p, crcPath{"avx2-vpclmul", copyCRCAVX2, copyCRCAVX2Stream, streamMin / 4})
		}
		p = append(p, crcPath{"sse42", copyCRCSSE42, copyCRCSSE42Stream, 2 << 20})
	}
	return append(p, genericCRCPath)
}

// copyCRCFoldAVX2 copies n bytes from src to dst and returns the CRC-32C
// register (not inverted) after them, starting from state. k is crcFold.
// With stream, it writes most of dst with non-temporal stores.
//
//go:noescape
func copyCRCFoldAVX2(dst, src *byte, n int, state uint32, k *[8]uint64, stream bool) uint32

// copyCRCFoldSSE42 is copyCRCFoldAVX2 with 128-bit registers. It is the
// path of the CPUs with AVX2 but without VPCLMULQDQ as well (AMD Zen 1 and
// 2, Intel before Ice Lake), whose loaders' slots are where its streaming
// stores pay (see slotStreamMin).
//
//go:noescape
func copyCRCFoldSSE42(dst, src *byte, n int, state uint32, k *[8]uint64, stream bool) uint32

func copyCRCAVX2(dst, src []byte, crc uint32) uint32 {
	if len(src) == 0 {
		return crc
	}
	dst = dst[:len(src)]
	return ^copyCRCFoldAVX2(&dst[0], &src[0], len(src), ^crc, &crcFold, false)
}

func copyCRCAVX2Stream(dst, src []byte, crc uint32) uint32 {
	if len(src) == 0 {
		return crc
	}
	dst = dst[:len(src)]
	return ^copyCRCFoldAVX2(&dst[0], &src[0], len(src), ^crc, &crcFold, true)
}

func copyCRCSSE42(dst, src []byte, crc uint32) uint32 {
	if len(src) == 0 {
		return crc
	}
	dst = dst[:len(src)]
	return ^copyCRCFoldSSE42(&dst[0], &src[0], len(src), ^crc, &crcFold, false)
}

func copyCRCSSE42Stream(dst, src []byte, crc uint32) uint32 {
	if len(src) == 0 {
		return crc
	}
	dst = dst[:len(src)]
	return ^copyCRCFoldSSE42(&dst[0], &src[0], len(src), ^crc, &crcFold, true)
}
