package zrecord

import (
	"bytes"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/klauspost/compress/zstd"
)

// featureRow returns a 2 KiB record of 512 little-endian int32 values: a
// gradient plus five bits of noise, like the benchmark's feature rows. Its
// entropy-coded frame is about a quarter smaller than its plain one.
func featureRow(id int) []byte {
	r := rand.New(rand.NewPCG(uint64(id), 11))
	b := make([]byte, 2048)
	base := r.IntN(96)
	for k := range 512 {
		b[4*k] = byte(base + k*128/512 + r.IntN(32))
	}
	return b
}

// tokenRow returns n bytes of little-endian int32 ids with a skewed
// distribution, which entropy coding shrinks far more than a quarter.
func tokenRow(id, n int) []byte {
	r := rand.New(rand.NewPCG(uint64(id), 13))
	b := make([]byte, n)
	for k := 0; k+4 <= n; k += 4 {
		f := r.Float64()
		v := int(50000 * f * f * f * f * f * f)
		b[k], b[k+1], b[k+2] = byte(v), byte(v>>8), byte(v>>16)
	}
	return b
}

// noisyPixels returns n bytes of a gradient with five bits of noise: few
// repeats, so literals are most of the frame.
func noisyPixels(id, n int) []byte {
	r := rand.New(rand.NewPCG(uint64(id), 17))
	b := make([]byte, n)
	base := r.IntN(96)
	for i := range b {
		b[i] = byte(base + i*128/max(n, 1) + r.IntN(32))
	}
	return b
}

// plainEncoder returns an encoder that never entropy-codes literals: the
// reference the frames preferPlain makes are compared with.
func plainEncoder() *zstd.Encoder {
	e, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedDefault), zstd.WithEncoderCRC(false),
		zstd.WithNoEntropyCompression(true), zstd.WithEncoderConcurrency(1))
	if err != nil {
		panic(err)
	}
	return e
}

// literalsKind returns the literals type of a single-block frame (0 raw,
// 1 RLE, 2 Huffman with its table, 3 Huffman with a repeated table), or -1
// when frame is not one.
func literalsKind(t *testing.T, frame []byte) int {
	t.Helper()
	if len(frame) < 6 {
		return -1
	}
	fhd := frame[4]
	at := 5 + [4]int{0, 1, 2, 4}[fhd&3] + [4]int{0, 2, 4, 8}[fhd>>6]
	if fhd>>5&1 == 0 || fhd>>6 == 0 {
		at++
	}
	if len(frame) < at+4 || frame[at]>>1&3 != 2 {
		return -1
	}
	return int(frame[at+3] & 3)
}

// TestPlainFrameSizePredicts checks the prediction against the plain
// encoder's frame for records of many sizes and kinds.
func TestPlainFrameSizePredicts(t *testing.T) {
	enc, err := newRecordEncoder(Zstd, nil, TierBalanced)
	if err != nil {
		t.Fatal(err)
	}
	defer enc.Close()
	pe := plainEncoder()
	defer pe.Close()
	checked := 0
	for id := range 40 {
		for _, r := range [][]byte{
			featureRow(id), tokenRow(id, 64+id*97), tokenRow(id, 8192), noisyPixels(id, 200+id*40),
			noisyPixels(id, 20000), ztRecordInternal(1000 + id*50),
		} {
			huff := enc.huff.EncodeAll(r, nil)
			want, ok := plainFrameSize(huff)
			if !ok {
				continue
			}
			// The plain encoder writes a compressed block of the predicted
			// size, or a raw block when that is smaller.
			plain := pe.EncodeAll(r, nil)
			switch k := literalsKind(t, plain); {
			case k == 0 && want != len(plain):
				t.Fatalf("record %d of %d bytes: predicted a plain frame of %d bytes, the encoder wrote %d", id, len(r), want, len(plain))
			case k == -1 && len(plain) > want:
				t.Fatalf("record %d of %d bytes: predicted a plain frame of %d bytes, the encoder wrote a raw block of %d", id, len(r), want, len(plain))
			case k > 0:
				t.Fatalf("record %d of %d bytes: plain frame has literals of kind %d", id, len(r), k)
			}
			checked++
		}
	}
	if checked < 100 {
		t.Fatalf("only %d records had Huffman-coded literals to predict", checked)
	}
	for _, bad := range [][]byte{nil, {1, 2, 3}, bytes.Repeat([]byte{0x28, 0xb5, 0x2f, 0xfd}, 4), make([]byte, 64)} {
		if _, ok := plainFrameSize(bad); ok {
			t.Fatalf("plainFrameSize(%x) claims a Huffman-coded frame", bad)
		}
	}
}

// TestPlainLiteralsChoice checks which frame each kind of record is stored
// as: feature rows and noisy pixels plain (at most a quarter larger),
// token rows and records past plainLiteralsMaxSize entropy-coded, a
// ZstdDict record never given the choice, and the same bytes every time.
func TestPlainLiteralsChoice(t *testing.T) {
	enc, err := newRecordEncoder(Zstd, nil, TierBalanced)
	if err != nil {
		t.Fatal(err)
	}
	defer enc.Close()
	dec, err := newDecoder(Zstd, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer dec.Close()
	cases := []struct {
		name string
		r    []byte
		kind int
	}{
		{"feature row", featureRow(1), 0},
		{"token row 2 KiB", tokenRow(3, 2048), 2},
		{"token row 8 KiB", tokenRow(4, 8192), 2},
		{"feature rows 8 KiB", bytes.Join([][]byte{featureRow(5), featureRow(6), featureRow(7), featureRow(8)}, nil), 2},
	}
	for _, c := range cases {
		frame, smaller := encodeRecord(enc, Element{}, c.r, nil)
		if !smaller {
			huff := enc.huff.EncodeAll(c.r, nil)
			t.Logf("%s: entropy-coded %d bytes, kept %d", c.name, len(huff), len(frame))
			t.Fatalf("%s: stored raw", c.name)
		}
		if k := literalsKind(t, frame); k != c.kind {
			t.Errorf("%s: literals of kind %d, want %d (frame %d bytes)", c.name, k, c.kind, len(frame))
		}
		if huff := enc.huff.EncodeAll(c.r, nil); c.kind == 0 && len(frame) > len(huff)+len(huff)/plainLiteralsSlack {
			t.Errorf("%s: plain frame of %d bytes is more than a quarter larger than %d", c.name, len(frame), len(huff))
		}
		if c.kind == 0 {
			pe := plainEncoder()
			ref := pe.EncodeAll(c.r, nil)
			pe.Close()
			if !bytes.Equal(frame, ref) {
				t.Errorf("%s: the rewritten frame (%d bytes) is not the plain encoder's (%d bytes)", c.name, len(frame), len(ref))
			}
		}
		again, _ := encodeRecord(enc, Element{}, c.r, []byte("prefix"))
		if !bytes.Equal(again[6:], frame) {
			t.Errorf("%s: a second encoding stored other bytes", c.name)
		}
		got, err := dec.DecodeAll(frame, make([]byte, 0, len(c.r)))
		if err != nil || !bytes.Equal(got, c.r) {
			t.Fatalf("%s: decodes to %d bytes, %v", c.name, len(got), err)
		}
	}
	var samples [][]byte
	for id := range 64 {
		samples = append(samples, featureRow(100+id), tokenRow(100+id, 2048))
	}
	dict, err := TrainDict(samples, TierFast, 4096)
	if err != nil {
		t.Fatal(err)
	}
	denc, err := newRecordEncoder(ZstdDict, dict, TierBalanced)
	if err != nil {
		t.Fatal(err)
	}
	defer denc.Close()
	ddec, err := newDecoder(ZstdDict, dict)
	if err != nil {
		t.Fatal(err)
	}
	defer ddec.Close()
	rewritten := 0
	for _, r := range samples {
		f, smaller := encodeRecord(denc, Element{}, r, nil)
		if !smaller {
			continue
		}
		if literalsKind(t, f) == 0 && literalsKind(t, denc.huff.EncodeAll(r, nil)) == 2 {
			rewritten++
		}
		got, err := ddec.DecodeAll(f, make([]byte, 0, len(r)))
		if err != nil || !bytes.Equal(got, r) {
			t.Fatalf("a ZstdDict record decodes to %d bytes, %v", len(got), err)
		}
	}
	if rewritten == 0 {
		t.Fatal("no ZstdDict frame was rewritten with plain literals")
	}
	t.Logf("%d of %d ZstdDict frames rewritten with plain literals", rewritten, len(samples))
}

// TestPlainLiteralsStore stores a mix of plain and entropy-coded frames,
// gathers them through every gather path, verifies the store, and checks
// that two stores of the same records written in other batches hold the
// same chunk bytes.
func TestPlainLiteralsStore(t *testing.T) {
	var recs [][]byte
	for id := range 96 {
		switch id % 3 {
		case 0:
			recs = append(recs, featureRow(id))
		case 1:
			recs = append(recs, tokenRow(id, 2048))
		default:
			// Its plain frame would not be smaller than itself: kept raw.
			recs = append(recs, noisyPixels(id, 2048))
		}
	}
	enc, err := newRecordEncoder(Zstd, nil, TierBalanced)
	if err != nil {
		t.Fatal(err)
	}
	defer enc.Close()
	pe := plainEncoder()
	defer pe.Close()
	root := t.TempDir()
	var chunks [][]byte
	for _, per := range []int{1, 7, len(recs)} {
		dir := filepath.Join(root, "s"+string(rune('a'+len(chunks))))
		s, err := Create(dir, WithCodec(Zstd))
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < len(recs); i += per {
			if _, err := s.Append(recs[i:min(i+per, len(recs))]); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Sync(); err != nil {
			t.Fatal(err)
		}
		chunk, err := os.ReadFile(filepath.Join(dir, chunkName(0)))
		if err != nil {
			t.Fatal(err)
		}
		kinds := map[int]int{}
		for i := range recs {
			e, err := s.entryAt(*s.segs.Load(), int64(i))
			if err != nil {
				t.Fatal(err)
			}
			if e.chunk != 0 {
				t.Fatalf("record %d past chunk 0: %+v", i, e)
			}
			huff := len(enc.huff.EncodeAll(recs[i], nil))
			if e.phys == e.logic {
				// Kept raw: its frames are not smaller, or the record
				// itself is within the bound.
				if huff < len(recs[i]) && len(recs[i]) > huff+huff/plainLiteralsSlack {
					t.Fatalf("record %d kept raw, entropy-coded %d bytes", i, huff)
				}
				kinds[-1]++
				continue
			}
			// Each frame kind is the one the rule asks for.
			k := literalsKind(t, chunk[e.off:e.off+e.phys])
			kinds[k]++
			plain := len(pe.EncodeAll(recs[i], nil))
			if fits := plain <= huff+huff/plainLiteralsSlack; (k == 0) != fits {
				t.Fatalf("record %d stored with literals of kind %d: entropy-coded %d bytes, plain %d", i, k, huff, plain)
			}
		}
		if kinds[0] < 8 || kinds[2] < 32 || kinds[-1] != 32 {
			t.Fatalf("stored kinds %v: want at least 8 plain (0), 32 Huffman (2) and 32 raw (-1)", kinds)
		}
		checkAllGathers(t, s, recs)
		if rep, err := s.Verify(); err != nil || !rep.OK() {
			t.Fatalf("Verify: %+v, %v", rep, err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		chunks = append(chunks, chunk)
	}
	for k := 1; k < len(chunks); k++ {
		if !bytes.Equal(chunks[k], chunks[0]) {
			t.Fatalf("the store written in batches %d holds other chunk bytes than the one written one by one", k)
		}
	}
}

// checkAllGathers reads every record of s through Gather, GatherPacked and
// GatherRagged, on one thread and fanned out, and compares with recs (all
// of one size).
func checkAllGathers(t *testing.T, s *Store, recs [][]byte) {
	t.Helper()
	defer SetThreads(0)
	n, size := len(recs), len(recs[0])
	idx := make([]int64, n)
	offsets := make([]int64, n+1)
	for i := range idx {
		idx[i] = int64(n - 1 - i) // backwards: no path may rely on order
		offsets[i+1] = offsets[i] + int64(size)
	}
	want := make([]byte, 0, n*size)
	for _, i := range idx {
		want = append(want, recs[i]...)
	}
	for _, threads := range []int{1, 2} {
		SetThreads(threads)
		dst := make([]byte, n*size)
		if err := s.Gather(idx, dst, size); err != nil || !bytes.Equal(dst, want) {
			t.Fatalf("Gather on %d threads: %v, equal %v", threads, err, bytes.Equal(dst, want))
		}
		clear(dst)
		if err := s.GatherPacked(idx, dst, offsets); err != nil || !bytes.Equal(dst, want) {
			t.Fatalf("GatherPacked on %d threads: %v, equal %v", threads, err, bytes.Equal(dst, want))
		}
		clear(dst)
		sizes := make([]int64, n)
		if needed, err := s.GatherRagged(idx, sizes, dst); err != nil || needed != int64(n*size) || !bytes.Equal(dst, want) {
			t.Fatalf("GatherRagged on %d threads: needed %d, %v, equal %v", threads, needed, err, bytes.Equal(dst, want))
		}
	}
}

// TestPlainLiteralsDictStore is TestPlainLiteralsStore for a ZstdDict
// store: frames the encoder gave a Huffman table, rewritten with plain
// literals, read back through every gather path and Verify.
func TestPlainLiteralsDictStore(t *testing.T) {
	var recs, samples [][]byte
	for id := range 64 {
		recs = append(recs, featureRow(200+id))
		samples = append(samples, featureRow(300+id), tokenRow(300+id, 2048))
	}
	dict, err := TrainDict(samples, TierFast, 4096)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "d")
	s, err := Create(dir, WithCodec(ZstdDict), WithDict(dict), WithDictTier(TierFast))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Append(recs); err != nil {
		t.Fatal(err)
	}
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	enc, err := newEncoder(ZstdDict, dict, TierFast)
	if err != nil {
		t.Fatal(err)
	}
	defer enc.Close()
	chunk, err := os.ReadFile(filepath.Join(dir, chunkName(0)))
	if err != nil {
		t.Fatal(err)
	}
	rewritten := 0
	for i := range recs {
		e, err := s.entryAt(*s.segs.Load(), int64(i))
		if err != nil {
			t.Fatal(err)
		}
		if e.phys < e.logic && literalsKind(t, chunk[e.off:e.off+e.phys]) == 0 && literalsKind(t, enc.EncodeAll(recs[i], nil)) == 2 {
			rewritten++
		}
	}
	if rewritten == 0 {
		t.Fatal("no frame of the ZstdDict store was rewritten with plain literals")
	}
	checkAllGathers(t, s, recs)
	if rep, err := s.Verify(); err != nil || !rep.OK() {
		t.Fatalf("Verify: %+v, %v", rep, err)
	}
}
