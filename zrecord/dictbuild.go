package zrecord

// The dictionary's content (its "history") is chosen here rather than by
// github.com/klauspost/compress/dict, whose builder follows the same idea but
// walks Go maps in their randomised order and stamps a time-seeded ID, so two
// trainings on the same samples give different bytes. This version visits
// every candidate in a fixed order with full tie-breaks, counts n-grams with a
// sort per sample and a small saturating sketch instead of per-position map
// updates, and bounds the search for the three starting repeat offsets.

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"hash/crc32"
	"slices"
	"sync"

	"github.com/klauspost/compress/zstd"
)

// gramLen is how many bytes one indexed n-gram spans.
const gramLen = 6

// gramHash hashes the low six bytes of u to 32 bits.
func gramHash(u uint64) uint32 {
	const prime6 = 227718039650203
	return uint32(((u << 16) * prime6) >> 32)
}

// sketchBits sizes the saturating counter array that tells n-grams seen in a
// single sample (the vast majority of noisy data) from repeated ones.
const sketchBits = 22

// sampleGrams appends to dst, for every distinct n-gram of s, its hash in the
// high 32 bits and the offset of its first occurrence in the low 32 bits, in
// ascending hash order.
func sampleGrams(dst []uint64, s []byte) []uint64 {
	dst = dst[:0]
	for i := 0; i+8 <= len(s); i++ {
		h := gramHash(binary.LittleEndian.Uint64(s[i:]))
		dst = append(dst, uint64(h)<<32|uint64(i))
	}
	slices.Sort(dst)
	// Keep the first (lowest offset) entry of each hash.
	out := dst[:0]
	for i, v := range dst {
		if i > 0 && v>>32 == dst[i-1]>>32 {
			continue
		}
		out = append(out, v)
	}
	return out
}

// gramStat is one repeated n-gram: in how many samples it occurs and the sum
// of its first offsets in them.
type gramStat struct {
	hash   uint32
	n      uint32
	offset int64
}

// countGrams counts, for every n-gram hash, how many samples contain it. It
// returns the n-grams found in more than the average number of samples,
// sorted by hash, and that average. Work is split over up to two goroutines;
// the result does not depend on the split.
func countGrams(samples [][]byte) (over []gramStat, ok bool) {
	workers := 2
	if len(samples) < 64 {
		workers = 1
	}
	// Pass 1: saturating per-sample counts in a sketch indexed by the top
	// sketchBits of the hash.
	sketches := make([][]uint8, workers)
	grams := make([][]uint64, workers) // every sample's distinct n-grams, concatenated
	totals := make([]uint64, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sk := make([]uint8, 1<<sketchBits)
			positions := 0
			for i := w; i < len(samples); i += workers {
				positions += max(len(samples[i])-7, 0)
			}
			grams[w] = make([]uint64, 0, positions)
			var buf []uint64
			for i := w; i < len(samples); i += workers {
				buf = sampleGrams(buf, samples[i])
				totals[w] += uint64(len(buf))
				for _, v := range buf {
					j := v >> (64 - sketchBits)
					if sk[j] < 255 {
						sk[j]++
					}
				}
				grams[w] = append(grams[w], buf...)
			}
			sketches[w] = sk
		}()
	}
	wg.Wait()
	sketch := sketches[0]
	var total uint64
	for w := range workers {
		total += totals[w]
		if w > 0 {
			for j, c := range sketches[w] {
				sketch[j] = uint8(min(int(sketch[j])+int(c), 255))
			}
		}
	}
	sketches = nil
	if total == 0 {
		return nil, false
	}
	// Pass 2: n-grams whose sketch slot saw one sample occur once in the whole
	// set; the rest are counted exactly.
	parts := make([][]uint64, workers)
	singles := make([]uint64, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Filtered in place: the kept entries are never more than those read.
			rep := grams[w][:0]
			for _, v := range grams[w] {
				if sketch[v>>(64-sketchBits)] == 1 {
					singles[w]++
					continue
				}
				rep = append(rep, v)
			}
			grams[w] = nil
			// Sorting by hash then offset groups equal hashes; the order of
			// samples within a group does not matter to the sums.
			slices.Sort(rep)
			parts[w] = rep
		}()
	}
	wg.Wait()
	parts = append(parts, nil)
	distinct := singles[0]
	if workers > 1 {
		distinct += singles[1]
	}
	eachGram(parts[0], parts[1], func(gramStat) { distinct++ })
	threshold := uint32(total / distinct)
	eachGram(parts[0], parts[1], func(s gramStat) {
		if s.n > threshold {
			over = append(over, s)
		}
	})
	return over, true
}

// eachGram walks two sorted lists of (hash<<32 | offset) entries and calls fn
// once per distinct hash, in ascending hash order, with the number of
// entries and the sum of their offsets.
func eachGram(a, b []uint64, fn func(gramStat)) {
	cur := gramStat{}
	started := false
	for len(a) > 0 || len(b) > 0 {
		var v uint64
		if len(b) == 0 || (len(a) > 0 && a[0] <= b[0]) {
			v, a = a[0], a[1:]
		} else {
			v, b = b[0], b[1:]
		}
		h, off := uint32(v>>32), int64(uint32(v))
		if started && h == cur.hash {
			cur.n++
			cur.offset += off
			continue
		}
		if started {
			fn(cur)
		}
		cur, started = gramStat{hash: h, n: 1, offset: off}, true
	}
	if started {
		fn(cur)
	}
}

// gramGraph is what the history builder knows of the wanted n-grams (the
// entries of a frequency-sorted list, named by their index in it): their
// bytes, how often each directly follows or precedes another in the samples,
// and which are not placed in the history yet.
type gramGraph struct {
	index  map[uint32]int32
	filter []uint64 // bit per top filterBits of a wanted hash
	value  [][gramLen]byte
	live   []bool
	follow [][]gramEdge
	prev   [][]gramEdge
}

// gramEdge is a neighbour of an n-gram and how often it was seen there.
type gramEdge struct {
	to int32
	n  uint32
}

const filterBits = 22

func newGramGraph(samples [][]byte, over []gramStat) *gramGraph {
	gg := &gramGraph{
		index:  make(map[uint32]int32, len(over)),
		filter: make([]uint64, 1<<filterBits/64),
		value:  make([][gramLen]byte, len(over)),
		live:   make([]bool, len(over)),
		follow: make([][]gramEdge, len(over)),
		prev:   make([][]gramEdge, len(over)),
	}
	for i, s := range over {
		gg.index[s.hash] = int32(i)
		f := s.hash >> (32 - filterBits)
		gg.filter[f/64] |= 1 << (f % 64)
	}
	follow, prev := newPairCounts(), newPairCounts()
	var at []int32
	for _, b := range samples {
		if len(b) < 8 {
			continue
		}
		at = at[:0]
		for i := 0; i+8 <= len(b); i++ {
			at = append(at, gg.lookup(gramHash(binary.LittleEndian.Uint64(b[i:]))))
		}
		for i, g := range at {
			if g < 0 {
				continue
			}
			if !gg.live[g] {
				gg.live[g] = true
				copy(gg.value[g][:], b[i:])
			}
			if len(b)-i > gramLen+8 {
				if n := at[i+gramLen]; n >= 0 {
					follow.add(uint64(g)<<32 | uint64(n))
				}
			}
			if i > gramLen {
				if p := at[i-gramLen]; p >= 0 {
					prev.add(uint64(g)<<32 | uint64(p))
				}
			}
		}
	}
	follow.each(func(k uint64, n uint32) {
		gg.follow[k>>32] = append(gg.follow[k>>32], gramEdge{to: int32(uint32(k)), n: n})
	})
	prev.each(func(k uint64, n uint32) {
		gg.prev[k>>32] = append(gg.prev[k>>32], gramEdge{to: int32(uint32(k)), n: n})
	})
	return gg
}

// lookup returns the index of a wanted hash, or -1.
func (gg *gramGraph) lookup(h uint32) int32 {
	f := h >> (32 - filterBits)
	if gg.filter[f/64]&(1<<(f%64)) == 0 {
		return -1
	}
	if i, ok := gg.index[h]; ok {
		return i
	}
	return -1
}

// liveIndex returns the index of h if it is wanted and not placed yet.
func (gg *gramGraph) liveIndex(h uint32) (int32, bool) {
	i := gg.lookup(h)
	return i, i >= 0 && gg.live[i]
}

// kill marks the n-gram with hash h, if wanted, as placed.
func (gg *gramGraph) kill(h uint32) {
	if i := gg.lookup(h); i >= 0 {
		gg.live[i] = false
	}
}

// hasLiveFollower reports whether any follower of g is still unplaced.
func (gg *gramGraph) hasLiveFollower(g int32) bool {
	for _, e := range gg.follow[g] {
		if gg.live[e.to] {
			return true
		}
	}
	return false
}

// pairCounts counts uint64 keys in an open-addressing table.
type pairCounts struct {
	keys []uint64 // key+1; 0 is empty
	vals []uint32
	n    int
}

func newPairCounts() *pairCounts {
	return &pairCounts{keys: make([]uint64, 1<<12), vals: make([]uint32, 1<<12)}
}

func (p *pairCounts) add(k uint64) {
	if 2*(p.n+1) > len(p.keys) {
		p.grow()
	}
	k++
	mask := uint64(len(p.keys) - 1)
	for i := (k * 0x9E3779B97F4A7C15) >> 20 & mask; ; i = (i + 1) & mask {
		switch p.keys[i] {
		case k:
			p.vals[i]++
			return
		case 0:
			p.keys[i], p.vals[i] = k, 1
			p.n++
			return
		}
	}
}

func (p *pairCounts) grow() {
	old, oldVals := p.keys, p.vals
	p.keys, p.vals = make([]uint64, 2*len(old)), make([]uint32, 2*len(old))
	mask := uint64(len(p.keys) - 1)
	for j, k := range old {
		if k == 0 {
			continue
		}
		i := (k * 0x9E3779B97F4A7C15) >> 20 & mask
		for p.keys[i] != 0 {
			i = (i + 1) & mask
		}
		p.keys[i], p.vals[i] = k, oldVals[j]
	}
}

// each calls fn for every key and its count, in table order.
func (p *pairCounts) each(fn func(k uint64, n uint32)) {
	for i, k := range p.keys {
		if k != 0 {
			fn(k-1, p.vals[i])
		}
	}
}

// linkCand is a candidate neighbour of a gramLinks.
type linkCand struct {
	hash   uint32
	n      uint32
	offset int64
	to     int32
}

// byCountThenOffset orders candidates by count (most first), then by summed
// offset (largest first), then by hash, so no two compare equal.
func byCountThenOffset(a, b linkCand) int {
	if a.n != b.n {
		if a.n > b.n {
			return -1
		}
		return 1
	}
	if a.offset != b.offset {
		if a.offset > b.offset {
			return -1
		}
		return 1
	}
	if a.hash < b.hash {
		return -1
	}
	if a.hash > b.hash {
		return 1
	}
	return 0
}

// maxOffsetSearches bounds how many leading history strings are searched for
// in the samples to find the dictionary's starting repeat offsets.
const maxOffsetSearches = 24

// byPlace orders n-grams by first offset, then hash: the full tie-break that
// keeps every sort of the builder deterministic.
func byPlace(a, b gramStat) int {
	return cmp.Or(cmp.Compare(a.offset, b.offset), cmp.Compare(a.hash, b.hash))
}

// buildHistory chooses up to size bytes of dictionary content from samples and
// up to three repeat offsets into it, deterministically.
func buildHistory(samples [][]byte, size int) (hist []byte, firstOffsets []int, ok bool) {
	over, ok := countGrams(samples)
	if !ok || len(over) == 0 {
		return nil, nil, false
	}
	// Most frequent first; counts within 1/32 of each other are kept together
	// and ordered by offset (then hash) so similar strings sit side by side.
	slices.SortStableFunc(over, func(a, b gramStat) int {
		return cmp.Or(cmp.Compare(b.n, a.n), byPlace(a, b))
	})
	groupSimilarCounts(over)
	if len(over) > size {
		over = over[:size]
	}
	lowest := over[len(over)-1].n
	gg := newGramGraph(samples, over)

	var strs [][]byte
	added := 0
	var cands []linkCand
	for idx, e := range over {
		if added > size {
			break
		}
		g := int32(idx)
		if !gg.live[g] {
			continue
		}
		cut := max(e.n/gramLen/4, lowest)
		str := make([]byte, 0, 2*gramLen)
		cands = cands[:0]
		for _, c := range gg.prev[g] {
			if gg.live[c.to] && c.n >= cut {
				cands = append(cands, linkCand{hash: over[c.to].hash, n: c.n, to: c.to})
			}
		}
		if len(cands) > 0 {
			slices.SortFunc(cands, byCountThenOffset)
			str = append(str, gg.value[cands[0].to][:]...)
		}
		str = append(str, gg.value[g][:]...)
		gg.live[g] = false
		for {
			cands = cands[:0]
			for _, c := range gg.follow[g] {
				if gg.live[c.to] {
					cands = append(cands, linkCand{hash: over[c.to].hash, n: c.n, offset: over[c.to].offset, to: c.to})
				}
			}
			if len(cands) == 0 {
				// Step back two bytes and try to continue from there.
				const stepBack = 2
				if len(str) < gramLen+stepBack {
					break
				}
				var t8 [8]byte
				copy(t8[:], str[len(str)-gramLen-stepBack:])
				g2, ok := gg.liveIndex(gramHash(binary.LittleEndian.Uint64(t8[:])))
				if !ok || !gg.hasLiveFollower(g2) {
					break
				}
				g = g2
				str = str[:len(str)-stepBack]
				continue
			}
			slices.SortFunc(cands, byCountThenOffset)
			stop := cands[0].n < cut
			next := cands[0].to
			// Drop every n-gram spanning the join so the string does not stutter.
			var join [2 * 8]byte
			copy(join[:], str[len(str)-gramLen:])
			copy(join[gramLen:], gg.value[next][:])
			for i := range 2 * gramLen {
				var t8 [8]byte
				copy(t8[:], join[i:])
				gg.kill(gramHash(binary.LittleEndian.Uint64(t8[:])))
			}
			str = append(str, gg.value[next][:]...)
			g = next
			if stop {
				break
			}
		}
		for j := 0; j+gramLen <= len(str); j++ {
			var t8 [8]byte
			copy(t8[:], str[j:])
			gg.kill(gramHash(binary.LittleEndian.Uint64(t8[:])))
		}
		strs = append(strs, str)
		added += len(str)
		if len(firstOffsets) < 3 && idx < maxOffsetSearches {
			if off, n := commonOffset(samples, str[:min(len(str), 16)], firstOffsets, added); n > 1 {
				firstOffsets = append(firstOffsets, off+added)
			}
		}
	}
	// Strings chosen first are the most frequent: they go last, nearest the
	// data, where offsets are shortest.
	written := 0
	for i, s := range strs {
		if written+len(s) > size {
			strs[i] = s[:size-written]
		}
		written += len(strs[i])
		if written >= size {
			strs = strs[:i+1]
			break
		}
	}
	hist = make([]byte, 0, written)
	for i := len(strs) - 1; i >= 0; i-- {
		hist = append(hist, strs[i]...)
	}
	return hist, firstOffsets, true
}

// groupSimilarCounts reorders runs of entries whose counts lie within 1/32 of
// the run's first count by ascending summed offset (then hash), keeping the
// runs themselves in descending count order.
func groupSimilarCounts(s []gramStat) {
	for i := 0; i < len(s); {
		j := i + 1
		for j < len(s) && s[i].n-s[j].n < s[i].n/32 {
			j++
		}
		run := s[i:j]
		slices.SortStableFunc(run, byPlace)
		i = j
	}
}

// commonOffset finds the offset at which prefix most often starts in the
// samples (ties go to the larger offset), skipping offsets already taken.
func commonOffset(samples [][]byte, prefix []byte, taken []int, added int) (off, n int) {
	counts := make(map[int]int)
	for _, b := range samples {
		if o := bytes.Index(b, prefix); o >= 0 {
			counts[o]++
		}
	}
	for _, t := range taken {
		delete(counts, t-added)
	}
	for k, v := range counts {
		if v > n || (v == n && k > off) {
			off, n = k, v
		}
	}
	return off, n
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

// buildZstdDict trains a zstd dictionary of at most size bytes on samples,
// compressing them at level to fit its entropy tables.
func buildZstdDict(samples [][]byte, size int, level zstd.EncoderLevel) ([]byte, error) {
	hist, first, ok := buildHistory(samples, size)
	if !ok || len(hist) < 8 {
		return nil, errf(ErrInvalidArgument, "no content is repeated across the %d samples", len(samples))
	}
	offsets := [3]int{1, 4, 8}
	for i, off := range first {
		if off == 0 || off >= len(hist) {
			break
		}
		offsets[i] = off
	}
	// The entropy tables are averaged over the samples compressed against the
	// history; a strided subset gives the same averages for less work (each
	// sample costs an encoder reset that copies the dictionary's tables).
	contents := samples
	if len(contents) > maxStatSamples {
		contents = make([][]byte, maxStatSamples)
		for i := range contents {
			contents[i] = samples[i*len(samples)/maxStatSamples]
		}
	}
	return zstd.BuildDict(zstd.BuildDictOptions{
		ID:         dictID(hist, samples),
		Contents:   contents,
		History:    hist,
		Offsets:    offsets,
		CompatV155: true,
		Level:      level,
	})
}
