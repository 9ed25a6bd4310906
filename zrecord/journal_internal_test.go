package zrecord

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

func TestDeleteIntentEncoding(t *testing.T) {
	for _, v := range []uint8{1, 2} {
		t.Run(fmt.Sprint("version ", v), func(t *testing.T) { testDeleteIntentEncoding(t, v) })
	}
}

func testDeleteIntentEncoding(t *testing.T, v uint8) {
	j := deleteIntent{
		version:   v,
		before:    position{3, 12345},
		beforeLen: 10,
		afterLen:  7,
		writes:    []indexedEntry{{1, entry{1, 2, 3, 4, 0}}, {5, entry{5, 6, 7, 0, 0}}},
	}
	if v == 2 {
		j.writes[1].e.sum = 0xdeadbeef
	}
	b := j.encode()
	got, ok := decodeDeleteIntent(b)
	if !ok || got.version != v || got.before != j.before || got.beforeLen != 10 || got.afterLen != 7 || len(got.writes) != 2 || got.writes[1] != j.writes[1] {
		t.Fatalf("round trip: %+v, %v", got, ok)
	}
	for i := range b {
		bad := bytes.Clone(b)
		bad[i] ^= 0x40
		if _, ok := decodeDeleteIntent(bad); ok {
			t.Fatalf("flipping byte %d went unnoticed", i)
		}
	}
	if _, ok := decodeDeleteIntent(b[:len(b)/2]); ok {
		t.Fatal("a torn journal was accepted")
	}
	// A write at or past the new length cannot be part of a delete.
	j.writes[0].idx = 7
	if _, ok := decodeDeleteIntent(j.encode()); ok {
		t.Fatal("a write past the new length was accepted")
	}
}

// zjJournal encodes a group whose held copies are given by idx.
func zjJournal(t *testing.T, group []move, copies map[int64][]byte) []byte {
	t.Helper()
	b, err := appendCompactJournal(nil, journalVersion(layoutV4), group, func(m move, dst []byte) error {
		copy(dst, copies[m.idx])
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestCompactJournalEncoding(t *testing.T) {
	group := []move{
		{idx: 4, from: entry{off: 5000, phys: 10, logic: 10}, to: entry{off: 100, phys: 10, logic: 10}},
		{idx: 2, from: entry{off: 300, phys: 900, logic: 2000, sum: 77}, to: entry{off: 110, phys: 900, logic: 2000, sum: 77}, held: true},
		{idx: 9, from: entry{off: 1200, phys: 0, logic: 0}, to: entry{off: 1010, phys: 0, logic: 0}},
	}
	held := bytes.Repeat([]byte{7}, 900)
	b := zjJournal(t, group, map[int64][]byte{2: held})
	// Leftovers of an earlier, longer group after the CRC are ignored.
	longer := append(bytes.Clone(b), bytes.Repeat([]byte{1}, 333)...)
	for _, raw := range [][]byte{b, longer} {
		j, ok := decodeCompactJournal(raw)
		if !ok || len(j.moves) != 3 || j.moves[1] != group[1] || !bytes.Equal(j.held[1], held) || j.held[0] != nil {
			t.Fatalf("round trip failed: %v", ok)
		}
	}
	if _, ok := decodeCompactJournal(b[:len(b)-1]); ok {
		t.Fatal("a torn journal was accepted")
	}
	for i := range b {
		bad := bytes.Clone(b)
		bad[i] ^= 0x10
		if _, ok := decodeCompactJournal(bad); ok {
			t.Fatalf("flipping byte %d went unnoticed", i)
		}
	}
}

// Which moves of a group get a held copy: those whose old bytes a move of the
// group (itself included) writes over.
func TestGroupHeld(t *testing.T) {
	moves := []move{
		// Shifted down by 50, less than its 100 bytes: overwrites itself.
		{idx: 0, from: entry{off: 50, phys: 100}, to: entry{off: 0, phys: 100}},
		// Clear of its own old bytes, but move 2 lands on them.
		{idx: 1, from: entry{off: 150, phys: 40}, to: entry{off: 100, phys: 40}},
		// Far away; move 3 lands on its old bytes.
		{idx: 2, from: entry{off: 1000, phys: 20}, to: entry{off: 140, phys: 20}},
		// Nothing lands on its old bytes.
		{idx: 3, from: entry{off: 2000, phys: 900}, to: entry{off: 160, phys: 900}},
		// Another chunk.
		{idx: 4, from: entry{off: 500, phys: 10, chunk: 1}, to: entry{off: 1060, phys: 10}},
	}
	if end := groupEnd(moves, 0); end != len(moves) {
		t.Fatalf("group ends at %d", end)
	}
	want := []bool{true, true, true, false, false}
	for k, m := range moves {
		if m.held != want[k] {
			t.Fatalf("move %d: held %v, want %v", k, m.held, want[k])
		}
	}
}

func TestTornBetween(t *testing.T) {
	a := entry{off: 0x01020304, phys: 10, logic: 20, chunk: 1, sum: 5}
	b := entry{off: 0x0A0B0C0D, phys: 10, logic: 20, chunk: 2, sum: 5}
	l := layoutV4
	var ab, bb, ub [24]byte
	l.putEntry(ab[:], 3, a)
	l.putEntry(bb[:], 3, b)
	for cut := 0; cut <= int(l.entSize); cut++ {
		var mix [24]byte
		copy(mix[:], bb[:cut])
		copy(mix[cut:], ab[cut:])
		if !tornBetween(mix[:], ab[:], bb[:]) {
			t.Fatalf("a write cut after %d bytes was not recognised", cut)
		}
	}
	l.putEntry(ub[:], 3, entry{off: 0x01020399, phys: 10, logic: 20, chunk: 1, sum: 5})
	if tornBetween(ub[:], ab[:], bb[:]) {
		t.Fatal("an unrelated entry was taken for a torn write")
	}
}

// zjCompactCrash builds a raw store whose compaction moves record 1 onto
// bytes overlapping its old place, writes the journal for that move, and lets
// damage() model how far the move got before the process died. A writable
// Open must then finish the move.
func zjCompactCrash(t *testing.T, damage func(t *testing.T, dir string, m move, held []byte)) {
	dir := filepath.Join(t.TempDir(), "s")
	s, err := Create(dir)
	if err != nil {
		t.Fatal(err)
	}
	a := bytes.Repeat([]byte{'a'}, 257) // b's old offset has two non-zero bytes
	b := make([]byte, 1000)
	for i := range b {
		b[i] = byte(i)
	}
	c := bytes.Repeat([]byte{'c'}, 100)
	if _, err := s.Append([][]byte{a, b, c}); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete([]int64{0}); err != nil { // c moves to index 0
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	m := move{idx: 1, from: entry{off: 257, phys: 1000, logic: 1000, sum: dataSum(b)}, to: entry{off: 0, phys: 1000, logic: 1000, sum: dataSum(b)}}
	g := []move{m}
	groupEnd(g, 0)
	if !g[0].held {
		t.Fatal("the move should hold a copy")
	}
	m = g[0]
	if err := os.WriteFile(filepath.Join(dir, compactJrnl), zjJournal(t, g, map[int64][]byte{1: b}), 0o644); err != nil {
		t.Fatal(err)
	}
	damage(t, dir, m, b)

	// Read-only refuses the half-done state; writable Open repairs it.
	if r, err := Open(dir, WithReadOnly()); err == nil {
		r.Close()
		t.Fatal("read-only Open accepted an unfinished move")
	}
	s, err = Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	out := make([]byte, 1100)
	if err := s.GatherPacked([]int64{0, 1}, out, []int64{0, 100, 1100}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out[:100], c) || !bytes.Equal(out[100:], b) {
		t.Fatal("records differ after recovery")
	}
	e, _ := s.readEntry(*s.segs.Load(), 1)
	if e != m.to {
		t.Fatalf("entry 1 is %+v, want the moved %+v", e, m.to)
	}
	if _, err := os.Stat(filepath.Join(dir, compactJrnl)); !os.IsNotExist(err) {
		t.Fatal("the journal survived recovery")
	}
	if err := s.Compact(); err != nil {
		t.Fatal(err)
	}
	if err := s.GatherPacked([]int64{0, 1}, out, []int64{0, 100, 1100}); err != nil || !bytes.Equal(out[:100], c) || !bytes.Equal(out[100:], b) {
		t.Fatalf("after a second compaction: %v", err)
	}
}

func zjPatch(t *testing.T, path string, off int64, data []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(data, off); err != nil {
		t.Fatal(err)
	}
}

func TestCompactJournalRedoesOverlappingMove(t *testing.T) {
	zjCompactCrash(t, func(t *testing.T, dir string, m move, held []byte) {
		// Died half way through copying: the old copy is partly overwritten
		// and the entry still points at it.
		zjPatch(t, filepath.Join(dir, "0.chunk"), 0, held[:600])
	})
}

func TestCompactJournalRepairsTornEntry(t *testing.T) {
	zjCompactCrash(t, func(t *testing.T, dir string, m move, held []byte) {
		// Died writing the entry: the bytes are in place, the entry is half
		// new, half old.
		zjPatch(t, filepath.Join(dir, "0.chunk"), 0, held)
		var nb [24]byte
		layoutV4.putEntry(nb[:], 1, m.to)
		zjPatch(t, filepath.Join(dir, "0.tab"), 1*24, nb[:1])
	})
}

// A journal whose entries no longer match (an earlier group, a later change
// of the table) is discarded without touching anything.
func TestCompactJournalStale(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "s")
	s, err := Create(dir)
	if err != nil {
		t.Fatal(err)
	}
	recs := [][]byte{bytes.Repeat([]byte{1}, 300), bytes.Repeat([]byte{2}, 300)}
	if _, err := s.Append(recs); err != nil {
		t.Fatal(err)
	}
	s.Close()
	g := []move{{idx: 1, from: entry{off: 999, phys: 300, logic: 300}, to: entry{off: 800, phys: 300, logic: 300}}}
	groupEnd(g, 0)
	os.WriteFile(filepath.Join(dir, compactJrnl), zjJournal(t, g, map[int64][]byte{1: bytes.Repeat([]byte{9}, 300)}), 0o644)
	s, err = Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	out := make([]byte, 600)
	if err := s.Gather([]int64{0, 1}, out, 300); err != nil || !bytes.Equal(out[300:], recs[1]) {
		t.Fatalf("a stale journal changed record 1: %v", err)
	}
}

// A group journal written, then death before any byte moved: the held
// record is rewritten at its new place, here past the current end of a
// lower chunk, and the store must reopen consistent.
func TestCompactJournalRedoExtendsChunk(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "s")
	s, err := Create(dir, WithChunkCapacity(1000))
	if err != nil {
		t.Fatal(err)
	}
	recs := [][]byte{bytes.Repeat([]byte{'A'}, 300), bytes.Repeat([]byte{'B'}, 800), bytes.Repeat([]byte{'C'}, 150), bytes.Repeat([]byte{'D'}, 300)}
	// A: chunk 0 [0,300); B: chunk 1 [0,800); C: chunk 1 [800,950); D: chunk 2 [0,300).
	if _, err := s.Append(recs); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete([]int64{0}); err != nil { // D moves to index 0
		t.Fatal(err)
	}
	s.Close()
	sb, sc, sd := dataSum(recs[1]), dataSum(recs[2]), dataSum(recs[3])
	group := []move{
		{idx: 1, from: entry{off: 0, phys: 800, logic: 800, chunk: 1, sum: sb}, to: entry{off: 0, phys: 800, logic: 800, chunk: 0, sum: sb}},
		{idx: 2, from: entry{off: 800, phys: 150, logic: 150, chunk: 1, sum: sc}, to: entry{off: 800, phys: 150, logic: 150, chunk: 0, sum: sc}},
		{idx: 0, from: entry{off: 0, phys: 300, logic: 300, chunk: 2, sum: sd}, to: entry{off: 0, phys: 300, logic: 300, chunk: 1, sum: sd}},
	}
	groupEnd(group, 0)
	if !group[0].held || group[1].held || group[2].held {
		t.Fatalf("held flags %v %v %v", group[0].held, group[1].held, group[2].held)
	}
	os.WriteFile(filepath.Join(dir, compactJrnl), zjJournal(t, group, map[int64][]byte{1: recs[1]}), 0o644)
	s, err = Open(dir, WithChunkCapacity(1000))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	want := [][]byte{recs[3], recs[1], recs[2]}
	out := make([]byte, 1250)
	if err := s.GatherPacked([]int64{0, 1, 2}, out, []int64{0, 300, 1100, 1250}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out, bytes.Join(want, nil)) {
		t.Fatal("records differ after recovery")
	}
	if err := s.Compact(); err != nil {
		t.Fatal(err)
	}
	if err := s.GatherPacked([]int64{0, 1, 2}, out, []int64{0, 300, 1100, 1250}); err != nil || !bytes.Equal(out, bytes.Join(want, nil)) {
		t.Fatalf("after compaction: %v", err)
	}
}
