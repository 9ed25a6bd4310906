package zrecord

import (
	"sync"
	"unsafe"
)

// The stores a lazy Set (OpenSet) has open, and which it closes when it
// needs room: a cache of open stores with a cap, shared by every lazy set
// made without WithMaxOpen (their stores count against one process-wide
// cap, since the limits it protects, the process's mappings and
// descriptors, are the process's), private to a set made with it. The
// store it closes is the least recently used one, as the clock algorithm
// finds it: the open stores form a ring, a use marks a store, and the hand
// that looks for one to close passes over marked stores once, unmarking
// them, and over pinned ones. A use costs one write to the entry the call
// pins anyway, where moving it to the front of a list would touch its
// neighbours too, a cache miss each when a batch touches thousands.
//
// A call pins the stores it reads (acquire) and unpins them when it
// returns (release); a pinned store is never closed, so eviction cannot
// pull a store from under a read. The cap is hard: a call that needs more
// stores opened than there is room for, with every other open store pinned
// by calls in flight, unpins its own and waits until a call releases some
// (it holds nothing while it waits, so calls cannot wait on each other in a
// circle), and a call that reads more stores than the cap does so in rounds
// (setgather.go). Opening a store (the caller's Opener, file I/O) and
// closing an evicted one (unmapping) happen outside the cache's mutex; a
// position being opened is marked, so two calls never open the same store
// at once.

// storeCache holds the open stores of the lazy sets that share it.
type storeCache struct {
	mu   sync.Mutex
	cond sync.Cond // signalled when pins drop, stores open or close, or sets close
	max  int       // the most stores open (or being opened, or closed) at once
	open int       // stores open, being opened, or evicted and not closed yet
	// closing counts the stores evicted and not closed yet: their mappings
	// are there until they are, so they keep their room until then.
	closing int
	wait    int // calls waiting for room
	// hand is where the clock looks next in the ring of open stores; nil
	// when none is open. nodes counts the ring.
	hand  *openStore
	nodes int
}

// openStore is one open store of a lazy set, in its cache's ring, with the
// view of it the set's reads use (setview.go). What a call reads of every
// store it touches comes first, in the entry's first cache line.
type openStore struct {
	pins       int32 // calls using it now
	used       bool  // used since the hand last passed it
	view       storeView
	set        *Set
	k          int // its position in the set
	prev, next *openStore
	_          [openStorePad]byte
}

// openStorePad pads an openStore to 512 bytes, a size class of the Go
// allocator whose objects start at multiples of 64 bytes: the entry's
// first cache line then holds its pins and the head of its view, and the
// copy of its first chunk starts the next one. The fields before the view
// take 8 bytes (the view is 8-aligned), those after it four words
// (TestOpenStoreSize checks the layout).
const openStorePad = 512 - (8 + unsafe.Sizeof(storeView{}) + 4*unsafe.Sizeof(uintptr(0)))

func newStoreCache(max int) *storeCache {
	c := &storeCache{max: max}
	c.cond.L = &c.mu
	return c
}

// sharedCache is the cache of every lazy set made without WithMaxOpen.
var sharedCache = sync.OnceValue(func() *storeCache { return newStoreCache(DefaultMaxOpen()) })

// insert puts n into the ring just behind the hand: the last the hand
// reaches.
func (c *storeCache) insert(n *openStore) {
	n.used = true
	if c.hand == nil {
		n.prev, n.next = n, n
		c.hand = n
	} else {
		n.prev, n.next = c.hand.prev, c.hand
		c.hand.prev.next = n
		c.hand.prev = n
	}
	c.nodes++
}

// unlink takes n out of the ring.
func (c *storeCache) unlink(n *openStore) {
	if n.next == n {
		c.hand = nil
	} else {
		n.prev.next, n.next.prev = n.next, n.prev
		if c.hand == n {
			c.hand = n.next
		}
	}
	n.prev, n.next = nil, nil
	c.nodes--
}

// evict drops n, which no call pins, from the cache and its set, and
// returns its store for the caller to close, once it has let go of mu,
// with closeAndFree: its room stays taken until then.
func (c *storeCache) evict(n *openStore) *Store {
	c.unlink(n)
	n.set.open[n.k] = nil
	c.closing++
	return n.view.st
}

// closeAndFree closes stores the cache let go of (evicted, or opened and
// turned down) and gives their room back; the caller does not hold mu.
func (c *storeCache) closeAndFree(sts []*Store) {
	if len(sts) == 0 {
		return
	}
	closeStores(sts)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.open -= len(sts)
	c.closing -= len(sts)
	c.signal()
}

// makeRoom evicts unpinned stores, least recently used first (the clock),
// until need more fit under the cap once the evicted stores are closed, or
// none is left to evict, and appends the evicted stores to out.
func (c *storeCache) makeRoom(need int, out []*Store) []*Store {
	// Two turns of the hand pass every store once marked and once not.
	for steps := 2 * c.nodes; c.open-c.closing+need > c.max && c.hand != nil && steps > 0; steps-- {
		n := c.hand
		c.hand = n.next
		switch {
		case n.pins > 0:
		case n.used:
			n.used = false
		default:
			out = append(out, c.evict(n))
		}
	}
	return out
}

// signal wakes the calls waiting for room (the caller holds mu, which
// they hold from their look at the room to their wait).
func (c *storeCache) signal() {
	if c.wait > 0 {
		c.cond.Broadcast()
	}
}

// closeStores closes stores a cache let go of. They were read-only and no
// call uses them, so nothing is lost if closing one fails.
func closeStores(sts []*Store) {
	for _, st := range sts {
		_ = st.Close()
	}
}

// opening marks, in a lazy set's list of open stores, a store a call is
// opening.
var opening = &openStore{}

// setSlot is what a lazy set knows of the store at one position besides
// whether it is open (Set.open); guarded by the cache's mu.
type setSlot struct {
	// seen: the store has been opened once, and ident is what it was then.
	seen  bool
	ident storeIdentity
	codec Codec // the store's codec, once seen
	// res is the residency map SetResidency gave the position, applied to
	// the store whenever it opens; nil for none.
	res *Residency
}

// acquire pins the stores at positions ks (distinct) of the set, opening
// those that are not open, and writes them to sts and their cache entries
// to nodes (nil for an eager set, whose stores are always open). On error
// nothing stays pinned. The caller unpins them with release(nodes).
func (t *Set) acquire(op string, ks []int32, sts []*Store, nodes []*openStore) error {
	if t.fixed != nil {
		for j, k := range ks {
			sts[j], nodes[j] = t.fixed[k], nil
		}
		return nil
	}
	need, err := t.reserve(op, ks, sts, nodes)
	if err != nil || need == 0 {
		return err
	}
	// Open what is missing, outside the lock; the positions are marked
	// as being opened and their room is reserved.
	opened := make([]*Store, len(ks))
	var first error
	for j, k := range ks {
		if nodes[j] == nil && first == nil {
			var err error
			if opened[j], err = t.openStore(int(k)); err != nil {
				first = err
			}
		}
	}
	return t.install(op, ks, sts, nodes, opened, first)
}

// reserve pins the stores of ks that are open (their nodes and stores into
// nodes and sts; nil for the others), and reserves room in the cache for
// the others, evicting unpinned stores as needed (closing them before it
// takes their room, so that their mappings are gone first), and marks them
// as being opened; it returns how many there are. While a store of ks is
// being opened by another call, or there is no room until stores other
// calls evicted are closed or until a call unpins some, it holds nothing
// and waits.
func (t *Set) reserve(op string, ks []int32, sts []*Store, nodes []*openStore) (need int, err error) {
	c := t.cache
	var evicted []*Store
	defer func() { c.closeAndFree(evicted) }() // after the unlock below
	c.mu.Lock()
	defer c.mu.Unlock()
	for {
		if t.closed {
			return 0, errf(ErrClosed, "%s from %s", op, t)
		}
		if t.needRes.Load() {
			// Refused before the store is opened: its files may not be
			// there until its reader gives the map.
			for _, k := range ks {
				if t.slots[k].res == nil {
					return 0, errf(ErrNotResident, "%s from %s: store %d (%s) has no residency map yet", op, t, k, t.shards[k].Dir)
				}
			}
		}
		busy := false
		for _, k := range ks {
			if t.open[k] == opening {
				busy = true
				break
			}
		}
		if !busy {
			need = 0
			for j, k := range ks {
				n := t.open[k]
				if n != nil {
					n.pins++
					n.used = true
					sts[j], nodes[j] = n.view.st, n
				} else {
					sts[j], nodes[j] = nil, nil
					need++
				}
			}
			if need == 0 {
				return 0, nil
			}
			evicted = c.makeRoom(need, evicted)
			if c.open+need <= c.max {
				for j, k := range ks {
					if nodes[j] == nil {
						t.open[k] = opening
					}
				}
				c.open += need
				return need, nil
			}
			// The room comes once the stores evicted (by this call or
			// others) are closed, or, when every other open store is
			// pinned by calls in flight, once one of them returns: let go
			// of ours meanwhile.
			for j := range ks {
				if n := nodes[j]; n != nil {
					n.pins--
					sts[j], nodes[j] = nil, nil
				}
			}
		}
		if len(evicted) > 0 {
			c.mu.Unlock()
			closeStores(evicted) // Close recovers its panics: the lock is taken again below
			c.mu.Lock()
			c.open -= len(evicted)
			c.closing -= len(evicted)
			c.signal()
			evicted = nil
			continue
		}
		c.wait++
		c.cond.Wait()
		c.wait--
	}
}

// install puts the stores acquire opened (opened[j] for each position it
// reserved, nil where the open failed or was not tried) into the cache,
// clears the positions' marks and gives back the room of those that did
// not open. With no error (first, or one from admit) it pins them into sts
// and nodes; with one, nothing of the call stays pinned (what opened stays
// in the cache) and the error is returned.
func (t *Set) install(op string, ks []int32, sts []*Store, nodes []*openStore, opened []*Store, first error) error {
	c := t.cache
	var drop []*Store
	defer func() { c.closeAndFree(drop) }() // after the unlock below
	c.mu.Lock()
	defer c.mu.Unlock()
	defer c.signal()
	fresh := make([]*openStore, len(ks))
	for j, k := range ks {
		if nodes[j] != nil {
			continue // pinned by reserve
		}
		sl := &t.slots[k]
		t.open[k] = nil
		st := opened[j]
		if st != nil && !t.closed {
			if err := t.admit(sl, int(k), st); err != nil {
				if first == nil {
					first = err
				}
				drop, st = append(drop, st), nil
				c.closing++
			}
		}
		if st == nil || t.closed {
			if st != nil {
				drop = append(drop, st) // its room comes back once it is closed
				c.closing++
			} else {
				c.open--
			}
			continue
		}
		n := &openStore{set: t, k: int(k)}
		n.view.fill(st)
		t.open[k] = n
		c.insert(n)
		fresh[j] = n
	}
	if first == nil && t.closed {
		first = errf(ErrClosed, "%s from %s", op, t)
	}
	for j := range ks {
		switch {
		case first == nil && fresh[j] != nil:
			fresh[j].pins = 1
			sts[j], nodes[j] = fresh[j].view.st, fresh[j]
		case first != nil && nodes[j] != nil:
			drop = append(drop, t.unpin(nodes[j])...)
			sts[j], nodes[j] = nil, nil
		}
	}
	return first
}

// admit checks a store just opened for position k against what the set
// knows of the position, and gives it the set's residency map and
// verification setting. The caller holds the cache's mu; on error the
// caller closes st.
func (t *Set) admit(sl *setSlot, k int, st *Store) error {
	if sl.seen {
		if why := sl.ident.differs(st.ident); why != "" {
			return errf(ErrCorrupt, "%s (store %d of a set of %d) changed since the set first opened it: %s; it was replaced or rewritten while the set was open, so its records are not the ones the set was made with: open the set again",
				st.dir, k, t.count(), why)
		}
	}
	if sl.res != nil {
		if err := st.SetResidency(sl.res); err != nil {
			return err
		}
	}
	switch t.verify {
	case 1:
		st.SetVerify(true)
	case 2:
		st.SetVerify(false)
	}
	if !sl.seen {
		sl.seen, sl.ident, sl.codec = true, st.ident, st.codec
	}
	return nil
}

// openStore opens the store at position k with the set's opener and checks
// that it is a read-only store of the length the set was made with.
// Running out of descriptors or mappings is reported naming the limit
// (limitError).
func (t *Set) openStore(k int) (st *Store, err error) {
	defer recoverTo(&err, "open "+t.shards[k].Dir)
	sh := t.shards[k]
	st, err = t.opener(k, sh.Dir)
	if err != nil {
		return nil, t.limitError(err, sh.Dir)
	}
	if st == nil {
		return nil, errf(ErrInvalidArgument, "set: the opener returned no store and no error for %s", sh.Dir)
	}
	switch {
	case !st.readOnly:
		err = errf(ErrInvalidArgument, "set: the opener opened %s writable; a lazy set's stores are opened read-only (WithReadOnly), since the set closes them when it needs room", sh.Dir)
	case st.Len() != sh.Len:
		err = errf(ErrCorrupt, "%s (store %d of a set of %d) holds %d records, the set was made with %d", sh.Dir, k, t.count(), st.Len(), sh.Len)
	}
	if err != nil {
		st.Close()
		return nil, err
	}
	return st, nil
}

// release unpins the stores acquire pinned into nodes (nil entries, of an
// eager set, are skipped). The stores of a set closed meanwhile are closed
// once no call pins them.
func (t *Set) release(nodes []*openStore) {
	if t.fixed != nil {
		return
	}
	c := t.cache
	var drop []*Store
	defer func() { c.closeAndFree(drop) }() // after the unlock below
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, n := range nodes {
		drop = append(drop, t.unpin(n)...)
	}
	c.signal()
}

// unpin drops one pin of n, and returns its store for the caller to close
// when it was the last pin of a closed set's store; the caller holds mu.
func (t *Set) unpin(n *openStore) []*Store {
	n.pins--
	if n.pins == 0 && t.closed && t.open[n.k] == n {
		return []*Store{t.cache.evict(n)}
	}
	return nil
}

// closeLazy closes a lazy set: every store no call pins now, and the others
// as the calls that pin them return. Calls after it fail with ErrClosed.
func (t *Set) closeLazy() error {
	c := t.cache
	var drop []*Store
	func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		if t.closed {
			return
		}
		t.closed = true
		for _, n := range t.open {
			if n != nil && n != opening && n.pins == 0 {
				drop = append(drop, c.evict(n))
			}
		}
		c.signal()
	}()
	var first error
	for _, st := range drop {
		if err := st.Close(); err != nil && first == nil {
			first = err
		}
	}
	if len(drop) > 0 {
		c.mu.Lock()
		c.open -= len(drop)
		c.closing -= len(drop)
		c.signal()
		c.mu.Unlock()
	}
	return first
}

// openNodes calls fn with each store of the set open now, for a setting
// that applies to each (SetVerify); the caller holds the cache's mu.
func (t *Set) openNodes(fn func(*openStore)) {
	n := t.cache.hand
	for range t.cache.nodes {
		if n.set == t {
			fn(n)
		}
		n = n.next
	}
}
