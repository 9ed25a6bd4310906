package zrecord

import (
	"errors"
	"fmt"
	"runtime/debug"
	"strconv"

	"github.com/klauspost/compress/zstd"
)

// DictTier picks how hard a ZstdDict store works for its ratio: how many
// bytes the dictionary trains on, how large it gets, and the encoder level
// records are compressed at. A caller picks a tier, never a number.
type DictTier uint8

const (
	// TierFast trains on a small sample and encodes at zstd SpeedDefault.
	TierFast DictTier = iota
	// TierBalanced trains on a medium sample and encodes at SpeedBetterCompression.
	TierBalanced
	// TierMax trains on the largest sample and encodes at SpeedBestCompression.
	TierMax
)

// ParseDictTier parses "fast", "balanced" or "max".
func ParseDictTier(s string) (DictTier, error) {
	switch s {
	case "fast":
		return TierFast, nil
	case "balanced":
		return TierBalanced, nil
	case "max":
		return TierMax, nil
	}
	return 0, errf(ErrInvalidArgument, "dictionary tier %q (want \"fast\", \"balanced\" or \"max\")", s)
}

// String returns "fast", "balanced" or "max".
func (t DictTier) String() string {
	switch t {
	case TierFast:
		return "fast"
	case TierBalanced:
		return "balanced"
	case TierMax:
		return "max"
	}
	return "tier(" + strconv.Itoa(int(t)) + ")"
}

// SampleBudget is how many bytes of records the tier trains its dictionary
// on. It is fixed per tier, so training costs the same whatever the record
// size: pick a strided subset of the records totalling about this much.
func (t DictTier) SampleBudget() int {
	// Training took 0.1-0.6 s, 0.4-1.5 s and 2.5-8 s on a 2-core machine
	// for records of 784 B to 12 KiB (fast tries one cover setting,
	// balanced and max three each).
	switch t {
	case TierFast:
		return 2 << 20
	case TierMax:
		return 12 << 20
	}
	return 4 << 20
}

// DictSize is the tier's dictionary size, content and entropy tables
// together (less when the samples are small: the dictionary is at most a
// tenth of the sample bytes its content is chosen from).
func (t DictTier) DictSize() int {
	switch t {
	case TierFast:
		return 32 << 10
	case TierMax:
		return 112 << 10
	}
	return 64 << 10
}

func (t DictTier) level() zstd.EncoderLevel {
	switch t {
	case TierFast:
		return zstd.SpeedDefault
	case TierMax:
		return zstd.SpeedBestCompression
	}
	return zstd.SpeedBetterCompression
}

// Training input limits.
const (
	minDictSamples = 8   // fewer samples cannot show what records share
	minSampleBytes = 8   // shorter samples carry no indexable content
	minDictSize    = 256 // smaller dictionaries are pointless
	// maxSampleBytes bounds one training sample: the builder encodes each
	// sample as a single zstd block (at most 128 KiB), so longer records
	// are cut into pieces of this size.
	maxSampleBytes = 64 << 10
)

// TrainDict trains a zstd dictionary on samples for a ZstdDict store. Pass a
// strided subset of the records totalling about tier.SampleBudget() bytes;
// if the samples total more, an evenly strided subset within the budget is
// used, so training time is bounded by the tier. Samples longer than 64 KiB
// are cut into 64 KiB pieces. maxSize > 0 caps the whole
// dictionary, in bytes, below tier.DictSize(). It fails with
// ErrInvalidArgument when there are fewer than 8 samples of at least 8
// bytes, or too few sample bytes for any content.
func TrainDict(samples [][]byte, tier DictTier, maxSize int) (d []byte, err error) {
	defer func() {
		if r := recover(); r != nil {
			d, err = nil, panicError("train dictionary", r)
		}
	}()
	if tier > TierMax {
		return nil, errf(ErrInvalidArgument, "dictionary tier %d", uint8(tier))
	}
	size := tier.DictSize()
	if maxSize > 0 && maxSize < size {
		size = maxSize
	}
	if size < minDictSize {
		return nil, errf(ErrInvalidArgument, "dictionary size %d below %d", size, minDictSize)
	}
	usable := make([][]byte, 0, len(samples))
	total := 0
	for _, s := range samples {
		for len(s) >= minSampleBytes {
			piece := s[:min(len(s), maxSampleBytes)]
			s = s[len(piece):]
			usable = append(usable, piece)
			total += len(piece)
		}
	}
	if len(usable) < minDictSamples {
		return nil, errf(ErrInvalidArgument, "%d usable samples (at least %d of %d+ bytes needed)", len(usable), minDictSamples, minSampleBytes)
	}
	usable = withinBudget(usable, total, tier.SampleBudget())
	d, err = buildZstdDict(usable, size, tier)
	// Training's tables (tens of MiB) are garbage now; hand them back to the
	// OS so a conversion that follows does not start at training's peak.
	debug.FreeOSMemory()
	if err != nil {
		if errors.Is(err, ErrInvalidArgument) {
			return nil, fmt.Errorf("zrecord: train dictionary on %d samples: %w", len(usable), err)
		}
		return nil, fmt.Errorf("zrecord: train dictionary on %d samples: %v: %w", len(usable), err, ErrInvalidArgument)
	}
	if err := checkDict(d); err != nil {
		return nil, err
	}
	return d, nil
}

// withinBudget returns an evenly strided subset of samples totalling at most
// about budget bytes (at least minDictSamples samples, trimmed if each is large).
func withinBudget(samples [][]byte, total, budget int) [][]byte {
	if total <= budget {
		return samples
	}
	avg := total / len(samples)
	keep := max(minDictSamples, min(len(samples), budget/max(avg, 1)))
	out := make([][]byte, 0, keep)
	for i := range keep {
		out = append(out, samples[i*len(samples)/keep])
	}
	per := budget / keep
	sum := 0
	for _, s := range out {
		sum += len(s)
	}
	if sum > budget {
		for i, s := range out {
			if len(s) > per {
				out[i] = s[:max(per, minSampleBytes)]
			}
		}
	}
	return out
}

// checkDict verifies that d is a zstd dictionary both directions accept.
func checkDict(d []byte) error {
	if len(d) == 0 {
		return errf(ErrInvalidArgument, "empty dictionary")
	}
	dec, err := zstd.NewReader(nil, zstd.WithDecoderDicts(d), zstd.WithDecoderConcurrency(1))
	if err != nil {
		return fmt.Errorf("zrecord: dictionary rejected by the decoder: %v: %w", err, ErrInvalidArgument)
	}
	dec.Close()
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderDict(d), zstd.WithEncoderConcurrency(1))
	if err != nil {
		return fmt.Errorf("zrecord: dictionary rejected by the encoder: %v: %w", err, ErrInvalidArgument)
	}
	return enc.Close()
}
