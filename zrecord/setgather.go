package zrecord

import "sync"

// The reads of a Set: a call routes its global indices to their stores and
// groups them by store (route), pins and read-locks the stores it touches
// (lockGroups), locates each store's records in that store's table
// (locateGroups), checks them, and copies them. Everything a call does is
// in proportion to its batch: a store the batch does not touch costs it
// nothing. When a lazy set may keep fewer stores open than a batch touches,
// the batch is located and checked in rounds of as many stores as it may
// keep open, then copied in rounds (locateRounds, fillRounds).
// A small batch of raw records of several stores takes a short path
// instead (gatherSmall, in gather_small.go), as in a single store.

// setCall is the working memory of one call of a Set.
type setCall struct {
	grp  []int32 // grp[k]: the group of the call's k-th index
	slot []int32 // slot[k]: its position q in grouped order
	perm []int32 // perm[q]: the call position of the q-th index in grouped order
	// ks[j] is the store of group j; first[j] where its indices start in
	// grouped order (first[len(ks)] is the call's length); cnt[j] how many.
	ks    []int32
	first []int32
	cnt   []int32
	local []int64 // the local index of each index, in grouped order
	// gs holds the located entries in grouped order (each store's own
	// chunk numbers) and the workers' staging for Store.fill.
	gs     *gatherScratch
	sts    []*Store     // sts[j]: group j's store, while it is pinned
	nodes  []*openStore // nodes[j]: its pin in a lazy set's cache
	chunks [][]*chunk   // chunks[j]: the chunk list its entries refer to
	all    []*chunk     // every group's chunks, one list, for the copy loops
	base   []uint32     // base[j]: where group j's chunks start in all
	// The hash table that finds an index's group: keys[h] is a store + 1
	// (0 free), vals[h] its group.
	keys, vals []int32
	order      []int32 // route's scratch when groups are sorted
	// For the short path (gatherSmall): small[j] is group j's store;
	// direct[s] is store s's group + 1 (0: none) while routeSmall routes.
	small  []smallSource
	direct []int32
}

var setCallPool = sync.Pool{New: func() any { return new(setCall) }}

// getSetCall returns working memory for a call of n indices.
func getSetCall(n int) *setCall {
	c := setCallPool.Get().(*setCall)
	c.gs = getGatherScratch(n)
	return c
}

// put returns c and its scratch to their pools, holding no store.
func (c *setCall) put() {
	gatherPool.Put(c.gs)
	c.gs = nil
	clear(c.sts)
	clear(c.nodes)
	clear(c.chunks)
	clear(c.all)
	c.all = c.all[:0]
	clear(c.small)
	setCallPool.Put(c)
}

// groups is the number of stores the call touches.
func (c *setCall) groups() int { return len(c.ks) }

// grow returns s with length n, reallocated if its capacity is short.
func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

// route range-checks indices against Len, finds each one's store and
// groups them by store into c: the groups in order of first appearance
// (in store order when the set's stores must be locked in order).
func (t *Set) route(op string, indices []int64, c *setCall) error {
	n := len(indices)
	total := t.Len()
	c.grp, c.slot, c.perm = grow(c.grp, n), grow(c.slot, n), grow(c.perm, n)
	c.local = grow(c.local, n)
	size, bits := 16, 4
	for size < 2*n {
		size, bits = size<<1, bits+1
	}
	c.keys, c.vals = grow(c.keys, size), grow(c.vals, size)
	clear(c.keys)
	c.ks, c.cnt = c.ks[:0], c.cnt[:0]
	mask := uint32(size - 1)
	for k, i := range indices {
		if uint64(i) >= uint64(total) {
			return errf(ErrIndexOutOfRange, "%s from a set of %d stores: index %d, length %d", op, t.count(), i, total)
		}
		s := int32(t.storeOf(i))
		h := (uint32(s) * 0x9e3779b1) >> (32 - bits)
		for {
			key := c.keys[h]
			if key == s+1 {
				break
			}
			if key == 0 {
				c.keys[h], c.vals[h] = s+1, int32(len(c.ks))
				c.ks, c.cnt = append(c.ks, s), append(c.cnt, 0)
				break
			}
			h = (h + 1) & mask
		}
		j := c.vals[h]
		c.grp[k] = j
		c.cnt[j]++
	}
	if t.ordered && len(c.ks) > 1 {
		c.sortGroups()
	}
	g := len(c.ks)
	c.first = grow(c.first, g+1)
	c.first[0] = 0
	for j := range g {
		c.first[j+1] = c.first[j] + c.cnt[j]
		c.cnt[j] = c.first[j] // now: the next free place of group j
	}
	for k, i := range indices {
		j := c.grp[k]
		q := c.cnt[j]
		c.cnt[j]++
		c.slot[k], c.perm[q] = q, int32(k)
		c.local[q] = i - t.starts[c.ks[j]]
	}
	c.sts, c.nodes = grow(c.sts, g), grow(c.nodes, g)
	c.chunks, c.base = grow(c.chunks, g), grow(c.base, g)
	clear(c.all)
	c.all = c.all[:0]
	return nil
}

// sortGroups renumbers the groups in store order.
func (c *setCall) sortGroups() {
	g := len(c.ks)
	c.order = grow(c.order, g)
	for j := range c.order {
		c.order[j] = int32(j)
	}
	ks := c.ks
	sortInt32s(c.order, func(a, b int32) bool { return ks[a] < ks[b] })
	rank := make([]int32, g)
	nks, ncnt := make([]int32, g), make([]int32, g)
	for r, j := range c.order {
		rank[j] = int32(r)
		nks[r], ncnt[r] = c.ks[j], c.cnt[j]
	}
	copy(c.ks, nks)
	copy(c.cnt, ncnt)
	for k, j := range c.grp {
		c.grp[k] = rank[j]
	}
}

// sortInt32s sorts s by less (insertion sort for short lists, else a
// heap sort: no allocation, no closure per comparison beyond less).
func sortInt32s(s []int32, less func(a, b int32) bool) {
	if len(s) <= 12 {
		for i := 1; i < len(s); i++ {
			for j := i; j > 0 && less(s[j], s[j-1]); j-- {
				s[j], s[j-1] = s[j-1], s[j]
			}
		}
		return
	}
	down := func(root, n int) {
		for {
			child := 2*root + 1
			if child >= n {
				return
			}
			if child+1 < n && less(s[child], s[child+1]) {
				child++
			}
			if !less(s[root], s[child]) {
				return
			}
			s[root], s[child] = s[child], s[root]
			root = child
		}
	}
	for i := len(s)/2 - 1; i >= 0; i-- {
		down(i, len(s))
	}
	for i := len(s) - 1; i > 0; i-- {
		s[0], s[i] = s[i], s[0]
		down(0, i)
	}
}

// roundSize is how many stores one round of a call may pin: all of an
// eager set's, as many as a lazy set's cache may keep open.
func (t *Set) roundSize() int {
	if t.fixed != nil {
		return t.count()
	}
	return t.cache.max
}

// lockGroups pins the stores of groups [lo, hi) and, in an eager set,
// takes their read locks, checking each is open; unlockGroups undoes it. A
// lazy set's stores are read-only and closed only by the set once no call
// pins them, so their pins are enough. An eager set's may be writable,
// and writers lock one store at a time: a set of such stores (ordered)
// takes the locks in store order (route sorted the groups), which cannot
// deadlock.
func (t *Set) lockGroups(op string, c *setCall, lo, hi int) error {
	if err := t.acquire(op, c.ks[lo:hi], c.sts[lo:hi], c.nodes[lo:hi]); err != nil {
		return err
	}
	if t.fixed == nil {
		return nil
	}
	for j := lo; j < hi; j++ {
		s := c.sts[j]
		s.mu.RLock()
		if err := s.checkRead(op); err != nil {
			s.mu.RUnlock()
			for i := lo; i < j; i++ {
				c.sts[i].mu.RUnlock()
			}
			return err
		}
	}
	return nil
}

func (t *Set) unlockGroups(c *setCall, lo, hi int) {
	if t.fixed != nil {
		for j := lo; j < hi; j++ {
			c.sts[j].mu.RUnlock()
		}
	}
	t.release(c.nodes[lo:hi])
}

// locateGroups locates the records of groups [lo, hi), whose stores are
// pinned (and locked), in their stores' tables, and keeps the chunk list
// each store's entries refer to. A lazy set's stores are located through
// their views (setview.go), first touching every entry of the batch so
// that the CPU fetches them at once; a store the view does not serve, or
// whose records it turns down (for the store's own locate to report), is
// located by Store.locate.
func (t *Set) locateGroups(op string, c *setCall, lo, hi int) error {
	if t.fixed == nil {
		var sum byte
		for j := lo; j < hi; j++ {
			sum += c.nodes[j].view.touch(c.local[c.first[j]:c.first[j+1]])
		}
		c.gs.touched = sum
	}
	for j := lo; j < hi; j++ {
		a, b := c.first[j], c.first[j+1]
		c.base[j] = uint32(len(c.all))
		if n := c.nodes[j]; n != nil && n.view.locate(c.local[a:b], c.gs.locs[a:b], op == "gather") {
			c.all = n.view.appendChunks(c.all)
		} else {
			chunks, err := c.sts[j].locateInto(op, c.local[a:b], c.gs.locs[a:b], &c.gs.touched)
			if err != nil {
				return err
			}
			c.all = append(c.all, chunks...)
		}
		e := len(c.all)
		c.chunks[j] = c.all[c.base[j]:e:e]
	}
	return nil
}

// locateRounds locates every record of the call, round by round, each
// round's stores locked while check (of groups [lo, hi)) looks at what
// was located.
func (t *Set) locateRounds(op string, c *setCall, check func(lo, hi int) error) error {
	r := t.roundSize()
	for lo := 0; lo < c.groups(); lo += r {
		hi := min(lo+r, c.groups())
		if err := t.lockGroups(op, c, lo, hi); err != nil {
			return err
		}
		err := t.locateGroups(op, c, lo, hi)
		if err == nil && check != nil {
			err = check(lo, hi)
		}
		t.unlockGroups(c, lo, hi)
		if err != nil {
			return err
		}
	}
	return nil
}

// fillRounds copies every located record of the call, round by round, on
// the calling goroutine: record k goes to out(k). A store closed since it
// was located (the cache needed room) is opened again, and checked to be
// the store it was (see admit), so its entries still hold.
func (t *Set) fillRounds(op string, c *setCall, out func(k int) []byte) error {
	c.gs.prepare(1)
	c.gs.stream = false
	r := t.roundSize()
	for lo := 0; lo < c.groups(); lo += r {
		hi := min(lo+r, c.groups())
		if err := t.lockGroups(op, c, lo, hi); err != nil {
			return err
		}
		err := t.fillGroups(c, lo, hi, out)
		t.unlockGroups(c, lo, hi)
		if err != nil {
			return err
		}
	}
	return nil
}

func (t *Set) fillGroups(c *setCall, lo, hi int, out func(k int) []byte) error {
	for j := lo; j < hi; j++ {
		st := c.sts[j]
		chunks := *st.chunks.Load()
		for q := c.first[j]; q < c.first[j+1]; q++ {
			if err := st.fill(c.gs, 0, int(q), chunks, c.local[q], out(int(c.perm[q]))); err != nil {
				return err
			}
		}
	}
	return nil
}

// entry returns the located entry of the call's k-th index.
func (c *setCall) entry(k int) entry { return c.gs.locs[c.slot[k]] }

// fillAt writes the call's k-th record into out through its own store.
func (c *setCall) fillAt(w, k int, out []byte) error {
	j, q := c.grp[k], c.slot[k]
	return c.sts[j].fill(c.gs, w, int(q), c.chunks[j], c.local[q], out)
}

// sizeError reports the call's k-th record, of the wrong size.
func (c *setCall) sizeError(k int, want int64, what string) error {
	j, q := c.grp[k], c.slot[k]
	return errf(ErrSizeMismatch, "gather from %s: record %d has %d bytes, %s %d", c.sts[j].dir, c.local[q], c.gs.locs[q].logic, what, want)
}

// checkStride checks that every located record of groups [lo, hi) is
// stride bytes.
func (c *setCall) checkStride(lo, hi, stride int) error {
	for j := lo; j < hi; j++ {
		for q := c.first[j]; q < c.first[j+1]; q++ {
			if e := c.gs.locs[q]; int64(e.logic) != int64(stride) {
				return errf(ErrSizeMismatch, "gather from %s: record %d has %d bytes, stride is %d", c.sts[j].dir, c.local[q], e.logic, stride)
			}
		}
	}
	return nil
}

// checkSlots checks that every located record of groups [lo, hi) fits its
// slot of offsets.
func (c *setCall) checkSlots(lo, hi int, offsets []int64) error {
	for j := lo; j < hi; j++ {
		for q := c.first[j]; q < c.first[j+1]; q++ {
			k := c.perm[q]
			if want := offsets[k+1] - offsets[k]; int64(c.gs.locs[q].logic) != want {
				return c.sizeError(int(k), want, "its slot has")
			}
		}
	}
	return nil
}

// cost is the fan-out weight of the located records, total logical
// bytes (see Store.gatherCost).
func (c *setCall) cost(total int64) int64 {
	cost := total
	for j, st := range c.sts[:c.groups()] {
		if n := c.nodes[j]; n != nil && !n.view.hasDec {
			continue
		}
		if st.dec != nil {
			cost += st.gatherCost(c.gs.locs[c.first[j]:c.first[j+1]], 0)
		}
	}
	return cost
}

// Gather is Store.Gather over the set: record indices[k] (a global index)
// lands in dst[k*stride:(k+1)*stride]. A batch whose records all lie in one
// store (a set of one store, a sequential read) is that store's Gather of
// the local indices.
func (t *Set) Gather(indices []int64, dst []byte, stride int) error {
	defer enterGather()()
	return t.gather(indices, dst, stride, false)
}

// GatherSlot is Store.GatherSlot over the set: Gather into one of a data
// loader's buffers.
func (t *Set) GatherSlot(indices []int64, dst []byte, stride int) error {
	defer enterGather()()
	return t.gather(indices, dst, stride, true)
}

func (t *Set) gather(indices []int64, dst []byte, stride int, slot bool) (err error) {
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
	if int64(n)*int64(stride) < smallGatherMax {
		if done, err := t.gatherSmall(indices, dst, stride, slot); done {
			return err
		}
	}
	c := getSetCall(n)
	defer c.put()
	if err := t.route("gather", indices, c); err != nil {
		return err
	}
	if c.groups() == 1 {
		return t.withGroup("gather", c, func(s *Store) error { return s.gather(c.local[:n], dst, stride, slot) })
	}
	wakeAhead(int64(n)*int64(stride), n)
	old := guardFaults()
	defer restoreFaults(old)
	if c.groups() > t.roundSize() {
		if err := t.locateRounds("gather", c, func(lo, hi int) error { return c.checkStride(lo, hi, stride) }); err != nil {
			return err
		}
		return t.fillRounds("gather", c, func(k int) []byte {
			off := k * stride
			return dst[off : off+stride : off+stride]
		})
	}
	if err := t.lockGroups("gather", c, 0, c.groups()); err != nil {
		return err
	}
	defer t.unlockGroups(c, 0, c.groups())
	if err := t.locateGroups("gather", c, 0, c.groups()); err != nil {
		return err
	}
	if err := c.checkStride(0, c.groups(), stride); err != nil {
		return err
	}
	frames, v3, checked, plain := false, false, true, true
	for j, st := range c.sts[:c.groups()] {
		var ch bool
		if n := c.nodes[j]; n != nil {
			frames, v3, ch = frames || n.view.encodes, v3 || n.view.v3, n.view.checkRaws()
		} else {
			frames, v3, ch = frames || st.mayEncode(), v3 || st.lay.version == versionV3, st.checkRaws()
		}
		checked, plain = checked && ch, plain && !ch
	}
	// The copy loops reach each record's bytes through its chunk: load a
	// word of every chunk first, so that the CPU fetches them all at once.
	var sum int64
	for _, ch := range c.all {
		sum += ch.curLen.Load()
	}
	c.gs.touched += byte(sum)
	// One list of entries in call order, their chunk numbers moved into
	// c.all, the list of every store's chunks, for the copy loops; each
	// block builds its own part of it.
	g := getGatherScratch(n)
	defer gatherPool.Put(g)
	total := int64(n) * int64(stride)
	workers := gatherWorkers(c.cost(total), n)
	blocks := gatherBlocks(workers, n)
	c.gs.prepare(blocks)
	c.gs.setStream(total, slot)
	g.setStream(total, slot)
	return parallelBlocks(workers, blocks, "gather", func(w int) error {
		lo, hi := n*w/blocks, n*(w+1)/blocks
		for k := lo; k < hi; k++ {
			e := c.gs.locs[c.slot[k]]
			e.chunk += c.base[c.grp[k]]
			g.locs[k] = e
		}
		if !canPrefetch {
			g.touchRecords(c.all)
		}
		limit := hi * stride // as in Store.Gather
		g.prefetchFirst(c.all, lo, hi)
		for k := lo; k < hi; k++ {
			switch {
			case checked:
				var sum uint32
				var bad bool
				if k, sum, bad = copyChecked(frames, g.locs, c.all, dst, stride, k, hi, hi, g.stream); bad {
					j, q := c.grp[k], c.slot[k]
					return c.sts[j].dataError(c.local[q], c.gs.locs[q], sum)
				}
			case plain:
				k = copyPlain(frames, v3, g.locs, c.all, dst, stride, k, hi, hi, g.stream)
			}
			if k == hi {
				break
			}
			if k+prefetchAhead < hi {
				g.prefetch(c.all, k+prefetchAhead)
			}
			off := k * stride
			if err := c.fillAt(w, k, dst[off:off+stride:limit]); err != nil {
				return err
			}
		}
		return nil
	})
}

// withGroup runs fn with the one store a call touches pinned: the call is
// that store's, with the local indices (c.local is in call order when
// there is one group).
func (t *Set) withGroup(op string, c *setCall, fn func(s *Store) error) error {
	if err := t.acquire(op, c.ks[:1], c.sts[:1], c.nodes[:1]); err != nil {
		return err
	}
	defer t.release(c.nodes[:1])
	return fn(c.sts[0])
}

// Sizes is Store.Sizes over the set.
func (t *Set) Sizes(indices []int64, sizes []int64) (err error) {
	defer recoverTo(&err, "sizes")
	if len(sizes) < len(indices) {
		return errf(ErrBufferTooSmall, "sizes from a set: %d slots for %d indices", len(sizes), len(indices))
	}
	n := len(indices)
	if n == 0 {
		return nil
	}
	old := guardFaults()
	defer restoreFaults(old)
	c := getSetCall(n)
	defer c.put()
	if err := t.route("sizes", indices, c); err != nil {
		return err
	}
	if err := t.locateRounds("sizes", c, nil); err != nil {
		return err
	}
	for k := range indices {
		sizes[k] = int64(c.entry(k).logic)
	}
	return nil
}

// GatherPacked is Store.GatherPacked over the set.
func (t *Set) GatherPacked(indices []int64, dst []byte, offsets []int64) (err error) {
	defer recoverTo(&err, "gather")
	n := len(indices)
	if n == 0 && len(offsets) <= 1 {
		return nil
	}
	if err := checkOffsets(n, dst, offsets); err != nil {
		return err
	}
	if n == 0 {
		return nil
	}
	c := getSetCall(n)
	defer c.put()
	if err := t.route("gather", indices, c); err != nil {
		return err
	}
	if c.groups() == 1 {
		return t.withGroup("gather", c, func(s *Store) error { return s.GatherPacked(c.local[:n], dst, offsets) })
	}
	defer enterGather()() // the one-store case above counts in Store.GatherPacked
	old := guardFaults()
	defer restoreFaults(old)
	return t.gatherSized("gather", c, dst, offsets, func(lo, hi int) error { return c.checkSlots(lo, hi, offsets) })
}

// GatherRagged is Store.GatherRagged over the set: the sizes and the bytes
// come from one view of every store (a lazy set's stores are read-only).
func (t *Set) GatherRagged(indices []int64, sizes []int64, dst []byte) (needed int64, err error) {
	defer recoverTo(&err, "gather")
	n := len(indices)
	if len(sizes) < n {
		return 0, errf(ErrBufferTooSmall, "gather from a set: %d size slots for %d indices", len(sizes), n)
	}
	if n == 0 {
		return 0, nil
	}
	c := getSetCall(n)
	defer c.put()
	if err := t.route("gather", indices, c); err != nil {
		return 0, err
	}
	if c.groups() == 1 {
		err := t.withGroup("gather", c, func(s *Store) error {
			var err error
			needed, err = s.GatherRagged(c.local[:n], sizes, dst)
			return err
		})
		return needed, err
	}
	defer enterGather()() // the one-store case above counts in Store.GatherRagged
	old := guardFaults()
	defer restoreFaults(old)
	op, offsets := pooledOffsets(n)
	defer offsetsPool.Put(op)
	err = t.gatherSized("gather", c, dst, offsets, func(lo, hi int) error {
		if hi < c.groups() {
			return nil // the offsets need every size: taken once all are located
		}
		for k := range indices {
			sizes[k] = int64(c.entry(k).logic)
			offsets[k+1] = offsets[k] + sizes[k]
		}
		needed = offsets[n]
		if needed > int64(len(dst)) {
			return errTooSmall
		}
		return nil
	})
	if err == errTooSmall {
		return needed, nil
	}
	return needed, err
}

// errTooSmall stops a GatherRagged whose destination cannot hold the
// batch: the call then reports the size it needs, and no error.
var errTooSmall = errf(ErrBufferTooSmall, "gather from a set: dst too small")

// gatherSized locates the call's records, lets check see them (once per
// round, and with hi == groups() once every record is located), and fills
// them back to back at offsets: in one pass over the batch, fanned out,
// when every store it touches may stay open at once, else in rounds.
func (t *Set) gatherSized(op string, c *setCall, dst []byte, offsets []int64, check func(lo, hi int) error) error {
	n := len(c.grp)
	if c.groups() > t.roundSize() {
		if err := t.locateRounds(op, c, check); err != nil {
			return err
		}
		return t.fillRounds(op, c, func(k int) []byte { return dst[offsets[k]:offsets[k+1]:offsets[k+1]] })
	}
	if err := t.lockGroups(op, c, 0, c.groups()); err != nil {
		return err
	}
	defer t.unlockGroups(c, 0, c.groups())
	if err := t.locateGroups(op, c, 0, c.groups()); err != nil {
		return err
	}
	if err := check(0, c.groups()); err != nil {
		return err
	}
	total := offsets[n] - offsets[0]
	workers := gatherWorkers(c.cost(total), n)
	blocks := gatherBlocks(workers, n)
	c.gs.prepare(blocks)
	c.gs.setStream(total, true)
	return parallelBlocks(workers, blocks, op, func(w int) error {
		lo := splitPoint(offsets, w, blocks)
		hi := splitPoint(offsets, w+1, blocks)
		limit := offsets[hi]
		for k := lo; k < hi; k++ {
			if err := c.fillAt(w, k, dst[offsets[k]:offsets[k+1]:limit]); err != nil {
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
