//go:build amd64

package zrecord

import (
	"bytes"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"os"
	"regexp"
	"strconv"
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

// TestStridedMaxFollowsTheCPU checks the family copyCRCPaths reads from
// CPUID against the one Linux reports, and that the sse42 path checks
// records of more than 128 bytes one at a time exactly where that family
// is 0x17, every other path keeping copyCRCStridedMax.
func TestStridedMaxFollowsTheCPU(t *testing.T) {
	if info, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		m := regexp.MustCompile(`(?m)^cpu family\s*:\s*(\d+)`).FindSubmatch(info)
		if m == nil {
			t.Fatal("/proc/cpuinfo names no cpu family")
		}
		if want, _ := strconv.Atoi(string(m[1])); cpuFamily() != uint32(want) {
			t.Fatalf("cpuFamily() = %#x, /proc/cpuinfo says %#x", cpuFamily(), want)
		}
	}
	for _, p := range copyCRCPaths() {
		want := copyCRCStridedMax
		if p.name == "sse42" && cpuFamily() == 0x17 {
			want = 128
		}
		if p.stridedMax != want {
			t.Errorf("path %s on family %#x: stridedMax %d, want %d", p.name, cpuFamily(), p.stridedMax, want)
		}
	}
}

// BenchmarkCopySmallChecked times the two routes of copySrcs for checked
// records of up to 2 KiB, 256 records at random from a 512 KiB pool:
// "strided" checks four records at a time with CRC32 chains
// (copyCRCStrided), the paths' names fold one record at a time with
// copyCRC. sse42StridedMax quotes it.
func BenchmarkCopySmallChecked(b *testing.B) {
	const pool, n = 512 << 10, 256
	src := make([]byte, pool)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range src {
		src[i] = byte(rng.Uint32())
	}
	for _, stride := range []int{64, 128, 256, 512, 1024, 2048} {
		srcs := make([]unsafe.Pointer, n)
		for i := range srcs {
			srcs[i] = unsafe.Pointer(&src[rng.IntN(pool/stride)*stride])
		}
		dst := make([]byte, n*stride)
		sums := make([]uint32, n)
		if useCopyCRCStrided {
			b.Run(fmt.Sprintf("%dB/strided", stride), func(b *testing.B) {
				b.SetBytes(int64(n * stride))
				for range b.N {
					copyCRCStrided(dst, srcs, sums, stride)
				}
			})
		}
		for _, p := range copyCRCPaths() {
			b.Run(fmt.Sprintf("%dB/%s", stride, p.name), func(b *testing.B) {
				b.SetBytes(int64(n * stride))
				for range b.N {
					for k := range n {
						sums[k] = p.fn(dst[k*stride:(k+1)*stride], unsafe.Slice((*byte)(srcs[k]), stride), 0)
					}
				}
			})
		}
	}
}
