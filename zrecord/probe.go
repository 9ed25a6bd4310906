package zrecord

import (
	"time"
)

// Probe is what ProbeCodec measured on a sample of records.
type Probe struct {
	// Records is the number of sample records.
	Records int64
	// LogicalBytes is their total size.
	LogicalBytes int64
	// StoredBytes is what a store of the probed codec would hold for them:
	// each record's frame (for small records of the zstd codecs, with
	// plain literals where that is at most a quarter larger), or the record
	// itself where no frame is smaller or the record is within that
	// quarter, as Append stores it (encodeRecord).
	StoredBytes int64
	// Compressed is how many records were stored encoded (as frames, or
	// narrowed).
	Compressed int64
	// DecodeNanos is the shortest of several timed passes that read every
	// stored record back into one buffer on a single goroutine, the way a
	// gather does (frames decoded, raw records copied with their checksum
	// computed on the way).
	DecodeNanos int64
	// Passes is how many passes were timed.
	Passes int64
}

// Probe timing bounds: passes repeat until probeMinTime has gone by, at
// least probeMinPasses and at most probeMaxPasses times, and the fastest
// pass counts (the least disturbed by other work on the machine).
const (
	probeMinPasses = 3
	probeMaxPasses = 50
	probeMinTime   = 60 * time.Millisecond
)

// ProbeCodec compresses samples as a store of codec c would (for ZstdDict
// against dict, at the level of tier) and times reading them back on one
// goroutine. It writes nothing to disk. For Raw it times the checked
// copies a raw gather makes by default, the reference the codecs are
// weighed against. Narrow needs an element type: see ProbeNarrow.
func ProbeCodec(c Codec, tier DictTier, dict []byte, samples [][]byte) (p Probe, err error) {
	defer recoverTo(&err, "probe codec")
	if c == Narrow {
		return Probe{}, errf(ErrInvalidArgument, "codec narrow needs an element type to probe with (ProbeNarrow)")
	}
	return probeCodec(c, tier, dict, Element{}, samples)
}

// ProbeNarrow is ProbeCodec for a Narrow store of elements el: samples are
// narrowed as Append would store them, and read back by widening (the
// narrowed ones) and copying (the others), as a gather does.
func ProbeNarrow(el Element, samples [][]byte) (p Probe, err error) {
	defer recoverTo(&err, "probe codec")
	if !el.valid() {
		return Probe{}, errf(ErrInvalidArgument, "probe narrow: element size %d (want 1, 2, 4 or 8)", el.Size)
	}
	return probeCodec(Narrow, TierBalanced, nil, el, samples)
}

func probeCodec(c Codec, tier DictTier, dict []byte, el Element, samples [][]byte) (p Probe, err error) {
	if !c.valid() {
		return Probe{}, errf(ErrInvalidArgument, "codec %d", uint8(c))
	}
	if tier > TierMax {
		return Probe{}, errf(ErrInvalidArgument, "dictionary tier %d", uint8(tier))
	}
	if c == ZstdDict && len(dict) == 0 {
		return Probe{}, errf(ErrInvalidArgument, "codec zstd_dict needs a dictionary to probe with")
	}
	p.Records = int64(len(samples))
	frames := make([][]byte, len(samples))
	compressed := make([]bool, len(samples))
	for i, r := range samples {
		p.LogicalBytes += int64(len(r))
		frames[i] = r
	}
	if c != Raw {
		var enc *recordEncoder
		if c.zstdFrames() {
			if enc, err = newRecordEncoder(c, dict, tier); err != nil {
				return Probe{}, err
			}
			defer enc.Close()
		}
		var arena []byte
		for i, r := range samples {
			start := len(arena)
			var smaller bool
			if arena, smaller = encodeRecord(enc, el, r, arena); smaller {
				frames[i] = arena[start:len(arena):len(arena)]
				compressed[i] = true
				p.Compressed++
			} else {
				arena = arena[:start]
			}
		}
		// The arena may have moved as it grew: take the frames again.
		off := 0
		for i := range frames {
			if compressed[i] {
				n := len(frames[i])
				frames[i] = arena[off : off+n : off+n]
				off += n
			}
		}
	}
	for _, f := range frames {
		p.StoredBytes += int64(len(f))
	}
	out := make([]byte, p.LogicalBytes)
	var dec interface {
		DecodeAll(src, dst []byte) ([]byte, error)
	}
	if p.Compressed > 0 && c.zstdFrames() {
		d, err := newDecoder(c, dict)
		if err != nil {
			return Probe{}, err
		}
		defer d.Close()
		dec = d
	}
	pass := func() error {
		off := 0
		for i, f := range frames {
			n := len(samples[i])
			dst := out[off : off : off+n]
			if compressed[i] && c == Narrow {
				if err := widenRecord(out[off:off+n], f, el.Size); err != nil {
					return errf(ErrCorrupt, "probe: sample %d does not widen: %v", i, err)
				}
			} else if compressed[i] {
				got, err := dec.DecodeAll(f, dst)
				if err != nil {
					return errf(ErrCorrupt, "probe: sample %d does not decode: %v", i, err)
				}
				if len(got) != n {
					return errf(ErrCorrupt, "probe: sample %d decodes to %d bytes, not %d", i, len(got), n)
				}
			} else {
				copyCRC(out[off:off+n], f, 0) // checked, as a default gather does
			}
			off += n
		}
		return nil
	}
	// One untimed pass warms the decoder's state and the output pages.
	if err := pass(); err != nil {
		return Probe{}, err
	}
	best := time.Duration(1<<63 - 1)
	var total time.Duration
	for p.Passes < probeMaxPasses && (p.Passes < probeMinPasses || total < probeMinTime) {
		t0 := time.Now()
		if err := pass(); err != nil {
			return Probe{}, err
		}
		d := time.Since(t0)
		total += d
		best = min(best, d)
		p.Passes++
	}
	p.DecodeNanos = max(int64(best), 1)
	return p, nil
}
