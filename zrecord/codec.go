package zrecord

import (
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
	// Zstd compresses each record on its own with zstd (level 3, SpeedDefault).
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
func encodeRecord(enc *zstd.Encoder, el Element, r, arena []byte) ([]byte, bool) {
	if len(r) == 0 {
		return arena, false
	}
	start := len(arena)
	if enc == nil {
		return narrowRecord(arena, r, el)
	}
	arena = enc.EncodeAll(r, arena)
	return arena, len(arena)-start < len(r)
}

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
