//go:build amd64

package zrecord

import (
	"bytes"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"testing"
	"unsafe"
)

// TestCopyStrided checks the two batch copies of gatherSmall against
// copy() and hash/crc32: record k of the batch lands at k*stride and
// nothing around the batch is written, at strides that leave every tail
// (of the 128-, 32- and 8-byte steps) and at batch sizes that are and are
// not a multiple of four, with sources that overlap and repeat.
func TestCopyStrided(t *testing.T) {
	if !useCopyStrided || !useCopyCRCStrided {
		t.Skip("this CPU or build takes the portable copies")
	}
	rng := rand.New(rand.NewPCG(5, 6))
	pool := make([]byte, 1<<20)
	for i := range pool {
		pool[i] = byte(rng.Uint32())
	}
	castagnoli := crc32.MakeTable(crc32.Castagnoli)
	const guard = 64
	for _, stride := range []int{1, 3, 7, 8, 9, 16, 31, 33, 64, 127, 255, 256, 257, 1000, 2047, 2048} {
		for _, n := range []int{1, 3, 4, 5, 8, 13, 64} {
			t.Run(fmt.Sprintf("%dB/%d", stride, n), func(t *testing.T) {
				srcs := make([]unsafe.Pointer, n)
				offs := make([]int, n)
				for k := range srcs {
					offs[k] = rng.IntN(len(pool) - stride)
					if k == 2 {
						offs[k] = offs[0] // a repeat
					}
					srcs[k] = unsafe.Pointer(&pool[offs[k]])
				}
				want := make([]byte, 0, n*stride)
				for _, o := range offs {
					want = append(want, pool[o:o+stride]...)
				}
				buf := bytes.Repeat([]byte{0xAA}, guard+n*stride+guard)
				dst := buf[guard : guard+n*stride]
				check := func(what string) {
					t.Helper()
					if !bytes.Equal(dst, want) {
						t.Fatalf("%s: the batch differs from the records", what)
					}
					if bytes.Count(buf[:guard], []byte{0xAA}) != guard || bytes.Count(buf[guard+n*stride:], []byte{0xAA}) != guard {
						t.Fatalf("%s: a byte outside the batch was written", what)
					}
				}
				copyStridedAVX2(&dst[0], &srcs[0], n, stride)
				check("copyStridedAVX2")
				if groups := n / 4; groups > 0 {
					clear(dst)
					sums := make([]uint32, groups*4+1)
					sums[groups*4] = 0x5EED
					copyCRCStridedX4(&dst[0], &srcs[0], &sums[0], groups, stride)
					for k := range groups * 4 {
						if w := crc32.Checksum(pool[offs[k]:offs[k]+stride], castagnoli); sums[k] != w {
							t.Fatalf("copyCRCStridedX4: record %d's checksum %08x, want %08x", k, sums[k], w)
						}
					}
					if sums[groups*4] != 0x5EED {
						t.Fatalf("copyCRCStridedX4 wrote a checksum past its %d records", groups*4)
					}
					copy(dst[groups*4*stride:], want[groups*4*stride:]) // the records it leaves to copyChecked
					check("copyCRCStridedX4")
				}
			})
		}
	}
}
