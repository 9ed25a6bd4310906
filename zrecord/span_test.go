package zrecord_test

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/loaderx/loaderx/zrecord"
)

// TestSpansLocateStoredBytes checks that the span of every record, read
// straight from its chunk file, is exactly what CheckBytes accepts, for
// each codec, through a store and through a set, and that CheckBytes
// names a record whose fetched bytes differ.
func TestSpansLocateStoredBytes(t *testing.T) {
	for _, codec := range []zrecord.Codec{zrecord.Raw, zrecord.Zstd, zrecord.Narrow} {
		t.Run(codec.String(), func(t *testing.T) {
			set, dirs, recs := ztSet(t, 0, []setShard{{codec, 40}, {codec, 0}, {codec, 25}})
			n := int64(len(recs))
			idx := make([]int64, n)
			for i := range idx {
				idx[i] = n - 1 - int64(i)
			}
			store, chunk, off, length := make([]uint32, n), make([]uint32, n), make([]uint32, n), make([]uint32, n)
			if err := set.Spans(idx, store, chunk, off, length); err != nil {
				t.Fatal(err)
			}
			stores := set.Stores()
			for k, i := range idx {
				wantShard, local := uint32(0), i
				if i >= 40 {
					wantShard, local = 2, i-40
				}
				if store[k] != wantShard {
					t.Fatalf("record %d: store %d, want %d", i, store[k], wantShard)
				}
				data, err := os.ReadFile(filepath.Join(dirs[store[k]], strconv.Itoa(int(chunk[k]))+".chunk"))
				if err != nil {
					t.Fatal(err)
				}
				b := data[off[k] : off[k]+length[k]]
				if codec == zrecord.Raw && string(b) != string(recs[i]) {
					t.Fatalf("record %d: the span does not hold the record", i)
				}
				s := stores[store[k]]
				// the span alone, then the span inside a wider buffer
				if err := s.CheckBytes([]int64{local}, chunk[k], int64(off[k]), b); err != nil {
					t.Fatalf("record %d: %v", i, err)
				}
				if err := s.CheckBytes([]int64{local}, chunk[k], 0, data); err != nil {
					t.Fatalf("record %d in its whole chunk: %v", i, err)
				}
				bad := append([]byte(nil), b...)
				bad[len(bad)/2] ^= 0x10
				ztIs(t, s.CheckBytes([]int64{local}, chunk[k], int64(off[k]), bad), zrecord.ErrCorrupt)
				// a buffer that stops one byte short does not hold the record
				ztIs(t, s.CheckBytes([]int64{local}, chunk[k], int64(off[k]), b[:len(b)-1]), zrecord.ErrInvalidArgument)
				ztIs(t, s.CheckBytes([]int64{local}, chunk[k]+1, int64(off[k]), b), zrecord.ErrInvalidArgument)
			}
			// the first store alone gives the same spans for its records
			one := make([]uint32, 40)
			c2, o2, l2 := make([]uint32, 40), make([]uint32, 40), make([]uint32, 40)
			first := make([]int64, 40)
			for i := range first {
				first[i] = int64(i)
			}
			if err := stores[0].Spans(first, c2, o2, l2); err != nil {
				t.Fatal(err)
			}
			for i := range first {
				k := n - 1 - int64(i)
				if c2[i] != chunk[k] || o2[i] != off[k] || l2[i] != length[k] || one[i] != 0 {
					t.Fatalf("record %d: store span (%d %d %d), set span (%d %d %d)", i, c2[i], o2[i], l2[i], chunk[k], off[k], length[k])
				}
			}
		})
	}
}

func TestSpansBadInput(t *testing.T) {
	s, _ := ztCreate(t, zrecord.Raw)
	if _, err := s.Append([][]byte{[]byte("abc"), []byte("defg")}); err != nil {
		t.Fatal(err)
	}
	u := func(n int) []uint32 { return make([]uint32, n) }
	cases := []struct {
		name string
		err  error
		want error
	}{
		{"out of range", s.Spans([]int64{2}, u(1), u(1), u(1)), zrecord.ErrIndexOutOfRange},
		{"negative", s.Spans([]int64{-1}, u(1), u(1), u(1)), zrecord.ErrIndexOutOfRange},
		{"short out", s.Spans([]int64{0, 1}, u(2), u(1), u(2)), zrecord.ErrBufferTooSmall},
		{"negative base", s.CheckBytes([]int64{0}, 0, -1, []byte("abc")), zrecord.ErrInvalidArgument},
		{"check out of range", s.CheckBytes([]int64{5}, 0, 0, []byte("abc")), zrecord.ErrIndexOutOfRange},
		{"empty is fine", s.Spans(nil, nil, nil, nil), nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.want == nil {
				if tc.err != nil {
					t.Fatal(tc.err)
				}
				return
			}
			ztIs(t, tc.err, tc.want)
		})
	}
	s.Close()
	ztIs(t, s.Spans([]int64{0}, u(1), u(1), u(1)), zrecord.ErrClosed)
}

// TestResidencyGatesReads checks that a store with a residency map refuses
// every read that needs a page the map does not hold, before writing a
// byte, through the store and through a set, and reads once it is held.
func TestResidencyGatesReads(t *testing.T) {
	const size = 1000
	set, _, recs := ztSet(t, size, []setShard{{zrecord.Raw, 30}, {zrecord.Zstd, 30}})
	stores := set.Stores()
	const page = 4096
	helds := make([][]byte, len(stores))
	for k, s := range stores {
		helds[k] = make([]byte, 64)
		if err := s.SetResidency(chunkMap(helds[k], page)); err != nil {
			t.Fatal(err)
		}
	}
	idx := []int64{3, 45, 59}
	dst := make([]byte, len(idx)*size)
	for i := range dst {
		dst[i] = 0xAB
	}
	ztIs(t, set.Gather(idx, dst, size), zrecord.ErrNotResident)
	ztIs(t, stores[0].Gather([]int64{3}, dst[:size], size), zrecord.ErrNotResident)
	ztIs(t, stores[1].GatherPacked([]int64{0}, dst[:size], []int64{0, size}), zrecord.ErrNotResident)
	if _, err := stores[1].GatherRagged([]int64{0}, make([]int64, 1), dst); err == nil {
		t.Fatal("GatherRagged read a page that is not held")
	}
	for _, b := range dst {
		if b != 0xAB {
			t.Fatal("a refused read wrote into dst")
		}
	}
	sizes := make([]int64, len(idx))
	if err := set.Sizes(idx, sizes); err != nil {
		t.Fatalf("Sizes must ignore the chunk pages of the map: %v", err)
	}
	// hold exactly the pages of record 3 (store 0) and 15, 29 (store 1)
	// (record 15 lies over two pages)
	c, o, l := make([]uint32, 1), make([]uint32, 1), make([]uint32, 1)
	hold := func(k int, local int64) {
		if err := stores[k].Spans([]int64{local}, c, o, l); err != nil {
			t.Fatal(err)
		}
		for p := o[0] / page; p <= (o[0]+l[0]-1)/page; p++ { // every page its bytes overlap
			helds[k][p] = 1
		}
	}
	hold(0, 3)
	hold(1, 15)
	ztIs(t, set.Gather(idx, dst, size), zrecord.ErrNotResident) // 59 is not held yet
	hold(1, 29)
	if err := set.Gather(idx, dst, size); err != nil {
		t.Fatal(err)
	}
	for k, i := range idx {
		if string(dst[k*size:(k+1)*size]) != string(recs[i]) {
			t.Fatalf("record %d differs", i)
		}
	}
	ztIs(t, stores[0].SetResidency(chunkMap(make([]byte, 1), 16)), zrecord.ErrInvalidArgument) // too few pages
	ztIs(t, stores[0].SetResidency(&zrecord.Residency{Held: helds[0], ChunkPage: page}), zrecord.ErrInvalidArgument)
	for _, s := range stores {
		if err := s.SetResidency(nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := set.Gather([]int64{0, 31}, dst[:2*size], size); err != nil {
		t.Fatalf("without a map every record reads: %v", err)
	}
}
