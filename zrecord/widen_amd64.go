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

// widenSIMD widens as many of the values as whole 32-byte output vectors
// hold with a kernel and returns how many it did; widenGo does the rest.
func widenSIMD(out, packed []byte, es, w int, base uint64) int {
	per := 32 / es // values per output vector
	n := len(out) / es
	n -= n % per
	if n == 0 {
		return 0
	}
	dst, src := unsafe.SliceData(out), unsafe.SliceData(packed)
	switch {
	case w == 1 && es == 2:
		widen8to16AVX2(dst, src, n, base)
	case w == 1 && es == 4:
		widen8to32AVX2(dst, src, n, base)
	case w == 1 && es == 8:
		widen8to64AVX2(dst, src, n, base)
	case w == 2 && es == 4:
		widen16to32AVX2(dst, src, n, base)
	case w == 2 && es == 8:
		widen16to64AVX2(dst, src, n, base)
	case w == 4 && es == 8:
		widen32to64AVX2(dst, src, n, base)
	default:
		return 0
	}
	return n
}
