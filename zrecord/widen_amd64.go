package zrecord

import (
	"unsafe"

	"golang.org/x/sys/cpu"
)

// useWidenSIMD says widen may use the AVX2 kernels: the CPU has AVX2 and
// the race detector, which does not see stores made in assembly, is off.
// The kernels use VEX-encoded instructions only (no AVX-512), so they run
// on every x86-64 CPU with AVX2.
var useWidenSIMD = cpu.X86.HasAVX2 && !raceBuild

// The kernels widen n values from src (each zero-extended) into dst, each
// plus base, 32 output bytes at a time; they handle n rounded down to a
// whole number of 32-byte vectors, and the caller the rest. The names say
// the input and output sizes in bits.
//
//go:noescape
func widen8to16AVX2(dst, src *byte, n int, base uint64)

//go:noescape
func widen8to32AVX2(dst, src *byte, n int, base uint64)

//go:noescape
func widen8to64AVX2(dst, src *byte, n int, base uint64)

//go:noescape
func widen16to32AVX2(dst, src *byte, n int, base uint64)

//go:noescape
func widen16to64AVX2(dst, src *byte, n int, base uint64)

//go:noescape
func widen32to64AVX2(dst, src *byte, n int, base uint64)

// The streaming kernels are the same with non-temporal stores, for a
// destination on a 32-byte boundary.

//go:noescape
func widen8to16AVX2Stream(dst, src *byte, n int, base uint64)

//go:noescape
func widen8to32AVX2Stream(dst, src *byte, n int, base uint64)

//go:noescape
func widen8to64AVX2Stream(dst, src *byte, n int, base uint64)

//go:noescape
func widen16to32AVX2Stream(dst, src *byte, n int, base uint64)

//go:noescape
func widen16to64AVX2Stream(dst, src *byte, n int, base uint64)

//go:noescape
func widen32to64AVX2Stream(dst, src *byte, n int, base uint64)

// widenKernels holds the kernels by input and output size in bytes: the
// cached one, then the streaming one (nil where there is none).
var widenKernels = [5][9][2]func(dst, src *byte, n int, base uint64){
	1: {2: {widen8to16AVX2, widen8to16AVX2Stream}, 4: {widen8to32AVX2, widen8to32AVX2Stream}, 8: {widen8to64AVX2, widen8to64AVX2Stream}},
	2: {4: {widen16to32AVX2, widen16to32AVX2Stream}, 8: {widen16to64AVX2, widen16to64AVX2Stream}},
	4: {8: {widen32to64AVX2, widen32to64AVX2Stream}},
}

// widenStreamMin is the shortest output widenSIMD writes with streaming
// stores: a shorter one is a few lines, which the seam (the head up to a
// 32-byte boundary, the fence) would cost more than it saves.
const widenStreamMin = 512

// widenSIMD widens the first values of packed into out with a kernel and
// returns how many it did (widenGo does the rest): as many as whole 32-byte
// output vectors hold. With stream, where out's values lie on their own
// boundaries, it widens those before the first 32-byte boundary in Go and
// the vectors after it with the streaming kernel, whose stores skip the
// caches; otherwise it uses the cached kernel from the start.
func widenSIMD(out, packed []byte, es, w int, base uint64, stream bool) int {
	if w < 1 || w >= len(widenKernels) || es >= len(widenKernels[w]) || widenKernels[w][es][0] == nil {
		return 0
	}
	k := widenKernels[w][es]
	head := 0
	if stream && len(out) >= widenStreamMin {
		if mis := int(uintptr(unsafe.Pointer(unsafe.SliceData(out))) & 31); mis%es == 0 {
			head = ((32 - mis) & 31) / es
			widenGo(out[:head*es], packed[:head*w], es, w, base)
			out, packed = out[head*es:], packed[head*w:]
		} else {
			stream = false
		}
	} else {
		stream = false
	}
	per := 32 / es // values per output vector
	n := len(out) / es
	n -= n % per
	if n > 0 {
		fn := k[0]
		if stream {
			fn = k[1]
		}
		fn(unsafe.SliceData(out), unsafe.SliceData(packed), n, base)
	}
	return head + n
}
