package zrecord

import (
	"cmp"
	"fmt"
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
// Compact cut short is simply run again. Moves run in groups journalled in
// compact.journal, so whether the process dies or the power fails, the
// next writable Open finishes the group that was cut short; see Durability
// in the package documentation for the protocol. At the end the chunk files
// shrink to the packed size.
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
	if err := s.settleDeletes(); err != nil {
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
		e, err := s.readEntry(segs, i)
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
		to := entry{off: cur.off, phys: e.phys, logic: e.logic, chunk: cur.chunk, sum: e.sum}
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
		if err := s.syncDirNow(); err != nil {
			return err
		}
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
	if err := s.syncDirNow(); err != nil {
		return err
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
			at := compactHeadSize + len(group)*compactMoveSize(journalVersion(s.lay))
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
				data = heldBytes(journal, journalVersion(s.lay), group, m.idx)
			case from.bytes() != nil:
				data = from.bytes()[m.from.off:m.from.end()]
			default:
				buf = slices.Grow(buf[:0], int(m.from.phys))[:m.from.phys]
				data = buf
				if err := readFull(from.f, data, int64(m.from.off)); err != nil {
					return fail(wrapf(err, "compact %s: read record %d", s.dir, m.idx))
				}
			}
			if err := to.cover(to.f, int64(m.to.end())); err != nil {
				return fail(wrapf(err, "compact: map %s", s.path(chunkName(to.id))))
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
	if d := c.bytes(); d != nil {
		copy(b, d[e.off:e.end()])
		return nil
	}
	return readFull(c.f, b, int64(e.off))
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
		c.unmap()
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
