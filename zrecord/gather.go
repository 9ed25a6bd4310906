package zrecord

// The gathers of fixed-size, packed and sized records, their copy loops and
// the per-record fill stay in one file: they share the scratch, the locate
// step and the fan-out, and Set (set.go) runs the same copy loops.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sort"
	"sync"
	"unsafe"
)

// gatherScratch is the per-call working memory of Gather, reused across calls.
type gatherScratch struct {
	locs []entry
	raw  [][]byte // per-worker staging for files that cannot be mapped
	// fold: per-worker buffers that a streamed call checks narrowed
	// records through (see fillNarrowed).
	fold [][]byte
	// touched sums the bytes loaded ahead of use by touchEntries and
	// touchRecords, so the loads are kept.
	touched byte
	// stream: the call's raw copies write past the caches, checked ones
	// with copyCRCStream and the others with the runtime's copy (see
	// setStream and copyRecord).
	stream bool
	// runs: the ranges the call advised sequential (adviseRuns).
	runs []seqRun
	// srcs: the address of each record in its chunk's mapping, which
	// checkSmall collects for copySrcs (outside the Go heap, which the
	// collector ignores; cleared as the call ends, by dropAddrs).
	srcs []unsafe.Pointer
	// sums: the checksum of each record copyCRCStrided copied.
	sums []uint32
	// tables: the table of each record of a Set's short path (the start
	// of its store's table mapping).
	tables []unsafe.Pointer
}

// setStream decides, for a call that copies total bytes, whether its raw
// copies write with streaming stores: from streamMin bytes, or, into a
// slot (see GatherSlot), from streamSlotMin.
func (g *gatherScratch) setStream(total int64, slot bool) {
	g.stream = total >= streamMin || slot && total >= streamSlotMin
}

var gatherPool = sync.Pool{New: func() any { return new(gatherScratch) }}

func getGatherScratch(n int) *gatherScratch {
	g := gatherPool.Get().(*gatherScratch)
	if cap(g.locs) < n {
		g.locs = make([]entry, n)
	}
	g.locs = g.locs[:n]
	return g
}

// Gather copies the records at indices into dst at a fixed stride: record
// indices[k] lands in dst[k*stride:(k+1)*stride]. Every record must be
// exactly stride bytes long (else ErrSizeMismatch naming the index); dst must
// hold len(indices)*stride bytes (else ErrBufferTooSmall). Indices may repeat
// and come in any order. All indices and sizes are checked before any byte
// of dst is written.
//
// Compressed records are decoded straight into dst. Batches of more than
// about 512 KiB of copying per worker, where decoding a byte counts as
// copying decodeWeight bytes, are split into contiguous blocks, a few per
// goroutine, that up to Threads() goroutines claim in turn; a batch of
// 32 KiB to 256 KiB of small raw records is shared by the caller and one
// helper, each locating and copying half. Gather runs concurrently with
// Append and other Gathers.
func (s *Store) Gather(indices []int64, dst []byte, stride int) error {
	defer enterGather()()
	return s.gather(indices, dst, stride, false)
}

// GatherSlot is Gather into a slot: one of a data loader's buffers, each
// written once and read later by another core, several of them in flight.
// Its large raw copies write past the caches (see streamSlotMin), where
// Gather keeps them in the cache for a caller that reads or reuses its
// buffer next.
func (s *Store) GatherSlot(indices []int64, dst []byte, stride int) error {
	defer enterGather()()
	return s.gather(indices, dst, stride, true)
}

func (s *Store) gather(indices []int64, dst []byte, stride int, slot bool) (err error) {
	defer recoverTo(&err, "gather")
	old := guardFaults()
	defer restoreFaults(old)
	s.mu.RLock()
	defer s.mu.RUnlock()
	if err := s.checkRead("gather"); err != nil {
		return err
	}
	n := len(indices)
	if stride < 0 {
		return errf(ErrInvalidArgument, "gather from %s: stride %d", s.dir, stride)
	}
	if n == 0 {
		return nil
	}
	if stride > 0 && n > len(dst)/stride {
		return errf(ErrBufferTooSmall, "gather from %s: %d records of %d bytes need %d bytes, dst has %d", s.dir, n, stride, int64(n)*int64(stride), len(dst))
	}
	g := getGatherScratch(n)
	defer gatherPool.Put(g)
	if int64(n)*int64(stride) < smallGatherMax {
		if done, err := s.gatherSmall(indices, dst, stride, slot, g); done {
			return err
		}
	}
	// Raw records are stored at their size, so n*stride is the least the
	// call copies.
	wakeAhead(int64(n)*int64(stride), n)
	chunks, err := s.locate("gather", indices, g)
	if err != nil {
		return err
	}
	g.adviseRuns(chunks)
	defer g.restoreRuns()
	for k := range g.locs {
		if e := &g.locs[k]; int64(e.logic) != int64(stride) {
			return errf(ErrSizeMismatch, "gather from %s: record %d has %d bytes, stride is %d", s.dir, indices[k], e.logic, stride)
		}
	}
	batched := false
	if !canPrefetch {
		g.touchRecords(chunks)
	} else {
		batched = g.prefetchBatch(chunks)
	}
	workers := gatherWorkers(s.gatherCost(g.locs, int64(n)*int64(stride)), n)
	blocks := gatherBlocks(workers, n)
	g.prepare(blocks)
	g.setStream(int64(n)*int64(stride), slot)
	checked := s.checkRaws()
	frames, v3 := s.mayEncode(), s.lay.version == versionV3
	return parallelBlocks(workers, blocks, "gather", func(w int) error {
		lo, hi := n*w/blocks, n*(w+1)/blocks
		// Records are filled in ascending order, and a slot's capacity runs
		// to the end of the block: scratch bytes the decoder leaves past a
		// record land in slots this worker fills afterwards.
		limit := hi * stride
		// The loops prefetch ahead of their copies up to pf: not at all
		// where prefetchBatch asked for the whole batch.
		pf := hi
		if batched {
			pf = lo
		}
		g.prefetchFirst(chunks, lo, pf)
		for k := lo; k < hi; k++ {
			// Raw records in mapped chunks: copy them (checking each
			// on the way, by default) up to the first record that
			// needs more.
			if checked {
				var sum uint32
				var bad bool
				if k, sum, bad = copyChecked(frames, g.locs, chunks, dst, stride, k, hi, pf, g.stream); bad {
					return s.dataError(indices[k], g.locs[k], sum)
				}
			} else {
				k = copyPlain(frames, v3, g.locs, chunks, dst, stride, k, hi, pf, g.stream)
			}
			if k == hi {
				break
			}
			if k+prefetchAhead < pf {
				g.prefetch(chunks, k+prefetchAhead)
			}
			off := k * stride
			if err := s.fill(g, w, k, chunks, indices[k], dst[off:off+stride:limit]); err != nil {
				return err
			}
		}
		return nil
	})
}

// coalesceMax bounds the bytes copyPlain copies in one piece.
const coalesceMax = 1 << 20

// copyPlain copies the records locs[k:hi] of a gather at a fixed stride
// into dst as long as they are raw and in mapped chunks, and returns the
// first k it did not copy (hi when it copied them all). frames says whether
// the records' store may hold encoded records (Store.mayEncode), v3 whether
// it is of version 3, where a raw record cannot be told from a frame by its
// sizes, stream whether it writes past the caches (copyRecord). Every record it
// copies is stride bytes (Gather checked their logical sizes, and raw
// records are stored at that size). It is Gather's loop for raw records,
// kept apart and free of calls other than the copy and the prefetch, and
// of work a random batch does not need: on 2 KiB records the general loop
// cost about a fifth more (BenchmarkGatherSmall), and each check or call
// left in this one a few ns per record.
func copyPlain(frames, v3 bool, locs []entry, chunks []*chunk, dst []byte, stride, k, hi, pf int, stream bool) int {
	var cur uint32 // the chunk d maps, when have
	var d []byte
	have := false
	for ; k < hi; k++ {
		e := &locs[k]
		if frames && (e.phys != e.logic || v3) {
			return k
		}
		if !have || e.chunk != cur {
			cur, d, have = e.chunk, chunks[e.chunk].bytes(), true
			if d == nil {
				return k
			}
		}
		if j := k + prefetchAhead; j < pf {
			if f := &locs[j]; f.phys > 0 {
				pd := d
				if f.chunk != cur {
					pd = chunks[f.chunk].bytes()
				}
				if int(f.off) < len(pd) {
					prefetchRecord(&pd[f.off], int(min(f.phys, prefetchBytes)))
				}
			}
		}
		off := int(e.off)
		end := off + stride // raw records are stride bytes
		if k+1 < hi {
			if f := &locs[k+1]; f.chunk == cur && int(f.off) == end && !(frames && (f.phys != f.logic || v3)) {
				// Records that follow each other in the chunk, as a
				// sequential read's do, are copied in one piece.
				// A run is cut at coalesceMax bytes: the runtime cannot
				// stop a goroutine inside one copy, so a long one would
				// hold up every garbage collection of the process.
				m := k + 1
				for m < hi && end-off < coalesceMax {
					f := &locs[m]
					if f.chunk != cur || int(f.off) != end || frames && (f.phys != f.logic || v3) {
						break
					}
					end += stride
					m++
				}
				copyRecord(dst[k*stride:m*stride], d[off:end], stream)
				k = m - 1
				continue
			}
		}
		copyRecord(dst[k*stride:(k+1)*stride], d[off:end], stream)
	}
	return hi
}

// copyChecked is copyPlain for a store whose raw records are checked
// (checkRaws): it copies the records locs[k:hi] into dst at a fixed stride
// as long as they are raw and in mapped chunks, each with copyCRC, which
// computes the record's checksum from the registers it copies through,
// and compares that with the table's. It returns the first k it did not
// copy (hi when it copied them all), or, with bad set, the first record
// whose bytes do not match and the checksum they have (the caller reports
// it with dataError). Records that follow each
// other in a chunk are not merged into one copy, as copyPlain merges
// them: each has its own checksum, and a copy per record costs nothing
// next to it. The loop is copyPlain's otherwise, prefetching included.
// With stream the copies use copyCRCStream.
func copyChecked(frames bool, locs []entry, chunks []*chunk, dst []byte, stride, k, hi, pf int, stream bool) (int, uint32, bool) {
	cp := copyCRCImpl.fn
	if stream {
		cp = copyCRCImpl.stream
	}
	var cur uint32 // the chunk d maps, when have
	var d []byte
	have := false
	for ; k < hi; k++ {
		e := &locs[k]
		if frames && e.phys != e.logic {
			return k, 0, false
		}
		if !have || e.chunk != cur {
			cur, d, have = e.chunk, chunks[e.chunk].bytes(), true
			if d == nil {
				return k, 0, false
			}
		}
		if j := k + prefetchAhead; j < pf {
			if f := &locs[j]; f.phys > 0 {
				pd := d
				if f.chunk != cur {
					pd = chunks[f.chunk].bytes()
				}
				if int(f.off) < len(pd) {
					prefetchRecord(&pd[f.off], int(min(f.phys, prefetchBytes)))
				}
			}
		}
		off := int(e.off)
		if sum := copyCRCPieces(cp, dst[k*stride:(k+1)*stride], d[off:off+stride], 0); sum != e.sum {
			return k, sum, true
		}
	}
	return hi, 0, false
}

// mayEncode reports whether the store's codec may store a record encoded
// (a zstd frame or a narrowed record, told from a raw one by phys_length !=
// logic_length): the raw copy loops stop at such a record and leave it to
// fill.
func (s *Store) mayEncode() bool { return s.dec != nil || s.codec == Narrow }

// checkRaws reports whether raw records are checked against their
// checksums as they are copied: in a version-4 store, unless SetVerify or
// WithVerify turned it off, and always in a store with a residency map,
// whose bytes were brought in from elsewhere.
func (s *Store) checkRaws() bool {
	return s.lay.checksummed() && (s.verifyRaw.Load() || s.resident.Load() != nil)
}

// GatherPacked copies the records at indices into dst back to back: record
// indices[k] lands in dst[offsets[k]:offsets[k+1]], which must be exactly its
// logical size (else ErrSizeMismatch naming the index). len(offsets) must be
// len(indices)+1, offsets non-decreasing and non-negative
// (ErrInvalidArgument), and offsets[len(indices)] <= len(dst)
// (ErrBufferTooSmall). Sizes returns the logical sizes to build offsets
// from. Everything is checked before any byte of dst is written.
func (s *Store) GatherPacked(indices []int64, dst []byte, offsets []int64) (err error) {
	defer recoverTo(&err, "gather")
	defer enterGather()()
	old := guardFaults()
	defer restoreFaults(old)
	s.mu.RLock()
	defer s.mu.RUnlock()
	if err := s.checkRead("gather"); err != nil {
		return err
	}
	n := len(indices)
	if n == 0 && len(offsets) <= 1 {
		return nil
	}
	if len(offsets) != n+1 {
		return errf(ErrInvalidArgument, "gather from %s: %d offsets for %d indices, want %d", s.dir, len(offsets), n, n+1)
	}
	if offsets[0] < 0 {
		return errf(ErrInvalidArgument, "gather from %s: offsets[0] is %d", s.dir, offsets[0])
	}
	for k := 0; k < n; k++ {
		if offsets[k+1] < offsets[k] {
			return errf(ErrInvalidArgument, "gather from %s: offsets[%d]=%d below offsets[%d]=%d", s.dir, k+1, offsets[k+1], k, offsets[k])
		}
	}
	if offsets[n] > int64(len(dst)) {
		return errf(ErrBufferTooSmall, "gather from %s: offsets end at %d, dst has %d bytes", s.dir, offsets[n], len(dst))
	}
	g := getGatherScratch(n)
	defer gatherPool.Put(g)
	chunks, err := s.locate("gather", indices, g)
	if err != nil {
		return err
	}
	g.adviseRuns(chunks)
	defer g.restoreRuns()
	for k, e := range g.locs {
		if want := offsets[k+1] - offsets[k]; int64(e.logic) != want {
			return errf(ErrSizeMismatch, "gather from %s: record %d has %d bytes, its slot has %d", s.dir, indices[k], e.logic, want)
		}
	}
	g.touchRecords(chunks)
	workers := gatherWorkers(s.gatherCost(g.locs, offsets[n]-offsets[0]), n)
	blocks := gatherBlocks(workers, n)
	g.prepare(blocks)
	g.setStream(offsets[n]-offsets[0], true)
	return parallelBlocks(workers, blocks, "gather", func(w int) error {
		// Split by bytes, not by count, so records of mixed sizes balance.
		lo := splitPoint(offsets, w, blocks)
		hi := splitPoint(offsets, w+1, blocks)
		limit := offsets[hi] // as in Gather: spare capacity up to the block's end
		for k := lo; k < hi; k++ {
			a, b := offsets[k], offsets[k+1]
			if err := s.fill(g, w, k, chunks, indices[k], dst[a:b:limit]); err != nil {
				return err
			}
		}
		return nil
	})
}

// decodeWeight is what decoding one byte of a zstd frame costs, in bytes
// copied: a core copies records from mapped memory at about 6-12 GB/s and
// decodes zstd frames at 0.3-1.0 GB/s (the bench's records of 2 KiB to
// 256 KiB; BenchmarkGatherFile with one thread).
const decodeWeight = 16

// gatherCost is the work of gathering the records at locs, total logical
// bytes, in bytes copied: what the fan-out decision weighs against
// fanOutBytes. Frames weigh decodeWeight times their logical size, so a
// batch of small compressed records, which decodes hundreds of times slower
// than it copies, is spread over the workers like a large raw one.
func (s *Store) gatherCost(locs []entry, total int64) int64 {
	if s.dec == nil {
		return total
	}
	var frames int64
	for _, e := range locs {
		if s.isFrame(e) {
			frames += int64(e.logic)
		}
	}
	return total + (decodeWeight-1)*frames
}

// splitPoint returns the first record of block w of workers blocks of about
// equal byte size.
func splitPoint(offsets []int64, w, workers int) int {
	n := len(offsets) - 1
	if w <= 0 {
		return 0
	}
	if w >= workers {
		return n
	}
	target := offsets[0] + (offsets[n]-offsets[0])*int64(w)/int64(workers)
	return sort.Search(n, func(k int) bool { return offsets[k] >= target })
}

// Sizes writes the logical size of each record at indices into sizes, which
// must hold at least len(indices) values (else ErrBufferTooSmall).
func (s *Store) Sizes(indices []int64, sizes []int64) (err error) {
	defer recoverTo(&err, "sizes")
	old := guardFaults()
	defer restoreFaults(old)
	s.mu.RLock()
	defer s.mu.RUnlock()
	if err := s.checkRead("sizes"); err != nil {
		return err
	}
	if len(sizes) < len(indices) {
		return errf(ErrBufferTooSmall, "sizes from %s: %d slots for %d indices", s.dir, len(sizes), len(indices))
	}
	if len(indices) == 0 {
		return nil
	}
	g := getGatherScratch(len(indices))
	defer gatherPool.Put(g)
	if _, err := s.locate("sizes", indices, g); err != nil {
		return err
	}
	for k, e := range g.locs {
		sizes[k] = int64(e.logic)
	}
	return nil
}

// locate range-checks indices against the published length and loads and
// checks their table entries into g.locs. It returns the chunk list the
// entries refer to.
func (s *Store) locate(op string, indices []int64, g *gatherScratch) ([]*chunk, error) {
	return s.locateInto(op, indices, g.locs[:len(indices)], &g.touched)
}

// locateInto is locate into locs (one entry per index); the loads that
// touchEntries makes ahead of the decoding are summed into *touched.
func (s *Store) locateInto(op string, indices []int64, locs []entry, touched *byte) ([]*chunk, error) {
	n := s.length.Load()
	var top int64
	for _, i := range indices {
		if uint64(i) >= uint64(n) {
			return nil, errf(ErrIndexOutOfRange, "%s from %s: index %d, length %d", op, s.dir, i, n)
		}
		top = max(top, i)
	}
	// A reader that brings the table in page by page (SetResidency): no
	// entry is read before its page is there.
	if err := s.checkEntriesResident(op, indices); err != nil {
		return nil, err
	}
	// Loaded after length: the lists are published before the length that
	// needs them, so they cover every entry below n.
	segs := *s.segs.Load()
	chunks := *s.chunks.Load()
	ov := s.overlay.Load()
	k := 0
	if ov == nil && s.lay.checksummed() {
		k = s.locateFirstSegment(indices, locs, segs, chunks, top)
		if k == 0 {
			*touched = touchEntries(s.lay, segs, indices)
			k = s.locateMapped(indices, locs, segs, chunks)
		}
	} else {
		*touched = touchEntries(s.lay, segs, indices)
	}
	for ; k < len(indices); k++ {
		i := indices[k]
		if ov != nil {
			if e, ok := ov.recs[i]; ok {
				locs[k] = e
				continue
			}
		}
		e, err := s.entryAt(segs, i)
		if err != nil {
			return nil, fmt.Errorf("zrecord: %s from %s: %w", op, s.dir, err)
		}
		if err := s.checkEntry(&e, chunks); err != nil {
			return nil, fmt.Errorf("zrecord: %s from %s: %s entry %d: %v: %w", op, s.dir, s.lay.segName(uint32(i>>s.lay.shift)), i, err, ErrCorrupt)
		}
		locs[k] = e
	}
	if op == "gather" {
		if err := s.checkResident(indices, locs[:len(indices)]); err != nil {
			return nil, err
		}
	}
	return chunks, nil
}

// adviseRunMin is the shortest run of stored bytes whose pages a gather
// reads with read-ahead (adviseRuns).
const adviseRunMin = 256 << 10

// seqRun is a range of a chunk's mapping that a gather advised sequential
// for its copy (adviseRuns), and gives back to random advice after it.
type seqRun struct {
	c      *chunk
	off, n int64
}

// adviseRuns advises sequential, for the copy that follows, the runs of
// located records that lie back to back in one chunk and span at least
// adviseRunMin bytes (one large record is such a run). Chunk mappings are
// advised random (see adviseRandom): a record that is not cached then costs
// the page it needs, not a read-ahead window, which is what a random batch
// of small records wants; a long run wants the read-ahead back, and gets it
// for as long as its copy takes (restoreRuns ends it). Advice is a hint:
// a concurrent gather that restores a range another is copying costs that
// copy its read-ahead, never a wrong byte.
func (g *gatherScratch) adviseRuns(chunks []*chunk) {
	locs := g.locs
	for k := 0; k < len(locs); {
		e := &locs[k]
		start, end := int64(e.off), int64(e.end())
		j := k + 1
		for j < len(locs) && locs[j].chunk == e.chunk && int64(locs[j].off) == end {
			end = int64(locs[j].end())
			j++
		}
		if end-start >= adviseRunMin && int(e.chunk) < len(chunks) {
			if c := chunks[e.chunk]; c.random && !c.trust.cached(func() bool { return c.cached(start) }) && c.advise(start, end-start, true) {
				g.runs = append(g.runs, seqRun{c, start, end - start})
			}
		}
		k = j
	}
}

// (A run whose first page is in the page cache is taken to be cached
// whole and left alone: one mincore costs less than the two advice calls;
// and a chunk whose runs were found cached often enough in a row is asked
// about for one run in trustSample, see cacheTrust.)

// restoreRuns gives the ranges adviseRuns advised sequential back to random.
func (g *gatherScratch) restoreRuns() {
	for _, r := range g.runs {
		r.c.advise(r.off, r.n, false)
	}
	clear(g.runs)
	g.runs = g.runs[:0]
}

// locateFirstSegment is locate for a version-4 store without an overlay
// whose indices, top the largest, all lie in the mapped first segment of
// the table (stores of up to 2^27 records): the entries are checked
// against their checksums and decoded in one pass (loadEntries), then
// checked against the chunks in a loop without calls. It returns how many entries it filled
// into locs, stopping at the first it cannot take; 0 also when the
// indices do not fit it, and locate then takes locateMapped's path.
func (s *Store) locateFirstSegment(indices []int64, locs []entry, segs []*segment, chunks []*chunk, top int64) int {
	const size = 24 // layoutV4.entSize
	if len(segs) == 0 || top>>(s.lay.shift&63) != 0 {
		return 0
	}
	d := segs[0].bytes()
	if (top+1)*size > int64(len(d)) {
		return 0
	}
	if canPrefetch && len(indices)*64 <= prefetchBatchMax {
		prefetchEntries(d, indices)
	}
	good := loadEntries(d, indices, locs)
	for k := range locs[:good] {
		if s.checkEntry(&locs[k], chunks) != nil {
			return k
		}
	}
	return good
}

// locateMapped is locate's loop for a version-4 store without an overlay:
// it decodes and checks the entries of indices in place in their mapped
// segments, in one loop with the segment's bytes kept between records of
// the same segment, and returns how many it filled into locs. It stops at
// the first entry it cannot take this way (an unmapped segment, a checksum
// or bounds failure), which locate's general loop then reports or handles.
func (s *Store) locateMapped(indices []int64, locs []entry, segs []*segment, chunks []*chunk) int {
	const size = 24 // layoutV4.entSize
	shift := s.lay.shift & 63
	mask := int64(1)<<shift - 1
	cur := int64(-1)
	var d []byte
	for k, i := range indices {
		if id := i >> shift; id != cur {
			if id >= int64(len(segs)) {
				return k
			}
			cur, d = id, segs[id].bytes()
		}
		off := (i & mask) * size
		if off+size > int64(len(d)) {
			return k
		}
		b := d[off : off+size : off+size]
		if binary.LittleEndian.Uint32(b[20:24]) != entrySumFast(i, b) {
			return k
		}
		e := getEntry20(b)
		if s.checkEntry(&e, chunks) != nil {
			return k
		}
		locs[k] = e
	}
	return len(indices)
}

// touchEntries loads one byte of each mapped table entry of indices before
// any is decoded, and returns their sum (kept by the caller, so that the
// loads are not dropped). The loads are independent, so the CPU overlaps their cache
// and TLB misses, where the decoding loop, with a checksum between one load
// and the next, takes them one after another: on a 2 KiB random gather this
// is about a quarter of the time (BenchmarkGatherSmall).
func touchEntries(l layout, segs []*segment, indices []int64) byte {
	var t byte
	for _, i := range indices {
		if d := segs[i>>l.shift].bytes(); d != nil {
			t += d[l.segOff(i)]
		}
	}
	return t
}

// touchRecords does the same for the first byte of each record at locs in
// a mapped chunk, so that the copies or checks that follow find them on
// their way into the cache.
func (g *gatherScratch) touchRecords(chunks []*chunk) {
	var t byte
	for _, e := range g.locs {
		if d := chunks[e.chunk].bytes(); d != nil && e.phys > 0 {
			t += d[e.off]
		}
	}
	g.touched += t
}

// prefetchAhead is how many records ahead of the one it copies a gather
// asks the CPU to load, and prefetchBytes how much of each: a record's
// first lines arrive while the record before it is copied, instead of
// each copy starting with a cache miss, and the hardware prefetcher
// follows a record's later lines once its copy runs.
//
// Records of up to l1RecordMax bytes are asked for into the L1 cache,
// larger ones into the L2 (prefetchRecord). On random batches from 128 MiB
// of raw records, nine alternated rounds of one run, L1 prefetches took
// the time of L2 ones to 0.75-0.95x checked and 0.70-0.98x unchecked at
// 256 B to 4 KiB (0.5-0.65x at 512 B, in the short path), and moved 8 KiB
// to 1 MiB records by less than the noise; a Python memory bench of L2
// prefetches against L1 ones had the 64 KiB plain copy ahead by a few per
// cent. (An earlier state of the gather, which asked for each record two
// records ahead only, had measured the other way: a prefetch into the L1
// holds one of its miss buffers until the line arrives, and asking for
// whole records so had starved its own loads.) Up to 16 KiB of each
// record: on random batches from 128 MiB of raw records, eight alternated
// rounds, the unchecked gather of 256 records of 8 KiB took a median of
// 176 against 189 µs for 4 KiB (faster in seven rounds of eight); 16 and
// 64 KiB records, checked or not, and checked 8 KiB ones moved by less
// than the noise.
const (
	prefetchAhead = 2
	prefetchBytes = 16 << 10
	l1RecordMax   = 4 << 10
)

// prefetchBatchMax bounds the stored bytes of a call that prefetchBatch
// asks for at once: well inside the L2 cache, so none is evicted before
// its copy.
const prefetchBatchMax = 256 << 10

// prefetch asks the CPU to load the start of the k-th record of the call
// (up to prefetchBytes of it) when its chunk is mapped. A prefetch never
// faults, so a record of a truncated file costs nothing here: its copy
// reports it.
func (g *gatherScratch) prefetch(chunks []*chunk, k int) {
	e := &g.locs[k]
	if e.phys == 0 {
		return
	}
	if d := chunks[e.chunk].bytes(); d != nil {
		prefetchRecord(&d[e.off], int(min(e.phys, prefetchBytes)))
	}
}

// prefetchEntries asks the CPU for the table entries of indices in the
// mapped segment d (entry i at byte 24*i), all of them before the first is
// decoded: a random batch's entries are as many cache misses, which then
// overlap instead of each waiting on the checksum of the entry before it.
// Its caller asks for no more lines than prefetchBatchMax holds.
func prefetchEntries(d []byte, indices []int64) {
	if len(d) >= 24 && len(indices) > 0 {
		prefetchEntriesAt(&d[0], len(d)/24, &indices[0], len(indices))
	}
}

// prefetchBatch asks the CPU for the first bytes (up to prefetchBytes) of every
// located record of a call whose stored bytes fit in prefetchBatchMax,
// before the copy loop starts: the loop's own prefetch runs only
// prefetchAhead records ahead, which leaves most of a small record's miss
// in its copy. With prefetchEntries, on 256-byte records from a warm
// 256 MiB store (random batches of 256, one goroutine), a checked gather
// took about 0.8 times the CPU time it took without the two (medians of
// 9 alternated rounds, two runs); checking or not made no difference
// there: the misses are the cost.
func (g *gatherScratch) prefetchBatch(chunks []*chunk) bool {
	var total int64
	for k := range g.locs {
		total += int64(g.locs[k].phys)
	}
	if total > prefetchBatchMax {
		return false
	}
	for k := range g.locs {
		g.prefetch(chunks, k)
	}
	return true
}

// prefetchFirst prefetches the first prefetchAhead records of the block
// [lo, hi), which the copy loop reaches before it prefetches anything.
func (g *gatherScratch) prefetchFirst(chunks []*chunk, lo, hi int) {
	for k := lo; k < min(lo+prefetchAhead, hi); k++ {
		g.prefetch(chunks, k)
	}
}

// entryAt returns table entry i, checked, like readEntry; an entry of a
// mapped version-4 segment is decoded and checked in place, without
// staging its bytes, which is most of what a small raw gather spends per
// record besides the copy.
func (s *Store) entryAt(segs []*segment, i int64) (entry, error) {
	l := &s.lay
	if d := segs[i>>l.shift].bytes(); d != nil && l.checksummed() {
		off := l.segOff(i)
		b := d[off : off+24 : off+24]
		if binary.LittleEndian.Uint32(b[20:24]) == entrySumFast(i, b) {
			return getEntry20(b), nil
		}
	}
	return s.readEntry(segs, i) // other layouts and unmapped segments; reports a damaged entry
}

func (g *gatherScratch) prepare(workers int) {
	for len(g.raw) < workers {
		g.raw = append(g.raw, nil)
	}
	for len(g.fold) < workers {
		g.fold = append(g.fold, nil)
	}
}

// foldBuffer returns worker w's fold buffer, n bytes long.
func (g *gatherScratch) foldBuffer(w, n int) []byte {
	if cap(g.fold[w]) < n {
		g.fold[w] = make([]byte, n)
	}
	return g.fold[w][:n]
}

// fill writes the k-th record of the call, idx, into out (exactly its
// logical size). Bytes of out's spare capacity may be overwritten. w
// selects the worker's staging buffer. In a checksummed store, a frame is
// checked before it is decoded, and a raw record as it is copied (copyCRC)
// unless raw verification is off; a raw record read from a file that is
// not mapped is checked after the read, in a second pass.
func (s *Store) fill(g *gatherScratch, w, k int, chunks []*chunk, idx int64, out []byte) error {
	e := g.locs[k]
	c := chunks[e.chunk]
	if s.isNarrowed(e) {
		return s.fillNarrowed(g, w, c, idx, e, out)
	}
	if !s.isFrame(e) {
		d := c.bytes()
		if d == nil {
			if err := readFull(c.f, out, int64(e.off)); err != nil {
				return s.readError(err, idx, e)
			}
			return s.checkRaw(idx, e, out)
		}
		src := d[e.off:e.end():e.end()]
		if !s.checkRaws() {
			copy(out, src)
			return nil
		}
		cp := copyCRC
		if g.stream {
			cp = copyCRCStream
		}
		if sum := cp(out, src, 0); sum != e.sum {
			return s.dataError(idx, e, sum)
		}
		return nil
	}
	src, err := s.storedBytes(g, w, c, idx, e)
	if err != nil {
		return err
	}
	if s.lay.checksummed() {
		if sum := sumInto(out, src); sum != e.sum {
			return s.dataError(idx, e, sum)
		}
	}
	return s.decode(idx, src, out)
}

// storedBytes returns the stored bytes of the encoded record idx (entry e,
// in chunk c): a view of the chunk's mapping, or, for a chunk that is not
// mapped, a copy read into worker w's staging buffer.
func (s *Store) storedBytes(g *gatherScratch, w int, c *chunk, idx int64, e entry) ([]byte, error) {
	if d := c.bytes(); d != nil {
		return d[e.off:e.end():e.end()], nil
	}
	if cap(g.raw[w]) < int(e.phys) {
		g.raw[w] = make([]byte, e.phys)
	}
	src := g.raw[w][:e.phys]
	if err := readFull(c.f, src, int64(e.off)); err != nil {
		return nil, s.readError(err, idx, e)
	}
	return src, nil
}

// readError reports a failed positional read of record idx. A chunk file
// that ends before the record does (truncated by another process, where
// chunks are read without a mapping) is damage, the same ErrCorrupt a
// mapped reader reports for it; other failures keep their cause.
func (s *Store) readError(err error, idx int64, e entry) error {
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return errf(ErrCorrupt, "record %d in %s: the file ends before the record's %d bytes at offset %d",
			idx, s.path(chunkName(e.chunk)), e.phys, e.off)
	}
	return wrapf(err, "gather from %s: read record %d", s.dir, idx)
}

// checkRaw checks the copy b of raw record idx against its checksum, when
// raw records are checked (checkRaws).
func (s *Store) checkRaw(idx int64, e entry, b []byte) error {
	if !s.checkRaws() {
		return nil
	}
	if sum := dataSum(b); sum != e.sum {
		return s.dataError(idx, e, sum)
	}
	return nil
}

// dataError reports stored bytes that do not match their checksum.
func (s *Store) dataError(idx int64, e entry, sum uint32) error {
	return errf(ErrCorrupt, "record %d in %s: stored bytes checksum %#08x, table says %#08x",
		idx, s.path(chunkName(e.chunk)), sum, e.sum)
}

// decode decompresses the frame src of record idx into out, whose length is
// the record's logical size. The decoder writes up to 32 scratch bytes into
// spare capacity, and takes a faster path when it may: callers give out
// spare capacity only where those bytes are overwritten later, and cap it
// at the end of the record otherwise.
func (s *Store) decode(idx int64, src, out []byte) error {
	got, err := s.dec.DecodeAll(src, out[:0])
	if err != nil {
		return fmt.Errorf("zrecord: gather from %s: record %d: %v: %w", s.dir, idx, err, ErrDecode)
	}
	if len(got) != len(out) {
		return errf(ErrDecode, "gather from %s: record %d decoded to %d bytes, want %d", s.dir, idx, len(got), len(out))
	}
	if !sameStart(got, out) {
		copy(out, got)
	}
	return nil
}
