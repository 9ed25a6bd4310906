package zrecord

import (
	"bytes"
	"math/rand/v2"
	"path/filepath"
	"testing"
	"unsafe"
)

// TestCopyRecord checks the raw-record copy against copy() at the sizes
// around its REP MOVSB range and at unaligned ends.
func TestCopyRecord(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	src := make([]byte, 40<<10)
	for i := range src {
		src[i] = byte(rng.Uint32())
	}
	// Offsets that put both ends on a cache line (the REP MOVSB path)
	// and off it.
	srcLine := int(-uintptr(unsafe.Pointer(&src[0])) & 63)
	for _, n := range []int{0, 1, 63, 1023, 1024, 1025, 2048, 4097, 12288, 16384, 16385, 40 << 10} {
		for _, shift := range []int{0, 1, 7, 33} {
			from := src[min(shift+srcLine, len(src)-n):][:n]
			buf := make([]byte, n+shift+8+64)
			to := buf[int(-uintptr(unsafe.Pointer(&buf[0]))&63):][:n+shift+8]
			for i := range to {
				to[i] = 0xAA
			}
			copyRecord(to[shift:shift+n], from, shift == 7)
			if !bytes.Equal(to[shift:shift+n], from) {
				t.Fatalf("%d bytes at offset %d: copy differs", n, shift)
			}
			for i, b := range append(to[:shift:shift], to[shift+n:]...) {
				if b != 0xAA {
					t.Fatalf("%d bytes at offset %d: byte %d outside the record was written", n, shift, i)
				}
			}
		}
	}
}

// TestGatherMixedRawAndFrames gathers, in one call, records a zstd store
// keeps raw (incompressible) and records it keeps as frames, spread over
// several chunks, in random order with repeats and in order: the raw loop
// hands each frame to the general one and picks up after it.
func TestGatherMixedRawAndFrames(t *testing.T) {
	const size, count = 2048, 600
	s, err := Create(filepath.Join(t.TempDir(), "s"), WithCodec(Zstd), WithChunkCapacity(64<<10))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	rng := rand.New(rand.NewPCG(5, 6))
	recs := make([][]byte, count)
	for i := range recs {
		recs[i] = make([]byte, size)
		if rng.IntN(3) == 0 {
			for k := range recs[i] {
				recs[i][k] = byte(rng.Uint32()) // incompressible: stored raw
			}
		} else {
			for k := range recs[i] {
				recs[i][k] = byte(i + k/64) // compressible: a frame
			}
		}
	}
	if _, err := s.Append(recs); err != nil {
		t.Fatal(err)
	}
	g := getGatherScratch(count)
	idx := make([]int64, count)
	for i := range idx {
		idx[i] = int64(i)
	}
	chunks, err := s.locate("test", idx, g)
	if err != nil {
		t.Fatal(err)
	}
	var raw, frames int
	used := map[uint32]bool{}
	for _, e := range g.locs {
		used[e.chunk] = true
		if s.isFrame(e) {
			frames++
		} else {
			raw++
		}
	}
	if raw == 0 || frames == 0 || len(used) < 3 || len(chunks) < 3 {
		t.Fatalf("want raw records, frames and several chunks: %d raw, %d frames, %d chunks", raw, frames, len(used))
	}
	var batches [][]int64
	for _, n := range []int{1, 2, 3, 17, 256, 1000} {
		batch := make([]int64, n)
		for k := range batch {
			batch[k] = rng.Int64N(count)
		}
		batches = append(batches, batch)
	}
	// In order, whole and from the middle: runs of neighbours are copied
	// in one piece up to a frame or the end of a chunk.
	batches = append(batches, idx, idx[77:431])
	for _, batch := range batches {
		n := len(batch)
		dst := make([]byte, n*size)
		if err := s.Gather(batch, dst, size); err != nil {
			t.Fatal(err)
		}
		for k, i := range batch {
			if !bytes.Equal(dst[k*size:(k+1)*size], recs[i]) {
				t.Fatalf("batch of %d: slot %d (record %d) differs", n, k, i)
			}
		}
	}
}
