package zrecord

import (
	"fmt"
	"sort"
	"sync"
)

// Set reads several stores as one index space: the records of stores[0],
// then those of stores[1], and so on, as a sharded dataset lays out its
// shards. Global index i is record i-Start(k) of the store k whose range
// holds it. The lengths are taken when the set is made (shards are
// immutable once published); a store that shrinks below its length later
// fails the gathers that reach past its end with ErrIndexOutOfRange.
//
// Gather, GatherPacked, GatherRagged and Sizes take global indices, in any
// order and with repeats, and do in one call what the store methods do: the
// same checks of every index and size before any byte is written, the same
// verification of every record against its checksum, and the same errors,
// which name the shard's own files and its local index. A dense Gather
// locates each shard's records in that shard's table, then copies the whole
// batch in one pass over its slots with the copy loops of Store.Gather,
// fanned out over the package's workers as one batch of that size would
// be. The stores stay owned by the set: Close closes them all.
type Set struct {
	stores []*Store
	starts []int64 // starts[k] is the first global index of stores[k]; starts[len] is Len
	// equal is the common length when every store but the last has it,
	// so that routing an index is a division; 0 otherwise.
	equal int64
}

// NewSet makes a set of the stores, in order. It refuses an empty list, a
// nil or closed store, and a store listed twice (ErrInvalidArgument).
func NewSet(stores []*Store) (*Set, error) {
	if len(stores) == 0 {
		return nil, errf(ErrInvalidArgument, "a set needs at least one store")
	}
	seen := make(map[*Store]int, len(stores))
	t := &Set{stores: append([]*Store(nil), stores...), starts: make([]int64, len(stores)+1)}
	for k, s := range stores {
		if s == nil {
			return nil, errf(ErrInvalidArgument, "set: store %d is nil", k)
		}
		if j, ok := seen[s]; ok {
			return nil, errf(ErrInvalidArgument, "set: store %s is listed at %d and %d", s.dir, j, k)
		}
		seen[s] = k
		if err := s.checkRead("open"); err != nil {
			return nil, err
		}
		t.starts[k+1] = t.starts[k] + s.Len()
	}
	if n := len(stores); n > 1 {
		first := t.starts[1]
		t.equal = first
		for k := 1; k < n-1; k++ {
			if t.starts[k+1]-t.starts[k] != first {
				t.equal = 0
				break
			}
		}
	}
	return t, nil
}

// Len is the number of records of the set.
func (t *Set) Len() int64 { return t.starts[len(t.stores)] }

// Stores returns the set's stores, in order.
func (t *Set) Stores() []*Store { return append([]*Store(nil), t.stores...) }

// Start returns the first global index of store k.
func (t *Set) Start(k int) int64 { return t.starts[k] }

// Codec returns the stores' codec when they all have the same one, else the
// one whose records cost most to read (ZstdDict, then Zstd, then Narrow).
func (t *Set) Codec() Codec {
	rank := func(c Codec) int {
		switch c {
		case ZstdDict:
			return 3
		case Zstd:
			return 2
		case Narrow:
			return 1
		}
		return 0
	}
	c := t.stores[0].codec
	for _, s := range t.stores[1:] {
		if rank(s.codec) > rank(c) {
			c = s.codec
		}
	}
	return c
}

// SetVerify calls SetVerify on every store.
func (t *Set) SetVerify(on bool) {
	for _, s := range t.stores {
		s.SetVerify(on)
	}
}

// Stats sums the stores' figures. Codec is Set.Codec; Version is the lowest
// of the stores' versions, Checksummed and Verified hold when they hold for
// every store, and Element is the first store's.
func (t *Set) Stats() (Stats, error) {
	var sum Stats
	for k, s := range t.stores {
		st, err := s.Stats()
		if err != nil {
			return Stats{}, err
		}
		if k == 0 {
			sum = st
			continue
		}
		sum.Length += st.Length
		sum.LiveBytes += st.LiveBytes
		sum.ChunkBytes += st.ChunkBytes
		sum.LogicalBytes += st.LogicalBytes
		sum.DictBytes += st.DictBytes
		sum.Chunks += st.Chunks
		sum.Version = min(sum.Version, st.Version)
		sum.Checksummed = sum.Checksummed && st.Checksummed
		sum.Verified = sum.Verified && st.Verified
	}
	sum.Codec = t.Codec()
	return sum, nil
}

// Close closes every store and returns the first error.
func (t *Set) Close() error {
	var first error
	for _, s := range t.stores {
		if err := s.Close(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// setScratch is the per-call working memory of a Set's gathers.
type setScratch struct {
	shard []int32   // shard[k]: the store of the call's k-th index
	slot  []int32   // slot[k]: its position in that store's local list
	local [][]int64 // per store: the local indices it reads, in call order
	pos   [][]int32 // per store: the call position of each of them
	gs    []*gatherScratch
	cs    [][]*chunk
	all   []*chunk // every store's chunks, one list, for the copy loops
	base  []uint32 // base[s]: where store s's chunks start in all
}

var setPool = sync.Pool{New: func() any { return new(setScratch) }}

// lock takes every store's read lock, in order, and checks that each is
// open; unlock releases them. Writers take one store's lock at a time, so
// taking them in one order cannot deadlock.
func (t *Set) lock(op string) error {
	for k, s := range t.stores {
		s.mu.RLock()
		if err := s.checkRead(op); err != nil {
			t.unlock(k + 1)
			return err
		}
	}
	return nil
}

func (t *Set) unlock(n int) {
	for _, s := range t.stores[:n] {
		s.mu.RUnlock()
	}
}

// route splits indices by store into sc, range-checking each against Len.
func (t *Set) route(op string, indices []int64, sc *setScratch) error {
	n, m := len(indices), len(t.stores)
	total := t.Len()
	if cap(sc.shard) < n {
		sc.shard, sc.slot = make([]int32, n), make([]int32, n)
	}
	sc.shard, sc.slot = sc.shard[:n], sc.slot[:n]
	for len(sc.local) < m {
		sc.local, sc.pos = append(sc.local, nil), append(sc.pos, nil)
	}
	for k := range m {
		sc.local[k], sc.pos[k] = sc.local[k][:0], sc.pos[k][:0]
	}
	last := int64(m - 1)
	for k, i := range indices {
		if uint64(i) >= uint64(total) {
			return errf(ErrIndexOutOfRange, "%s from a set of %d stores: index %d, length %d", op, m, i, total)
		}
		var s int64
		if t.equal > 0 {
			s = min(i/t.equal, last)
		} else {
			s = int64(sort.Search(m, func(j int) bool { return t.starts[j+1] > i }))
		}
		sc.shard[k], sc.slot[k] = int32(s), int32(len(sc.local[s]))
		sc.local[s] = append(sc.local[s], i-t.starts[s])
		sc.pos[s] = append(sc.pos[s], int32(k))
	}
	return nil
}

// locate routes indices and locates each store's records in its table
// (Store.locate), with a gatherScratch per store in sc.gs and its chunks
// in sc.cs.
func (t *Set) locate(op string, indices []int64, sc *setScratch) error {
	if err := t.route(op, indices, sc); err != nil {
		return err
	}
	return t.locateRouted(op, sc)
}

// only returns the one of the m stores every routed index lies in, or -1.
// (sc.local may hold more lists, left by a larger set.)
func (sc *setScratch) only(m int) int {
	found := -1
	for s := range sc.local[:m] {
		if len(sc.local[s]) > 0 {
			if found >= 0 {
				return -1
			}
			found = s
		}
	}
	return found
}

// locateRouted is locate after route.
func (t *Set) locateRouted(op string, sc *setScratch) error {
	m := len(t.stores)
	for len(sc.gs) < m {
		sc.gs, sc.cs = append(sc.gs, nil), append(sc.cs, nil)
	}
	for s, st := range t.stores {
		sc.cs[s] = nil
		if len(sc.local[s]) == 0 {
			continue
		}
		sc.gs[s] = getGatherScratch(len(sc.local[s]))
		chunks, err := st.locate(op, sc.local[s], sc.gs[s])
		if err != nil {
			return err
		}
		sc.cs[s] = chunks
	}
	return nil
}

// release returns sc and the store scratches it took to their pools.
func (sc *setScratch) release() {
	for s, g := range sc.gs {
		if g != nil {
			gatherPool.Put(g)
			sc.gs[s] = nil
		}
	}
	for s := range sc.cs {
		sc.cs[s] = nil
	}
	clear(sc.all)
	sc.all = sc.all[:0]
	setPool.Put(sc)
}

// entry returns the table entry of the call's k-th record.
func (sc *setScratch) entry(k int) entry { return sc.gs[sc.shard[k]].locs[sc.slot[k]] }

// cost is the fan-out weight of the located records, total logical bytes
// (see Store.gatherCost).
func (t *Set) cost(sc *setScratch, total int64) int64 {
	cost := total
	for s, st := range t.stores {
		if len(sc.local[s]) > 0 && st.dec != nil {
			cost += st.gatherCost(sc.gs[s].locs, 0)
		}
	}
	return cost
}

// prepare gives every store's scratch staging for blocks workers and the
// call's streaming decision.
func (sc *setScratch) prepare(blocks int, total int64, workers int) {
	for _, g := range sc.gs {
		if g != nil {
			g.prepare(blocks)
			g.setStream(total, workers)
		}
	}
}

// fill writes the call's k-th record into out through its own store.
func (t *Set) fill(sc *setScratch, w, k int, out []byte) error {
	s, j := sc.shard[k], int(sc.slot[k])
	return t.stores[s].fill(sc.gs[s], w, j, sc.cs[s], sc.local[s][j], out)
}

// Gather is Store.Gather over the set: record indices[k] (a global index)
// lands in dst[k*stride:(k+1)*stride]. A batch whose records all lie in one
// store (a set of one store, a sequential read) is that store's Gather of
// the local indices.
func (t *Set) Gather(indices []int64, dst []byte, stride int) (err error) {
	defer recoverTo(&err, "gather")
	n := len(indices)
	if stride < 0 {
		return errf(ErrInvalidArgument, "gather from a set: stride %d", stride)
	}
	if n == 0 {
		return nil
	}
	if stride > 0 && n > len(dst)/stride {
		return errf(ErrBufferTooSmall, "gather from a set: %d records of %d bytes need %d bytes, dst has %d", n, stride, int64(n)*int64(stride), len(dst))
	}
	sc := setPool.Get().(*setScratch)
	defer sc.release()
	if err := t.route("gather", indices, sc); err != nil {
		return err
	}
	if s := sc.only(len(t.stores)); s >= 0 {
		return t.stores[s].Gather(sc.local[s], dst, stride)
	}
	old := guardFaults()
	defer restoreFaults(old)
	if err := t.lock("gather"); err != nil {
		return err
	}
	defer t.unlock(len(t.stores))
	if err := t.locateRouted("gather", sc); err != nil {
		return err
	}
	frames, v3, checked, plain := false, false, true, true
	sc.base = sc.base[:0]
	for s, st := range t.stores {
		sc.base = append(sc.base, uint32(len(sc.all)))
		sc.all = append(sc.all, sc.cs[s]...)
		if len(sc.local[s]) == 0 {
			continue
		}
		frames = frames || st.mayEncode()
		v3 = v3 || st.lay.version == versionV3
		c := st.checkRaws()
		checked, plain = checked && c, plain && !c
		for j, e := range sc.gs[s].locs {
			if int64(e.logic) != int64(stride) {
				return errf(ErrSizeMismatch, "gather from %s: record %d has %d bytes, stride is %d", st.dir, sc.local[s][j], e.logic, stride)
			}
		}
	}
	// One list of entries in call order, their chunk numbers moved into
	// sc.all, the list of every store's chunks, for the copy loops; each
	// block builds its own part of it.
	g := getGatherScratch(n)
	defer gatherPool.Put(g)
	total := int64(n) * int64(stride)
	workers := workersFor(t.cost(sc, total), n, fanOutBytes)
	blocks := gatherBlocks(workers, n)
	sc.prepare(blocks, total, workers)
	g.setStream(total, workers)
	return parallelBlocks(workers, blocks, "gather", func(w int) error {
		lo, hi := n*w/blocks, n*(w+1)/blocks
		for k := lo; k < hi; k++ {
			s := sc.shard[k]
			e := sc.gs[s].locs[sc.slot[k]]
			e.chunk += sc.base[s]
			g.locs[k] = e
		}
		if !canPrefetch {
			g.touchRecords(sc.all)
		}
		limit := hi * stride // as in Store.Gather
		g.prefetchFirst(sc.all, lo, hi)
		for k := lo; k < hi; k++ {
			switch {
			case checked:
				var sum uint32
				var bad bool
				if k, sum, bad = copyChecked(frames, g.locs, sc.all, dst, stride, k, hi, g.stream); bad {
					s, j := sc.shard[k], sc.slot[k]
					return t.stores[s].dataError(sc.local[s][j], sc.entry(k), sum)
				}
			case plain:
				k = copyPlain(frames, v3, g.locs, sc.all, dst, stride, k, hi)
			}
			if k == hi {
				break
			}
			if k+prefetchAhead < hi {
				g.prefetch(sc.all, k+prefetchAhead)
			}
			off := k * stride
			if err := t.fill(sc, w, k, dst[off:off+stride:limit]); err != nil {
				return err
			}
		}
		return nil
	})
}

// Sizes is Store.Sizes over the set.
func (t *Set) Sizes(indices []int64, sizes []int64) (err error) {
	defer recoverTo(&err, "sizes")
	old := guardFaults()
	defer restoreFaults(old)
	if err := t.lock("sizes"); err != nil {
		return err
	}
	defer t.unlock(len(t.stores))
	if len(sizes) < len(indices) {
		return errf(ErrBufferTooSmall, "sizes from a set: %d slots for %d indices", len(sizes), len(indices))
	}
	if len(indices) == 0 {
		return nil
	}
	sc := setPool.Get().(*setScratch)
	defer sc.release()
	if err := t.locate("sizes", indices, sc); err != nil {
		return err
	}
	for k := range indices {
		sizes[k] = int64(sc.entry(k).logic)
	}
	return nil
}

// GatherPacked is Store.GatherPacked over the set.
func (t *Set) GatherPacked(indices []int64, dst []byte, offsets []int64) (err error) {
	defer recoverTo(&err, "gather")
	old := guardFaults()
	defer restoreFaults(old)
	if err := t.lock("gather"); err != nil {
		return err
	}
	defer t.unlock(len(t.stores))
	n := len(indices)
	if n == 0 && len(offsets) <= 1 {
		return nil
	}
	if err := checkOffsets(n, dst, offsets); err != nil {
		return err
	}
	sc := setPool.Get().(*setScratch)
	defer sc.release()
	if err := t.locate("gather", indices, sc); err != nil {
		return err
	}
	for k := range indices {
		if e, want := sc.entry(k), offsets[k+1]-offsets[k]; int64(e.logic) != want {
			s, j := sc.shard[k], sc.slot[k]
			return errf(ErrSizeMismatch, "gather from %s: record %d has %d bytes, its slot has %d", t.stores[s].dir, sc.local[s][j], e.logic, want)
		}
	}
	return t.fillPacked(sc, n, dst, offsets)
}

// GatherRagged is Store.GatherRagged over the set: the sizes and the bytes
// come from one view of every store, under their read locks.
func (t *Set) GatherRagged(indices []int64, sizes []int64, dst []byte) (needed int64, err error) {
	defer recoverTo(&err, "gather")
	old := guardFaults()
	defer restoreFaults(old)
	if err := t.lock("gather"); err != nil {
		return 0, err
	}
	defer t.unlock(len(t.stores))
	n := len(indices)
	if len(sizes) < n {
		return 0, errf(ErrBufferTooSmall, "gather from a set: %d size slots for %d indices", len(sizes), n)
	}
	if n == 0 {
		return 0, nil
	}
	sc := setPool.Get().(*setScratch)
	defer sc.release()
	if err := t.locate("gather", indices, sc); err != nil {
		return 0, err
	}
	op, offsets := pooledOffsets(n)
	defer offsetsPool.Put(op)
	for k := range indices {
		sizes[k] = int64(sc.entry(k).logic)
		offsets[k+1] = offsets[k] + sizes[k]
	}
	needed = offsets[n]
	if needed > int64(len(dst)) {
		return needed, nil
	}
	return needed, t.fillPacked(sc, n, dst, offsets)
}

// fillPacked fills the located records back to back at offsets, in blocks
// of about equal bytes, as GatherPacked does for one store.
func (t *Set) fillPacked(sc *setScratch, n int, dst []byte, offsets []int64) error {
	total := offsets[n] - offsets[0]
	workers := workersFor(t.cost(sc, total), n, fanOutBytes)
	blocks := gatherBlocks(workers, n)
	sc.prepare(blocks, total, workers)
	return parallelBlocks(workers, blocks, "gather", func(w int) error {
		lo := splitPoint(offsets, w, blocks)
		hi := splitPoint(offsets, w+1, blocks)
		limit := offsets[hi]
		for k := lo; k < hi; k++ {
			if err := t.fill(sc, w, k, dst[offsets[k]:offsets[k+1]:limit]); err != nil {
				return err
			}
		}
		return nil
	})
}

// checkOffsets is GatherPacked's check of its offsets against n indices and
// dst.
func checkOffsets(n int, dst []byte, offsets []int64) error {
	if len(offsets) != n+1 {
		return errf(ErrInvalidArgument, "gather from a set: %d offsets for %d indices, want %d", len(offsets), n, n+1)
	}
	if offsets[0] < 0 {
		return errf(ErrInvalidArgument, "gather from a set: offsets[0] is %d", offsets[0])
	}
	for k := 0; k < n; k++ {
		if offsets[k+1] < offsets[k] {
			return errf(ErrInvalidArgument, "gather from a set: offsets[%d]=%d below offsets[%d]=%d", k+1, offsets[k+1], k, offsets[k])
		}
	}
	if offsets[n] > int64(len(dst)) {
		return errf(ErrBufferTooSmall, "gather from a set: offsets end at %d, dst has %d bytes", offsets[n], len(dst))
	}
	return nil
}

// String names the set by its first store and its size.
func (t *Set) String() string {
	return fmt.Sprintf("set of %d stores from %s, %d records", len(t.stores), t.stores[0].dir, t.Len())
}
