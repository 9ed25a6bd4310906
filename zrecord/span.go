package zrecord

// Spans and CheckBytes serve a reader that keeps the chunk files somewhere
// else and brings their bytes in itself, such as a local cache of a store
// held in object storage: Spans says which bytes of which chunk file a
// batch needs, and CheckBytes checks bytes fetched from elsewhere against
// the table before the reader lets a gather use them.

// Spans writes, for each record at indices, the chunk that holds its
// stored bytes, their offset in that chunk file and their number, into
// chunk, off and length, which must hold at least len(indices) values
// each (else ErrBufferTooSmall). The indices are range-checked and their
// table entries checked as a gather checks them; no record byte is read.
func (s *Store) Spans(indices []int64, chunk, off, length []uint32) (err error) {
	defer recoverTo(&err, "spans")
	old := guardFaults()
	defer restoreFaults(old)
	s.mu.RLock()
	defer s.mu.RUnlock()
	if err := s.checkRead("spans"); err != nil {
		return err
	}
	if err := spanBuffers(s.dir, len(indices), chunk, off, length); err != nil {
		return err
	}
	if len(indices) == 0 {
		return nil
	}
	g := getGatherScratch(len(indices))
	defer gatherPool.Put(g)
	if _, err := s.locate("spans", indices, g); err != nil {
		return err
	}
	for k, e := range g.locs {
		chunk[k], off[k], length[k] = e.chunk, e.off, e.phys
	}
	return nil
}

// Spans is Store.Spans over the set's global indices; store[k] receives
// the position in the set of the store that holds record k, and the other
// three the span inside that store.
func (t *Set) Spans(indices []int64, store, chunk, off, length []uint32) (err error) {
	defer recoverTo(&err, "spans")
	if err := spanBuffers("a set", len(indices), chunk, off, length); err != nil {
		return err
	}
	if len(store) < len(indices) {
		return errf(ErrBufferTooSmall, "spans from a set: %d store slots for %d indices", len(store), len(indices))
	}
	if len(indices) == 0 {
		return nil
	}
	old := guardFaults()
	defer restoreFaults(old)
	c := getSetCall(len(indices))
	defer c.put()
	if err := t.route("spans", indices, c); err != nil {
		return err
	}
	if err := t.locateRounds("spans", c, nil); err != nil {
		return err
	}
	for k := range indices {
		e := c.entry(k)
		store[k], chunk[k], off[k], length[k] = uint32(c.ks[c.grp[k]]), e.chunk, e.off, e.phys
	}
	return nil
}

func spanBuffers(where string, n int, chunk, off, length []uint32) error {
	if len(chunk) < n || len(off) < n || len(length) < n {
		return errf(ErrBufferTooSmall, "spans from %s: %d, %d and %d slots for %d indices",
			where, len(chunk), len(off), len(length), n)
	}
	return nil
}

// CheckBytes checks the stored bytes of the records at indices against
// their table checksums, reading them from buf, which holds bytes
// [base, base+len(buf)) of chunk file chunk rather than from the chunk
// file itself. Every record must lie in that chunk and inside that range
// (else ErrInvalidArgument, naming the record). A record whose bytes do
// not match is ErrCorrupt naming the record, its chunk file and both
// checksums; the first such record in indices' order is reported.
func (s *Store) CheckBytes(indices []int64, chunk uint32, base int64, buf []byte) (err error) {
	defer recoverTo(&err, "check bytes")
	s.mu.RLock()
	defer s.mu.RUnlock()
	if err := s.checkRead("check bytes"); err != nil {
		return err
	}
	if len(indices) == 0 {
		return nil
	}
	if base < 0 {
		return errf(ErrInvalidArgument, "check bytes of %s: negative base offset %d", s.path(chunkName(chunk)), base)
	}
	if !s.lay.checksummed() {
		return errf(ErrInvalidArgument, "check bytes of %s: a version-%d store has no record checksums", s.dir, s.lay.version)
	}
	g := getGatherScratch(len(indices))
	defer gatherPool.Put(g)
	if _, err := s.locate("check bytes", indices, g); err != nil {
		return err
	}
	end := base + int64(len(buf))
	for k, e := range g.locs {
		if e.chunk != chunk || int64(e.off) < base || int64(e.off)+int64(e.phys) > end {
			return errf(ErrInvalidArgument, "check bytes of %s [%d, %d): record %d lies at [%d, %d) of %s",
				s.path(chunkName(chunk)), base, end, indices[k], e.off, int64(e.off)+int64(e.phys), chunkName(e.chunk))
		}
		lo := int64(e.off) - base
		if sum := dataSum(buf[lo : lo+int64(e.phys)]); sum != e.sum {
			return s.dataError(indices[k], e, sum)
		}
	}
	return nil
}

// residency marks which pages of a store's chunk files a reader may touch:
// the record whose stored bytes start at offset off of chunk c lies in page
// base[c] + off/page, and may be read only while held[that page] != 0.
type residency struct {
	held []byte
	base []int64
	page int64
}

// SetResidency makes every read of record bytes (Gather, GatherPacked,
// GatherRagged, and a Set's reads of this store) first check that each
// record it needs lies in a held page, and fail with ErrNotResident,
// before any byte is written, when one does not. A record whose stored
// bytes start at offset off of chunk c lies in page base[c] + off/pageSize.
// held is read, never written, and stays the caller's: it must stay valid
// until SetResidency(nil, nil, 0) removes the map (which Close does too).
// base must give every chunk of the store a page inside held. Sizes,
// Spans and CheckBytes ignore the map.
func (s *Store) SetResidency(held []byte, base []int64, pageSize int64) error {
	if held == nil && base == nil {
		s.resident.Store(nil)
		return nil
	}
	if pageSize <= 0 {
		return errf(ErrInvalidArgument, "residency of %s: page size %d", s.dir, pageSize)
	}
	chunks := *s.chunks.Load()
	for _, c := range chunks {
		if int(c.id) >= len(base) {
			return errf(ErrInvalidArgument, "residency of %s: %d chunk bases, but the store has chunk %d", s.dir, len(base), c.id)
		}
		top := base[c.id] + (c.end.Load()-1)/pageSize
		if base[c.id] < 0 || (c.end.Load() > 0 && top >= int64(len(held))) {
			return errf(ErrInvalidArgument, "residency of %s: chunk %d reaches page %d of %d", s.dir, c.id, top, len(held))
		}
	}
	s.resident.Store(&residency{held: held, base: base, page: pageSize})
	return nil
}

// checkResident reports the first of the located records that the
// residency map, if any, does not hold.
func (s *Store) checkResident(indices []int64, locs []entry) error {
	r := s.resident.Load()
	if r == nil {
		return nil
	}
	for k, e := range locs {
		c := int64(e.chunk)
		if c >= int64(len(r.base)) {
			return errf(ErrNotResident, "%s: record %d lies in chunk %d, which the residency map does not cover", s.dir, indices[k], c)
		}
		p := r.base[c] + int64(e.off)/r.page
		if uint64(p) >= uint64(len(r.held)) || r.held[p] == 0 {
			return errf(ErrNotResident, "%s: record %d lies in page %d, which is not held", s.dir, indices[k], p)
		}
	}
	return nil
}
