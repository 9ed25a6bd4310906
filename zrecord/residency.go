package zrecord

// Residency maps: which pages of a store's files a reader may touch.
//
// A reader that keeps a store's files somewhere else and brings their bytes
// in page by page (the object-storage cache of loaderx's store layer)
// mirrors the store in sparse files, where a byte not brought in yet reads
// as zero. A zero table entry fails its checksum as surely as a damaged
// one, and a zero record fails its own: without the map such a read would
// report damage that is not there. With it, a call refuses with
// ErrNotResident before it reads a table entry whose page is not held, and
// a gather before it reads a record any of whose pages is not held; the
// reader brings those pages in and calls again. What the map lets through
// is still checked: a store with a map checks every record it reads against
// its checksum, raw records included, whatever SetVerify says, since bytes
// kept elsewhere are trusted only through their checksums.
//
// Pages are fixed byte ranges of their file: page p of a file cut into
// pages of P bytes is bytes [p*P, (p+1)*P). The pages of every file of the
// store are numbered into one array, Residency.Held.

// Residency is what SetResidency takes: one byte per page in Held,
// nonzero where the page may be read. Page p of chunk file c is
// Held[ChunkBase[c]+p], chunk files being cut into pages of ChunkPage
// bytes; page p of table segment s is Held[TableBase[s]+p], segments being
// cut into pages of TablePage bytes. A record's stored bytes [off, off+n)
// of chunk c need every chunk page they overlap (an empty record none),
// and table entry i the pages its bytes in its segment overlap (one, or two
// when the entry straddles a page boundary). A nil TableBase leaves the
// table ungated (its files are whole). Held is read, never written, and
// stays the caller's: it, ChunkBase and TableBase must stay valid until the
// map is removed (SetResidency(nil)) or the store is closed.
type Residency struct {
	Held      []byte
	ChunkBase []int64
	ChunkPage int64
	TableBase []int64
	TablePage int64
}

// residency is a store's map as its reads check it.
type residency struct {
	held   []byte
	base   []int64
	page   int64
	pshift int // log2(page) when page is a power of two, else -1
	tbase  []int64
	tpage  int64
	tshift int
	// none: the store's reader has not given its map yet, and every read
	// is refused (a lazy set's position, see Set.RequireResidency).
	none bool
}

// noResidency refuses every read of the store that holds it.
var noResidency = &residency{none: true}

// pageShift is log2(size) for a power of two, else -1.
func pageShift(size int64) int {
	if size > 0 && size&(size-1) == 0 {
		for k := 0; k < 63; k++ {
			if int64(1)<<k == size {
				return k
			}
		}
	}
	return -1
}

// pageOf is the page of byte off of a file cut into pages of size bytes.
func pageOf(off, size int64, shift int) int64 {
	if shift >= 0 {
		return off >> shift
	}
	return off / size
}

// holds reports whether page p is held.
func (r *residency) holds(p int64) bool {
	return uint64(p) < uint64(len(r.held)) && r.held[p] != 0
}

// recordHeld reports whether every chunk page that the stored bytes of
// entry e overlap is held.
func (r *residency) recordHeld(e *entry) bool {
	if r.none {
		return false
	}
	if e.phys == 0 {
		return true
	}
	c := int64(e.chunk)
	if c >= int64(len(r.base)) {
		return false
	}
	b := r.base[c]
	last := b + pageOf(int64(e.off)+int64(e.phys)-1, r.page, r.pshift)
	for p := b + pageOf(int64(e.off), r.page, r.pshift); p <= last; p++ {
		if !r.holds(p) {
			return false
		}
	}
	return true
}

// entryHeld reports whether the table pages that entry i overlaps, in the
// layout l, are held.
func (r *residency) entryHeld(l *layout, i int64) bool {
	if r.none {
		return false
	}
	if r.tbase == nil {
		return true
	}
	seg := i >> (l.shift & 63)
	if seg >= int64(len(r.tbase)) {
		return false
	}
	o := (i & l.segMask()) * l.entSize
	b := r.tbase[seg]
	return r.holds(b+pageOf(o, r.tpage, r.tshift)) && r.holds(b+pageOf(o+l.entSize-1, r.tpage, r.tshift))
}

// SetResidency gives the store a residency map (see Residency), or with
// nil removes it. From then on every call that reads table entries
// (Gather, GatherPacked, GatherRagged, Sizes, Spans, CheckBytes, and a
// Set's calls on this store) fails with ErrNotResident before it reads an
// entry whose table page is not held, the gathers before they read a
// record any of whose chunk pages is not held, and Stats and Verify unless
// every page they would read is held; nothing is written before the
// refusal. The map must give every chunk of the store, and every table
// segment that holds entries below its length when TableBase is given,
// pages inside Held (else ErrInvalidArgument). It may be replaced at any
// time, beside reads.
func (s *Store) SetResidency(m *Residency) error {
	if m == nil {
		s.resident.Store(nil)
		return nil
	}
	r, err := s.newResidency(m)
	if err != nil {
		return err
	}
	s.resident.Store(r)
	return nil
}

// newResidency checks m against the store's files and makes its map.
func (s *Store) newResidency(m *Residency) (*residency, error) {
	if m.ChunkPage <= 0 {
		return nil, errf(ErrInvalidArgument, "residency of %s: chunk page size %d", s.dir, m.ChunkPage)
	}
	if m.TableBase != nil && m.TablePage <= 0 {
		return nil, errf(ErrInvalidArgument, "residency of %s: table page size %d", s.dir, m.TablePage)
	}
	r := &residency{held: m.Held, base: m.ChunkBase, page: m.ChunkPage, pshift: pageShift(m.ChunkPage),
		tbase: m.TableBase, tpage: m.TablePage, tshift: pageShift(m.TablePage)}
	for _, c := range *s.chunks.Load() {
		if int(c.id) >= len(r.base) {
			return nil, errf(ErrInvalidArgument, "residency of %s: %d chunk bases, but the store has chunk %d", s.dir, len(r.base), c.id)
		}
		b, end := r.base[c.id], c.end.Load()
		if b < 0 || (end > 0 && b+pageOf(end-1, r.page, r.pshift) >= int64(len(r.held))) {
			return nil, errf(ErrInvalidArgument, "residency of %s: chunk %d (%d bytes) from page %d does not fit %d pages", s.dir, c.id, end, b, len(r.held))
		}
	}
	if r.tbase != nil {
		l := s.lay
		n := s.length.Load()
		for seg := int64(0); seg < l.segCount(n); seg++ {
			if seg >= int64(len(r.tbase)) {
				return nil, errf(ErrInvalidArgument, "residency of %s: %d table bases, but the table has segment %d", s.dir, len(r.tbase), seg)
			}
			entries := min(n-seg<<l.shift, l.segEntries())
			b := r.tbase[seg]
			if b < 0 || b+pageOf(entries*l.entSize-1, r.tpage, r.tshift) >= int64(len(r.held)) {
				return nil, errf(ErrInvalidArgument, "residency of %s: %s (%d entries) from page %d does not fit %d pages", s.dir, l.segName(uint32(seg)), entries, b, len(r.held))
			}
		}
	}
	return r, nil
}

// checkEntriesResident reports the first of indices whose table entry the
// residency map, if any, does not hold; op names the call.
func (s *Store) checkEntriesResident(op string, indices []int64) error {
	r := s.resident.Load()
	if r == nil {
		return nil
	}
	if r.none {
		return errf(ErrNotResident, "%s from %s: the store's reader has not given its residency map yet", op, s.dir)
	}
	if r.tbase == nil {
		return nil
	}
	l := &s.lay
	for _, i := range indices {
		if !r.entryHeld(l, i) {
			return errf(ErrNotResident, "%s from %s: the table entry of record %d (in %s) lies in a page that is not held", op, s.dir, i, l.segName(uint32(i>>l.shift)))
		}
	}
	return nil
}

// checkResident reports the first of the located records whose stored
// bytes the residency map, if any, does not hold.
func (s *Store) checkResident(indices []int64, locs []entry) error {
	r := s.resident.Load()
	if r == nil {
		return nil
	}
	for k := range locs {
		if e := &locs[k]; !r.recordHeld(e) {
			return errf(ErrNotResident, "%s: record %d, bytes [%d, %d) of %s, lies in a page that is not held", s.dir, indices[k], e.off, int64(e.off)+int64(e.phys), chunkName(e.chunk))
		}
	}
	return nil
}

// wholeResident reports, for a call that reads the whole table (Stats'
// first sums, Verify) and, with chunks, every chunk file, the first page
// it needs that the residency map, if any, does not hold.
func (s *Store) wholeResident(op string, chunks bool) error {
	r := s.resident.Load()
	if r == nil {
		return nil
	}
	if r.none {
		return errf(ErrNotResident, "%s of %s: the store's reader has not given its residency map yet", op, s.dir)
	}
	if r.tbase != nil {
		l := s.lay
		n := s.length.Load()
		for seg := int64(0); seg < l.segCount(n); seg++ {
			entries := min(n-seg<<l.shift, l.segEntries())
			b := r.tbase[seg]
			last := b + pageOf(entries*l.entSize-1, r.tpage, r.tshift)
			for p := b; p <= last; p++ {
				if !r.holds(p) {
					return errf(ErrNotResident, "%s of %s: it reads the whole record table, and page %d of %s is not held", op, s.dir, p-b, l.segName(uint32(seg)))
				}
			}
		}
	}
	if !chunks {
		return nil
	}
	for _, c := range *s.chunks.Load() {
		end := c.end.Load()
		if end == 0 {
			continue
		}
		if int(c.id) >= len(r.base) {
			return errf(ErrNotResident, "%s of %s: the residency map does not cover %s", op, s.dir, chunkName(c.id))
		}
		b := r.base[c.id]
		last := b + pageOf(end-1, r.page, r.pshift)
		for p := b; p <= last; p++ {
			if !r.holds(p) {
				return errf(ErrNotResident, "%s of %s: it reads every record, and page %d of %s is not held", op, s.dir, p-b, chunkName(c.id))
			}
		}
	}
	return nil
}
