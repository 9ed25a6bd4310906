package zrecord

import "fmt"

// Spans, CheckBytes and CheckTable serve a reader that keeps the store's
// files somewhere else and brings their bytes in itself, such as a local
// cache of a store held in object storage: Spans says which bytes of which
// chunk file a batch needs, CheckBytes checks record bytes fetched from
// elsewhere against the table, and CheckTable checks table bytes fetched
// from elsewhere against their own checksums, before the reader lets the
// store use them (residency.go).

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

// CheckTable checks table bytes a reader brought in from elsewhere before
// it lets the store read them: buf holds bytes [base, base+len(buf)) of
// table segment seg. Every entry that lies wholly inside that range and
// below the store's length is checked against its checksum and against the
// chunk files, as a read checks the entries it uses; an entry the range
// holds only part of is left for the read that uses it, which checks it
// whole. A failing entry is ErrCorrupt naming the segment file and the
// record, the first in file order. It reads nothing of the store's own
// table, so no residency map gates it.
func (s *Store) CheckTable(seg uint32, base int64, buf []byte) (err error) {
	defer recoverTo(&err, "check table")
	s.mu.RLock()
	defer s.mu.RUnlock()
	if err := s.checkRead("check table"); err != nil {
		return err
	}
	l := s.lay
	name := s.path(l.segName(seg))
	if !l.checksummed() {
		return errf(ErrInvalidArgument, "check table of %s: a version-%d store has no entry checksums", s.dir, l.version)
	}
	if base < 0 || base > l.segBytes() {
		return errf(ErrInvalidArgument, "check table of %s: base offset %d outside the segment", name, base)
	}
	n := s.length.Load()
	chunks := *s.chunks.Load()
	end := min(base+int64(len(buf)), l.segBytes())
	first := int64(seg) << l.shift
	for o := (base + l.entSize - 1) / l.entSize * l.entSize; o+l.entSize <= end; o += l.entSize {
		i := first + o/l.entSize
		if i >= n {
			break
		}
		b := buf[o-base : o-base+l.entSize]
		e, bad := l.getEntryAt(b, i)
		if bad != nil {
			return s.entryError(i, bad)
		}
		if err := s.checkEntry(&e, chunks); err != nil {
			return fmt.Errorf("zrecord: check table of %s: entry %d: %v: %w", name, i, err, ErrCorrupt)
		}
	}
	return nil
}
