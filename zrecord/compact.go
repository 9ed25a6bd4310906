package zrecord

import (
	"cmp"
	"encoding/binary"
	"os"
	"slices"
	"sort"
)

// A compaction runs in groups of moves. compactGroupMoves and
// compactGroupBytes bound a group (a larger record forms a group alone).
const (
	compactGroupMoves = 4096
	compactGroupBytes = 64 << 20
)

// move relocates record idx from one place to a lower one.
type move struct {
	idx      int64
	from, to entry
	// held: a later move of the same group (or this one) writes over the
	// record's old bytes, so the journal keeps a copy of them.
	held bool
}

// Compact reclaims the space of deleted records by repacking the live ones
// densely from the start of chunk 0, in their physical order (chunk, then
// offset). Records already in place are skipped, so a store with little
// garbage near its end is cheap to compact. It waits for running Gathers
// and Appends and runs alone; record indices do not change.
//
// A record never moves to a higher address, so it only lands on bytes no
// live record needs, and the store is consistent after every step: a
// Compact cut short is simply run again. Moves run in groups. Before a
// group, compact.journal records its moves and a copy of every record
// whose old bytes the group overwrites (a record moved down by less than
// its length, or onto the old place of a record moved just before it), and
// is synced. Then the group's bytes are written and synced, then its table
// entries, which are synced too. So whether the process dies or the power
// fails, the next writable Open can finish the group from the journal. At
// the end the frontier moves down in meta.zr (synced), each chunk file is
// cut to its packed size and chunk files past the new frontier are removed.
func (s *Store) Compact() (err error) {
	defer recoverTo(&err, "compact")
	old := guardFaults()
	defer restoreFaults(old)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.checkWrite("compact"); err != nil {
		return err
	}
	if err := s.compact(); err != nil {
		s.breakHandle(err)
		return err
	}
	return nil
}

func (s *Store) compact() error {
	// The moves rewrite records that exist on disk; start from a durable
	// state so that the journal describes what the disk holds.
	if err := s.syncLocked(); err != nil {
		return err
	}
	length := s.length.Load()
	segs := *s.segs.Load()
	chunks := *s.chunks.Load()
	live := make([]indexedEntry, 0, length)
	for i := int64(0); i < length; i++ {
		e, err := readEntry(segs, i)
		if err != nil {
			return wrapf(err, "compact %s: read entry %d", s.dir, i)
		}
		live = append(live, indexedEntry{i, e})
	}
	slices.SortFunc(live, func(a, b indexedEntry) int {
		if c := cmp.Compare(a.e.chunk, b.e.chunk); c != 0 {
			return c
		}
		if c := cmp.Compare(a.e.off, b.e.off); c != 0 {
			return c
		}
		if c := cmp.Compare(a.e.phys, b.e.phys); c != 0 {
			return c
		}
		return cmp.Compare(a.idx, b.idx)
	})

	// Plan every move. The cursor never passes the record it places: it
	// only rolls to the next chunk when the record lives in a later chunk,
	// and within the record's own chunk it stays at or below the record.
	capacity := uint64(s.opts.capacity)
	packed := make([]int64, len(chunks)) // where each chunk's live bytes end
	var cur position
	var moves []move
	for _, it := range live {
		e := it.e
		if cur.off > 0 && e.chunk != cur.chunk && uint64(cur.off)+uint64(e.phys) > capacity {
			cur = position{cur.chunk + 1, 0}
		}
		to := entry{off: cur.off, phys: e.phys, logic: e.logic, chunk: cur.chunk}
		cur.off += e.phys
		packed[cur.chunk] = int64(cur.off)
		if to != e {
			moves = append(moves, move{idx: it.idx, from: e, to: to})
		}
	}
	live = nil

	if len(moves) > 0 {
		if err := s.runMoves(moves, chunks); err != nil {
			return err
		}
	}
	if err := s.finishCompact(cur, packed); err != nil {
		return err
	}
	if len(moves) > 0 {
		// Every move is durable; the journal must be gone before anything
		// else changes the table.
		if err := s.removeFile(compactJrnl); err != nil {
			return err
		}
		if err := syncDir(s.fsys, s.dir); err != nil {
			return wrapf(err, "compact: sync %s", s.dir)
		}
		s.dirDirty = false
	}
	return nil
}

// groupEnd returns where the group starting at moves[start] ends, and marks
// the moves of the group whose old bytes the group overwrites.
func groupEnd(moves []move, start int) int {
	end, bytes := start, int64(0)
	for end < len(moves) && end-start < compactGroupMoves {
		bytes += int64(moves[end].from.phys)
		if end > start && bytes > compactGroupBytes {
			break
		}
		end++
	}
	// Destinations rise with the index, so for each move the first later
	// destination reaching past its start is the only one that can overlap.
	g := moves[start:end]
	for j := range g {
		from := g[j].from
		if from.phys == 0 {
			continue
		}
		k := j + sort.Search(len(g)-j, func(x int) bool {
			to := g[j+x].to
			return to.chunk > from.chunk || (to.chunk == from.chunk && to.end() > uint64(from.off))
		})
		g[j].held = k < len(g) && g[k].to.chunk == from.chunk && uint64(g[k].to.off) < from.end()
	}
	return end
}

// runMoves performs the planned moves group by group (see Compact). If it
// fails, records whose bytes on disk may be damaged are pinned in memory as
// they were, so the handle keeps reading them correctly.
func (s *Store) runMoves(moves []move, chunks []*chunk) error {
	p := s.path(compactJrnl)
	jf, err := s.fsys.OpenFile(p, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return wrapf(err, "compact: create %s", p)
	}
	defer jf.Close()
	if err := syncDir(s.fsys, s.dir); err != nil {
		return wrapf(err, "compact: sync %s", s.dir)
	}
	var journal, buf []byte
	for start := 0; start < len(moves); {
		end := groupEnd(moves, start)
		group := moves[start:end]
		start = end

		// 1. The journal, with copies of the records the group overwrites.
		journal, err = s.encodeCompactJournal(journal[:0], group, chunks)
		if err != nil {
			return err
		}
		if err := writeFull(jf, journal, 0); err != nil {
			return wrapf(err, "compact: write %s", p)
		}
		if err := jf.Sync(); err != nil {
			return wrapf(err, "compact: sync %s", p)
		}

		// 2. The records at their new places.
		fail := func(err error) error {
			recs := map[int64]pinned{}
			at := compactHeadSize + len(group)*compactMoveSize
			for _, m := range group {
				if m.held {
					recs[m.idx] = pinned{e: m.from, data: slices.Clone(journal[at : at+int(m.from.phys)])}
					at += int(m.from.phys)
				}
			}
			if len(recs) > 0 {
				s.pin(recs)
			}
			return err
		}
		for _, m := range group {
			if m.from.phys == 0 {
				continue
			}
			from, to := chunks[m.from.chunk], chunks[m.to.chunk]
			var data []byte
			switch {
			case m.held:
				// The old bytes may already be overwritten by an earlier
				// move of this group: copy from the journal.
				data = heldBytes(journal, group, m.idx)
			case from.data != nil:
				data = from.data[m.from.off:m.from.end()]
			default:
				buf = slices.Grow(buf[:0], int(m.from.phys))[:m.from.phys]
				data = buf
				if err := readFull(from.f, data, int64(m.from.off)); err != nil {
					return fail(wrapf(err, "compact %s: read record %d", s.dir, m.idx))
				}
			}
			if err := writeFull(to.f, data, int64(m.to.off)); err != nil {
				return fail(wrapf(err, "compact: write %s", s.path(chunkName(to.id))))
			}
			to.dirty = true
			to.size = max(to.size, int64(m.to.end()))
		}
		if err := s.syncChunks(); err != nil {
			return fail(err)
		}

		// 3. The table entries.
		for k, m := range group {
			if err := s.writeEntry(m.idx, m.to); err != nil {
				// The bytes at the new places are complete; this entry
				// may be torn and the later ones are still old.
				recs := map[int64]pinned{}
				for _, m := range group[k:] {
					recs[m.idx] = pinned{e: m.to}
				}
				s.pin(recs)
				return err
			}
		}
		if err := s.syncSegments(); err != nil {
			return err
		}
	}
	if err := jf.Close(); err != nil {
		return wrapf(err, "compact: close %s", p)
	}
	return nil
}

// readStored reads the stored bytes of the record at e into b.
func (s *Store) readStored(c *chunk, e entry, b []byte) error {
	if c.data != nil {
		copy(b, c.data[e.off:e.end()])
		return nil
	}
	return readFull(c.f, b, int64(e.off))
}

// heldBytes returns the journal's copy of record idx of the group.
func heldBytes(journal []byte, group []move, idx int64) []byte {
	at := compactHeadSize + len(group)*compactMoveSize
	for _, m := range group {
		if !m.held {
			continue
		}
		if m.idx == idx {
			return journal[at : at+int(m.from.phys)]
		}
		at += int(m.from.phys)
	}
	return nil
}

// finishCompact moves the frontier down to tail, cuts every remaining chunk
// to its packed size and removes the chunks past the frontier.
func (s *Store) finishCompact(tail position, packed []int64) error {
	if tail != s.tail {
		// Durable before any file shrinks: a frontier on disk past the end
		// of a cut chunk would make the store unreadable.
		if err := s.writeHeader(tail, s.length.Load()); err != nil {
			return err
		}
		if err := s.meta.Sync(); err != nil {
			return wrapf(err, "compact: sync %s", s.path(metaName))
		}
		s.metaDirty = false
	}
	chunks := *s.chunks.Load()
	s.tail = tail
	list := slices.Clone(chunks[:tail.chunk+1])
	s.chunks.Store(&list)
	var first error
	for _, c := range chunks[tail.chunk+1:] {
		unmapSpan(c.data)
		c.data = nil
		c.f.Close()
		if err := s.removeFile(chunkName(c.id)); err != nil && first == nil {
			first = err // the next writable Open removes it
		}
	}
	for _, c := range list {
		end := packed[c.id]
		c.end.Store(end)
		if c.size > end {
			if err := c.f.Truncate(end); err != nil {
				if first == nil {
					first = wrapf(err, "compact: truncate %s", s.path(chunkName(c.id)))
				}
				continue
			}
			c.size = end
			c.dirty = true
		}
	}
	return first
}

// compact.journal describes one group of moves:
//
//	0   "ZCMP"
//	4   version (u8), 3 zero bytes
//	8   number of moves (u32)
//	12  total size of the held copies (u32)
//	16  moves, 48 bytes each: index (u64), entry before (16 bytes), entry
//	    after (16 bytes), flags (u32; 1: a copy is held), 4 zero bytes
//	..  the held copies (stored bytes), in the order of their moves
//	..  CRC-32C of everything before it
//
// The file is overwritten in place for each group; bytes past the CRC are
// leftovers of a longer earlier group and are ignored.
var compactMagic = [4]byte{'Z', 'C', 'M', 'P'}

const (
	compactHeadSize = 16
	compactMoveSize = 48
)

// encodeCompactJournal returns the journal of group in b's memory, reading
// the copies of held records from their (still intact) old places.
func (s *Store) encodeCompactJournal(b []byte, group []move, chunks []*chunk) ([]byte, error) {
	return appendCompactJournal(b[:0], group, func(m move, dst []byte) error {
		if err := s.readStored(chunks[m.from.chunk], m.from, dst); err != nil {
			return wrapf(err, "compact %s: read record %d", s.dir, m.idx)
		}
		return nil
	})
}

// appendCompactJournal appends the journal of group to b; copy fills in the
// stored bytes of each held record.
func appendCompactJournal(b []byte, group []move, copy func(m move, dst []byte) error) ([]byte, error) {
	var held uint64
	for _, m := range group {
		if m.held {
			held += uint64(m.from.phys)
		}
	}
	size := compactHeadSize + len(group)*compactMoveSize + int(held)
	start := len(b)
	b = slices.Grow(b, size+4)[:start+compactHeadSize]
	h := b[start:]
	h[0], h[1], h[2], h[3] = compactMagic[0], compactMagic[1], compactMagic[2], compactMagic[3]
	h[4], h[5], h[6], h[7] = 1, 0, 0, 0
	binary.LittleEndian.PutUint32(h[8:], uint32(len(group)))
	binary.LittleEndian.PutUint32(h[12:], uint32(held))
	var mb [compactMoveSize]byte
	for _, m := range group {
		binary.LittleEndian.PutUint64(mb[0:], uint64(m.idx))
		m.from.put(mb[8:])
		m.to.put(mb[24:])
		flags := uint32(0)
		if m.held {
			flags = 1
		}
		binary.LittleEndian.PutUint32(mb[40:], flags)
		b = append(b, mb[:]...)
	}
	for _, m := range group {
		if !m.held {
			continue
		}
		n := len(b)
		b = b[:n+int(m.from.phys)]
		if err := copy(m, b[n:]); err != nil {
			return nil, err
		}
	}
	return sealed(b), nil
}

type compactJournal struct {
	moves []move
	held  [][]byte // per move, the held copy or nil
}

func decodeCompactJournal(raw []byte) (compactJournal, bool) {
	if len(raw) < compactHeadSize || [4]byte(raw[0:4]) != compactMagic || raw[4] != 1 {
		return compactJournal{}, false
	}
	count := uint64(binary.LittleEndian.Uint32(raw[8:]))
	heldLen := uint64(binary.LittleEndian.Uint32(raw[12:]))
	size := compactHeadSize + count*compactMoveSize + heldLen
	if count == 0 || size+4 > uint64(len(raw)) {
		return compactJournal{}, false
	}
	b, ok := unseal(raw[:size+4])
	if !ok {
		return compactJournal{}, false
	}
	j := compactJournal{moves: make([]move, count), held: make([][]byte, count)}
	at := compactHeadSize + count*compactMoveSize
	for k := range j.moves {
		p := b[compactHeadSize+k*compactMoveSize:]
		m := move{idx: int64(binary.LittleEndian.Uint64(p)), from: getEntry(p[8:]), to: getEntry(p[24:])}
		flags := binary.LittleEndian.Uint32(p[40:])
		if m.idx < 0 || m.from.phys != m.to.phys || m.from.logic != m.to.logic || m.from == m.to || flags > 1 {
			return compactJournal{}, false
		}
		if flags == 1 {
			if m.from.phys == 0 || at+uint64(m.from.phys) > size {
				return compactJournal{}, false
			}
			m.held = true
			j.held[k] = b[at : at+uint64(m.from.phys)]
			at += uint64(m.from.phys)
		}
		j.moves[k] = m
	}
	if at != size {
		return compactJournal{}, false
	}
	return j, true
}

// tornBetween reports whether every byte of cur is the byte of a or of b at
// the same place: what an entry write from a to b cut short leaves.
func tornBetween(cur, a, b entry) bool {
	var x, y, z [entrySize]byte
	cur.put(x[:])
	a.put(y[:])
	b.put(z[:])
	for i := range x {
		if x[i] != y[i] && x[i] != z[i] {
			return false
		}
	}
	return true
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
	length := s.length.Load()
	segs := *s.segs.Load()
	cur := make([]entry, len(j.moves))
	for k, m := range j.moves {
		if m.idx >= length {
			return nil, nil
		}
		e, err := readEntry(segs, m.idx)
		if err != nil {
			return nil, wrapf(err, "read entry %d of %s", m.idx, s.dir)
		}
		if e != m.from && e != m.to && !tornBetween(e, m.from, m.to) {
			return nil, nil
		}
		cur[k] = e
	}
	var plan []compactRepair
	for k, m := range j.moves {
		switch {
		case cur[k] == m.to:
		case m.held:
			plan = append(plan, compactRepair{k, true})
		case cur[k] != m.from:
			plan = append(plan, compactRepair{k, false})
		}
	}
	return plan, nil
}

// replayCompactJournal finishes a group of moves cut short by the death of
// the process or a power failure (writable Open).
func (s *Store) replayCompactJournal() error {
	raw, ok, err := s.readWhole(compactJrnl)
	if err != nil || !ok {
		return err
	}
	if j, valid := decodeCompactJournal(raw); valid {
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

// checkNoPendingJournal refuses a read-only Open while an interrupted Delete
// or Compact is unfinished: only a writable Open can repair the table, and
// reading it before then could return wrong records.
func (s *Store) checkNoPendingJournal() error {
	if raw, ok, err := s.readWhole(compactJrnl); err != nil {
		return err
	} else if ok {
		if j, valid := decodeCompactJournal(raw); valid {
			plan, err := s.planCompactRepair(j)
			if err != nil {
				return err
			}
			if len(plan) > 0 {
				return errf(ErrCorrupt, "%s: interrupted compaction, open the store writable once to recover", s.path(compactJrnl))
			}
		}
	}
	if raw, ok, err := s.readWhole(deleteJournal); err != nil {
		return err
	} else if ok {
		if j, valid := decodeDeleteIntent(raw); s.deleteJournalLive(j, valid) {
			return errf(ErrCorrupt, "%s: interrupted delete, open the store writable once to recover", s.path(deleteJournal))
		}
	}
	return nil
}
