package zrecord

import (
	"encoding/binary"
	"hash/crc32"
	"math/rand/v2"
	"slices"
	"testing"
	"unsafe"
)

// TestEntrySumFast checks the fast entry checksum against a CRC-32C of the
// index and the entry's first 20 bytes computed from scratch, for indices
// and bytes that exercise every bit.
func TestEntrySumFast(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	tab := crc32.MakeTable(crc32.Castagnoli)
	for n := range 10000 {
		var b [24]byte
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		idx := int64(rng.Uint64())
		switch n {
		case 0:
			idx = 0
		case 1:
			idx = -1
		case 2:
			idx = 1 << 62
		}
		var msg [28]byte
		binary.LittleEndian.PutUint64(msg[:8], uint64(idx))
		copy(msg[8:], b[:20])
		want := crc32.Checksum(msg[:], tab)
		if got := entrySumFast(idx, b[:]); got != want {
			t.Fatalf("entry %d bytes %x: fast sum %#08x, want %#08x", idx, b[:20], got, want)
		}
		if got := entrySum(idx, b[:]); got != want {
			t.Fatalf("entry %d bytes %x: sum %#08x, want %#08x", idx, b[:20], got, want)
		}
	}
}

func BenchmarkEntrySum(b *testing.B) {
	var buf [24]byte
	var sink uint32
	b.Run("crc32", func(b *testing.B) {
		for i := range b.N {
			sink += entrySum(int64(i), buf[:])
		}
	})
	b.Run("fast", func(b *testing.B) {
		for i := range b.N {
			sink += entrySumFast(int64(i), buf[:])
		}
	})
	_ = sink
}

// TestLoadEntries checks the batch entry loader against loadEntriesGo and
// getEntry20 on a segment of random entries, some damaged: every good
// entry up to the first damaged one is decoded, and the damaged one's
// position is returned.
func TestLoadEntries(t *testing.T) {
	if unsafe.Sizeof(entry{}) != 20 || unsafe.Offsetof(entry{}.sum) != 16 || unsafe.Offsetof(entry{}.chunk) != 12 {
		t.Fatal("entry is no longer five uint32 fields in table order: loadEntriesSSE42 copies them as they are stored")
	}
	rng := rand.New(rand.NewPCG(8, 9))
	const count = 1000
	seg := make([]byte, count*24)
	for i := range int64(count) {
		e := entry{off: rng.Uint32(), phys: rng.Uint32(), logic: rng.Uint32(), chunk: rng.Uint32(), sum: rng.Uint32()}
		layoutV4.putEntry(seg[i*24:i*24+24], i, e)
	}
	bad := int64(613)
	seg[bad*24+int64(rng.IntN(24))] ^= 1 << rng.IntN(8)
	for _, n := range []int{0, 1, 2, 255, 256, 700} {
		indices := make([]int64, n)
		for k := range indices {
			indices[k] = rng.Int64N(count)
		}
		if n == 700 {
			indices[400] = bad
		}
		want := make([]entry, n)
		got := make([]entry, n)
		wk := loadEntriesGo(seg, indices, want)
		gk := loadEntries(seg, indices, got)
		if gk != wk {
			t.Fatalf("%d indices: stopped at %d, want %d", n, gk, wk)
		}
		first := n
		if k := slices.Index(indices, bad); k >= 0 {
			first = k
		}
		if wk != first {
			t.Fatalf("%d indices: stopped at %d, the first damaged entry is at %d", n, wk, first)
		}
		for k := range wk {
			if got[k] != want[k] || got[k] != getEntry20(seg[indices[k]*24:]) {
				t.Fatalf("%d indices: entry %d (index %d) decoded as %+v, want %+v", n, k, indices[k], got[k], want[k])
			}
		}
	}
}

// An index past the segment, or a negative one, stops the batch loader at
// its position without reading outside the segment: the indices are
// range-checked before the call, but another thread may change them after.
func TestLoadEntriesStopsOutsideSegment(t *testing.T) {
	const count = 64
	seg := make([]byte, count*24)
	for i := range int64(count) {
		layoutV4.putEntry(seg[i*24:i*24+24], i, entry{off: uint32(i), phys: 1, logic: 1})
	}
	for _, badIdx := range []int64{count, count + 1, 1 << 40, -1, -count} {
		indices := []int64{3, 9, count - 1, badIdx, 5}
		for name, load := range map[string]func([]byte, []int64, []entry) int{"batch": loadEntries, "go": loadEntriesGo} {
			locs := make([]entry, len(indices))
			if k := load(seg, indices, locs); k != 3 {
				t.Fatalf("%s, index %d at position 3: stopped at %d", name, badIdx, k)
			}
			if locs[2].off != count-1 {
				t.Fatalf("%s: entry before the bad index decoded as %+v", name, locs[2])
			}
		}
	}
}

// TestPutEntries checks the batched entry encoder against putEntry, entry
// by entry, over batches that cross the assembly's slices and start at
// indices near the ends of the index range; the bytes around the batch stay
// untouched.
func TestPutEntries(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 9))
	const slice = 4096 // loadEntriesSlice on amd64
	for _, n := range []int{0, 1, 2, 7, slice - 1, slice, 2*slice + 3} {
		for _, first := range []int64{0, 12345, 1<<62 - int64(n)} {
			ents := make([]entry, n)
			for k := range ents {
				ents[k] = entry{off: rng.Uint32(), phys: rng.Uint32(), logic: rng.Uint32(), chunk: rng.Uint32(), sum: rng.Uint32()}
			}
			want := make([]byte, 24*n+8)
			got := make([]byte, 24*n+8)
			for i := range got {
				got[i], want[i] = 0xa5, 0xa5
			}
			for k, e := range ents {
				layoutV4.putEntry(want[4+24*k:4+24*k+24], first+int64(k), e)
			}
			putEntries(got[4:4+24*n], first, ents)
			if !slices.Equal(got, want) {
				t.Fatalf("%d entries from %d: putEntries differs from putEntry", n, first)
			}
			clear(got)
			putEntriesGo(got[4:4+24*n], first, ents)
			if !slices.Equal(got[4:4+24*n], want[4:4+24*n]) {
				t.Fatalf("%d entries from %d: putEntriesGo differs from putEntry", n, first)
			}
		}
	}
}

// TestShortSum checks the short-input checksum against hash/crc32 at every
// length up to a little past shortSumMax and every alignment.
func TestShortSum(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 1))
	tab := crc32.MakeTable(crc32.Castagnoli)
	buf := make([]byte, shortSumMax+24)
	for i := range buf {
		buf[i] = byte(rng.Uint32())
	}
	for n := 0; n <= shortSumMax+8; n++ {
		for off := 0; off < 8; off++ {
			b := buf[off : off+n]
			want := crc32.Checksum(b, tab)
			if n <= shortSumMax {
				if got := shortSum(b); got != want {
					t.Fatalf("%d bytes at %d: shortSum %#08x, want %#08x", n, off, got, want)
				}
			}
			if got := dataSum(b); got != want {
				t.Fatalf("%d bytes at %d: dataSum %#08x, want %#08x", n, off, got, want)
			}
		}
	}
}

// TestLoadEntriesFrom checks the loader of entries from several tables
// against loadEntriesGo of each entry's own table: the same entries
// decoded, and the batch stopped at the first damaged one.
func TestLoadEntriesFrom(t *testing.T) {
	rng := rand.New(rand.NewPCG(10, 11))
	const count = 500
	segs := make([][]byte, 3)
	for s := range segs {
		segs[s] = make([]byte, count*24)
		for i := range int64(count) {
			e := entry{off: rng.Uint32(), phys: rng.Uint32(), logic: rng.Uint32(), chunk: uint32(s), sum: rng.Uint32()}
			layoutV4.putEntry(segs[s][i*24:i*24+24], i, e)
		}
	}
	const bad = 321
	segs[1][bad*24+int64(rng.IntN(24))] ^= 1 << rng.IntN(8)
	for _, n := range []int{0, 1, 3, 256, 600} {
		tables := make([]unsafe.Pointer, n)
		indices := make([]int64, n)
		which := make([]int, n)
		for k := range indices {
			which[k], indices[k] = rng.IntN(len(segs)), rng.Int64N(count)
			if which[k] == 1 && indices[k] == bad {
				indices[k]--
			}
			if n == 600 && k == 450 {
				which[k], indices[k] = 1, bad
			}
			tables[k] = unsafe.Pointer(&segs[which[k]][0])
		}
		for name, load := range map[string]func([]unsafe.Pointer, []int64, []entry) int{"batch": loadEntriesFrom, "go": loadEntriesFromGo} {
			got := make([]entry, n)
			stop := load(tables, indices, got)
			want := n
			if n == 600 {
				want = 450
			}
			if stop != want {
				t.Fatalf("%s, %d entries: stopped at %d, want %d", name, n, stop, want)
			}
			for k := range stop {
				one := make([]entry, 1)
				if loadEntriesGo(segs[which[k]], indices[k:k+1], one) != 1 || got[k] != one[0] {
					t.Fatalf("%s, %d entries: entry %d (table %d, index %d) decoded as %+v, want %+v", name, n, k, which[k], indices[k], got[k], one[0])
				}
			}
		}
	}
}
