package zrecord

import (
	"fmt"
	"sync/atomic"
)

// Set reads several stores as one index space: the records of store 0,
// then those of store 1, and so on, as a sharded dataset lays out its
// shards. Global index i is record i-Start(k) of the store k whose range
// holds it.
//
// A set is eager or lazy. NewSet makes an eager set of stores the caller
// has opened: the set owns them and keeps them open until Close. OpenSet
// makes a lazy set from a list of shards (a directory and a length each)
// and an Opener: it opens no store until a call needs one, and keeps at
// most a capped number open (WithMaxOpen, DefaultMaxOpen), closing the
// least recently used when it needs room (setcache.go). A lazy set of
// 100,000 shards opens in the time it takes to copy their list, and each
// call costs in proportion to its batch, whatever the number of shards:
// only the stores a batch touches are opened, locked and read.
//
// Gather, GatherPacked, GatherRagged, Sizes and Spans take global indices,
// in any order and with repeats, and do in one call what the store methods
// do: the same checks of every index and size before any byte is written,
// the same verification of every record against its checksum, and the same
// errors, which name the shard's own files and its local index. A dense
// Gather locates each store's records in that store's table, then copies
// the whole batch in one pass over its slots with the copy loops of
// Store.Gather, fanned out over the package's workers as one batch of that
// size would be. A batch that touches more stores than a lazy set may keep
// open is read in rounds of that many stores: every record is located and
// checked first, round by round, and then copied, round by round, the
// stores opened again as each round needs them.
//
// The lengths are taken when the set is made (shards are immutable once
// published). A store of an eager set that shrinks later fails the gathers
// that reach past its end with ErrIndexOutOfRange; a lazy set checks each
// store's length whenever it opens it, and compares what it finds with what
// it found the first time (meta.zr's file, the header), so a shard replaced
// or rewritten while the set is open is ErrCorrupt naming it, never other
// records.
type Set struct {
	starts []int64 // starts[k] is the first global index of store k; starts[len] is Len
	// equal is the common length when every store but the last has it,
	// so that routing an index is a division; 0 otherwise.
	equal int64

	// fixed holds an eager set's stores (NewSet); nil for a lazy set.
	fixed []*Store
	// ordered: a call read-locks its stores in their order, since some
	// may be writable (see lockGroups).
	ordered bool

	// A lazy set's shards, opener and cache (OpenSet).
	shards []Shard
	opener Opener
	cache  *storeCache
	// The fields below are guarded by cache.mu. open[k] is store k's
	// entry in the cache: nil when the store is not open, opening while a
	// call opens it (apart from what else the set knows of it, slots[k], so
	// that a call finds the entries of the thousands of stores it touches
	// in one dense list).
	open   []*openStore
	slots  []setSlot
	closed bool
	verify int8 // 0: as each store opens; 1: on; 2: off (SetVerify)
	// needRes: a position without a residency map refuses its calls
	// (RequireResidency).
	needRes atomic.Bool
}

// Shard is one store of a lazy set: its directory, and the number of
// records the set takes it to hold.
type Shard struct {
	Dir string
	Len int64
}

// Opener opens the store of shard k of a lazy set, whose directory is dir,
// read-only (WithReadOnly). The set calls it whenever a call needs a store
// it does not have open, on the calling goroutine, never twice at once for
// the same shard. It is where a caller checks what it knows of a shard (a
// schema kept beside the store, say); its error fails the call that needed
// the store, and the set tries again at the next call that needs it.
type Opener func(k int, dir string) (*Store, error)

// SetOption configures OpenSet.
type SetOption func(*setOptions)

type setOptions struct {
	maxOpen    int
	maxOpenSet bool // WithMaxOpen was given: a cache of its own
}

// WithMaxOpen gives the set a cache of its own that keeps at most n of its
// stores open (n >= 1). Each open store holds one memory mapping per chunk
// file and table segment (two for a store of one chunk), and no file
// descriptor once open (WithReleaseFiles). Without it the set shares the
// process-wide cache of DefaultMaxOpen stores with every other lazy set made
// without it.
func WithMaxOpen(n int) SetOption {
	return func(o *setOptions) { o.maxOpen, o.maxOpenSet = n, true }
}

// NewSet makes an eager set of the stores, in order: it owns them and keeps
// them open until Close. It refuses an empty list, a nil or closed store,
// and a store listed twice (ErrInvalidArgument).
func NewSet(stores []*Store) (*Set, error) {
	if len(stores) == 0 {
		return nil, errf(ErrInvalidArgument, "a set needs at least one store")
	}
	seen := make(map[*Store]int, len(stores))
	t := &Set{fixed: append([]*Store(nil), stores...), starts: make([]int64, len(stores)+1)}
	for k, s := range stores {
		if s == nil {
			return nil, errf(ErrInvalidArgument, "set: store %d is nil", k)
		}
		if j, ok := seen[s]; ok {
			return nil, errf(ErrInvalidArgument, "set: store %s is listed at %d and %d", s.dir, j, k)
		}
		seen[s] = k
		s.mu.RLock()
		err := s.checkRead("open")
		s.mu.RUnlock()
		if err != nil {
			return nil, err
		}
		t.starts[k+1] = t.starts[k] + s.Len()
		t.ordered = t.ordered || !s.readOnly
	}
	t.setEqual()
	return t, nil
}

// OpenSet makes a lazy set of the shards, in order, whose stores open is
// to open (nil: Open(dir, WithReadOnly())). It opens none of them: the
// stores open as calls need them, each checked to be read-only and to hold
// the shard's Len records, and at most a capped number stay open (see
// WithMaxOpen). It refuses an empty list, a negative length, a directory
// listed twice, lengths that sum past 2^62, and a cap below 1
// (ErrInvalidArgument).
func OpenSet(shards []Shard, open Opener, opts ...SetOption) (*Set, error) {
	var o setOptions
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	if len(shards) == 0 {
		return nil, errf(ErrInvalidArgument, "a set needs at least one store")
	}
	if o.maxOpenSet && o.maxOpen < 1 {
		return nil, errf(ErrInvalidArgument, "set: WithMaxOpen(%d): the set must be able to keep at least one store open", o.maxOpen)
	}
	if open == nil {
		open = func(_ int, dir string) (*Store, error) { return Open(dir, WithReadOnly()) }
	}
	t := &Set{
		shards: append([]Shard(nil), shards...),
		opener: open,
		starts: make([]int64, len(shards)+1),
		slots:  make([]setSlot, len(shards)),
		open:   make([]*openStore, len(shards)),
	}
	seen := make(map[string]int, len(shards))
	for k, sh := range shards {
		if sh.Len < 0 {
			return nil, errf(ErrInvalidArgument, "set: shard %d (%s) has length %d", k, sh.Dir, sh.Len)
		}
		if j, ok := seen[sh.Dir]; ok {
			return nil, errf(ErrInvalidArgument, "set: %s is listed at %d and %d", sh.Dir, j, k)
		}
		seen[sh.Dir] = k
		t.starts[k+1] = t.starts[k] + sh.Len
		if t.starts[k+1] > maxLength {
			return nil, errf(ErrInvalidArgument, "set: the shards' lengths sum past %d at shard %d", int64(maxLength), k)
		}
	}
	if o.maxOpenSet {
		t.cache = newStoreCache(o.maxOpen)
	} else {
		t.cache = sharedCache()
	}
	t.setEqual()
	return t, nil
}

// maxLength bounds a set's records, as a header's length is bounded.
const maxLength = 1 << 62

// setEqual sets equal from starts.
func (t *Set) setEqual() {
	n := t.count()
	if n <= 1 {
		return
	}
	first := t.starts[1]
	for k := 1; k < n-1; k++ {
		if t.starts[k+1]-t.starts[k] != first {
			return
		}
	}
	t.equal = first
}

// count is the number of stores of the set.
func (t *Set) count() int { return len(t.starts) - 1 }

// Len is the number of records of the set.
func (t *Set) Len() int64 { return t.starts[t.count()] }

// NumStores is the number of stores (shards) of the set.
func (t *Set) NumStores() int { return t.count() }

// Stores returns an eager set's stores, in order; nil for a lazy set, whose
// stores are opened and closed as calls need them.
func (t *Set) Stores() []*Store {
	if t.fixed == nil {
		return nil
	}
	return append([]*Store(nil), t.fixed...)
}

// Start returns the first global index of store k.
func (t *Set) Start(k int) int64 { return t.starts[k] }

// Codec returns the stores' codec when they all have the same one, else the
// one whose records cost most to read (ZstdDict, then Zstd, then Narrow). A
// lazy set opens each store it has not opened before to learn its codec.
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
	best := Raw
	for k := range t.count() {
		c, ok := t.codecOf(k)
		if ok && rank(c) > rank(best) {
			best = c
		}
	}
	return best
}

// codecOf returns the codec of store k; false when it cannot be opened.
func (t *Set) codecOf(k int) (Codec, bool) {
	if t.fixed != nil {
		return t.fixed[k].codec, true
	}
	t.cache.mu.Lock()
	sl := &t.slots[k]
	c, seen := sl.codec, sl.seen
	t.cache.mu.Unlock()
	if seen {
		return c, true
	}
	ks, sts, nodes := []int32{int32(k)}, make([]*Store, 1), make([]*openStore, 1)
	if err := t.acquire("codec", ks, sts, nodes); err != nil {
		return 0, false
	}
	defer t.release(nodes)
	return sts[0].codec, true
}

// SetVerify calls SetVerify on every store: of a lazy set, on each open
// one and on every store it opens later.
func (t *Set) SetVerify(on bool) {
	if t.fixed != nil {
		for _, s := range t.fixed {
			s.SetVerify(on)
		}
		return
	}
	t.cache.mu.Lock()
	defer t.cache.mu.Unlock()
	t.verify = 2
	if on {
		t.verify = 1
	}
	t.openNodes(func(n *openStore) {
		n.view.st.SetVerify(on)
		n.view.verify.Store(on)
	})
}

// Stats sums the stores' figures. Codec is Set.Codec; Version is the lowest
// of the stores' versions, Checksummed and Verified hold when they hold for
// every store, and Element is the first store's. A lazy set opens every
// store in turn (through its cache) for it.
func (t *Set) Stats() (Stats, error) {
	var sum Stats
	err := t.each("stats", func(k int, s *Store) error {
		st, err := s.Stats()
		if err != nil {
			return err
		}
		if k == 0 {
			sum = st
			return nil
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
		return nil
	})
	if err != nil {
		return Stats{}, err
	}
	sum.Codec = t.Codec()
	return sum, nil
}

// each calls fn with every store in order, each pinned for the call.
func (t *Set) each(op string, fn func(k int, s *Store) error) error {
	ks, sts, nodes := []int32{0}, make([]*Store, 1), make([]*openStore, 1)
	for k := range t.count() {
		ks[0] = int32(k)
		if err := t.acquire(op, ks, sts, nodes); err != nil {
			return err
		}
		err := fn(k, sts[0])
		t.release(nodes)
		if err != nil {
			return err
		}
	}
	return nil
}

// withStore runs fn with store k pinned: a call about one store of the set
// (CheckBytes, CheckTable).
func (t *Set) withStore(op string, k int, fn func(s *Store) error) error {
	if k < 0 || k >= t.count() {
		return errf(ErrInvalidArgument, "%s: store %d of a set of %d stores", op, k, t.count())
	}
	ks, sts, nodes := []int32{int32(k)}, make([]*Store, 1), make([]*openStore, 1)
	if err := t.acquire(op, ks, sts, nodes); err != nil {
		return err
	}
	defer t.release(nodes)
	return fn(sts[0])
}

// CheckBytes is Store.CheckBytes for store k of the set: indices are that
// store's own.
func (t *Set) CheckBytes(k int, indices []int64, chunk uint32, base int64, buf []byte) (err error) {
	defer recoverTo(&err, "check bytes")
	return t.withStore("check bytes", k, func(s *Store) error { return s.CheckBytes(indices, chunk, base, buf) })
}

// CheckTable is Store.CheckTable for store k of the set.
func (t *Set) CheckTable(k int, seg uint32, base int64, buf []byte) (err error) {
	defer recoverTo(&err, "check table")
	return t.withStore("check table", k, func(s *Store) error { return s.CheckTable(seg, base, buf) })
}

// SetResidency is Store.SetResidency for store k of the set. A lazy set
// keeps the map for the position and gives it to the store whenever it
// opens it (a store not open now is checked against the map then, and a
// map that does not fit it fails the call that opens it); the map's arrays
// stay the caller's and must stay valid until SetResidency(k, nil) removes
// the map, or the set is closed. Of a set that requires residency
// (RequireResidency), removing a position's map makes its store refuse
// every call again.
func (t *Set) SetResidency(k int, m *Residency) (err error) {
	defer recoverTo(&err, "residency")
	if k < 0 || k >= t.count() {
		return errf(ErrInvalidArgument, "residency: store %d of a set of %d stores", k, t.count())
	}
	if t.fixed != nil {
		if m == nil && t.needRes.Load() {
			t.fixed[k].resident.Store(noResidency)
			return nil
		}
		return t.fixed[k].SetResidency(m)
	}
	if m != nil {
		if m.ChunkPage <= 0 || (m.TableBase != nil && m.TablePage <= 0) {
			return errf(ErrInvalidArgument, "residency of %s: page sizes %d and %d", t.shards[k].Dir, m.ChunkPage, m.TablePage)
		}
		cp := *m
		m = &cp
	}
	c := t.cache
	c.mu.Lock()
	defer c.mu.Unlock()
	sl := &t.slots[k]
	if n := t.open[k]; n != nil && n != opening {
		// Store.SetResidency is safe beside reads of the store.
		st := n.view.st
		if m == nil {
			st.resident.Store(nil)
			if t.needRes.Load() {
				st.resident.Store(noResidency)
			}
		} else if err := st.SetResidency(m); err != nil {
			return err
		}
		n.view.resident.Store(st.resident.Load())
	}
	sl.res = m
	return nil
}

// RequireResidency makes every store of the set refuse its reads with
// ErrNotResident until SetResidency gives its position a map: a reader that
// brings the stores' files in itself then gives each store's map when it
// first reads that store, not all of them up front. A lazy set refuses a
// call that needs such a store before it opens it, so the store's files
// need not be there yet; every call that needs such a store is refused so,
// Stats included, and Codec, which cannot fail, leaves such stores out. It
// cannot be undone.
func (t *Set) RequireResidency() {
	t.needRes.Store(true)
	if t.fixed == nil {
		return
	}
	for _, s := range t.fixed {
		s.resident.CompareAndSwap(nil, noResidency)
	}
}

// Close closes every store and returns the first error. A lazy set closes
// the stores calls in flight use once those calls return.
func (t *Set) Close() error {
	if t.fixed == nil {
		return t.closeLazy()
	}
	var first error
	for _, s := range t.fixed {
		if err := s.Close(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// String names the set by its first store and its size.
func (t *Set) String() string {
	first := ""
	if t.fixed != nil {
		first = t.fixed[0].dir
	} else {
		first = t.shards[0].Dir
	}
	return fmt.Sprintf("set of %d stores from %s, %d records", t.count(), first, t.Len())
}

// storeOf returns the store whose range holds global index i, which is
// below Len.
func (t *Set) storeOf(i int64) int {
	if t.equal > 0 {
		return int(min(i/t.equal, int64(t.count()-1)))
	}
	lo, hi := 0, t.count()-1 // the store is in [lo, hi]
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if t.starts[mid+1] > i {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return lo
}
