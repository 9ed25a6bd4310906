package zrecord

import (
	"encoding/binary"
	"slices"
	"sort"
)

// The in-place compaction of earlier releases wrote compact.journal files
// of version 1 and 2; a writable Open still finishes one. The tests build
// such journals with the encoder and the grouping below, as that compaction
// did.

// A group held at most legacyGroupMoves moves or legacyGroupBytes bytes (a
// larger record formed a group alone).
const (
	legacyGroupMoves = 4096
	legacyGroupBytes = 64 << 20
)

// groupEnd returns where the group starting at moves[start] ends, and marks
// the moves of the group whose old bytes the group overwrites.
func groupEnd(moves []move, start int) int {
	end, bytes := start, int64(0)
	for end < len(moves) && end-start < legacyGroupMoves {
		bytes += int64(moves[end].from.phys)
		if end > start && bytes > legacyGroupBytes {
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

// appendCompactJournal appends the journal of group to b; copy fills in the
// stored bytes of each held record.
func appendCompactJournal(b []byte, v uint8, group []move, copy func(m move, dst []byte) error) ([]byte, error) {
	var held uint64
	for _, m := range group {
		if m.held {
			held += uint64(m.from.phys)
		}
	}
	ms, es := compactMoveSize(v), journalEntrySize(v)
	size := compactHeadSize + len(group)*ms + int(held)
	start := len(b)
	b = slices.Grow(b, size+4)[:start+compactHeadSize]
	h := b[start:]
	h[0], h[1], h[2], h[3] = compactMagic[0], compactMagic[1], compactMagic[2], compactMagic[3]
	h[4], h[5], h[6], h[7] = v, 0, 0, 0
	binary.LittleEndian.PutUint32(h[8:], uint32(len(group)))
	binary.LittleEndian.PutUint32(h[12:], uint32(held))
	var buf [56]byte
	mb := buf[:ms]
	for _, m := range group {
		binary.LittleEndian.PutUint64(mb[0:], uint64(m.idx))
		putJournalEntry(mb[8:], v, m.from)
		putJournalEntry(mb[8+es:], v, m.to)
		flags := uint32(0)
		if m.held {
			flags = 1
		}
		binary.LittleEndian.PutUint32(mb[8+2*es:], flags)
		b = append(b, mb...)
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
