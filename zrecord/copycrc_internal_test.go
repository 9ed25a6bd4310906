package zrecord

import (
	"bytes"
	"hash/crc32"
	"math/bits"
	"math/rand/v2"
	"testing"
	"unsafe"
)

// refTable is built here rather than shared with the package, so that the
// tests check copyCRC against hash/crc32 alone.
var refTable = crc32.MakeTable(crc32.Castagnoli)

// withPath runs f with copyCRC forced onto p.
func withPath(t testing.TB, p crcPath, f func()) {
	t.Helper()
	old := copyCRCImpl
	copyCRCImpl = p
	defer func() { copyCRCImpl = old }()
	f()
}

// guard is the byte written around every destination: a path that stores
// outside dst changes it.
const guard = 0xA5

// checkCopyCRC copies src into a destination placed at dstAlign bytes past a
// cache line, between guard bytes, with initial crc, and fails unless the
// copy, the checksum and the guards are right.
// Both entry points are checked, the one with streaming stores too.
func checkCopyCRC(t *testing.T, src []byte, dstAlign int, crc uint32) {
	t.Helper()
	const pad = 64
	buf := make([]byte, len(src)+3*pad)
	base := int(-uintptr(unsafe.Pointer(&buf[0])) & 63)
	start := base + pad + dstAlign
	want := crc32.Update(crc, refTable, src)
	for _, f := range []struct {
		name string
		fn   func(dst, src []byte, crc uint32) uint32
	}{{"copyCRC", copyCRC}, {"copyCRCStream", copyCRCStream}} {
		for i := range buf {
			buf[i] = guard
		}
		dst := buf[start : start+len(src)]
		if got := f.fn(dst, src, crc); got != want {
			t.Fatalf("%s on %s, %d bytes (src line offset %d, dst line offset %d), crc %#x: got %#08x, want %#08x",
				f.name, copyCRCImpl.name, len(src), uintptr(unsafe.Pointer(unsafe.SliceData(src)))&63, dstAlign, crc, got, want)
		}
		if !bytes.Equal(dst, src) {
			t.Fatalf("%s on %s, %d bytes at dst offset %d: the copy differs", f.name, copyCRCImpl.name, len(src), dstAlign)
		}
		for i, b := range buf {
			if (i < start || i >= start+len(src)) && b != guard {
				t.Fatalf("%s on %s, %d bytes at dst offset %d: byte %d outside dst was written", f.name, copyCRCImpl.name, len(src), dstAlign, i-start)
			}
		}
	}
}

// alignedSource returns n random bytes starting align bytes past a cache
// line.
func alignedSource(rng *rand.Rand, n, align int) []byte {
	buf := make([]byte, n+128)
	for i := range buf {
		buf[i] = byte(rng.Uint32())
	}
	base := int(-uintptr(unsafe.Pointer(&buf[0])) & 63)
	return buf[base+align : base+align+n]
}

func TestCopyCRCPaths(t *testing.T) {
	names := map[string]bool{}
	for _, p := range copyCRCPaths() {
		names[p.name] = true
	}
	if !names["generic"] {
		t.Fatalf("paths %v: no generic path", names)
	}
	t.Logf("paths on this CPU: %v; default %s", names, copyCRCImpl.name)
	if raceBuild && copyCRCImpl.name != "generic" {
		t.Fatalf("race build takes %s, want generic", copyCRCImpl.name)
	}
}

// TestCastagnoliConstants checks the polynomial the folding constants are
// computed from against hash/crc32's, and the power function on known
// values.
func TestCastagnoliConstants(t *testing.T) {
	if got := bits.Reverse32(castagnoliPoly); got != crc32.Castagnoli {
		t.Fatalf("reflected polynomial %#x, hash/crc32 has %#x", got, crc32.Castagnoli)
	}
	for e, want := range map[int]uint32{0: 1, 1: 2, 31: 1 << 31, 32: castagnoliPoly, 33: castagnoliPoly << 1} {
		if got := xPowMod(e); got != want {
			t.Errorf("x^%d mod P = %#x, want %#x", e, got, want)
		}
	}
	// A remainder has degree below 32, so its slot uses bits 32..63 only.
	for k, c := range crcFold {
		if c&(1<<32-1) != 0 || c == 0 {
			t.Errorf("constant %d is %#x: want a non-zero value in bits 32..63", k, c)
		}
	}
}

func TestCopyCRCEveryLength(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	for _, p := range copyCRCPaths() {
		t.Run(p.name, func(t *testing.T) {
			withPath(t, p, func() {
				for n := 0; n <= 1100; n++ {
					src := alignedSource(rng, n, n%64)
					checkCopyCRC(t, src, (n*7)%64, 0)
					checkCopyCRC(t, src, 0, rng.Uint32())
				}
			})
		})
	}
}

func TestCopyCRCAlignments(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	for _, p := range copyCRCPaths() {
		t.Run(p.name, func(t *testing.T) {
			withPath(t, p, func() {
				for sa := range 64 {
					for da := range 64 {
						for _, n := range []int{31, 257, 1029} {
							checkCopyCRC(t, alignedSource(rng, n, sa), da, uint32(sa*64+da))
						}
					}
				}
			})
		})
	}
}

func TestCopyCRCLarge(t *testing.T) {
	rng := rand.New(rand.NewPCG(15, 16))
	sizes := []int{4 << 10, 4<<10 + 1, 12<<10 + 77, 147 << 10, 256<<10 - 3, 1 << 20, 1<<20 + 1, 3<<20 + 12345}
	for _, p := range copyCRCPaths() {
		t.Run(p.name, func(t *testing.T) {
			withPath(t, p, func() {
				for k, n := range sizes {
					checkCopyCRC(t, alignedSource(rng, n, k*5%64), k*11%64, rng.Uint32())
				}
			})
		})
	}
}

// TestCopyCRCChained checks that a checksum continued over pieces, the
// way copyCRC cuts a long input, equals the checksum of the whole.
func TestCopyCRCChained(t *testing.T) {
	rng := rand.New(rand.NewPCG(17, 18))
	src := alignedSource(rng, 10000, 3)
	want := crc32.Checksum(src, refTable)
	for _, p := range copyCRCPaths() {
		withPath(t, p, func() {
			dst := make([]byte, len(src))
			var crc uint32
			for off := 0; off < len(src); {
				n := min(len(src)-off, 1+rng.IntN(700))
				crc = copyCRC(dst[off:], src[off:off+n], crc)
				off += n
			}
			if crc != want || !bytes.Equal(dst, src) {
				t.Fatalf("%s: chained %#08x, want %#08x (copy equal: %v)", p.name, crc, want, bytes.Equal(dst, src))
			}
		})
	}
}

// TestCopyCRCDataSum checks that copyCRC from 0 is the table's data_crc.
func TestCopyCRCDataSum(t *testing.T) {
	rng := rand.New(rand.NewPCG(19, 20))
	for _, n := range []int{0, 1, 300, 5000} {
		src := alignedSource(rng, n, 0)
		dst := make([]byte, n)
		if got, want := copyCRC(dst, src, 0), dataSum(src); got != want {
			t.Fatalf("%d bytes: copyCRC %#08x, dataSum %#08x", n, got, want)
		}
	}
}

func FuzzCopyCRC(f *testing.F) {
	f.Add([]byte("123456789"), uint32(0), uint8(0), uint8(0))
	f.Add(bytes.Repeat([]byte{0xff}, 300), uint32(0xdeadbeef), uint8(3), uint8(17))
	f.Add(make([]byte, 1100), uint32(1), uint8(63), uint8(1))
	f.Fuzz(func(t *testing.T, data []byte, crc uint32, srcAlign, dstAlign uint8) {
		buf := make([]byte, len(data)+128)
		base := int(-uintptr(unsafe.Pointer(&buf[0])) & 63)
		src := buf[base+int(srcAlign%64):][:len(data)]
		copy(src, data)
		for _, p := range copyCRCPaths() {
			withPath(t, p, func() { checkCopyCRC(t, src, int(dstAlign%64), crc) })
		}
	})
}
