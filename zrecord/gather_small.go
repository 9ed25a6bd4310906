package zrecord

import "unsafe"

// smallGatherMax bounds the bytes of a fixed-stride Gather that
// gatherSmall takes: below adviseRunMin, so that no run of its records
// wants read-ahead, within prefetchBatchMax, so that the whole batch is
// asked for at once, and far below fanOutBytes, so that it never takes
// the general fan-out (it may be split in two: gather_split.go).
const smallGatherMax = min(adviseRunMin, prefetchBatchMax)

// The short path of a small batch of raw records (gatherSmall, of a Store
// and of a Set) does in three passes what Gather's general path does in
// about ten: the table entries of the batch asked for at once and checked
// in one assembly loop (prefetchEntriesAt and loadEntries; for a Set,
// whose entries lie in several tables, prefetchEntriesFrom and
// loadEntriesFrom), then one loop that checks each entry against its
// chunk and the stride, asks for the record and keeps its address
// (checkSmall), then one copy of the batch from those addresses
// (copySrcs), both split over two goroutines from splitSmallBytes
// (gather_split.go). On 256 random records of 256 bytes
// from a warm store, the general path spent about 35 ns a record on work
// that is not a cache miss, four times what np.take spends.
//
// A store takes part when it holds raw records only, is checksummed, and
// has neither an overlay nor a residency map, and its records are in its
// first table segment. Anything else about a call (an index out of range,
// a damaged entry, a record of another size, stores that disagree on
// verification) declines it before a byte of dst is written: the general
// path then handles it, and reports whatever is wrong.

// gatherSmall is Gather's short path for a store (see above). It reports
// false where it declines the call.
func (s *Store) gatherSmall(indices []int64, dst []byte, stride int, slot bool, g *gatherScratch) (bool, error) {
	if !canPrefetch {
		return false, nil
	}
	seg, chunks := s.smallTable()
	n := len(indices)
	if len(seg) == 0 || n == 0 {
		return false, nil
	}
	locs := g.locs[:n]
	g.srcs = grow(g.srcs, n)
	g.sums = grow(g.sums, n)
	defer g.dropAddrs()
	checked := s.checkRaws()
	if splitsSmall(n, stride, slot) {
		took, at, sum, err := splitSmall(dst, stride, checked, g, n, func(lo, hi int) bool {
			prefetchEntriesAt(&seg[0], len(seg)/24, &indices[lo], hi-lo)
			return locateSmall(seg, chunks, indices[lo:hi], locs[lo:hi], g.srcs[lo:hi], stride)
		})
		if took && err == nil && at >= 0 {
			err = s.dataError(indices[at], locs[at], sum)
		}
		return took, err
	}
	prefetchEntriesAt(&seg[0], len(seg)/24, &indices[0], n)
	if !locateSmall(seg, chunks, indices, locs, g.srcs, stride) {
		return false, nil
	}
	if stride == 0 {
		return true, nil
	}
	// On the caller's goroutine, whose memory faults Gather turns into
	// errors.
	if at, sum, bad := copySrcs(dst, g.srcs, locs, stride, checked, g.sums[:n]); bad {
		return true, s.dataError(indices[at], locs[at], sum)
	}
	return true, nil
}

// smallTable returns the store's entries that are published, mapped and
// in its first table segment, and its chunk list, for locateSmall; no
// entries where the store does not take part in the short path (see
// above).
func (s *Store) smallTable() ([]byte, []*chunk) {
	if s.mayEncode() || !s.lay.checksummed() || s.overlay.Load() != nil || s.resident.Load() != nil {
		return nil, nil
	}
	// The length first: the lists are published before the length that
	// needs them (as in locateInto).
	length := s.length.Load()
	segs := *s.segs.Load()
	chunks := *s.chunks.Load()
	if len(segs) == 0 {
		return nil, nil
	}
	seg := segs[0].bytes()
	lim := min(length, int64(len(seg)/24), int64(1)<<(s.lay.shift&63))
	if lim <= 0 {
		return nil, nil
	}
	return seg[:lim*24], chunks
}

// locateSmall fills locs with the checked entries of indices in the table
// seg (entry i at byte 24*i, every entry of seg published) and srcs with
// the address of each record in its chunk's mapping, and asks for each
// record's bytes. It reports false, leaving the rest undone, at an index
// past seg, an entry that does not match its checksum, or a record that
// checkSmall turns down.
func locateSmall(seg []byte, chunks []*chunk, indices []int64, locs []entry, srcs []unsafe.Pointer, stride int) bool {
	if loadEntries(seg, indices, locs) < len(indices) {
		return false
	}
	return checkSmall(locs[:len(indices)], srcs, stride, []smallSource{{chunks: chunks}}, nil)
}

// checkSmall checks each of the entries locs, of record k in the chunks
// of src[grp[k]] (src[0] when grp is nil), keeps the address of the
// record in its chunk's mapping in srcs[k], and asks for its bytes. It
// reports false, leaving the rest undone, at a record that is not raw, not
// stride bytes, or not within its chunk's committed and mapped bytes. The
// addresses stay good for as long as the store is read locked or pinned:
// a mapping replaced by a longer one is kept until the store closes
// (mapping.retired).
func checkSmall(locs []entry, srcs []unsafe.Pointer, stride int, src []smallSource, grp []int32) bool {
	chunks := src[0].chunks
	var list int32 // the source chunks is of
	var cur uint32 // the chunk cd maps, up to cend, when have
	var cd []byte
	var cend uint64
	have := false
	for k := range locs {
		e := &locs[k]
		if grp != nil && grp[k] != list {
			list, have = grp[k], false
			chunks = src[list].chunks
		}
		if e.logic != uint32(stride) || e.phys != e.logic || int64(e.chunk) >= int64(len(chunks)) {
			return false
		}
		if !have || e.chunk != cur {
			c := chunks[e.chunk]
			cur, cd, have = e.chunk, c.bytes(), true
			cend = uint64(min(c.end.Load(), int64(len(cd))))
		}
		if e.end() > cend {
			return false // past the chunk's committed end, or not mapped
		}
		if stride > 0 {
			p := &cd[e.off]
			prefetchRecord(p, min(stride, prefetchBytes))
			srcs[k] = unsafe.Pointer(p)
		}
	}
	return true
}

// dropAddrs clears the addresses the short path kept in g, before g goes
// back to its pool: they point into mappings that may be gone by the time
// g is used again, and the collector must not meet such a pointer where a
// later mapping of the Go heap might be.
func (g *gatherScratch) dropAddrs() {
	clear(g.srcs)
	clear(g.tables)
}

// copySrcs copies the stride bytes at each of srcs (located by
// locateSmall) to dst back to back, record k at k*stride, and with
// checked checks each against locs[k].sum, with sums (len(sums) >=
// len(locs)) as its scratch. It returns false, or the
// position of the first record that does not match, its checksum and
// true. Records of up to the path's stridedMax bytes are checked four at
// a time (copyCRCStrided), the others one at a time by copyCRC; unchecked
// batches are one call of copyStrided where the CPU has it.
func copySrcs(dst []byte, srcs []unsafe.Pointer, locs []entry, stride int, checked bool, sums []uint32) (int, uint32, bool) {
	n := len(locs)
	_ = dst[n*stride-1]
	srcs = srcs[:n]
	if !checked {
		if !copyStrided(dst, srcs, stride) {
			for k, p := range srcs {
				copy(dst[k*stride:(k+1)*stride], unsafe.Slice((*byte)(p), stride))
			}
		}
		return 0, 0, false
	}
	done := 0
	if stride <= copyCRCImpl.stridedMax {
		done = copyCRCStrided(dst, srcs, sums, stride)
		for k, sum := range sums[:done] {
			if sum != locs[k].sum {
				return k, sum, true
			}
		}
	}
	for k := done; k < n; k++ {
		off := k * stride
		if sum := copyCRC(dst[off:off+stride], unsafe.Slice((*byte)(srcs[k]), stride), 0); sum != locs[k].sum {
			return k, sum, true
		}
	}
	return 0, 0, false
}

// smallSource is one store of a Set call that gatherSmall takes: its
// table and chunks, as smallTable gives them (or the store's view of a
// lazy set, which has them at hand, the chunks of a store of one or two
// in buf), and whether its raw reads are checked.
type smallSource struct {
	seg     []byte
	chunks  []*chunk
	buf     [2]*chunk
	checked bool
}

// smallSource fills src with group j's store, or reports false where the
// store does not take part (see above).
func (c *setCall) smallSource(j int, src *smallSource) bool {
	if n := c.nodes[j]; n != nil {
		v := &n.view
		if !v.fast || v.encodes || v.resident.Load() != nil || v.length == 0 {
			return false
		}
		src.seg, src.checked = v.table(), v.checkRaws()
		if v.nchunks == 0 {
			src.chunks = v.chunks
		} else {
			src.buf = [2]*chunk{&v.chunkBuf[0], &v.chunkBuf[1]}
			src.chunks = src.buf[:v.nchunks]
		}
		return true
	}
	s := c.sts[j]
	src.seg, src.chunks = s.smallTable()
	src.checked = s.checkRaws()
	return len(src.seg) > 0
}

// smallSetMax is the most stores a set may have for its calls to take
// the short path: routeSmall finds an index's group in a table with a
// place for every store (setCall.direct, 4 bytes a store).
const smallSetMax = 1 << 17

// routeSmall is route for the short path: it range-checks indices and
// finds each one's store, its group (grp, in order of first appearance)
// and its local index (local), both in call order, without sorting the
// call by group. It reports false at an index out of range, for the
// general path to report.
func (t *Set) routeSmall(indices []int64, c *setCall) bool {
	n := len(indices)
	c.grp, c.local = grow(c.grp, n), grow(c.local, n)
	c.ks = c.ks[:0]
	if len(c.direct) < t.count() {
		c.direct = make([]int32, t.count())
	}
	dir := c.direct[:t.count()]
	ok := true
	total := t.Len()
	for k, i := range indices {
		if uint64(i) >= uint64(total) {
			ok = false
			break
		}
		s := t.storeOf(i)
		j := dir[s] - 1
		if j < 0 {
			j = int32(len(c.ks))
			dir[s] = j + 1
			c.ks = append(c.ks, int32(s))
		}
		c.grp[k], c.local[k] = j, i-t.starts[s]
	}
	for _, s := range c.ks { // the table's places are 0 between calls
		dir[s] = 0
	}
	g := len(c.ks)
	c.sts, c.nodes = grow(c.sts, g), grow(c.nodes, g)
	return ok
}

// gatherSmall is Gather's short path for a Set (see above): the call
// routed in call order (routeSmall), a call of one store handed to that
// store's Gather, and otherwise, with the stores pinned (and locked), the
// batch's entries asked for and checked from their stores' tables in one
// loop each, and the batch copied from the records' addresses in one
// pass, as in one store. It reports false where it declines the call.
func (t *Set) gatherSmall(indices []int64, dst []byte, stride int, slot bool) (bool, error) {
	n := len(indices)
	if !canPrefetch || stride <= 0 || t.ordered || t.count() > smallSetMax {
		return false, nil
	}
	c := getSetCall(n)
	defer c.put()
	if !t.routeSmall(indices, c) || c.groups() > t.roundSize() {
		return false, nil
	}
	if c.groups() == 1 {
		return true, t.withGroup("gather", c, func(s *Store) error { return s.gather(c.local[:n], dst, stride, slot) })
	}
	old := guardFaults()
	defer restoreFaults(old)
	if err := t.lockGroups("gather", c, 0, c.groups()); err != nil {
		return true, err
	}
	defer t.unlockGroups(c, 0, c.groups())
	c.small = grow(c.small, c.groups())
	src := c.small
	for j := range src {
		if !c.smallSource(j, &src[j]) || src[j].checked != src[0].checked {
			return false, nil
		}
	}
	g := c.gs
	defer g.dropAddrs()
	g.tables = grow(g.tables, n)
	for k, j := range c.grp[:n] {
		seg := src[j].seg
		if uint64(c.local[k]) >= uint64(len(seg)/24) {
			return false, nil
		}
		g.tables[k] = unsafe.Pointer(&seg[0])
	}
	locs := g.locs[:n]
	g.srcs = grow(g.srcs, n)
	g.sums = grow(g.sums, n)
	checked := src[0].checked
	if splitsSmall(n, stride, slot) {
		took, at, sum, err := splitSmall(dst, stride, checked, g, n, func(lo, hi int) bool {
			return c.locateSmall(src, stride, lo, hi)
		})
		if took && err == nil && at >= 0 {
			err = c.sts[c.grp[at]].dataError(c.local[at], locs[at], sum)
		}
		return took, err
	}
	if !c.locateSmall(src, stride, 0, n) {
		return false, nil
	}
	if at, sum, bad := copySrcs(dst, g.srcs, locs, stride, checked, g.sums[:n]); bad {
		return true, c.sts[c.grp[at]].dataError(c.local[at], locs[at], sum)
	}
	return true, nil
}

// locateSmall is locateSmall for records lo..hi-1 of a Set call whose
// tables (c.gs.tables) are filled: it asks for their entries, checks them
// into c.gs.locs and keeps their records' addresses in c.gs.srcs, or
// reports false.
func (c *setCall) locateSmall(src []smallSource, stride, lo, hi int) bool {
	g := c.gs
	prefetchEntriesFrom(&g.tables[lo], &c.local[lo], hi-lo)
	return loadEntriesFrom(g.tables[lo:hi], c.local[lo:hi], g.locs[lo:hi]) == hi-lo &&
		checkSmall(g.locs[lo:hi], g.srcs[lo:hi], stride, src, c.grp[lo:hi])
}
