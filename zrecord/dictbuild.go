package zrecord

// The dictionary's content (its "history") is chosen here, by the cover
// method zstd's own trainer uses, rather than by
// github.com/klauspost/compress/dict, whose builder walks Go maps in their
// randomised order and stamps a time-seeded ID, so two trainings on the same
// samples give different bytes. Cover counts every d-byte substring
// ("d-mer") of the samples, then repeatedly takes the segment of k bytes
// whose not-yet-taken d-mers are most frequent, so the content is what the
// records share most, and places it so the segments taken first sit last,
// nearest the data, where match offsets are shortest. Every step visits
// positions in order and breaks ties by position, so equal samples give an
// equal dictionary; zstd.BuildDict then fits the entropy tables.

import (
	"encoding/binary"
	"hash/crc32"
	"slices"
	"sync"

	"github.com/klauspost/compress/zstd"
)

// coverParams are one setting of the cover method: segments of k bytes
// scored by their d-mers (d is 6 or 8).
type coverParams struct{ k, d int }

// coverCandidates are the settings a tier tries. With more than one, each
// dictionary is built on three quarters of the samples and the one that
// compresses the held-out quarter smallest wins; short segments suit small
// records with short shared strings, long ones suit longer shared runs.
func (t DictTier) coverCandidates() []coverParams {
	switch t {
	case TierFast:
		return []coverParams{{256, 8}}
	case TierMax:
		return []coverParams{{64, 6}, {256, 8}, {1024, 8}}
	}
	return []coverParams{{64, 8}, {256, 8}, {1024, 8}}
}

// coverBits sizes the d-mer frequency table (2^coverBits counters): the
// table size zstd's fast cover trainer uses by default. Collisions only add
// the same noise to every segment's score.
const coverBits = 20

// minContentRatio: the dictionary is at most 1/minContentRatio of the bytes
// of the samples its content is chosen from, so a small training set does
// not turn into a dictionary that holds the samples themselves.
const minContentRatio = 10

// dmerHash hashes the d bytes at buf[p:] (8 readable bytes are needed).
func dmerHash(buf []byte, p, d int) uint32 {
	v := binary.LittleEndian.Uint64(buf[p:])
	if d < 8 {
		v <<= uint(64 - 8*d)
	}
	return uint32((v * 0x9E3779B185EBCA87) >> (64 - coverBits))
}

// dmerFreqs counts the d-mers starting at every position of buf.
func dmerFreqs(buf []byte, d int) []uint32 {
	freq := make([]uint32, 1<<coverBits)
	for p := 0; p+8 <= len(buf); p++ {
		freq[dmerHash(buf, p, d)]++
	}
	return freq
}

// coverHistory returns up to size bytes of dictionary content chosen from
// buf, the training samples back to back. freq holds buf's d-mer counts and
// is consumed: a d-mer taken into the content counts zero afterwards.
//
// The d-mers are cut into epochs of consecutive positions; each round takes
// from the next epoch its best segment (the most frequent distinct untaken
// d-mers within k bytes), so the content draws on the whole sample set, and
// rounds go on until the content is full or no epoch has anything left.
func coverHistory(buf []byte, freq []uint32, size int, p coverParams) []byte {
	last := len(buf) - 8 // the last position a d-mer can be read at
	if last < 0 || size <= 0 {
		return nil
	}
	positions := last + 1
	epochs := max(1, size/p.k/4)
	epochSize := positions / epochs
	if epochSize < 10*p.k {
		epochs = max(1, positions/(10*p.k))
		epochSize = positions / epochs
	}
	dict := make([]byte, size)
	tail := size
	inWindow := make([]uint16, 1<<coverBits)
	idle := 0
	for e := 0; tail > 0 && idle < epochs; e = (e + 1) % epochs {
		begin := e * epochSize
		end := min(positions, begin+epochSize)
		if e == epochs-1 {
			end = positions
		}
		// Slide a window of d-mers spanning at most k bytes over the epoch;
		// its score is the summed count of the distinct d-mers inside.
		var score, best uint64
		bestAt, lo := -1, begin
		for i := begin; i < end; i++ {
			h := dmerHash(buf, i, p.d)
			if inWindow[h] == 0 {
				score += uint64(freq[h])
			}
			inWindow[h]++
			for i+p.d-lo > p.k {
				hl := dmerHash(buf, lo, p.d)
				inWindow[hl]--
				if inWindow[hl] == 0 {
					score -= uint64(freq[hl])
				}
				lo++
			}
			if score > best {
				best, bestAt = score, lo
			}
		}
		for i := lo; i < end; i++ {
			inWindow[dmerHash(buf, i, p.d)] = 0
		}
		if bestAt < 0 {
			idle++
			continue
		}
		idle = 0
		// The segment is the window's d-mers, less untaken-count-zero ones
		// at either end.
		first, lastDmer := bestAt, min(bestAt+p.k-p.d, end-1)
		for first < lastDmer && freq[dmerHash(buf, first, p.d)] == 0 {
			first++
		}
		for lastDmer > first && freq[dmerHash(buf, lastDmer, p.d)] == 0 {
			lastDmer--
		}
		for i := first; i <= lastDmer; i++ {
			freq[dmerHash(buf, i, p.d)] = 0
		}
		seg := buf[first : lastDmer+p.d]
		n := min(len(seg), tail)
		copy(dict[tail-n:tail], seg[len(seg)-n:])
		tail -= n
	}
	return dict[tail:]
}

// dictID derives a dictionary ID from its content, so equal training input
// gives an equal dictionary. IDs below 32768 are reserved by the zstd format.
func dictID(hist []byte, samples [][]byte) uint32 {
	h := crc32.New(crc32.MakeTable(crc32.Castagnoli))
	_, _ = h.Write(hist)
	var n [8]byte
	binary.LittleEndian.PutUint64(n[:], uint64(len(samples)))
	_, _ = h.Write(n[:])
	return 32768 + h.Sum32()%((1<<31)-32768)
}

// maxStatSamples bounds how many samples are compressed to fit the
// dictionary's entropy tables.
const maxStatSamples = 512

// judgeSamples bounds the samples that fit a candidate's tables and the
// held-out samples that judge it: enough to rank candidates, which differ
// by several percent where they differ at all.
const judgeSamples = 192

// strided returns at most n of samples, evenly strided.
func strided(samples [][]byte, n int) [][]byte {
	if len(samples) <= n {
		return samples
	}
	out := make([][]byte, n)
	for i := range out {
		out[i] = samples[i*len(samples)/n]
	}
	return out
}

// buildZstdDict trains a zstd dictionary of at most size bytes on samples,
// for a store of the given tier.
//
// With 32 samples or more, the content is chosen from three quarters of
// them and the entropy tables are fitted on the held-out quarter: records
// the dictionary has not seen, as the store's records will be (or on all
// samples, when the held-out ones match nothing in the content). The
// candidates of a tier are judged by the held-out quarter's compressed size.
func buildZstdDict(samples [][]byte, size int, tier DictTier) ([]byte, error) {
	cands := tier.coverCandidates()
	train, held := samples, [][]byte(nil)
	if len(samples) >= 4*minDictSamples {
		train, held = make([][]byte, 0, len(samples)), make([][]byte, 0, len(samples)/4+1)
		for i, s := range samples {
			if i%4 == 3 {
				held = append(held, s)
			} else {
				train = append(train, s)
			}
		}
	}
	fit := held
	if fit == nil {
		fit, cands = train, cands[:1]
	}
	fit = strided(fit, maxStatSamples)
	var buf []byte
	for _, s := range train {
		buf = append(buf, s...)
	}
	size = min(size, len(buf)/minContentRatio)
	if size < minDictSize {
		return nil, errf(ErrInvalidArgument, "%d bytes of samples to choose content from are too few for a dictionary (%d are needed)", len(buf), minContentRatio*minDictSize)
	}
	// The d-mer counts depend on d only; each candidate consumes a copy.
	counts := map[int][]uint32{}
	for _, c := range cands {
		if counts[c.d] == nil {
			counts[c.d] = dmerFreqs(buf, c.d)
		}
	}
	// Candidates get tables fitted on training samples, which always match
	// their content, and are judged on held-out ones.
	judgeFit, judge := strided(train, judgeSamples), strided(held, judgeSamples)
	hists := make([][]byte, len(cands))
	costs := make([]int, len(cands))
	errs := make([]error, len(cands))
	var wg sync.WaitGroup
	sem := make(chan struct{}, codecWorkers())
	for i, c := range cands {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			// TrainDict's recover does not reach this goroutine.
			defer func() {
				if r := recover(); r != nil {
					errs[i] = panicError("train dictionary", r)
				}
			}()
			freq := counts[c.d]
			if len(cands) > 1 {
				freq = append([]uint32(nil), freq...)
			}
			hists[i] = coverHistory(buf, freq, size, c)
			if len(cands) == 1 {
				return
			}
			// Candidates are judged at the default level, which ranks them
			// as the tier's level does at a fraction of the cost; the
			// winner's tables are fitted at the tier's level below.
			var d []byte
			if d, errs[i] = buildWithin(hists[i], samples, judgeFit, size, zstd.SpeedDefault); errs[i] == nil {
				costs[i], errs[i] = compressedSize(judge, d, zstd.SpeedDefault)
			}
		})
	}
	wg.Wait()
	best := -1
	for i := range cands {
		if errs[i] == nil && (best < 0 || costs[i] < costs[best]) {
			best = i
		}
	}
	if best < 0 {
		return nil, errs[0]
	}
	d, err := buildWithin(hists[best], samples, fit, size, tier.level())
	if err != nil && held != nil {
		// Held-out records that match nothing in the content leave no
		// sequences to fit the tables on; the training samples have them.
		d, err = buildWithin(hists[best], samples, strided(samples, maxStatSamples), size, tier.level())
	}
	return d, err
}

// allLiterals is a training sample that compresses to literals only (every
// byte value once, no repeat): added to the samples that fit the tables when
// the content covers those samples entirely, since the literal table cannot
// be fitted on no literals.
var allLiterals = func() []byte {
	b := make([]byte, 256)
	for i := range b {
		b[i] = byte(i * 167)
	}
	return b
}()

// buildWithin builds the dictionary of content hist with entropy tables
// fitted on fit, at most size bytes in all: content is dropped from its
// start (the least valuable end) until header and tables fit beside it.
func buildWithin(hist []byte, samples, fit [][]byte, size int, level zstd.EncoderLevel) ([]byte, error) {
	if len(hist) < 8 {
		return nil, errf(ErrInvalidArgument, "no dictionary content found in the samples")
	}
	for {
		opts := zstd.BuildDictOptions{
			ID:         dictID(hist, samples),
			Contents:   fit,
			History:    hist,
			Offsets:    [3]int{1, 4, 8},
			CompatV155: true,
			Level:      level,
		}
		d, err := zstd.BuildDict(opts)
		if err != nil && err.Error() == "0 literals found" {
			opts.Contents = append(slices.Clip(fit), allLiterals)
			d, err = zstd.BuildDict(opts)
		}
		if err != nil || len(d) <= size {
			return d, err
		}
		over := len(d) - size
		if len(hist)-over < 8 {
			return nil, errf(ErrInvalidArgument, "a dictionary of %d bytes leaves no room for content beside its tables", size)
		}
		hist = hist[over:]
	}
}

// compressedSize is what samples take compressed one by one, against dict
// when it is not nil.
func compressedSize(samples [][]byte, dict []byte, level zstd.EncoderLevel) (int, error) {
	opts := []zstd.EOption{zstd.WithEncoderLevel(level), zstd.WithEncoderConcurrency(1),
		zstd.WithEncoderCRC(false), zstd.WithAllLitEntropyCompression(true)}
	if dict != nil {
		opts = append(opts, zstd.WithEncoderDict(dict))
	}
	enc, err := zstd.NewWriter(nil, opts...)
	if err != nil {
		return 0, err
	}
	defer enc.Close()
	total := 0
	var out []byte
	for _, s := range samples {
		out = enc.EncodeAll(s, out[:0])
		total += len(out)
	}
	return total, nil
}
