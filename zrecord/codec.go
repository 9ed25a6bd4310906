package zrecord

import (
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"strconv"

	"github.com/klauspost/compress/zstd"
)

// Codec is a store's compression method, stamped into meta.zr at creation.
// Every record of a store is stored either raw or encoded on its own by the
// store's codec (a zstd frame, or a narrowed array of integers); a record
// whose encoding would not be smaller than the record is stored raw.
type Codec uint8

const (
	// Raw stores records as they are.
	Raw Codec = 0
	// Zstd compresses each record on its own with zstd (level 3,
	// SpeedDefault). A record of at most plainLiteralsMaxSize bytes is
	// stored with its literals left uncompressed when that frame is at most
	// a quarter larger than the entropy-coded one, since it decodes about
	// twice as fast (see encodeRecord); both are plain zstd frames.
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
	if enc.plain != nil && len(r) <= plainLiteralsMaxSize {
		arena = enc.preferPlain(r, arena, start)
	}
	return arena, len(arena)-start < len(r)
}

// Plain literals. A small record's zstd frame spends about half of its
// decode time reading the Huffman table of its literals and decoding them
// (huff0.ReadTable and the literal decode were 34 % of the CPU profile of
// decoding 2 KiB frames, the FSE tables and sequences most of the rest);
// the same frame with its literals stored as they are decodes 2.1x faster
// (BenchmarkDecodeLiterals: 2 KiB int32 feature rows). It is larger by
// what the entropy coding saved: 23-29 % for those rows (p10-p90), 37-47 %
// for Zipf token ids, 7 % for noisy uint8 pixels that have few repeats.
//
// What each side costs: a decode nanosecond is paid on every warm epoch,
// a stored byte once per cold read, about 1.5 ns per byte on this
// machine's disk (cold token rows: 392 MiB read at 322 batches of 2 MiB a
// second). At 2 KiB the plain frame saves 2.5-5 µs of decode for about 170
// more bytes (~0.26 µs cold), so on time alone it would always win. What
// bounds it is the store's size, the reason a user picks zstd: a plain
// frame is kept when it is at most plainLiteralsSlack (a quarter) larger,
// which caps a store's growth at 25 % and keeps entropy coding where it
// pays most (token ids). Past plainLiteralsMaxSize a frame's table is read
// once for many literals and a record with literals but few repeats would
// be kept raw (noisy 12 KiB pixels: 15 % larger, stored uncompressed), so
// larger records stay as they are.
const (
	// plainLiteralsMaxSize is the largest record given the choice.
	plainLiteralsMaxSize = 4 << 10
	// plainLiteralsSlack: a plain frame is kept when it is at most
	// 1/plainLiteralsSlack larger than the entropy-coded one.
	plainLiteralsSlack = 4
)

// recordEncoder holds the encoders of a zstd codec's records: huff
// entropy-codes literals; plain, for the Zstd codec only, leaves them as
// they are. A ZstdDict frame refers to the Huffman table its dictionary
// carries instead of holding one, so it has no table to read and plain is
// nil. Both are safe for concurrent EncodeAll calls.
type recordEncoder struct {
	huff  *zstd.Encoder
	plain *zstd.Encoder
}

// newRecordEncoder returns the encoders of codec c.
func newRecordEncoder(c Codec, dict []byte, tier DictTier) (*recordEncoder, error) {
	huff, err := newEncoder(c, dict, tier)
	if err != nil {
		return nil, err
	}
	e := &recordEncoder{huff: huff}
	if c == Zstd {
		e.plain, err = zstd.NewWriter(nil,
			zstd.WithEncoderLevel(encoderLevel(c, tier)),
			zstd.WithEncoderConcurrency(codecWorkers()),
			zstd.WithEncoderCRC(false),
			zstd.WithNoEntropyCompression(true))
		if err != nil {
			huff.Close()
			return nil, fmt.Errorf("zrecord: zstd encoder: %w", err)
		}
	}
	return e, nil
}

// Close releases both encoders.
func (e *recordEncoder) Close() error {
	err := e.huff.Close()
	if e.plain != nil {
		err = errors.Join(err, e.plain.Close())
	}
	return err
}

// preferPlain is given arena ending in the entropy-coded frame of r, which
// begins at start, and returns it ending in the frame to store: the plain
// literal one when it is at most 1/plainLiteralsSlack larger, else the
// frame it was given. The size of the plain frame is predicted from the
// first one's literals section (plainFrameSize), so r is encoded a second
// time only when the plain frame is to be kept. The choice depends on r
// alone: the same record is stored as the same bytes in any batch.
func (e *recordEncoder) preferPlain(r, arena []byte, start int) []byte {
	huff := len(arena) - start
	limit := huff + huff/plainLiteralsSlack
	if want, ok := plainFrameSize(arena[start:]); !ok || want > limit {
		return arena
	}
	mid := len(arena)
	arena = e.plain.EncodeAll(r, arena)
	if n := len(arena) - mid; n <= limit {
		copy(arena[start:], arena[mid:])
		return arena[:start+n]
	}
	// The encoder parsed r differently from the prediction: keep the
	// entropy-coded frame.
	return arena[:mid]
}

// plainFrameSize predicts the size of frame with its literals stored raw,
// for a single-block frame whose literals are Huffman-coded with their own
// table (the only kind whose literals cost a table read); ok is false for
// any other frame. Both encoders find the same matches, so the frames
// differ only in the literals section: its header and its bytes.
func plainFrameSize(frame []byte) (size int, ok bool) {
	if len(frame) < 6 || binary.LittleEndian.Uint32(frame) != zstdMagic {
		return 0, false
	}
	fhd := frame[4]
	single := fhd>>5&1 == 1
	at := 5 + [4]int{0, 1, 2, 4}[fhd&3] + [4]int{0, 2, 4, 8}[fhd>>6]
	if !single {
		at++ // window descriptor
	} else if fhd>>6 == 0 {
		at++ // one-byte content size
	}
	if len(frame) < at+3+5 {
		return 0, false
	}
	bh := uint32(frame[at]) | uint32(frame[at+1])<<8 | uint32(frame[at+2])<<16
	if bh&1 == 0 || bh>>1&3 != 2 {
		return 0, false // more than one block, or not a compressed one
	}
	lit := frame[at+3:]
	if lit[0]&3 != 2 {
		return 0, false // raw, RLE or treeless literals: no table to read
	}
	var head, regen, comp int
	h := uint64(lit[0]) | uint64(lit[1])<<8 | uint64(lit[2])<<16 | uint64(lit[3])<<24 | uint64(lit[4])<<32
	switch lit[0] >> 2 & 3 {
	case 0, 1:
		head, regen, comp = 3, int(h>>4&0x3ff), int(h>>14&0x3ff)
	case 2:
		head, regen, comp = 4, int(h>>4&0x3fff), int(h>>18&0x3fff)
	default:
		head, regen, comp = 5, int(h>>4&0x3ffff), int(h>>22&0x3ffff)
	}
	// The encoder writes a raw literals header of 1, 2 or 3 bytes for
	// fewer than 16, 2048 or more literals (the format would allow 32 and
	// 4096).
	rawHead := 1
	if regen >= 2048 {
		rawHead = 3
	} else if regen >= 16 {
		rawHead = 2
	}
	return len(frame) - head - comp + rawHead + regen, true
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
