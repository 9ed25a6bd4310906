package zrecord

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// One fuzz target per decoder of bytes read from disk. Each must reject or
// accept any input without panicking; what it accepts must encode back to
// the same bytes; and, where the format carries a checksum, any single bit
// flip of an accepted input must be rejected. The seed corpus lives in
// testdata/fuzz/<target>/ (regenerate it with ZRECORD_WRITE_FUZZ_SEEDS=1
// go test -run TestWriteFuzzSeeds); plain go test runs the seeds.

func seedHeaders() [][]byte {
	var out [][]byte
	for _, h := range []header{
		{version: formatVersion, codec: Raw},
		{version: formatVersion, codec: Zstd, tailChunk: 3, tailOffset: 12345, length: 77},
		{version: formatVersion, codec: ZstdDict, tailChunk: 1, tailOffset: 9, length: 2, dictSum: 0xdeadbeef},
		{version: versionV1, codec: Zstd, tailChunk: 0, tailOffset: 100, length: 5},
		{version: versionV3, codec: ZstdDict, tailOffset: 4096, length: 40},
	} {
		b := h.encode()
		out = append(out, b[:])
	}
	return append(out, []byte("ZREC"), []byte{}, bytes.Repeat([]byte{0xff}, 32))
}

func FuzzDecodeHeader(f *testing.F) {
	for _, b := range seedHeaders() {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := decodeHeader(b, "meta.zr")
		if err != nil {
			return
		}
		enc := h.encode()
		if !bytes.Equal(enc[:], b[:headerSize]) {
			t.Fatalf("accepted header %x encodes back as %x", b[:headerSize], enc)
		}
		if h.version != formatVersion {
			return
		}
		for i := range headerSize * 8 {
			c := bytes.Clone(b[:headerSize])
			c[i/8] ^= 1 << (i % 8)
			if _, err := decodeHeader(c, "meta.zr"); err == nil {
				t.Fatalf("flipping bit %d of an accepted header went unnoticed", i)
			}
		}
	})
}

func seedEntries() [][]byte {
	var out [][]byte
	for i, e := range []entry{{}, {off: 1, phys: 2, logic: 3, chunk: 4, sum: 5}, {off: 1 << 31, phys: 1 << 20, logic: 1 << 21, chunk: 7, sum: 0xffffffff}} {
		b := make([]byte, 32)
		binary.LittleEndian.PutUint64(b[24:], uint64(i*1000))
		layoutV4.putEntry(b, int64(i*1000), e)
		out = append(out, b)
	}
	return out
}

// FuzzDecodeEntry takes 24 entry bytes followed by the index (u64) they are
// read at.
func FuzzDecodeEntry(f *testing.F) {
	for _, b := range seedEntries() {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) < 32 {
			return
		}
		idx := int64(binary.LittleEndian.Uint64(b[24:]) >> 2) // non-negative
		raw := b[:24]
		// Version 1 and 3 entries: every 16 bytes decode, and back.
		var old [16]byte
		layoutV1.putEntry(old[:], idx, layoutV1Entry(raw))
		if !bytes.Equal(old[:], raw[:16]) {
			t.Fatalf("a 16-byte entry %x encodes back as %x", raw[:16], old)
		}
		e, bad := layoutV4.getEntryAt(raw, idx)
		if bad != nil {
			return
		}
		var enc [24]byte
		layoutV4.putEntry(enc[:], idx, e)
		if !bytes.Equal(enc[:], raw) {
			t.Fatalf("accepted entry %x encodes back as %x", raw, enc)
		}
		for i := range 24 * 8 {
			c := bytes.Clone(raw)
			c[i/8] ^= 1 << (i % 8)
			if _, bad := layoutV4.getEntryAt(c, idx); bad == nil {
				t.Fatalf("flipping bit %d of an accepted entry went unnoticed", i)
			}
		}
		if idx > 0 {
			if _, bad := layoutV4.getEntryAt(raw, idx-1); bad == nil {
				t.Fatal("an entry read at the wrong index was accepted")
			}
		}
	})
}

func layoutV1Entry(b []byte) entry {
	e, _ := layoutV1.getEntryAt(b, 0)
	return e
}

func seedDeleteJournals() [][]byte {
	var out [][]byte
	for _, v := range []uint8{1, 2} {
		j := deleteIntent{version: v, before: position{2, 300}, beforeLen: 9, afterLen: 6,
			writes: []indexedEntry{{0, entry{off: 10, phys: 5, logic: 5, chunk: 1, sum: 42}}, {4, entry{phys: 1, logic: 9}}}}
		if v == 1 {
			j.writes[0].e.sum = 0
		}
		out = append(out, j.encode())
	}
	return out
}

func FuzzDecodeDeleteIntent(f *testing.F) {
	for _, b := range seedDeleteJournals() {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		j, ok := decodeDeleteIntent(raw)
		if !ok {
			return
		}
		if enc := j.encode(); !bytes.Equal(enc, raw) {
			t.Fatalf("accepted journal encodes back differently:\n%x\n%x", raw, enc)
		}
		for i := range len(raw) * 8 {
			c := bytes.Clone(raw)
			c[i/8] ^= 1 << (i % 8)
			if _, ok := decodeDeleteIntent(c); ok {
				t.Fatalf("flipping bit %d of an accepted journal went unnoticed", i)
			}
		}
	})
}

func seedCompactJournals() [][]byte {
	var out [][]byte
	for _, v := range []uint8{1, 2} {
		group := []move{
			{idx: 3, from: entry{off: 500, phys: 10, logic: 10, sum: 7}, to: entry{off: 100, phys: 10, logic: 10, sum: 7}},
			{idx: 1, from: entry{off: 120, phys: 40, logic: 90, sum: 8}, to: entry{off: 110, phys: 40, logic: 90, sum: 8}, held: true},
		}
		if v == 1 {
			for k := range group {
				group[k].from.sum, group[k].to.sum = 0, 0
			}
		}
		b, _ := appendCompactJournal(nil, v, group, func(m move, dst []byte) error {
			for k := range dst {
				dst[k] = byte(k)
			}
			return nil
		})
		out = append(out, b)
	}
	return out
}

func FuzzDecodeCompactJournal(f *testing.F) {
	for _, b := range seedCompactJournals() {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		j, ok := decodeCompactJournal(raw)
		if !ok {
			return
		}
		enc, err := appendCompactJournal(nil, j.version, j.moves, func(m move, dst []byte) error {
			for k, mm := range j.moves {
				if mm.idx == m.idx && mm.held {
					copy(dst, j.held[k])
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.HasPrefix(raw, enc) {
			t.Fatalf("accepted journal encodes back differently:\n%x\n%x", raw, enc)
		}
		for i := range len(enc) * 8 {
			c := bytes.Clone(enc)
			c[i/8] ^= 1 << (i % 8)
			if _, ok := decodeCompactJournal(c); ok {
				t.Fatalf("flipping bit %d of an accepted journal went unnoticed", i)
			}
		}
	})
}

func seedDicts(t testing.TB) [][]byte {
	var samples [][]byte
	for i := range 64 {
		samples = append(samples, []byte("record "+strconv.Itoa(i)+" shares this text with the others, mostly "+strconv.Itoa(i*i)))
	}
	d, err := TrainDict(samples, TierFast, 1024)
	if err != nil {
		t.Fatal(err)
	}
	return [][]byte{d, d[:len(d)/2], []byte("not a dictionary"), {0x37, 0xa4, 0x30, 0xec}}
}

// FuzzDictionary feeds dict.zr contents to the checks Open makes: a
// dictionary they accept must work for both directions.
func FuzzDictionary(f *testing.F) {
	for _, d := range seedDicts(f) {
		f.Add(d)
	}
	f.Fuzz(func(t *testing.T, d []byte) {
		if checkDict(d) != nil {
			return
		}
		enc, err := newEncoder(ZstdDict, d, TierFast)
		if err != nil {
			t.Fatalf("accepted dictionary: encoder: %v", err)
		}
		defer enc.Close()
		dec, err := newDecoder(ZstdDict, d)
		if err != nil {
			t.Fatalf("accepted dictionary: decoder: %v", err)
		}
		defer dec.Close()
		rec := bytes.Repeat([]byte("round trip through the dictionary "), 20)
		got, err := dec.DecodeAll(enc.EncodeAll(rec, nil), make([]byte, 0, len(rec)))
		if err != nil || !bytes.Equal(got, rec) {
			t.Fatalf("accepted dictionary: round trip: %v", err)
		}
	})
}

// TestWriteFuzzSeeds writes the seed corpus of the targets above into
// testdata/fuzz when ZRECORD_WRITE_FUZZ_SEEDS is set.
func TestWriteFuzzSeeds(t *testing.T) {
	if os.Getenv("ZRECORD_WRITE_FUZZ_SEEDS") == "" {
		t.Skip("set ZRECORD_WRITE_FUZZ_SEEDS=1 to rewrite the seed corpus")
	}
	for target, seeds := range map[string][][]byte{
		"FuzzDecodeHeader":         seedHeaders(),
		"FuzzDecodeEntry":          seedEntries(),
		"FuzzDecodeDeleteIntent":   seedDeleteJournals(),
		"FuzzDecodeCompactJournal": seedCompactJournals(),
		"FuzzDictionary":           seedDicts(t),
	} {
		dir := filepath.Join("testdata", "fuzz", target)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for k, b := range seeds {
			body := "go test fuzz v1\n[]byte(" + strconv.Quote(string(b)) + ")\n"
			if err := os.WriteFile(filepath.Join(dir, "seed"+strconv.Itoa(k)), []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
}
