package zrecord

import "slices"

// recoverFrontier finishes a writable Open: it settles the write frontier
// and cuts off whatever an interrupted Append or Compact left past it (the
// end of the tail chunk and chunk files past the tail chunk). tailEnd is
// where the last live record of the tail chunk ends; a frontier below it
// (a header torn in the middle of its tail offset) is raised to it.
func (s *Store) recoverFrontier(tailEnd int64) error {
	chunks := *s.chunks.Load()
	tc := chunks[s.tail.chunk]
	if tailEnd > int64(s.tail.off) {
		s.tail.off = uint32(tailEnd)
		if err := s.writeHeader(s.tail, s.length.Load()); err != nil {
			return err
		}
	}
	// Cut even at its own size: that also frees blocks a killed raw append
	// reserved past the end (see appendRawParts).
	if tc.size >= int64(s.tail.off) {
		if err := tc.f.Truncate(int64(s.tail.off)); err != nil {
			return wrapf(err, "truncate %s", s.path(chunkName(tc.id)))
		}
		if tc.size > int64(s.tail.off) {
			tc.size = int64(s.tail.off)
			tc.dirty = true
		}
	}
	tc.end.Store(int64(s.tail.off))
	ents, err := s.fsys.ReadDir(s.dir)
	if err != nil {
		return wrapf(err, "read directory %s", s.dir)
	}
	// The other format's table segments are what an interrupted Upgrade
	// left: .tab files it had not switched to, or .loc files it had not
	// removed yet.
	foreign := layoutV4.suffix
	if s.lay.checksummed() {
		foreign = layoutV1.suffix
	}
	for _, e := range ents {
		_, stale := parseID(e.Name(), foreign)
		if id, ok := parseID(e.Name(), chunkSuffix); ok && id > s.tail.chunk {
			stale = true
		}
		if stale {
			if err := s.removeFile(e.Name()); err != nil {
				return err
			}
		}
	}
	return nil
}

// deleteLogLive reports whether a decoded delete log belongs to the store's
// current header: the state its first record starts from (nothing applied
// to the table yet, or part of it) or the state its last record ends in
// (all entries written, though after a power failure not necessarily all
// kept). Anything else is stale.
func (s *Store) deleteLogLive(log []deleteIntent) bool {
	if len(log) == 0 || log[0].version != journalVersion(s.lay) || log[0].before != s.tail {
		return false
	}
	n := s.length.Load()
	return n == log[0].beforeLen || n == log[len(log)-1].afterLen
}

// replayDeleteJournal finishes the Deletes of a live delete log (writable
// Open): the writes are idempotent, so the log is simply applied again.
func (s *Store) replayDeleteJournal() error {
	raw, ok, err := s.readWhole(deleteJournal)
	if err != nil || !ok {
		return err
	}
	if log := decodeDeleteLog(raw); s.deleteLogLive(log) {
		if err := s.applyDelete(log); err != nil {
			return err
		}
		s.length.Store(log[len(log)-1].afterLen)
		if err := s.syncLocked(); err != nil {
			return err
		}
	}
	return s.removeFile(deleteJournal)
}

// loadDeleteLog gives a read-only handle the Deletes of a live delete log:
// a writer logged them and has not written them into the table yet, so the
// handle takes the moved entries from memory, as the writer does.
func (s *Store) loadDeleteLog() error {
	raw, ok, err := s.readWhole(deleteJournal)
	if err != nil || !ok {
		return err
	}
	log := decodeDeleteLog(raw)
	if !s.deleteLogLive(log) {
		return nil
	}
	s.overlay.Store(&overlay{recs: deleteLogWrites(log)})
	s.length.Store(log[len(log)-1].afterLen)
	return nil
}

// tornBetween reports whether every byte of cur is the byte of a or of b at
// the same place: what an entry write from a to b cut short leaves.
func tornBetween(cur, a, b []byte) bool {
	for i := range cur {
		if cur[i] != a[i] && cur[i] != b[i] {
			return false
		}
	}
	return true
}

// entryState is what the bytes of table entry idx are with respect to a
// write from entry a to entry b: 0 if they are a, 1 if b, 2 if a write from
// one to the other cut short, -1 if none of these.
func (s *Store) entryState(segs []*segment, idx int64, a, b entry) (int, error) {
	var buf [maxEntrySize]byte
	cur, err := s.entryBytes(segs, idx, &buf)
	if err != nil {
		return 0, err
	}
	l := s.lay
	var ab, bb [maxEntrySize]byte
	l.putEntry(ab[:l.entSize], idx, a)
	l.putEntry(bb[:l.entSize], idx, b)
	switch {
	case string(cur) == string(ab[:l.entSize]):
		return 0, nil
	case string(cur) == string(bb[:l.entSize]):
		return 1, nil
	case tornBetween(cur, ab[:l.entSize], bb[:l.entSize]):
		return 2, nil
	}
	return -1, nil
}

// compactRepair is one step of finishing a journal: move k of the journal
// gets its entry rewritten, and its held copy first if redo is set.
type compactRepair struct {
	k    int
	redo bool
}

// planCompactRepair works out what an interrupted group needs. Every entry
// of the group must still be its old or its new value (or a write between
// them cut short); otherwise the journal is stale and nothing is done. A
// held record whose entry is not yet the new one may have lost its old
// bytes: it is rewritten at its new place from the journal. A torn entry
// of any other record is completed (its bytes were written before it).
// Records whose entry is old and whose old bytes the group left alone stay
// where they are.
func (s *Store) planCompactRepair(j compactJournal) ([]compactRepair, error) {
	if j.version != journalVersion(s.lay) {
		return nil, nil // written for another format: stale
	}
	length := s.length.Load()
	segs := *s.segs.Load()
	cur := make([]int, len(j.moves))
	for k, m := range j.moves {
		if m.idx >= length {
			return nil, nil
		}
		st, err := s.entryState(segs, m.idx, m.from, m.to)
		if err != nil {
			return nil, err
		}
		if st < 0 {
			return nil, nil
		}
		cur[k] = st
	}
	var plan []compactRepair
	for k, m := range j.moves {
		switch {
		case cur[k] == 1:
		case m.held:
			plan = append(plan, compactRepair{k, true})
		case cur[k] != 0:
			plan = append(plan, compactRepair{k, false})
		}
	}
	return plan, nil
}

// replayCompactJournal finishes a compaction cut short by the death of the
// process or a power failure (writable Open): a relocation (this release),
// or a group of in-place moves (earlier releases).
func (s *Store) replayCompactJournal() error {
	raw, ok, err := s.readWhole(compactJrnl)
	if err != nil || !ok {
		return err
	}
	if j, valid := decodeRelocation(raw); valid {
		if err := s.replayRelocation(j); err != nil {
			return err
		}
	} else if j, valid := decodeCompactJournal(raw); valid {
		plan, err := s.planCompactRepair(j)
		if err != nil {
			return err
		}
		chunks := *s.chunks.Load()
		for _, r := range plan {
			m := j.moves[r.k]
			if int64(m.to.chunk) >= int64(len(chunks)) || m.to.end() > uint64(MaxChunkCapacity) {
				return errf(ErrCorrupt, "%s: move of record %d ends outside its chunk", s.path(compactJrnl), m.idx)
			}
			if r.redo {
				to := chunks[m.to.chunk]
				if err := to.cover(to.f, int64(m.to.end())); err != nil {
					return wrapf(err, "map %s", s.path(chunkName(to.id)))
				}
				if err := writeFull(to.f, j.held[r.k], int64(m.to.off)); err != nil {
					return wrapf(err, "write %s", s.path(chunkName(to.id)))
				}
				to.dirty = true
				to.size = max(to.size, int64(m.to.end()))
			}
			if err := s.writeEntry(m.idx, m.to); err != nil {
				return err
			}
		}
		if len(plan) > 0 {
			// Durable before the journal goes.
			if err := s.syncLocked(); err != nil {
				return err
			}
		}
	}
	return s.removeFile(compactJrnl)
}

// relocationState classifies the table against a relocation journal: for
// each move, 0 if its entry is the old one, 1 the new one, 2 a write
// between them cut short. It reports false when an entry is none of these,
// or lies past the length: the journal is stale.
func (s *Store) relocationState(j relocation) ([]int, bool, error) {
	if !s.lay.checksummed() {
		return nil, false, nil
	}
	length := s.length.Load()
	segs := *s.segs.Load()
	st := make([]int, len(j.moves))
	for k, m := range j.moves {
		if m.idx >= length {
			return nil, false, nil
		}
		v, err := s.entryState(segs, m.idx, m.from, m.to)
		if err != nil {
			return nil, false, err
		}
		if v < 0 {
			return nil, false, nil
		}
		st[k] = v
	}
	return st, true, nil
}

// replayRelocation finishes or undoes an interrupted compaction. If every
// moved record's new copy is intact (its checksum matches), the table is
// switched to the new places and the old copies are cut off; otherwise (a
// power failure took part of the new copies) the table goes back to the old
// places, which nothing overwrote, and the new copies are cut off.
func (s *Store) replayRelocation(j relocation) error {
	// A compaction that took in pending Deletes built on their log: their
	// writes go into the table first, then the journal is judged against
	// the table they produce.
	log, chained, err := s.chainedDeleteLog(j)
	if err != nil {
		return err
	}
	if chained {
		// Idempotent: the entries the compaction moved are judged (and
		// rewritten) below; the others end up as the log says.
		if s.tail == j.oldTail && s.length.Load() == log[0].beforeLen {
			s.length.Store(j.length)
		}
		if err := s.writeEntries(deleteLogWrites(log)); err != nil {
			return err
		}
	}
	st, live, err := s.relocationState(j)
	if err != nil {
		return err
	}
	if live {
		if err := s.growChunks(max(j.newTail.chunk, s.tail.chunk)); err != nil {
			return err
		}
		chunks := *s.chunks.Load()
		forward := true
		var buf []byte
		for _, m := range j.moves {
			c := chunks[m.to.chunk]
			if int64(m.to.end()) > c.size {
				forward = false
				break
			}
			buf = slices.Grow(buf[:0], int(m.to.phys))[:m.to.phys]
			if err := readFull(c.f, buf, int64(m.to.off)); err != nil {
				return wrapf(err, "read %s", s.path(chunkName(c.id)))
			}
			if dataSum(buf) != m.to.sum {
				forward = false
				break
			}
		}
		isDest := map[uint32]bool{}
		for _, d := range j.dests {
			isDest[d] = true
		}
		cut := func(id uint32, size int64) error {
			if int64(id) >= int64(len(chunks)) || chunks[id].size <= size {
				return nil
			}
			c := chunks[id]
			if err := c.f.Truncate(size); err != nil {
				return wrapf(err, "truncate %s", s.path(chunkName(id)))
			}
			c.size, c.dirty = size, true
			return nil
		}
		if forward {
			for k, m := range j.moves {
				if st[k] != 1 {
					if err := s.writeEntry(m.idx, m.to); err != nil {
						return err
					}
				}
			}
			if s.tail == j.oldTail && s.length.Load() == j.length {
				// The switch of the header did not reach the disk.
				s.tail = j.newTail
				if err := s.writeHeader(s.tail, j.length); err != nil {
					return err
				}
			}
			if err := s.syncLocked(); err != nil {
				return err
			}
			if err := cut(j.hole.chunk, int64(j.hole.off)); err != nil {
				return err
			}
			for id := j.hole.chunk + 1; id < j.newTail.chunk; id++ {
				if !isDest[id] {
					if err := cut(id, 0); err != nil {
						return err
					}
				}
			}
		} else {
			for k, m := range j.moves {
				if st[k] != 0 {
					if err := s.writeEntry(m.idx, m.from); err != nil {
						return err
					}
				}
			}
			s.tail = j.oldTail
			s.length.Store(j.length)
			if err := s.writeHeader(s.tail, j.length); err != nil {
				return err
			}
			if err := s.syncLocked(); err != nil {
				return err
			}
			// Destinations at or below the old frontier were empty.
			for _, d := range j.dests {
				if d <= j.oldTail.chunk {
					if err := cut(d, 0); err != nil {
						return err
					}
				}
			}
		}
		// Chunk files past the frontier are removed by recoverFrontier.
		if keep := int(s.tail.chunk) + 1; keep < len(chunks) {
			for _, c := range chunks[keep:] {
				c.unmap()
				c.f.Close()
			}
			list := slices.Clone(chunks[:keep])
			s.chunks.Store(&list)
		}
		if err := s.syncLocked(); err != nil {
			return err
		}
	}
	if chained {
		if err := s.removeFile(deleteJournal); err != nil {
			return err
		}
	}
	return s.removeFile(compactJrnl)
}

// chainedDeleteLog returns the delete log a compaction with journal j took
// in (its pending Deletes, which the compaction built on), if there is one.
func (s *Store) chainedDeleteLog(j relocation) ([]deleteIntent, bool, error) {
	raw, ok, err := s.readWhole(deleteJournal)
	if err != nil || !ok {
		return nil, false, err
	}
	log := decodeDeleteLog(raw)
	chained := len(log) > 0 && log[0].version == journalVersion(s.lay) &&
		log[0].before == j.oldTail && log[len(log)-1].afterLen == j.length
	return log, chained, nil
}

// checkNoPendingJournal refuses a read-only Open while an interrupted
// Compact is unfinished: only a writable Open can repair the table, and
// reading it before then could return wrong records. Deletes in a live
// delete log are taken into the handle's view instead (loadDeleteLog).
func (s *Store) checkNoPendingJournal() error {
	if raw, ok, err := s.readWhole(compactJrnl); err != nil {
		return err
	} else if ok {
		if j, valid := decodeRelocation(raw); valid {
			st, live, err := s.relocationState(j)
			if err != nil {
				return err
			}
			done := live && s.tail != j.oldTail
			for _, v := range st {
				done = done && v == 1
			}
			if live && !done {
				return errf(ErrCorrupt, "%s: interrupted compaction, open the store writable once to recover", s.path(compactJrnl))
			}
			if live {
				// The entries of the Deletes the compaction took in were
				// written unsynced: read them from their log, except
				// those of the records the compaction moved, which the
				// table holds (done says so).
				log, chained, err := s.chainedDeleteLog(j)
				if err != nil {
					return err
				}
				if chained {
					recs := deleteLogWrites(log)
					for _, m := range j.moves {
						delete(recs, m.idx)
					}
					s.overlay.Store(&overlay{recs: recs})
					return nil
				}
			}
		} else if j, valid := decodeCompactJournal(raw); valid {
			plan, err := s.planCompactRepair(j)
			if err != nil {
				return err
			}
			if len(plan) > 0 {
				return errf(ErrCorrupt, "%s: interrupted compaction, open the store writable once to recover", s.path(compactJrnl))
			}
		}
	}
	return s.loadDeleteLog()
}
