package zrecord

import (
	"encoding/binary"
	"fmt"
	"runtime"
	"strconv"
	"sync"

	"github.com/klauspost/compress/huff0"
	"github.com/klauspost/compress/zstd"
)

// Codec is a store's compression method, stamped into meta.zr at creation.
// Every record of a store is stored either raw or encoded on its own by the
// store's codec (a zstd frame, or a narrowed array of integers); a record
// whose encoding would not be smaller than the record is stored raw, and so
// is a small record that a zstd frame shrinks by less than a fifth (see
// plainLiteralsSlack).
type Codec uint8

const (
	// Raw stores records as they are.
	Raw Codec = 0
	// Zstd compresses each record on its own with zstd (level 3,
	// SpeedDefault). A record of at most plainLiteralsMaxSize bytes is
	// stored with its literals not entropy-coded when that frame is at
	// most a quarter larger than the entropy-coded one, since it decodes
	// 1.5-1.8x faster (see plainLiteralsSlack), or raw when the record
	// itself is within that quarter; either frame is an ordinary zstd
	// frame. ZstdDict records follow the same rule.
	Zstd Codec = 1
	// ZstdDict compresses each record against a trained dictionary kept in
	// dict.zr (see TrainDict and WithDictTier).
	ZstdDict Codec = 2
	// Narrow stores each record, an array of integers of the store's
	// element type (WithElement), with each value minus the record's
	// smallest in the fewest bytes (1, 2 or 4) that hold the record's span
	// of values. Decoding is a widening at close to the speed of a copy,
	// where zstd decodes about ten times slower: it is the codec for integer
	// records read from the page cache (token ids, offsets, labels). The
	// name says what it does to the values. Stores of this codec are format
	// version 5, which older readers refuse.
	Narrow Codec = 3
)

// String returns "raw", "zstd", "zstd_dict" or "narrow".
func (c Codec) String() string {
	switch c {
	case Raw:
		return "raw"
	case Zstd:
		return "zstd"
	case ZstdDict:
		return "zstd_dict"
	case Narrow:
		return "narrow"
	}
	return "codec(" + strconv.Itoa(int(c)) + ")"
}

// ParseCodec parses a codec name as returned by Codec.String. "zstdict" is
// accepted as another spelling of "zstd_dict".
func ParseCodec(s string) (Codec, error) {
	switch s {
	case "raw":
		return Raw, nil
	case "zstd":
		return Zstd, nil
	case "zstd_dict", "zstdict":
		return ZstdDict, nil
	case "narrow":
		return Narrow, nil
	}
	return 0, errf(ErrInvalidArgument, "codec %q (want \"raw\", \"zstd\", \"zstd_dict\" or \"narrow\")", s)
}

func (c Codec) valid() bool { return c <= Narrow }

// zstdFrames reports whether the codec stores records as zstd frames.
func (c Codec) zstdFrames() bool { return c == Zstd || c == ZstdDict }

// encoderLevel is the zstd level records of a codec are written at.
func encoderLevel(c Codec, tier DictTier) zstd.EncoderLevel {
	if c == ZstdDict {
		return tier.level()
	}
	return zstd.SpeedDefault
}

// encodeRecord appends record r encoded to arena, with enc for a zstd
// codec, else narrowed as elements el, and reports whether that is smaller
// than r (else r is to be stored raw, and arena is cut back by the caller).
func encodeRecord(enc *recordEncoder, el Element, r, arena []byte) ([]byte, bool) {
	if len(r) == 0 {
		return arena, false
	}
	start := len(arena)
	if enc == nil {
		return narrowRecord(arena, r, el)
	}
	arena = enc.huff.EncodeAll(r, arena)
	if enc.plain && len(r) <= plainLiteralsMaxSize {
		var raw bool
		if arena, raw = enc.preferPlain(r, arena, start); raw {
			return arena, false
		}
	}
	return arena, len(arena)-start < len(r)
}

// Plain literals. A small record's zstd frame spends about a third of its
// decode time reading the Huffman table of its literals and decoding them
// (huff0.ReadTable and the literal decode were 34 % of the CPU profile of
// decoding 2 KiB frames, the FSE tables and sequences most of the rest);
// the same frame with its literals stored as they are decodes 1.5-1.8x
// faster in CPU time (BenchmarkDecodeLiterals, 2 KiB int32 feature rows,
// three rounds). It is larger by what the entropy coding saved: 20-29 %
// for those rows, 37-47 % for Zipf token ids, 7 % for noisy uint8 pixels
// with few repeats.
//
// What each side costs: a decode nanosecond is paid on every warm epoch,
// a stored byte once per cold read, about 1.5 ns per byte on this
// machine's disk (cold token rows: 392 MiB read at 322 batches of 2 MiB a
// second). At 2 KiB the plain frame saves 3-4 µs of decode for about 130
// more bytes (~0.2 µs cold), so on time alone it would always win. What
// bounds it is the store's size, the reason a user picks zstd: a plain
// frame is kept when it is at most plainLiteralsSlack (a quarter) larger,
// which caps a store's growth at 25 % and keeps entropy coding where it
// saves most (token ids). In the benchmark's 2 KiB feature rows, which
// sit near the bound (plain 1.23-1.29x, p10-p90, of the Python bench's
// rows), that makes the store 1.09x larger than before, 1.03x the
// original's.
//
// plainLiteralsMaxSize keeps the rule to records whose frame is mostly
// table and set-up; past it the literals and sequences themselves are the
// cost, and a store of 12 KiB photo-like records, whose frames are nearly
// all literals (15 % larger plain, hence kept raw), keeps its ratio.
const (
	// plainLiteralsMaxSize is the largest record given the choice.
	plainLiteralsMaxSize = 4 << 10
	// plainLiteralsSlack: a plain frame is kept when it is at most
	// 1/plainLiteralsSlack larger than the entropy-coded one.
	plainLiteralsSlack = 4
)

// recordEncoder holds the encoder of a zstd codec's records and the state
// to rewrite a small record's frame with plain literals. The rule is the
// same for ZstdDict frames, though it matters less there: the encoder
// already stores the literals of most of them plain (of 1000 feature rows
// of 2 KiB against a dictionary of their kind, 94 % at TierBalanced, 60 %
// at TierFast), and never refers to the dictionary's Huffman table, so the
// others carry a table of their own like Zstd frames. It is safe for
// concurrent use.
type recordEncoder struct {
	huff *zstd.Encoder
	// plain: frames may be rewritten with plain literals.
	plain bool
	// tables holds *huff0.Scratch for reading the literals back.
	tables sync.Pool
}

// newRecordEncoder returns the encoder of codec c.
func newRecordEncoder(c Codec, dict []byte, tier DictTier) (*recordEncoder, error) {
	huff, err := newEncoder(c, dict, tier)
	if err != nil {
		return nil, err
	}
	return &recordEncoder{huff: huff, plain: c.zstdFrames()}, nil
}

// Close releases the encoder.
func (e *recordEncoder) Close() error { return e.huff.Close() }

// literalTables is what preferPlain reads a frame's literals with: a
// Huffman table and room for the literals of a record of up to
// plainLiteralsMaxSize bytes, with slack for decoders that write a little
// past the literals.
type literalTables struct {
	table *huff0.Scratch
	buf   [plainLiteralsMaxSize + 64]byte
}

// preferPlain is given arena ending in the entropy-coded frame of r, which
// begins at start, and returns it ending in the frame to store: the same
// frame with its literals stored plain when that is at most
// 1/plainLiteralsSlack larger and smaller than r, else the frame it was
// given; raw reports that r itself, the plainest form, is within that
// bound and its plain frame would not be smaller than it: r is to be
// stored raw. The plain frame is made from the first one by decoding its
// literals (a few µs for 2 KiB) rather than by encoding r again (tens of
// µs); the sequences are copied as they are. The choice depends on r
// alone, so the same record is stored as the same bytes in any batch.
func (e *recordEncoder) preferPlain(r, arena []byte, start int) (_ []byte, raw bool) {
	frame := arena[start:]
	lits, ok := parseLiterals(frame)
	if !ok || lits.regen > plainLiteralsMaxSize {
		return arena, false
	}
	size := lits.plainSize(len(frame))
	limit := len(frame) + len(frame)/plainLiteralsSlack
	if size >= len(r) {
		return arena, len(r) <= limit
	}
	if size > limit {
		return arena, false
	}
	t, _ := e.tables.Get().(*literalTables)
	if t == nil {
		t = new(literalTables)
	}
	defer e.tables.Put(t)
	table, rest, err := huff0.ReadTable(frame[lits.table:lits.end], t.table)
	if err != nil {
		return arena, false
	}
	t.table = table
	var out []byte
	if lits.streams == 1 {
		out, err = table.Decoder().Decompress1X(t.buf[:0:lits.regen], rest)
	} else {
		out, err = table.Decoder().Decompress4X(t.buf[:0:lits.regen], rest)
	}
	if err != nil || len(out) != lits.regen {
		return arena, false
	}
	mid := len(arena)
	block := size - lits.block - 3
	arena = append(arena, frame[:lits.block]...)
	bh := 1 | 2<<1 | uint32(block)<<3 // last block, compressed, its size
	arena = append(arena, byte(bh), byte(bh>>8), byte(bh>>16))
	switch {
	case lits.regen < 16:
		arena = append(arena, byte(lits.regen<<3))
	case lits.regen < 2048:
		arena = append(arena, byte(1<<2|lits.regen<<4), byte(lits.regen>>4))
	default:
		arena = append(arena, byte(3<<2|lits.regen<<4), byte(lits.regen>>4), byte(lits.regen>>12))
	}
	arena = append(arena, out...)
	arena = append(arena, frame[lits.end:]...) // the sequences section
	if len(arena)-mid != size {
		return arena[:mid], false
	}
	copy(arena[start:], arena[mid:])
	return arena[:start+size], false
}

// frameLiterals locates the literals section of a single-block frame whose
// literals are Huffman-coded with their own table (the only kind whose
// literals cost a table read).
type frameLiterals struct {
	block   int // offset of the block header
	table   int // offset of the Huffman table, after the literals header
	end     int // offset just past the compressed literals
	regen   int // number of literals
	streams int // 1 or 4
}

// plainSize is the size of the frame of frameLen bytes with its literals
// stored plain: both frames have the same header and sequences, and
// differ only in the literals section.
func (l frameLiterals) plainSize(frameLen int) int {
	// The encoder writes a plain literals header of 1, 2 or 3 bytes for
	// fewer than 16, 2048 or more literals (the format would allow 32
	// and 4096); preferPlain writes the same.
	head := 1
	if l.regen >= 2048 {
		head = 3
	} else if l.regen >= 16 {
		head = 2
	}
	return frameLen - (l.end - l.block - 3) + head + l.regen
}

// parseLiterals returns where frame's literals are; ok is false for a
// frame of more than one block, of a raw or RLE block, or whose literals
// are plain, RLE or coded with a repeated table.
func parseLiterals(frame []byte) (l frameLiterals, ok bool) {
	if len(frame) < 6 || binary.LittleEndian.Uint32(frame) != zstdMagic {
		return l, false
	}
	fhd := frame[4]
	at := 5 + [4]int{0, 1, 2, 4}[fhd&3] + [4]int{0, 2, 4, 8}[fhd>>6]
	if fhd>>5&1 == 0 {
		at++ // window descriptor
	} else if fhd>>6 == 0 {
		at++ // one-byte content size
	}
	if len(frame) < at+3+5 {
		return l, false
	}
	bh := uint32(frame[at]) | uint32(frame[at+1])<<8 | uint32(frame[at+2])<<16
	if bh&1 == 0 || bh>>1&3 != 2 || int(bh>>3) != len(frame)-at-3 {
		return l, false // more than one block, not a compressed one, or cut
	}
	lit := frame[at+3:]
	if lit[0]&3 != 2 {
		return l, false
	}
	var head, comp int
	h := uint64(lit[0]) | uint64(lit[1])<<8 | uint64(lit[2])<<16 | uint64(lit[3])<<24 | uint64(lit[4])<<32
	l.streams = 4
	switch lit[0] >> 2 & 3 {
	case 0:
		l.streams = 1
		head, l.regen, comp = 3, int(h>>4&0x3ff), int(h>>14&0x3ff)
	case 1:
		head, l.regen, comp = 3, int(h>>4&0x3ff), int(h>>14&0x3ff)
	case 2:
		head, l.regen, comp = 4, int(h>>4&0x3fff), int(h>>18&0x3fff)
	default:
		head, l.regen, comp = 5, int(h>>4&0x3ffff), int(h>>22&0x3ffff)
	}
	l.block, l.table, l.end = at, at+3+head, at+3+head+comp
	if l.end > len(frame) {
		return l, false
	}
	return l, true
}

// plainFrameSize predicts the size of frame with its literals stored
// plain; ok is false where parseLiterals finds no table-coded literals.
func plainFrameSize(frame []byte) (size int, ok bool) {
	l, ok := parseLiterals(frame)
	if !ok {
		return 0, false
	}
	return l.plainSize(len(frame)), true
}

// zstdMagic opens every zstd frame.
const zstdMagic = 0xFD2FB528

// codecWorkers is how many encoder or decoder states a store keeps: enough
// for every worker of a fan-out plus the caller.
func codecWorkers() int {
	return max(runtime.GOMAXPROCS(0), Threads(), 2)
}

// newEncoder returns an encoder for codec c; it is safe for concurrent
// EncodeAll calls.
func newEncoder(c Codec, dict []byte, tier DictTier) (*zstd.Encoder, error) {
	opts := []zstd.EOption{
		zstd.WithEncoderLevel(encoderLevel(c, tier)),
		zstd.WithEncoderConcurrency(codecWorkers()),
		// No content checksum in the frame: the table entry's checksum of
		// the stored bytes covers the frame, and Gather checks it before
		// decoding.
		zstd.WithEncoderCRC(false),
		// Entropy-code the literals of blocks where no match is found. At
		// the default level the encoder skips that, so a record of noisy
		// pixels (no repeats, but a skewed byte distribution) would be
		// stored raw where reference zstd at level 3 shrinks it ~1.1-1.2x.
		zstd.WithAllLitEntropyCompression(true),
	}
	if c == ZstdDict {
		opts = append(opts, zstd.WithEncoderDict(dict))
	}
	enc, err := zstd.NewWriter(nil, opts...)
	if err != nil {
		return nil, fmt.Errorf("zrecord: zstd encoder: %w", err)
	}
	return enc, nil
}

// newDecoder returns a decoder for codec c; it is safe for concurrent
// DecodeAll calls. DecodeAll never writes past cap(dst), so records can be
// decoded straight into a shared destination through capped slices.
func newDecoder(c Codec, dict []byte) (*zstd.Decoder, error) {
	opts := []zstd.DOption{
		zstd.WithDecodeAllCapLimit(true),
		zstd.WithDecoderConcurrency(codecWorkers()),
		zstd.WithDecoderMaxMemory(MaxRecordSize),
	}
	if c == ZstdDict {
		opts = append(opts, zstd.WithDecoderDicts(dict))
	}
	dec, err := zstd.NewReader(nil, opts...)
	if err != nil {
		return nil, fmt.Errorf("zrecord: zstd decoder: %w", err)
	}
	return dec, nil
}
