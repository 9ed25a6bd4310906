package zrecord

import (
	"cmp"
	"fmt"
	"slices"
)

// Delete removes the records at indices. The index space stays dense: each
// hole is filled by moving the current last record into it, so the indices
// of moved records change (a client that keeps its own index table must
// re-read it). Indices must be in range and distinct; otherwise Delete
// returns ErrIndexOutOfRange or ErrDuplicateIndex naming the index and
// changes nothing. It waits for running Gathers and Appends and runs alone.
//
// Delete rewrites table entries of records that may already be durable, so
// it journals them first (delete.intent) and is safe against the death of
// the process and power failure; see Durability in the package
// documentation for the protocol.
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

	// Work out the final table in memory, highest index first: the last
	// record moves into each hole. A slot filled earlier can itself become
	// the last one, so moves read through the overlay.
	segs := *s.segs.Load()
	overlay := make(map[int64]entry, len(order))
	get := func(i int64) (entry, error) {
		if e, ok := overlay[i]; ok {
			return e, nil
		}
		e, err := s.readEntry(segs, i)
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
			overlay[i] = e
		}
		delete(overlay, last)
		n--
	}
	writes := make([]indexedEntry, 0, len(overlay))
	for i, e := range overlay {
		writes = append(writes, indexedEntry{i, e})
	}
	slices.SortFunc(writes, func(a, b indexedEntry) int { return cmp.Compare(a.idx, b.idx) })

	// The journal describes the disk only if the disk holds the state it
	// starts from.
	if err := s.syncLocked(); err != nil {
		return err
	}
	j := deleteIntent{version: journalVersion(s.lay), before: s.tail, beforeLen: length, afterLen: n, writes: writes}
	if err := s.writeDurable(deleteJournal, j.encode()); err != nil {
		// Nothing was applied. A journal that cannot even be removed
		// could be taken for a pending one later, so then the handle stops
		// writing (the next Open sorts it out).
		if rerr := s.removeFile(deleteJournal); rerr != nil {
			s.breakHandle(err)
		}
		return err
	}
	err = s.applyDelete(j)
	if err == nil {
		err = s.syncLocked()
	}
	if err != nil {
		// The table on disk may be half rewritten (an entry even torn);
		// the journal finishes it at the next writable Open. Until then
		// this handle shows the finished delete from memory.
		recs := make(map[int64]pinned, len(writes))
		for _, w := range writes {
			recs[w.idx] = pinned{e: w.e}
		}
		s.pin(recs)
		s.breakHandle(err)
	}
	s.length.Store(n)
	s.live -= live
	s.logical -= logical
	if err != nil {
		return err
	}
	if err := s.removeFile(deleteJournal); err != nil {
		// The delete took effect, and Open would apply the journal again
		// harmlessly; but a handle that keeps writing could make it stale,
		// so this one stops.
		s.breakHandle(err)
		return err
	}
	if err := s.syncDirNow(); err != nil {
		s.breakHandle(err)
		return err
	}
	return nil
}

// applyDelete writes the journal's entries and then the header with the new
// length. Applying a journal twice is harmless. It does not change the
// in-memory length.
func (s *Store) applyDelete(j deleteIntent) error {
	for _, w := range j.writes {
		if err := s.writeEntry(w.idx, w.e); err != nil {
			return err
		}
	}
	return s.writeHeader(s.tail, j.afterLen)
}
