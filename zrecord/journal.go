package zrecord

import (
	"encoding/binary"
	"io"
	"os"
)

// readWhole reads a small file of the store. It reports ok=false when the
// file does not exist.
func (s *Store) readWhole(name string) (b []byte, ok bool, err error) {
	p := s.path(name)
	f, err := s.fsys.OpenFile(p, os.O_RDONLY, 0)
	if err != nil {
		if isNotExist(err) {
			return nil, false, nil
		}
		return nil, false, wrapf(err, "open %s", p)
	}
	defer f.Close()
	n, err := fileSize(f)
	if err != nil {
		return nil, false, wrapf(err, "stat %s", p)
	}
	if n > MaxRecordSize+4096 {
		return nil, true, nil // not a journal this package wrote
	}
	b = make([]byte, n)
	if err := readFull(f, b, 0); err != nil && err != io.ErrUnexpectedEOF {
		return nil, false, wrapf(err, "read %s", p)
	}
	return b, true, nil
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
//	40  writes: index (u64) + entry each
//	end CRC-32C of everything before it
//
// A journal of version 2 (written for a store of format 4) holds entries of
// 20 bytes: offset, phys, logic, chunk and the data checksum. Version 1
// (format 1) holds the first 16 of them. The entry checksum is not kept:
// it follows from the index when the entry is written.
type deleteIntent struct {
	version   uint8
	before    position
	beforeLen int64
	afterLen  int64
	writes    []indexedEntry
}

var deleteMagic = [4]byte{'Z', 'D', 'E', 'L'}

const deleteHeadSize = 40

// journalVersion is the version of the journals written for a store of
// layout l.
func journalVersion(l layout) uint8 {
	if l.checksummed() {
		return 2
	}
	return 1
}

// journalEntrySize is the size of an entry in a journal of version v.
func journalEntrySize(v uint8) int {
	if v >= 2 {
		return 20
	}
	return 16
}

// putJournalEntry encodes e as a journal of version v holds it.
func putJournalEntry(b []byte, v uint8, e entry) {
	if v >= 2 {
		e.put20(b)
	} else {
		e.put(b)
	}
}

func getJournalEntry(b []byte, v uint8) entry {
	if v >= 2 {
		return getEntry20(b)
	}
	return getEntry(b)
}

func (j deleteIntent) encode() []byte {
	es := journalEntrySize(j.version)
	b := make([]byte, deleteHeadSize, deleteHeadSize+len(j.writes)*(8+es)+4)
	copy(b, deleteMagic[:])
	b[4] = j.version
	binary.LittleEndian.PutUint64(b[8:], uint64(j.beforeLen))
	binary.LittleEndian.PutUint32(b[16:], j.before.chunk)
	binary.LittleEndian.PutUint32(b[20:], j.before.off)
	binary.LittleEndian.PutUint64(b[24:], uint64(j.afterLen))
	binary.LittleEndian.PutUint64(b[32:], uint64(len(j.writes)))
	var eb [20]byte
	for _, w := range j.writes {
		b = binary.LittleEndian.AppendUint64(b, uint64(w.idx))
		putJournalEntry(eb[:], j.version, w.e)
		b = append(b, eb[:es]...)
	}
	return sealed(b)
}

func decodeDeleteIntent(raw []byte) (deleteIntent, bool) {
	b, ok := unseal(raw)
	if !ok || len(b) < deleteHeadSize || [4]byte(b[0:4]) != deleteMagic || (b[4] != 1 && b[4] != 2) {
		return deleteIntent{}, false
	}
	j := deleteIntent{
		version:   b[4],
		beforeLen: int64(binary.LittleEndian.Uint64(b[8:])),
		before:    position{binary.LittleEndian.Uint32(b[16:]), binary.LittleEndian.Uint32(b[20:])},
		afterLen:  int64(binary.LittleEndian.Uint64(b[24:])),
	}
	ws := uint64(8 + journalEntrySize(j.version))
	count := binary.LittleEndian.Uint64(b[32:])
	if count != uint64(len(b)-deleteHeadSize)/ws || uint64(len(b)-deleteHeadSize)%ws != 0 {
		return deleteIntent{}, false
	}
	if j.afterLen < 0 || j.beforeLen <= j.afterLen {
		return deleteIntent{}, false
	}
	j.writes = make([]indexedEntry, count)
	for k := range j.writes {
		p := b[deleteHeadSize+uint64(k)*ws:]
		j.writes[k] = indexedEntry{int64(binary.LittleEndian.Uint64(p)), getJournalEntry(p[8:], j.version)}
		if j.writes[k].idx < 0 || j.writes[k].idx >= j.afterLen {
			return deleteIntent{}, false
		}
	}
	return j, true
}

// decodeDeleteLog parses delete.intent as a log: the records of the Deletes
// made since the table on disk was last brought up to date, back to back,
// each laid out as above. Each record starts from the state the one before
// it left (same version and frontier, its length before equal to the other's
// length after). Parsing stops at the first record that is torn, damaged or
// does not follow on, so what is returned is the longest valid prefix: a
// Delete cut short by the death of the process, or whose record a power cut
// lost, is simply absent. A journal of an earlier release holds one record.
func decodeDeleteLog(raw []byte) []deleteIntent {
	var out []deleteIntent
	for off := 0; len(raw)-off >= deleteHeadSize+4; {
		b := raw[off:]
		v := b[4]
		if v != 1 && v != 2 {
			break
		}
		ws := uint64(8 + journalEntrySize(v))
		count := binary.LittleEndian.Uint64(b[32:])
		if count > uint64(len(b))/ws {
			break
		}
		size := deleteHeadSize + count*ws + 4
		if size > uint64(len(b)) {
			break
		}
		j, ok := decodeDeleteIntent(b[:size])
		if !ok {
			break
		}
		if n := len(out); n > 0 && (j.version != out[0].version || j.before != out[0].before || j.beforeLen != out[n-1].afterLen) {
			break
		}
		out = append(out, j)
		off += int(size)
	}
	return out
}

// deleteLogWrites folds the records of a delete log into the entry each
// index below the final length ends up with.
func deleteLogWrites(log []deleteIntent) map[int64]entry {
	final := log[len(log)-1].afterLen
	w := make(map[int64]entry)
	for _, j := range log {
		for _, x := range j.writes {
			w[x.idx] = x.e
		}
	}
	for i := range w {
		if i >= final {
			delete(w, i)
		}
	}
	return w
}

// A compact.journal of version 1 or 2 (magic "ZCMP") is what the in-place
// compaction of earlier releases wrote; a writable Open still finishes one
// (replayCompactJournal). It describes one group of moves:
//
//	0   "ZCMP"
//	4   version (u8), 3 zero bytes
//	8   number of moves (u32)
//	12  total size of the held copies (u32)
//	16  moves: index (u64), entry before, entry after, flags (u32; 1: a
//	    copy is held), 4 zero bytes; entries as in delete.intent of the
//	    same version, so a move is 48 bytes in version 1 and 56 in 2
//	..  the held copies (stored bytes), in the order of their moves
//	..  CRC-32C of everything before it
//
// The file is overwritten in place for each group; bytes past the CRC are
// leftovers of a longer earlier group and are ignored.
var compactMagic = [4]byte{'Z', 'C', 'M', 'P'}

const compactHeadSize = 16

// compactMoveSize is the size of a move in a journal of version v.
func compactMoveSize(v uint8) int { return 16 + 2*journalEntrySize(v) }

type compactJournal struct {
	version uint8
	moves   []move
	held    [][]byte // per move, the held copy or nil
}

func decodeCompactJournal(raw []byte) (compactJournal, bool) {
	if len(raw) < compactHeadSize || [4]byte(raw[0:4]) != compactMagic || (raw[4] != 1 && raw[4] != 2) {
		return compactJournal{}, false
	}
	v := raw[4]
	ms, es := uint64(compactMoveSize(v)), journalEntrySize(v)
	count := uint64(binary.LittleEndian.Uint32(raw[8:]))
	heldLen := uint64(binary.LittleEndian.Uint32(raw[12:]))
	size := compactHeadSize + count*ms + heldLen
	if count == 0 || size+4 > uint64(len(raw)) {
		return compactJournal{}, false
	}
	b, ok := unseal(raw[:size+4])
	if !ok {
		return compactJournal{}, false
	}
	j := compactJournal{version: v, moves: make([]move, count), held: make([][]byte, count)}
	at := compactHeadSize + count*ms
	for k := range j.moves {
		p := b[compactHeadSize+uint64(k)*ms:]
		m := move{idx: int64(binary.LittleEndian.Uint64(p)), from: getJournalEntry(p[8:], v), to: getJournalEntry(p[8+es:], v)}
		flags := binary.LittleEndian.Uint32(p[8+2*es:])
		if m.idx < 0 || m.from.phys != m.to.phys || m.from.logic != m.to.logic || m.from.sum != m.to.sum || m.from == m.to || flags > 1 {
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
