package zrecord

import (
	"fmt"
	"os"
)

// Upgrade rewrites a store of an earlier format version (1, written by
// earlier releases of this package, or 3, written by the original loaderx
// 1.5.2) to the current one, so that its records are verified from then on.
// A store of the current version is left alone. Any other write (Append,
// Delete, Compact) upgrades the store first as well; reads never do.
//
// The record bytes stay where they are, except that a version-3 frame that
// is not smaller than its record is decoded and its record stored raw past
// the frontier. Every compressed record is decoded once to check it before
// its checksum is taken (ErrCorrupt naming the record if it fails, and the
// store is left as it was). The new table is written beside the old one
// (.tab segments next to .loc), made durable, and the store switches to it
// with a single write of meta.zr; the old segments are removed after. So a
// crash at any point leaves either the old store or the new one, with the
// same records, and needs no journal.
func (s *Store) Upgrade() (err error) {
	defer recoverTo(&err, "upgrade")
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.checkWrite("upgrade"); err != nil {
		return err
	}
	return s.upgradeLocked()
}

// upgradeFor upgrades the store before a write that shares the store (op
// names it). It takes mu exclusively only when there is work to do.
func (s *Store) upgradeFor(op string) error {
	s.mu.RLock()
	current := s.closed || s.readOnly || s.lay.checksummed()
	s.mu.RUnlock()
	if current {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.checkWrite(op); err != nil {
		return err
	}
	return s.upgradeLocked()
}

// upgradeLocked upgrades the store if its version is not the current one.
// The caller holds mu exclusively.
func (s *Store) upgradeLocked() error {
	if s.lay.checksummed() { // version 4, or 5 (written only as such)
		return nil
	}
	old := guardFaults()
	defer restoreFaults(old)
	switched, err := s.upgrade()
	if err != nil && switched {
		s.breakHandle(err)
	}
	return err
}

// upgradeWriter writes the new table's segments, block by block.
type upgradeWriter struct {
	s     *Store
	files map[uint32]File
	buf   []byte
	first int64 // index of the first entry in buf
}

func (w *upgradeWriter) add(i int64, e entry) error {
	l := layoutV4
	if len(w.buf) == 0 {
		w.first = i
	}
	n := len(w.buf)
	w.buf = w.buf[:n+int(l.entSize)]
	l.putEntry(w.buf[n:], i, e)
	// Flush at a segment's end or when the block is full.
	if (i+1)&l.segMask() == 0 || len(w.buf) >= 1<<20 {
		return w.flush()
	}
	return nil
}

func (w *upgradeWriter) flush() error {
	if len(w.buf) == 0 {
		return nil
	}
	l := layoutV4
	id := uint32(w.first >> l.shift)
	f, err := w.file(id)
	if err != nil {
		return err
	}
	if err := writeFull(f, w.buf, l.segOff(w.first)); err != nil {
		return wrapf(err, "upgrade: write %s", w.s.path(l.segName(id)))
	}
	w.buf = w.buf[:0]
	return nil
}

func (w *upgradeWriter) file(id uint32) (File, error) {
	if f, ok := w.files[id]; ok {
		return f, nil
	}
	p := w.s.path(layoutV4.segName(id))
	f, err := w.s.fsys.OpenFile(p, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, wrapf(err, "upgrade: create %s", p)
	}
	w.s.dirDirty = true
	w.files[id] = f
	return f, nil
}

func (w *upgradeWriter) close() {
	for _, f := range w.files {
		f.Close()
	}
}

// discard removes the segments written so far, after a failure before the
// switch (best effort: the next writable Open removes them too).
func (w *upgradeWriter) discard() {
	w.close()
	for id := range w.files {
		w.s.removeFile(layoutV4.segName(id))
	}
	w.files = nil
}

// upgrade rewrites the table (see Upgrade). switched reports whether the
// new header was written, after which a failure leaves the handle unusable.
func (s *Store) upgrade() (switched bool, err error) {
	if err := s.syncLocked(); err != nil {
		return false, err
	}
	n := s.length.Load()
	segs := *s.segs.Load()
	w := &upgradeWriter{s: s, files: map[uint32]File{}, buf: make([]byte, 0, 1<<20+maxEntrySize)}
	defer func() {
		if err != nil && !switched {
			w.discard()
		} else {
			w.close()
		}
	}()
	newSegs := layoutV4.segCount(n)
	if n == 0 {
		newSegs = 1 // a store always has segment 0
	}
	for id := int64(0); id < newSegs; id++ {
		if _, err := w.file(uint32(id)); err != nil {
			return false, err
		}
	}
	capacity := uint64(s.opts.capacity)
	pos := s.tail
	var live, logical int64
	ends := map[uint32]int64{}
	var stored, decoded []byte
	for i := int64(0); i < n; i++ {
		e, err := s.readEntry(segs, i)
		if err != nil {
			return false, fmt.Errorf("zrecord: upgrade %s: %w", s.dir, err)
		}
		chunks := *s.chunks.Load()
		if err := s.checkEntry(&e, chunks); err != nil {
			return false, errf(ErrCorrupt, "upgrade %s: %s entry %d: %v", s.dir, s.lay.segName(uint32(i>>s.lay.shift)), i, err)
		}
		if cap(stored) < int(e.phys) {
			stored = make([]byte, e.phys)
		}
		stored = stored[:e.phys]
		if err := s.readStored(chunks[e.chunk], e, stored); err != nil {
			return false, wrapf(err, "upgrade %s: read record %d", s.dir, i)
		}
		ne := e
		ne.sum = dataSum(stored)
		if s.isFrame(e) {
			if cap(decoded) < int(e.logic) {
				decoded = make([]byte, e.logic)
			}
			got, err := s.dec.DecodeAll(stored, decoded[:0:e.logic])
			if err != nil || len(got) != int(e.logic) {
				return false, errf(ErrCorrupt, "upgrade %s: record %d in %s does not decode to its %d bytes (%v)",
					s.dir, i, s.path(chunkName(e.chunk)), e.logic, err)
			}
			if e.phys >= e.logic {
				// Version 4 reads phys == logic as raw and never holds a
				// larger frame: store the record itself, past the frontier.
				size := uint64(e.logic)
				if pos.off > 0 && uint64(pos.off)+size > capacity {
					pos = position{pos.chunk + 1, 0}
				}
				if err := s.growChunks(pos.chunk); err != nil {
					return false, err
				}
				c := (*s.chunks.Load())[pos.chunk]
				if err := c.cover(c.f, int64(pos.off)+int64(size)); err != nil {
					return false, wrapf(err, "upgrade: map %s", s.path(chunkName(c.id)))
				}
				if err := writeFull(c.f, got, int64(pos.off)); err != nil {
					return false, wrapf(err, "upgrade: write %s", s.path(chunkName(c.id)))
				}
				c.dirty = true
				c.size = max(c.size, int64(pos.off)+int64(size))
				ne = entry{off: pos.off, phys: e.logic, logic: e.logic, chunk: pos.chunk, sum: dataSum(got)}
				pos.off += uint32(size)
			}
		}
		ends[ne.chunk] = max(ends[ne.chunk], int64(ne.end()))
		live += int64(ne.phys)
		logical += int64(ne.logic)
		if err := w.add(i, ne); err != nil {
			return false, err
		}
	}
	if err := w.flush(); err != nil {
		return false, err
	}
	for id, f := range w.files {
		if err := f.Sync(); err != nil {
			return false, wrapf(err, "upgrade: sync %s", s.path(layoutV4.segName(id)))
		}
	}
	if err := s.syncChunks(); err != nil {
		return false, err
	}
	if err := s.syncDirNow(); err != nil {
		return false, err
	}

	// The switch: one write of the header, synced.
	oldLay, oldSegs := s.lay, segs
	s.lay = layoutV4
	if err := s.writeHeader(pos, n); err != nil {
		s.lay = oldLay
		return true, err // what reached meta.zr is unknown
	}
	if err := s.meta.Sync(); err != nil {
		return true, wrapf(err, "upgrade: sync %s", s.path(metaName))
	}
	s.metaDirty = false

	// The handle follows: the new segments, the new frontier, and the old
	// table and the unused ends of the chunks go.
	var list []*segment
	for id := int64(0); id < newSegs; id++ {
		g, err := s.openSegmentOf(layoutV4, uint32(id), false)
		if err != nil {
			s.segs.Store(&list)
			for _, g := range oldSegs {
				g.unmap()
				g.f.Close()
			}
			return true, err
		}
		list = append(list, g)
	}
	s.segs.Store(&list)
	var first error
	keep := func(err error) {
		if err != nil && first == nil {
			first = err
		}
	}
	for _, g := range oldSegs {
		keep(g.unmap())
		keep(g.f.Close())
		keep(s.removeFile(oldLay.segName(g.id)))
	}
	s.tail = pos
	s.live, s.logical, s.totalsKnown = live, logical, true
	chunks := *s.chunks.Load()
	for _, c := range chunks[:pos.chunk+1] {
		end := ends[c.id]
		if c.id == pos.chunk {
			end = int64(pos.off)
		}
		c.end.Store(end)
		if c.size > end {
			if err := c.f.Truncate(end); err != nil {
				keep(wrapf(err, "upgrade: truncate %s", s.path(chunkName(c.id))))
				continue
			}
			c.size = end
			c.dirty = true
		}
	}
	keep(s.syncLocked())
	return true, first
}
