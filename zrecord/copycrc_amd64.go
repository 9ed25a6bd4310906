package zrecord

import "golang.org/x/sys/cpu"

// hasVPCLMULQDQ says the CPU multiplies carry-less in 256-bit registers
// (VEX-encoded VPCLMULQDQ, as on AMD Zen 3 and Intel Ice Lake). It is read
// from CPUID leaf 7 (ECX bit 10) here because golang.org/x/sys/cpu reports
// the bit only together with AVX-512, which the Zen 3 cores lack although
// they run the 256-bit form. HasAVX2 implies the leaf exists and that the
// OS saves the YMM registers.
var hasVPCLMULQDQ = cpu.X86.HasAVX2 && cpuid7ECX()&(1<<10) != 0

// cpuid returns the registers CPUID leaves for leaf and sub-leaf sub.
func cpuid(leaf, sub uint32) (eax, ebx, ecx, edx uint32)

// cpuid7ECX returns ECX of CPUID leaf 7, sub-leaf 0.
func cpuid7ECX() uint32 {
	_, _, ecx, _ := cpuid(7, 0)
	return ecx
}

// cpuFamily returns the CPU's family as CPUID leaf 1 reports it, the
// extended family added where the base one is 15 (AMD's 0x17 is Zen 1,
// Zen+ and Zen 2; 0x19 Zen 3 and 4; Intel's cores are family 6).
func cpuFamily() uint32 {
	eax, _, _, _ := cpuid(1, 0)
	family := eax >> 8 & 0xf
	if family == 0xf {
		family += eax >> 20 & 0xff
	}
	return family
}

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
			p = append(p, crcPath{"avx2-vpclmul", copyCRCAVX2, copyCRCAVX2Stream, streamMin / 4, copyCRCStridedMax})
		}
		p = append(p, crcPath{"sse42", copyCRCSSE42, copyCRCSSE42Stream, 2 << 20, sse42StridedMax()})
	}
	return append(p, genericCRCPath)
}

// sse42StridedMax is the sse42 path's stridedMax: copyCRCStridedMax, or
// 128 bytes on AMD's family 0x17, where the CRC32 instruction issues only
// every third cycle, so that four chains of it, one a record, are bound by
// its issue rate rather than its latency. On an AMD EPYC of that family
// (Zen 1, model 1), 256 records at random from 512 KiB, three runs of each
// (BenchmarkCopySmallChecked): four CRC32 chains took 3.3-3.5 us over
// 64-byte records against the fold's 8.1, 6.1-6.3 against 6.4-6.8 over
// 128 bytes, but 11.7-11.9 against 9.3-9.7 over 256 bytes, and 96-102
// against 55-58 over 2 KiB. In whole gathers of 256-byte records
// (BenchmarkGather256, three alternated runs) the same batch again took
// 11.0-11.4 us against 11.9-12.4; random batches, whose cost is the
// memory's, tied. Only Zen 1 was measured; the rule takes the family,
// which Zen+ and Zen 2 share.
func sse42StridedMax() int {
	if cpuFamily() == 0x17 {
		return 128
	}
	return copyCRCStridedMax
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
