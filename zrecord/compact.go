package zrecord

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"slices"
)

// move relocates record idx from one place to another.
type move struct {
	idx      int64
	from, to entry
	// held: in a journal of the earlier in-place compaction, a copy of the
	// record's old bytes is kept (see decodeCompactJournal).
	held bool
}

// Compact reclaims the space of deleted records. The records before the
// first hole (in physical order: chunk, then offset) stay where they are;
// every live record after it is copied, once, into fresh chunk files (or
// chunk files left empty by an earlier compaction) right after the chunk
// that holds the hole, packed in the same order. A store with little
// garbage near its end is therefore cheap to compact, and compacting a
// compact store changes nothing. It waits for running Gathers and Appends
// and runs alone; record indices do not change.
//
// No live byte is overwritten: the old copies stay on disk until the next
// Sync or Close has made the new ones durable, which then cuts the chunk
// that held the first hole back to it and removes or empties the chunk
// files that only held old copies. The table is switched over to the new
// places under a journal (compact.journal), the one file Compact syncs, so
// that whether the process dies or the power fails, the next writable Open
// completes the switch or, if the new copies did not all reach the disk,
// undoes it; see Durability in the package documentation.
func (s *Store) Compact() (err error) {
	defer recoverTo(&err, "compact")
	old := guardFaults()
	defer restoreFaults(old)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.checkWrite("compact"); err != nil {
		return err
	}
	if err := s.upgradeLocked(); err != nil {
		return err
	}
	if err := s.compact(); err != nil {
		s.breakHandle(err)
		return err
	}
	return nil
}

// compactCleanup is what a compaction leaves for the next sync: chunk files
// to cut back to their published end (the chunk of the first hole, and the
// chunks that only held old copies), chunk files past the new frontier to
// remove, and whether compact.journal is to be removed.
type compactCleanup struct {
	truncate []uint32
	remove   []uint32
	journal  bool
	// deleteLog: the compaction wrote pending Deletes into the table; their
	// log goes with the journal, which refers to it.
	deleteLog bool
}

// runCleanup carries out a compaction's cleanup once a sync has made the
// compacted store durable. The caller holds appendMu or mu exclusively.
// Readers never touch bytes at or past a chunk's published end, so cutting
// them off under them is safe.
func (s *Store) runCleanup() error {
	c := s.cleanup
	if c == nil {
		return nil
	}
	chunks := *s.chunks.Load()
	for _, id := range c.truncate {
		if int64(id) >= int64(len(chunks)) {
			continue
		}
		ch := chunks[id]
		end := ch.end.Load()
		if id == s.tail.chunk {
			end = int64(s.tail.off)
		}
		if ch.size > end {
			if err := ch.f.Truncate(end); err != nil {
				return wrapf(err, "compact: truncate %s", s.path(chunkName(id)))
			}
			ch.size = end
			ch.dirty = true
		}
	}
	for _, id := range c.remove {
		if id > s.tail.chunk {
			if err := s.removeFile(chunkName(id)); err != nil {
				return err
			}
		}
	}
	c.truncate, c.remove = nil, nil
	if c.journal {
		if err := s.removeFile(compactJrnl); err != nil {
			return err
		}
		c.journal = false
	}
	if c.deleteLog {
		if err := s.removeFile(deleteJournal); err != nil {
			return err
		}
	}
	s.cleanup = nil
	return nil
}

func (s *Store) compact() error {
	length := s.length.Load()
	segs := *s.segs.Load()
	chunks := *s.chunks.Load()
	// Pending Deletes are read through: their entry writes go into the
	// table with the compaction's own.
	var pending map[int64]entry
	if s.pend != nil {
		pending = s.overlay.Load().recs
	}
	live := make([]indexedEntry, 0, length)
	for i := int64(0); i < length; i++ {
		if pe, ok := pending[i]; ok {
			live = append(live, indexedEntry{i, pe})
			continue
		}
		e, err := s.readLiveEntry(segs, chunks, i)
		if err != nil {
			return fmt.Errorf("zrecord: compact %s: %w", s.dir, err)
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

	hole, k, found := firstHole(live, chunks, s.tail.chunk)
	if !found {
		return nil
	}
	// A compaction whose old copies are still on disk is finished first:
	// its journal must not be overwritten before the store it describes
	// is durable.
	if s.cleanup != nil {
		if err := s.syncLocked(); err != nil {
			return err
		}
	}
	relocate := live[k:]
	if len(relocate) == 0 && s.pend != nil {
		// Only the frontier moves: the pending Deletes go into the table
		// the ordinary way first, since the new header must not get ahead
		// of them.
		if err := s.settleDeletes(); err != nil {
			return err
		}
		pending = nil
	}
	holding := make(map[uint32]bool) // chunks past the hole with live records
	for _, it := range relocate {
		holding[it.e.chunk] = true
	}
	oldTail := s.tail

	// Plan: destinations are chunk ids after the hole's chunk that hold
	// nothing (empty files, or new ones past the frontier).
	next := func(after uint32) (uint32, error) {
		for id := after + 1; ; id++ {
			if id > oldTail.chunk || (!holding[id] && chunks[id].size == 0) {
				return id, nil
			}
			if id == math.MaxUint32 {
				return 0, errf(ErrInvalidArgument, "compact %s: out of chunk ids", s.dir)
			}
		}
	}
	capacity := uint64(s.opts.capacity)
	newTail := hole
	var dests []uint32
	moves := make([]move, 0, len(relocate))
	if len(relocate) > 0 {
		d, err := next(hole.chunk)
		if err != nil {
			return err
		}
		dests = append(dests, d)
		var off uint32
		for _, it := range relocate {
			e := it.e
			if off > 0 && uint64(off)+uint64(e.phys) > capacity {
				if d, err = next(d); err != nil {
					return err
				}
				dests = append(dests, d)
				off = 0
			}
			to := entry{off: off, phys: e.phys, logic: e.logic, chunk: d, sum: e.sum}
			off += e.phys
			moves = append(moves, move{idx: it.idx, from: e, to: to})
		}
		newTail = position{d, off}
	}
	live = nil

	// 1. The copies, into files no live record uses.
	if len(moves) > 0 {
		if s.pend != nil {
			// The log of the pending Deletes is durable before the journal
			// that builds on it (the table they both rewrite is then
			// written in place), with what was written before it.
			if err := s.syncLocked(); err != nil {
				return err
			}
			if err := s.pend.f.Sync(); err != nil {
				return wrapf(err, "compact: sync %s", s.path(deleteJournal))
			}
		}
		if err := s.growChunks(newTail.chunk); err != nil {
			return err
		}
		chunks = *s.chunks.Load()
		if err := s.copyMoves(moves, chunks); err != nil {
			return err
		}

		// 2. The journal, synced: from here on the table is rewritten in
		// place, and only the journal knows both places of every moved
		// record.
		j := relocation{length: length, oldTail: oldTail, newTail: newTail, hole: hole, dests: dests, moves: moves}
		p := s.path(compactJrnl)
		f, err := s.fsys.OpenFile(p, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
		if err != nil {
			return wrapf(err, "compact: create %s", p)
		}
		s.dirDirty = true
		if err := writeSyncClose(f, p, j.encode()); err != nil {
			return err
		}
		// The journal must be found after a power cut before any entry
		// is overwritten in place: its directory entry is synced too.
		if err := s.syncDirNow(); err != nil {
			return err
		}
	}
	// 3. The table and the header. Until they are written the old entries
	// still point at intact old copies, so the handle reads correctly at
	// every step.
	cl := &compactCleanup{journal: len(moves) > 0}
	if s.pend != nil {
		// The pending Deletes' writes of records that stay in place.
		var stay []move
		moved := make(map[int64]bool, len(moves))
		for _, m := range moves {
			moved[m.idx] = true
		}
		for i, pe := range pending {
			if !moved[i] {
				stay = append(stay, move{idx: i, to: pe})
			}
		}
		if err := s.writeMovedEntries(stay); err != nil {
			return err
		}
		cl.deleteLog = true
	}
	if err := s.writeMovedEntries(moves); err != nil {
		return err
	}
	if err := s.writeHeader(newTail, length); err != nil {
		return err
	}
	if p := s.pend; p != nil {
		// The table holds the Deletes; their log stays until the sync.
		s.pend = nil
		if s.broken.Load() == nil {
			s.overlay.Store(nil)
		}
		p.f.Close()
	}

	// 4. The handle follows; the old copies wait for the next sync.
	isDest := make(map[uint32]bool, len(dests))
	for _, d := range dests {
		isDest[d] = true
	}
	ends := make(map[uint32]int64, len(dests))
	for _, m := range moves {
		ends[m.to.chunk] = max(ends[m.to.chunk], int64(m.to.end()))
	}
	for id := hole.chunk; id <= newTail.chunk && int64(id) < int64(len(chunks)); id++ {
		c := chunks[id]
		switch {
		case id == hole.chunk:
			c.end.Store(int64(hole.off))
			cl.truncate = append(cl.truncate, id)
		case isDest[id]:
			c.end.Store(ends[id])
		default:
			c.end.Store(0)
			cl.truncate = append(cl.truncate, id)
		}
	}
	list := slices.Clone(chunks[:newTail.chunk+1])
	for _, c := range chunks[newTail.chunk+1:] {
		c.unmap()
		c.f.Close()
		cl.remove = append(cl.remove, c.id)
	}
	s.chunks.Store(&list)
	s.tail = newTail
	s.cleanup = cl
	return nil
}

// writeMovedEntries writes the new entries of moves into the table, one
// write per run of consecutive indices within a segment.
func (s *Store) writeMovedEntries(moves []move) error {
	order := slices.Clone(moves)
	slices.SortFunc(order, func(a, b move) int { return cmp.Compare(a.idx, b.idx) })
	l := s.lay
	segs := *s.segs.Load()
	var buf []byte
	for k := 0; k < len(order); {
		first := order[k].idx
		j := k + 1
		for j < len(order) && order[j].idx == order[j-1].idx+1 && order[j].idx>>l.shift == first>>l.shift && j-k < 1<<16 {
			j++
		}
		buf = slices.Grow(buf[:0], (j-k)*int(l.entSize))[:(j-k)*int(l.entSize)]
		for x := k; x < j; x++ {
			l.putEntry(buf[int64(x-k)*l.entSize:int64(x-k+1)*l.entSize], order[x].idx, order[x].to)
		}
		g := segs[first>>l.shift]
		if err := writeFull(g.f, buf, l.segOff(first)); err != nil {
			return wrapf(err, "compact: write %s", s.path(l.segName(g.id)))
		}
		g.dirty = true
		k = j
	}
	return nil
}

// firstHole finds the first place, in physical order, where the live
// records (sorted by place) do not follow on densely: the start of a gap
// between two records, or of garbage at the end of a chunk (a chunk's end
// is its published end; the tail chunk's is the frontier). It returns that
// place and the position in live of the first record at or after it.
func firstHole(live []indexedEntry, chunks []*chunk, tail uint32) (position, int, bool) {
	var cur position
	k := 0
	for {
		// The live records of chunk cur.chunk from k on.
		for k < len(live) && live[k].e.chunk == cur.chunk {
			e := live[k].e
			if e.off != cur.off {
				return cur, k, true
			}
			cur.off += e.phys
			k++
		}
		if chunks[cur.chunk].end.Load() > int64(cur.off) {
			return cur, k, true
		}
		if cur.chunk >= tail {
			return position{}, 0, false
		}
		cur = position{cur.chunk + 1, 0}
	}
}

// copyMoves writes the stored bytes of every move at its new place: one
// vectored write per run of moves into the same chunk, taking the bytes
// straight from the mappings of their old chunks.
func (s *Store) copyMoves(moves []move, chunks []*chunk) error {
	const batch = 64 << 20
	var iov [][]byte
	flush := func(to *chunk, start, end int64) error {
		if len(iov) == 0 {
			return nil
		}
		if err := to.cover(to.f, end); err != nil {
			return wrapf(err, "compact: map %s", s.path(chunkName(to.id)))
		}
		// The moved bytes go into empty chunk files; their blocks are
		// reserved first, as an append reserves them (see preallocate).
		preallocate(to.f, start, end-start)
		if err := writeVec(to.f, iov, start); err != nil {
			return wrapf(err, "compact: write %s", s.path(chunkName(to.id)))
		}
		to.dirty = true
		to.size = max(to.size, end)
		clear(iov)
		iov = iov[:0]
		return nil
	}
	for k := 0; k < len(moves); {
		to := chunks[moves[k].to.chunk]
		start, end := int64(moves[k].to.off), int64(moves[k].to.off)
		var prev entry
		for ; k < len(moves) && moves[k].to.chunk == to.id && end-start < batch; k++ {
			m := moves[k]
			end = int64(m.to.end())
			if m.from.phys == 0 {
				continue
			}
			from := chunks[m.from.chunk]
			if d := from.bytes(); d != nil {
				b := d[m.from.off:m.from.end()]
				// A record that follows the previous one in the same old
				// chunk extends the previous buffer.
				if n := len(iov); n > 0 && prev.chunk == m.from.chunk && prev.end() == uint64(m.from.off) && cap(iov[n-1]) >= len(iov[n-1])+len(b) {
					iov[n-1] = iov[n-1][:len(iov[n-1])+len(b)]
				} else {
					iov = append(iov, b)
				}
			} else {
				b := make([]byte, m.from.phys)
				if err := readFull(from.f, b, int64(m.from.off)); err != nil {
					return wrapf(err, "compact %s: read record %d", s.dir, m.idx)
				}
				iov = append(iov, b)
			}
			prev = m.from
		}
		if err := flush(to, start, end); err != nil {
			return err
		}
	}
	return nil
}

// readStored reads the stored bytes of the record at e into b.
func (s *Store) readStored(c *chunk, e entry, b []byte) error {
	if d := c.bytes(); d != nil {
		copy(b, d[e.off:e.end()])
		return nil
	}
	return readFull(c.f, b, int64(e.off))
}

// relocation is the content of a compact.journal of version 3 or 4 (magic
// "ZCMR"): one compaction, which copied the live records after the first
// hole to chunks that held nothing and switches the table over to them.
//
//	0   "ZCMR"
//	4   version (u8) 4, 3 zero bytes
//	8   length (u64)
//	16  frontier before: chunk (u32), offset (u32)
//	24  frontier after: chunk (u32), offset (u32)
//	32  the first hole: chunk (u32), offset (u32)
//	40  number of destination chunks (u32), 44 number of moves (u32)
//	48  destination chunk ids (u32 each)
//	..  moves: index (u64), entry before, entry after (20 bytes each, as
//	    in a delete.intent of version 2)
//	end CRC-32C of everything before it
//
// A compaction runs on a store of format 4 or 5 only (it upgrades an older
// one first), whose entries are the same, so there is one version.
type relocation struct {
	length           int64
	oldTail, newTail position
	hole             position
	dests            []uint32
	moves            []move
}

var relocMagic = [4]byte{'Z', 'C', 'M', 'R'}

const (
	relocHeadSize = 48
	relocVersion  = 4
)

func (j relocation) encode() []byte {
	const ev = 2
	es := journalEntrySize(ev)
	b := make([]byte, relocHeadSize, relocHeadSize+4*len(j.dests)+len(j.moves)*(8+2*es)+4)
	copy(b, relocMagic[:])
	b[4] = relocVersion
	binary.LittleEndian.PutUint64(b[8:], uint64(j.length))
	for k, p := range []position{j.oldTail, j.newTail, j.hole} {
		binary.LittleEndian.PutUint32(b[16+8*k:], p.chunk)
		binary.LittleEndian.PutUint32(b[20+8*k:], p.off)
	}
	binary.LittleEndian.PutUint32(b[40:], uint32(len(j.dests)))
	binary.LittleEndian.PutUint32(b[44:], uint32(len(j.moves)))
	for _, d := range j.dests {
		b = binary.LittleEndian.AppendUint32(b, d)
	}
	var eb [20]byte
	for _, m := range j.moves {
		b = binary.LittleEndian.AppendUint64(b, uint64(m.idx))
		putJournalEntry(eb[:], ev, m.from)
		b = append(b, eb[:es]...)
		putJournalEntry(eb[:], ev, m.to)
		b = append(b, eb[:es]...)
	}
	return sealed(b)
}

func decodeRelocation(raw []byte) (relocation, bool) {
	b, ok := unseal(raw)
	if !ok || len(b) < relocHeadSize || [4]byte(b[0:4]) != relocMagic || b[4] != relocVersion || b[5] != 0 || b[6] != 0 || b[7] != 0 {
		return relocation{}, false
	}
	j := relocation{length: int64(binary.LittleEndian.Uint64(b[8:]))}
	ps := make([]position, 3)
	for k := range ps {
		ps[k] = position{binary.LittleEndian.Uint32(b[16+8*k:]), binary.LittleEndian.Uint32(b[20+8*k:])}
	}
	j.oldTail, j.newTail, j.hole = ps[0], ps[1], ps[2]
	nd, nm := uint64(binary.LittleEndian.Uint32(b[40:])), uint64(binary.LittleEndian.Uint32(b[44:]))
	const ev = 2
	es := uint64(journalEntrySize(ev))
	if uint64(len(b)) != relocHeadSize+4*nd+nm*(8+2*es) || j.length < 0 || nm == 0 || nd == 0 {
		return relocation{}, false
	}
	at := uint64(relocHeadSize)
	for range nd {
		j.dests = append(j.dests, binary.LittleEndian.Uint32(b[at:]))
		at += 4
	}
	j.moves = make([]move, nm)
	for k := range j.moves {
		p := b[at:]
		m := move{idx: int64(binary.LittleEndian.Uint64(p)), from: getJournalEntry(p[8:], ev), to: getJournalEntry(p[8+es:], ev)}
		if m.idx < 0 || m.idx >= j.length || m.from.phys != m.to.phys || m.from.logic != m.to.logic || m.from.sum != m.to.sum {
			return relocation{}, false
		}
		j.moves[k] = m
		at += 8 + 2*es
	}
	return j, true
}
