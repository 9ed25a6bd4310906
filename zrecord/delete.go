package zrecord

import (
	"cmp"
	"fmt"
	"os"
	"slices"
)

// Delete removes the records at indices. The index space stays dense: each
// hole is filled by moving the current last record into it, so the indices
// of moved records change (a client that keeps its own index table must
// re-read it). Indices must be in range and distinct; otherwise Delete
// returns ErrIndexOutOfRange or ErrDuplicateIndex naming the index and
// changes nothing. It waits for running Gathers and Appends and runs alone.
//
// Delete writes one record to a log (delete.intent) and nothing else: the
// table entries it changes are served from memory until the next Sync,
// Close, Append or Compact writes them into the table. It syncs nothing,
// like Append; see Durability in the package documentation.
func (s *Store) Delete(indices []int64) (err error) {
	defer recoverTo(&err, "delete")
	old := guardFaults()
	defer restoreFaults(old)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.checkWrite("delete"); err != nil {
		return err
	}
	if len(indices) == 0 {
		return nil
	}
	length := s.length.Load()
	for _, i := range indices {
		if uint64(i) >= uint64(length) {
			return errf(ErrIndexOutOfRange, "delete from %s: index %d, length %d", s.dir, i, length)
		}
	}
	order := slices.Clone(indices)
	slices.Sort(order)
	for k := 1; k < len(order); k++ {
		if order[k] == order[k-1] {
			return errf(ErrDuplicateIndex, "delete from %s: index %d given twice", s.dir, order[k])
		}
	}
	// The arguments are good: a store of an earlier version is rewritten
	// to the current one first (see Upgrade).
	if err := s.upgradeLocked(); err != nil {
		return err
	}

	// Work out the entry writes, highest index first: the last record moves
	// into each hole. A slot filled earlier (by this call or by a Delete
	// still pending) can itself become the last one, so entries are read
	// through both.
	segs := *s.segs.Load()
	chunks := *s.chunks.Load()
	var pending map[int64]entry
	if s.pend != nil {
		pending = s.overlay.Load().recs
	}
	writes := make(map[int64]entry, len(order))
	get := func(i int64) (entry, error) {
		if e, ok := writes[i]; ok {
			return e, nil
		}
		if pe, ok := pending[i]; ok {
			return pe, nil
		}
		e, err := s.readLiveEntry(segs, chunks, i)
		if err != nil {
			return entry{}, fmt.Errorf("zrecord: delete from %s: %w", s.dir, err)
		}
		return e, nil
	}
	var live, logical int64
	n := length
	for k := len(order) - 1; k >= 0; k-- {
		i := order[k]
		gone, err := get(i)
		if err != nil {
			return err
		}
		live += int64(gone.phys)
		logical += int64(gone.logic)
		last := n - 1
		if i != last {
			e, err := get(last)
			if err != nil {
				return err
			}
			writes[i] = e
		}
		delete(writes, last)
		n--
	}
	list := make([]indexedEntry, 0, len(writes))
	for i, e := range writes {
		list = append(list, indexedEntry{i, e})
	}
	slices.SortFunc(list, func(a, b indexedEntry) int { return cmp.Compare(a.idx, b.idx) })

	j := deleteIntent{version: journalVersion(s.lay), before: s.tail, beforeLen: length, afterLen: n, writes: list}
	if err := s.logDelete(j); err != nil {
		return err
	}

	// Published: readers take the moved entries from memory. They are
	// excluded while this runs, so the map is changed in place.
	if pending == nil {
		pending = make(map[int64]entry, len(list))
		s.overlay.Store(&overlay{recs: pending})
	}
	for _, w := range list {
		pending[w.idx] = w.e
	}
	for i := n; i < length; i++ {
		delete(pending, i)
	}
	s.length.Store(n)
	s.live -= live
	s.logical -= logical
	if s.pend.off >= deleteLogLimit {
		// A long run of Deletes without a sync: the table takes them now,
		// so that the log and the entries held in memory stay bounded.
		return s.settleDeletes()
	}
	return nil
}

// deleteLogLimit is the size of delete.intent past which a Delete writes
// the pending Deletes into the table itself.
const deleteLogLimit = 64 << 20

// pendingDelete is the state of the Deletes not yet written into the table:
// their log, open, and the length they leave. Their cumulative
// entry writes are the records of the overlay. It is guarded by appendMu or
// mu held exclusively.
type pendingDelete struct {
	f        File
	off      int64 // where the next record goes
	records  int   // records written completely
	afterLen int64
}

// logDelete appends j to delete.intent, creating the log for the first
// Delete since the table was last brought up to date. It syncs nothing.
func (s *Store) logDelete(j deleteIntent) error {
	p := s.pend
	if p == nil {
		if c := s.cleanup; c != nil && c.deleteLog {
			// The last Compact's journal builds on the log of the Deletes
			// it took in: a new log may not replace it before the sync.
			if err := s.syncLocked(); err != nil {
				return err
			}
		}
		path := s.path(deleteJournal)
		f, err := s.fsys.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
		if err != nil {
			return wrapf(err, "delete: create %s", path)
		}
		s.dirDirty = true
		p = &pendingDelete{f: f}
		s.pend = p
	}
	b := j.encode()
	if err := writeFull(p.f, b, p.off); err != nil {
		// A torn record ends the log: the next one is written over it.
		return wrapf(err, "delete: write %s", s.path(deleteJournal))
	}
	p.off += int64(len(b))
	p.records++
	p.afterLen = j.afterLen
	return nil
}

// settleDeletes writes the pending Deletes into the table. Their log is
// made durable first, together with everything written before it (the
// entries it overwrites are the last durable copies of the records it
// moved); then the entries and the header with the new length are written
// and synced, and the log is removed. A failure leaves the log, which the
// next call, or the next writable Open, applies again (the writes are
// idempotent). The caller holds appendMu or mu exclusively; readers keep
// taking the moved entries from the overlay until the table holds them.
func (s *Store) settleDeletes() error {
	p := s.pend
	if p == nil {
		return nil
	}
	if p.records > 0 {
		if err := s.syncLocked(); err != nil {
			return err
		}
		if err := p.f.Sync(); err != nil {
			return wrapf(err, "sync %s", s.path(deleteJournal))
		}
		if err := s.writeEntries(s.overlay.Load().recs); err != nil {
			return err
		}
		if err := s.writeHeader(s.tail, p.afterLen); err != nil {
			return err
		}
		if err := s.syncSegments(); err != nil {
			return err
		}
		if err := s.meta.Sync(); err != nil {
			return wrapf(err, "sync %s", s.path(metaName))
		}
		s.metaDirty = false
	}
	s.pend = nil
	if s.broken.Load() == nil {
		s.overlay.Store(nil)
	}
	cerr := p.f.Close()
	// The table holds the deletes durably: the log only repeats them (a
	// log left behind is applied again harmlessly, or found stale).
	if err := s.removeFile(deleteJournal); err != nil {
		return err
	}
	if cerr != nil {
		return wrapf(cerr, "close %s", s.path(deleteJournal))
	}
	return nil
}

// applyDelete writes the entries of a recovered delete log and then the
// header with the final length. Applying a log twice is harmless. It does
// not change the in-memory length.
func (s *Store) applyDelete(log []deleteIntent) error {
	if err := s.writeEntries(deleteLogWrites(log)); err != nil {
		return err
	}
	return s.writeHeader(s.tail, log[len(log)-1].afterLen)
}

// writeEntries writes the table entries w, in index order.
func (s *Store) writeEntries(w map[int64]entry) error {
	idx := make([]int64, 0, len(w))
	for i := range w {
		idx = append(idx, i)
	}
	slices.Sort(idx)
	for _, i := range idx {
		if err := s.writeEntry(i, w[i]); err != nil {
			return err
		}
	}
	return nil
}
