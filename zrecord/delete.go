package zrecord

import (
	"cmp"
	"encoding/binary"
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
// it is made safe against both the death of the process and power failure:
// it syncs the store, records the table writes in a checksummed intent
// journal (delete.intent) and syncs that, applies the writes and the new
// length, syncs again, and only then removes the journal. A writable Open
// that finds the journal applies it again.
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

	// Work out the final table in memory, highest index first: the last
	// record moves into each hole. A slot filled earlier can itself become
	// the last one, so moves read through the overlay.
	segs := *s.segs.Load()
	overlay := make(map[int64]entry, len(order))
	get := func(i int64) (entry, error) {
		if e, ok := overlay[i]; ok {
			return e, nil
		}
		e, err := readEntry(segs, i)
		if err != nil {
			return entry{}, wrapf(err, "delete from %s: read entry %d", s.dir, i)
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
	j := deleteIntent{before: s.tail, beforeLen: length, afterLen: n, writes: writes}
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

// indexedEntry is a table entry and the index it belongs at.
type indexedEntry struct {
	idx int64
	e   entry
}

// deleteIntent is the content of delete.intent: the header state before and
// after a Delete and the entry writes that take the table from one to the
// other.
//
//	0   "ZDEL"
//	4   version (u8), 3 zero bytes
//	8   length before (u64)
//	16  tail chunk (u32), 20 tail offset (u32) — unchanged by Delete
//	24  length after (u64)
//	32  number of writes (u64)
//	40  writes: index (u64) + entry (16 bytes) each
//	end CRC-32C of everything before it
type deleteIntent struct {
	before    position
	beforeLen int64
	afterLen  int64
	writes    []indexedEntry
}

var deleteMagic = [4]byte{'Z', 'D', 'E', 'L'}

const deleteHeadSize = 40

func (j deleteIntent) encode() []byte {
	b := make([]byte, deleteHeadSize, deleteHeadSize+len(j.writes)*24+4)
	copy(b, deleteMagic[:])
	b[4] = 1
	binary.LittleEndian.PutUint64(b[8:], uint64(j.beforeLen))
	binary.LittleEndian.PutUint32(b[16:], j.before.chunk)
	binary.LittleEndian.PutUint32(b[20:], j.before.off)
	binary.LittleEndian.PutUint64(b[24:], uint64(j.afterLen))
	binary.LittleEndian.PutUint64(b[32:], uint64(len(j.writes)))
	var eb [entrySize]byte
	for _, w := range j.writes {
		b = binary.LittleEndian.AppendUint64(b, uint64(w.idx))
		w.e.put(eb[:])
		b = append(b, eb[:]...)
	}
	return sealed(b)
}

func decodeDeleteIntent(raw []byte) (deleteIntent, bool) {
	b, ok := unseal(raw)
	if !ok || len(b) < deleteHeadSize || [4]byte(b[0:4]) != deleteMagic || b[4] != 1 {
		return deleteIntent{}, false
	}
	j := deleteIntent{
		beforeLen: int64(binary.LittleEndian.Uint64(b[8:])),
		before:    position{binary.LittleEndian.Uint32(b[16:]), binary.LittleEndian.Uint32(b[20:])},
		afterLen:  int64(binary.LittleEndian.Uint64(b[24:])),
	}
	count := binary.LittleEndian.Uint64(b[32:])
	if count != uint64(len(b)-deleteHeadSize)/24 || uint64(len(b)-deleteHeadSize)%24 != 0 {
		return deleteIntent{}, false
	}
	if j.afterLen < 0 || j.beforeLen <= j.afterLen {
		return deleteIntent{}, false
	}
	j.writes = make([]indexedEntry, count)
	for k := range j.writes {
		p := b[deleteHeadSize+k*24:]
		j.writes[k] = indexedEntry{int64(binary.LittleEndian.Uint64(p)), getEntry(p[8:])}
		if j.writes[k].idx < 0 || j.writes[k].idx >= j.afterLen {
			return deleteIntent{}, false
		}
	}
	return j, true
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

// deleteJournalLive reports whether a decoded journal belongs to the store's
// current header: the delete's before state (nothing or part of it
// applied) or its after state (all entries written, though after a power
// failure not necessarily all kept). Anything else is stale.
func (s *Store) deleteJournalLive(j deleteIntent, valid bool) bool {
	if !valid || j.before != s.tail {
		return false
	}
	n := s.length.Load()
	return n == j.beforeLen || n == j.afterLen
}

// replayDeleteJournal finishes an interrupted Delete (writable Open): the
// writes are idempotent, so a live journal is simply applied again.
func (s *Store) replayDeleteJournal() error {
	raw, ok, err := s.readWhole(deleteJournal)
	if err != nil || !ok {
		return err
	}
	if j, valid := decodeDeleteIntent(raw); s.deleteJournalLive(j, valid) {
		if err := s.applyDelete(j); err != nil {
			return err
		}
		s.length.Store(j.afterLen)
		if err := s.syncLocked(); err != nil {
			return err
		}
	}
	return s.removeFile(deleteJournal)
}
