package zrecord

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"unsafe"
)

// widenPairs are the widenings a narrowed record can need: packed width w
// below element size es.
var widenPairs = []struct{ w, es int }{{1, 2}, {1, 4}, {1, 8}, {2, 4}, {2, 8}, {4, 8}}

// TestWidenKernels checks widen (the assembly kernels where the CPU has
// them) against widenGo and against the definition, for every pair, at
// lengths around the kernels' vector and unrolled-loop sizes, with bases
// that make the addition wrap; cached and streamed, into outputs at
// several offsets from a 32-byte boundary (a streamed one widens up to the
// boundary in Go, and one whose values are off their own boundaries is
// written cached).
func TestWidenKernels(t *testing.T) {
	if !useWidenSIMD {
		t.Log("no AVX2 (or a race build): widen runs in Go, checked against the definition only")
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for _, p := range widenPairs {
		for _, n := range []int{0, 1, 3, 4, 7, 8, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 128, 129, 1000, 2048} {
			for _, base := range []uint64{0, 1, 0x7f, 0xfffe, 0xffffffff_fffffff0, rng.Uint64()} {
				for _, stream := range []bool{false, true} {
					for _, off := range []int{0, p.es, 32 - p.es, 1} {
						checkWiden(t, rng, p.w, p.es, n, base, stream, off)
					}
				}
			}
		}
	}
}

// checkWiden widens n random values of w bytes into es-byte values with
// widen, into an output off bytes past a 32-byte boundary between guard
// bytes, and checks them against widenGo and the definition.
func checkWiden(t *testing.T, rng *rand.Rand, w, es, n int, base uint64, stream bool, off int) {
	t.Helper()
	packed := make([]byte, n*w+3) // spare bytes the kernels must not read into out
	for i := range packed {
		packed[i] = byte(rng.Uint32())
	}
	buf := make([]byte, n*es+104)
	start := int(-uintptr(unsafe.Pointer(&buf[0]))&31) + 32 + off
	for i := range buf {
		buf[i] = 0xAB
	}
	got := buf[start : start+n*es]
	ref := make([]byte, n*es)
	widen(got, packed[:n*w], es, w, base, stream)
	widenGo(ref, packed[:n*w], es, w, base)
	what := fmt.Sprintf("w=%d es=%d n=%d base=%#x stream=%v offset %d", w, es, n, base, stream, off)
	if string(got) != string(ref) {
		t.Fatalf("%s: widen and widenGo differ", what)
	}
	mask := uint64(1)<<(8*es) - 1
	if es == 8 {
		mask = ^uint64(0)
	}
	for i := 0; i < n; i++ {
		want := (getElem(packed[i*w:], w) + base) & mask
		if v := getElem(got[i*es:], es); v != want {
			t.Fatalf("%s: value %d is %#x, want %#x", what, i, v, want)
		}
	}
	for i, b := range buf {
		if (i < start || i >= start+n*es) && b != 0xAB {
			t.Fatalf("%s: byte %d outside the output written", what, i-start)
		}
	}
}

// TestNarrowRecordWidths checks the width narrowRecord picks for spans at
// the edges of each width, and that the stored form widens back.
func TestNarrowRecordWidths(t *testing.T) {
	for _, c := range []struct {
		span  uint64
		width int
	}{{0, 0}, {1, 1}, {0xff, 1}, {0x100, 2}, {0xffff, 2}, {0x10000, 4}, {0xffffffff, 4}, {0x1_0000_0000, -1}} {
		el := Element{Size: 8, Signed: true}
		r := make([]byte, 8*64)
		for i := 0; i < 64; i++ {
			v := int64(-1000)
			if i%2 == 1 {
				v += int64(c.span)
			}
			binary.LittleEndian.PutUint64(r[8*i:], uint64(v))
		}
		out, ok := narrowRecord(nil, r, el)
		if c.width < 0 {
			if ok {
				t.Fatalf("span %#x: narrowed an int64 record that needs 8 bytes", c.span)
			}
			continue
		}
		if !ok || int(out[0]) != c.width || len(out) != narrowedSize(8, c.width, 64) {
			t.Fatalf("span %#x: ok=%v, %d bytes, width %d; want width %d", c.span, ok, len(out), out[0], c.width)
		}
		back := make([]byte, len(r))
		if err := widenRecord(back, out, 8); err != nil || string(back) != string(r) {
			t.Fatalf("span %#x: widened back wrong (%v)", c.span, err)
		}
	}
}

// TestVersionNarrowRefusedByOlderReader plays a reader that knows versions
// 1, 3 and 4 only, as the releases before the codec do: it must refuse a
// Narrow store's header with ErrVersion, and say the store is newer.
func TestVersionNarrowRefusedByOlderReader(t *testing.T) {
	h := header{version: versionNarrow, codec: Narrow, length: 3, elem: Element{Size: 2}}
	b := h.encode()
	if got, err := decodeHeader(b[:], "meta.zr"); err != nil || got.elem != h.elem || got.codec != Narrow {
		t.Fatalf("this reader: %+v, %v", got, err)
	}
	saved := readVersions
	readVersions = []uint8{versionV1, versionV3, formatVersion}
	defer func() { readVersions = saved }()
	_, err := decodeHeader(b[:], "meta.zr")
	if !errors.Is(err, ErrVersion) {
		t.Fatalf("a version-4 reader: %v, want ErrVersion", err)
	}
	for _, want := range []string{"format version 5", "newer loaderx", "1, 3 and 4"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	b[4] = 2 // never written: not called newer
	if _, err := decodeHeader(b[:], "meta.zr"); !errors.Is(err, ErrVersion) || strings.Contains(err.Error(), "newer") {
		t.Errorf("version 2: %v", err)
	}
}

// TestNarrowHeaderChecks: the codec and the version go together, and the
// element bytes must describe an element.
func TestNarrowHeaderChecks(t *testing.T) {
	for name, h := range map[string]header{
		"narrow as version 4": {version: formatVersion, codec: Narrow},
		"zstd as version 5":   {version: versionNarrow, codec: Zstd, elem: Element{Size: 4}},
		"element size 3":      {version: versionNarrow, codec: Narrow, elem: Element{Size: 3}},
		"element size 0":      {version: versionNarrow, codec: Narrow},
	} {
		b := h.encode()
		if _, err := decodeHeader(b[:], "meta.zr"); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: %v, want ErrCorrupt", name, err)
		}
	}
	b := header{version: versionNarrow, codec: Narrow, elem: Element{Size: 4}}.encode()
	b[31] = 2
	binary.LittleEndian.PutUint32(b[22:26], headerSum(b[:]))
	if _, err := decodeHeader(b[:], "meta.zr"); !errors.Is(err, ErrCorrupt) {
		t.Errorf("signedness byte 2: %v, want ErrCorrupt", err)
	}
}

// FuzzWidenRecord feeds arbitrary stored bytes to the widening of a record
// of a given logical size: it must never panic or write past out, and it
// must either fail or fill out exactly (the checksum normally stops damage
// first; this is the check behind it).
func FuzzWidenRecord(f *testing.F) {
	for _, p := range widenPairs {
		rec := make([]byte, 64*p.es)
		for i := range rec {
			rec[i] = byte(i % 3)
		}
		if out, ok := narrowRecord(nil, rec, Element{Size: p.es}); ok {
			f.Add(out, uint16(len(rec)), uint8(p.es))
		}
	}
	f.Add([]byte{0, 1, 2, 3, 4}, uint16(16), uint8(4))
	f.Add([]byte{4, 0, 0, 0, 0, 0, 0, 0, 0}, uint16(8), uint8(8))
	f.Fuzz(func(t *testing.T, src []byte, logic uint16, esCode uint8) {
		es := []int{1, 2, 4, 8}[esCode%4]
		out := make([]byte, int(logic)+16)
		for i := range out {
			out[i] = 0x5A
		}
		if err := widenRecord(out[:logic], src, es); err == nil {
			w := int(src[0])
			if len(src) != narrowedSize(es, w, int(logic)/es) || int(logic)%es != 0 {
				t.Fatalf("accepted %d stored bytes for %d logical at width %d", len(src), logic, w)
			}
		}
		for _, b := range out[logic:] {
			if b != 0x5A {
				t.Fatal("wrote past the record")
			}
		}
	})
}

// TestNarrowSmall32 checks the small-record path of 32-bit elements against
// the general one: the same bytes and the same choice, for records of 1 to
// 16 values whose spans fall on each side of every width's limit, signed and
// not.
func TestNarrowSmall32(t *testing.T) {
	rng := rand.New(rand.NewPCG(17, 4))
	spans := []uint32{0, 1, 0xff, 0x100, 0xffff, 0x10000, 0xffffffff}
	for trial := range 20000 {
		n := 1 + trial%16
		base := rng.Uint32()
		span := spans[rng.IntN(len(spans))]
		r := make([]byte, 4*n)
		for i := range n {
			v := base + uint32(rng.Uint64N(uint64(span)+1))
			if i == 0 {
				v = base
			}
			binary.LittleEndian.PutUint32(r[4*i:], v)
		}
		for _, signed := range []bool{false, true} {
			el := Element{Size: 4, Signed: signed}
			prefix := []byte{9, 9}
			got, gotOK := narrowSmall32(append([]byte(nil), prefix...), r, signed)
			want, wantOK := narrowAny(append([]byte(nil), prefix...), r, el)
			if gotOK != wantOK || !bytes.Equal(got, want) {
				t.Fatalf("%d values %x signed %v: small path %v %x, general %v %x", n, r, signed, gotOK, got, wantOK, want)
			}
		}
	}
}
