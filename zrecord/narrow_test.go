package zrecord_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/loaderx/loaderx/zrecord"
)

// narrowValues encodes vals as little-endian elements of size bytes.
func narrowValues(size int, vals []int64) []byte {
	b := make([]byte, size*len(vals))
	for i, v := range vals {
		switch size {
		case 1:
			b[i] = byte(v)
		case 2:
			binary.LittleEndian.PutUint16(b[2*i:], uint16(v))
		case 4:
			binary.LittleEndian.PutUint32(b[4*i:], uint32(v))
		default:
			binary.LittleEndian.PutUint64(b[8*i:], uint64(v))
		}
	}
	return b
}

// narrowSpanRecord returns n values of an element type in [lo, lo+span],
// both ends present, the rest random in between.
func narrowSpanRecord(rng *rand.Rand, size int, lo int64, span uint64, n int) []byte {
	vals := make([]int64, n)
	for i := range vals {
		var d uint64
		switch {
		case i == 0 || span == 0:
		case i == 1:
			d = span
		case span == math.MaxUint64:
			d = rng.Uint64()
		default:
			d = rng.Uint64N(span + 1)
		}
		vals[i] = lo + int64(d)
	}
	return narrowValues(size, vals)
}

// narrowCreate makes a Narrow store of element type el.
func narrowCreate(t *testing.T, el zrecord.Element, opts ...zrecord.Option) (*zrecord.Store, string) {
	t.Helper()
	return ztCreate(t, zrecord.Narrow, append([]zrecord.Option{zrecord.WithElement(el.Size, el.Signed)}, opts...)...)
}

// TestNarrowRoundTrip stores records of every element type at every width
// (and spans that need the full element, stored raw) and reads them back
// through Gather and GatherPacked, before and after a reopen; the stored
// bytes are what the chosen width gives.
func TestNarrowRoundTrip(t *testing.T) {
	const n = 333 // odd: the kernels' vector tails run too
	for _, size := range []int{1, 2, 4, 8} {
		for _, signed := range []bool{false, true} {
			el := zrecord.Element{Size: size, Signed: signed}
			t.Run(el.String(), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(uint64(size), 7))
				bits := 8 * size
				lo := int64(0)
				if signed {
					lo = -(int64(1) << (bits - 1)) // the type's minimum
				}
				var recs [][]byte
				var wantStored int64
				for _, width := range []int{0, 1, 2, 4, 8} {
					span := uint64(1)<<(8*width) - 1
					if width == 0 {
						span = 0
					}
					if width == 8 || width >= size {
						span = uint64(1)<<bits - 1 // the whole range: stays raw
						if bits == 64 {
							span = math.MaxUint64
						}
					}
					for _, start := range []int64{lo, lo + 5, -3} {
						if !signed && start < 0 {
							start = 17
						}
						if width >= size || width == 8 {
							start = lo
						}
						r := narrowSpanRecord(rng, size, start, span, n)
						recs = append(recs, r)
						w := width
						if width >= size || width == 8 {
							w = size
						}
						if w < size && 1+size+n*w < len(r) {
							wantStored += int64(1 + size + n*w)
						} else {
							wantStored += int64(len(r))
						}
					}
				}
				odd := make([]byte, 2*size+1) // not a whole number of elements
				if size == 1 {
					odd = []byte{9, 9} // whole, but 2 bytes narrowed would not shrink it
				}
				recs = append(recs, []byte{}, odd)
				wantStored += int64(len(odd))
				s, dir := narrowCreate(t, el)
				if _, err := s.Append(recs); err != nil {
					t.Fatal(err)
				}
				ztExpect(t, s, recs)
				st, err := s.Stats()
				if err != nil {
					t.Fatal(err)
				}
				if st.LiveBytes != wantStored || st.Version != 5 || st.Element != el || st.Codec != zrecord.Narrow {
					t.Fatalf("Stats: %d stored bytes (want %d), version %d, element %v, codec %v", st.LiveBytes, wantStored, st.Version, st.Element, st.Codec)
				}
				if err := s.Close(); err != nil {
					t.Fatal(err)
				}
				s2, err := zrecord.Open(dir, zrecord.WithReadOnly())
				if err != nil {
					t.Fatal(err)
				}
				defer s2.Close()
				ztExpect(t, s2, recs)
				rep, err := s2.Verify()
				if err != nil || !rep.OK() || rep.Checked != int64(len(recs)) {
					t.Fatalf("Verify: %+v, %v", rep, err)
				}
			})
		}
	}
}

// TestNarrowExtremes: int64 minimum and maximum in one record (stays raw),
// each alone with its neighbours (narrowed), all-equal records, and
// records whose length is not a whole number of elements.
func TestNarrowExtremes(t *testing.T) {
	s, _ := narrowCreate(t, zrecord.Element{Size: 8, Signed: true})
	recs := [][]byte{
		narrowValues(8, []int64{math.MinInt64, math.MaxInt64, 0, -1}),
		narrowValues(8, []int64{math.MinInt64, math.MinInt64 + 200, math.MinInt64 + 1, math.MinInt64}),
		narrowValues(8, []int64{math.MaxInt64, math.MaxInt64 - 65535, math.MaxInt64 - 1, math.MaxInt64}),
		narrowValues(8, []int64{-7, -7, -7, -7, -7, -7}),
		narrowValues(8, []int64{math.MaxInt64}),
		make([]byte, 8*1000),
		make([]byte, 8*3+5),
		{},
	}
	if _, err := s.Append(recs); err != nil {
		t.Fatal(err)
	}
	ztExpect(t, s, recs)
	st, _ := s.Stats()
	// raw 32, 1+8+4, 1+8+8, 1+8, raw 8, 1+8, raw 29, 0
	if want := int64(32 + 13 + 17 + 9 + 8 + 9 + 29); st.LiveBytes != want {
		t.Errorf("%d stored bytes, want %d", st.LiveBytes, want)
	}
}

// TestNarrowElementOptions: the element type's default and validation.
func TestNarrowElementOptions(t *testing.T) {
	s, dir := ztCreate(t, zrecord.Narrow)
	st, _ := s.Stats()
	if st.Element != zrecord.DefaultElement || zrecord.DefaultElement != (zrecord.Element{Size: 4, Signed: true}) {
		t.Fatalf("default element %v", st.Element)
	}
	s.Close()
	for _, opts := range [][]zrecord.Option{
		{zrecord.WithCodec(zrecord.Narrow), zrecord.WithElement(3, false)},
		{zrecord.WithCodec(zrecord.Narrow), zrecord.WithElement(0, true)},
		{zrecord.WithCodec(zrecord.Zstd), zrecord.WithElement(4, true)},
		{zrecord.WithElement(2, false)},
	} {
		if _, err := zrecord.Create(filepath.Join(t.TempDir(), "x"), opts...); !errors.Is(err, zrecord.ErrInvalidArgument) {
			t.Errorf("Create: %v, want ErrInvalidArgument", err)
		}
	}
	if _, err := zrecord.ParseElement("float32"); !errors.Is(err, zrecord.ErrInvalidArgument) {
		t.Errorf("ParseElement(float32): %v", err)
	}
	for _, name := range []string{"int8", "uint16", "int32", "uint64"} {
		if el, err := zrecord.ParseElement(name); err != nil || el.String() != name {
			t.Errorf("ParseElement(%s) = %v, %v", name, el, err)
		}
	}
	b, err := os.ReadFile(filepath.Join(dir, "meta.zr"))
	if err != nil {
		t.Fatal(err)
	}
	if b[4] != 5 || b[5] != byte(zrecord.Narrow) || b[30] != 4 || b[31] != 1 {
		t.Errorf("header bytes: version %d codec %d element %d/%d", b[4], b[5], b[30], b[31])
	}
}

// narrowDamageStore writes a store of int32 token ids: every record
// narrowed to 2 bytes per value.
func narrowDamageStore(t *testing.T) (string, [][]byte) {
	t.Helper()
	s, dir := narrowCreate(t, zrecord.DefaultElement)
	rng := rand.New(rand.NewPCG(3, 4))
	var recs [][]byte
	for range 5 {
		recs = append(recs, narrowSpanRecord(rng, 4, 10, 40000, 256))
	}
	if _, err := s.Append(recs); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return dir, recs
}

// narrowEntry reads table entry i of a version-5 store.
func narrowEntry(t *testing.T, dir string, i int64) (off, phys uint32) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "0.tab"))
	if err != nil {
		t.Fatal(err)
	}
	return binary.LittleEndian.Uint32(b[i*24:]), binary.LittleEndian.Uint32(b[i*24+4:])
}

// TestNarrowDamage: a flipped stored byte fails the checksum (ErrCorrupt,
// naming the record); a width code that does not fit the sizes, with the
// checksums made to match, fails the widening (ErrDecode, naming it); and
// Verify lists both.
func TestNarrowDamage(t *testing.T) {
	t.Run("flipped byte", func(t *testing.T) {
		dir, _ := narrowDamageStore(t)
		off, phys := narrowEntry(t, dir, 2)
		if phys != 1+4+256*2 {
			t.Fatalf("record 2 has %d stored bytes, want a 2-byte narrowing", phys)
		}
		flipByte(t, filepath.Join(dir, "0.chunk"), int64(off)+100)
		s, err := zrecord.Open(dir, zrecord.WithReadOnly())
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		dst := make([]byte, 3*1024)
		err = s.Gather([]int64{0, 2, 4}, dst, 1024)
		if !errors.Is(err, zrecord.ErrCorrupt) || !containsAll(err.Error(), "record 2", "0.chunk") {
			t.Fatalf("Gather: %v, want ErrCorrupt naming record 2", err)
		}
		rep, err := s.Verify()
		if err != nil || rep.OK() || len(rep.Faults) != 1 || rep.Faults[0].Index != 2 {
			t.Fatalf("Verify: %+v, %v", rep, err)
		}
	})
	t.Run("width code", func(t *testing.T) {
		dir, _ := narrowDamageStore(t)
		off, phys := narrowEntry(t, dir, 1)
		chunk := filepath.Join(dir, "0.chunk")
		b, err := os.ReadFile(chunk)
		if err != nil {
			t.Fatal(err)
		}
		for _, code := range []byte{1, 3, 4} {
			b[off] = code // a width the sizes do not fit, or no width at all
			if err := os.WriteFile(chunk, b, 0o644); err != nil {
				t.Fatal(err)
			}
			resealData(t, dir, 1, b[off:off+phys])
			s, err := zrecord.Open(dir, zrecord.WithReadOnly())
			if err != nil {
				t.Fatal(err)
			}
			dst := make([]byte, 1024)
			err = s.Gather([]int64{1}, dst, 1024)
			if !errors.Is(err, zrecord.ErrDecode) || !containsAll(err.Error(), "record 1", "width code") {
				t.Errorf("code %d: Gather: %v, want ErrDecode naming record 1 and the width code", code, err)
			}
			rep, err := s.Verify()
			if err != nil || len(rep.Faults) != 1 || rep.Faults[0].Index != 1 {
				t.Errorf("code %d: Verify: %+v, %v", code, rep, err)
			}
			s.Close()
		}
	})
	t.Run("stored length", func(t *testing.T) {
		dir, _ := narrowDamageStore(t)
		p := filepath.Join(dir, "0.tab")
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		binary.LittleEndian.PutUint32(b[3*24+4:], 1+4+256*2-1) // a length no width gives
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		resealEntry(t, dir, 3)
		s, err := zrecord.Open(dir, zrecord.WithReadOnly())
		if err != nil {
			t.Fatalf("Open: %v (the table is checked where it is read)", err)
		}
		defer s.Close()
		dst := make([]byte, 1024)
		if err := s.Gather([]int64{3}, dst, 1024); !errors.Is(err, zrecord.ErrCorrupt) || !containsAll(err.Error(), "entry 3", "narrowed") {
			t.Fatalf("Gather: %v, want ErrCorrupt naming entry 3", err)
		}
	})
}

// resealData sets the data checksum of table entry i to that of stored and
// reseals the entry.
func resealData(t *testing.T, dir string, i int64, stored []byte) {
	t.Helper()
	p := filepath.Join(dir, "0.tab")
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	binary.LittleEndian.PutUint32(b[i*24+16:], crc32.Checksum(stored, castagnoli))
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	resealEntry(t, dir, i)
}

func flipByte(t *testing.T, p string, at int64) {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	b[at] ^= 0x10
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func containsAll(s string, parts ...string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}

// TestNarrowMaintenance: Delete, Compact, pipelined appends and a pread
// reader keep a Narrow store's records, and Upgrade leaves it as it is.
func TestNarrowMaintenance(t *testing.T) {
	old := zrecord.SetPipeStepPerThread(64 << 10)
	defer zrecord.SetPipeStepPerThread(old)
	s, dir := narrowCreate(t, zrecord.Element{Size: 2, Signed: false}, zrecord.WithChunkCapacity(32<<10))
	rng := rand.New(rand.NewPCG(5, 6))
	var recs [][]byte
	for i := range 200 {
		recs = append(recs, narrowSpanRecord(rng, 2, int64(i), uint64(i%3)*100, 1500+i))
	}
	before := zrecord.PipelinedAppends()
	if _, err := s.Append(recs); err != nil {
		t.Fatal(err)
	}
	if zrecord.PipelinedAppends() == before {
		t.Fatal("the batch was not appended pipelined")
	}
	ztExpect(t, s, recs)
	idx := []int64{199, 3, 3, 0, 150}
	sizes := make([]int64, len(idx))
	dst := make([]byte, 1<<20)
	needed, err := s.GatherRagged(idx, sizes, dst)
	if err != nil {
		t.Fatal(err)
	}
	var off int64
	for k, i := range idx {
		if got := dst[off : off+sizes[k]]; string(got) != string(recs[i]) {
			t.Fatalf("GatherRagged: record %d differs", i)
		}
		off += sizes[k]
	}
	if off != needed {
		t.Fatalf("GatherRagged needed %d, sizes add up to %d", needed, off)
	}
	if err := s.Delete([]int64{0, 5, 199, 17}); err != nil {
		t.Fatal(err)
	}
	// Delete fills each hole, from the highest, with the last record.
	want := append([][]byte(nil), recs[:199]...)
	want[17], want = want[198], want[:198]
	want[5], want = want[197], want[:197]
	want[0], want = want[196], want[:196]
	ztExpect(t, s, want)
	if err := s.Compact(); err != nil {
		t.Fatal(err)
	}
	ztExpect(t, s, want)
	if err := s.Upgrade(); err != nil {
		t.Fatal(err)
	}
	st, _ := s.Stats()
	if st.Version != 5 {
		t.Fatalf("version %d after Upgrade", st.Version)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	r, err := zrecord.VerifyDir(dir)
	if err != nil || !r.OK() || r.Codec != "narrow" || r.Version != 5 {
		t.Fatalf("VerifyDir: %+v, %v", r, err)
	}
	s2, err := zrecord.Open(dir, zrecord.WithFS(ztNoMapFS{zrecord.OSFS}))
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	ztExpect(t, s2, want)
}

// TestNarrowProbe: the probe stores what Append would and reads it back.
func TestNarrowProbe(t *testing.T) {
	rng := rand.New(rand.NewPCG(8, 9))
	var samples [][]byte
	var want int64
	for range 20 {
		samples = append(samples, narrowSpanRecord(rng, 4, 3, 49999, 2048))
		want += 1 + 4 + 2*2048
	}
	samples = append(samples, make([]byte, 7))
	want += 7
	p, err := zrecord.ProbeNarrow(zrecord.Element{Size: 4, Signed: true}, samples)
	if err != nil {
		t.Fatal(err)
	}
	if p.StoredBytes != want || p.Compressed != 20 || p.Records != 21 || p.DecodeNanos <= 0 {
		t.Fatalf("probe %+v, want %d stored bytes", p, want)
	}
	if _, err := zrecord.ProbeCodec(zrecord.Narrow, zrecord.TierBalanced, nil, samples); !errors.Is(err, zrecord.ErrInvalidArgument) {
		t.Fatalf("ProbeCodec(Narrow): %v", err)
	}
	if _, err := zrecord.ProbeNarrow(zrecord.Element{Size: 5}, samples); !errors.Is(err, zrecord.ErrInvalidArgument) {
		t.Fatalf("ProbeNarrow(size 5): %v", err)
	}
}

func ExampleWithElement() {
	dir, _ := os.MkdirTemp("", "narrow-example-")
	defer os.RemoveAll(dir)
	s, err := zrecord.Create(filepath.Join(dir, "tokens"), zrecord.WithCodec(zrecord.Narrow), zrecord.WithElement(4, true))
	if err != nil {
		panic(err)
	}
	defer s.Close()
	ids := narrowValues(4, []int64{101, 7, 49999, 0, 312, 5})
	if _, err := s.Append([][]byte{ids}); err != nil {
		panic(err)
	}
	st, _ := s.Stats()
	fmt.Println(st.Codec, st.Element, st.LogicalBytes, "->", st.LiveBytes)
	// Output: narrow int32 24 -> 17
}
