package zrecord_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/loaderx/loaderx/zrecord"
	"github.com/loaderx/loaderx/zrecord/internal/faultfs"
)

// The steps a Compact leaves to the sync after it (cutting off the old
// copies, removing its journal) run in Close. A power cut at any write of
// that Close, with any subset of the unsynced writes kept, must leave the
// records as they were.
func TestPowerCutDuringCompactCleanup(t *testing.T) {
	rng, seed := seeded(t)
	for ci, c := range faultCases {
		if c.op(newRand(0), make(model, 64)).kind != "compact" {
			continue
		}
		t.Run(c.name, func(t *testing.T) {
			f := newFaultFixture(t, c, seed+int64(ci))
			for k := 1; k <= f.closeWrites+1; k++ {
				dir, fs, s := f.openDurable(t)
				if err := f.op.apply(s); err != nil {
					t.Fatalf("%s: %v", f.op, err)
				}
				fs.KeepLog(true)
				fs.Arm(k, faultfs.Crash)
				s.Close()
				keepSeed := rng.Uint64()
				if err := fs.PowerCut(func(path string, i int) bool {
					return newRand(int64(keepSeed^uint64(i)*0x9e3779b97f4a7c15^uint64(len(path)))).IntN(2) == 0
				}); err != nil {
					t.Fatal(err)
				}
				f.reopenAndContinue(t, dir, rng, fmt.Sprintf("power cut at write %d of the Close after %s", k, f.op), f.after)
				if t.Failed() {
					t.Fatalf("seed %d, Close writes: %v", seed, fs.Log())
				}
			}
		})
	}
}

// A power cut right after Compact returned that loses every unsynced write
// to the chunk files (the new copies) but keeps the rest (the synced
// journal, the table entries and the header pointing at the new copies):
// Open must switch back to the old copies, which nothing overwrote.
func TestCompactUndoneWhenNewCopiesLost(t *testing.T) {
	rng, seed := seeded(t)
	for ci, c := range faultCases {
		if c.op(newRand(0), make(model, 64)).kind != "compact" {
			continue
		}
		t.Run(c.name, func(t *testing.T) {
			f := newFaultFixture(t, c, seed+int64(ci))
			dir, fs, s := f.openDurable(t)
			if err := f.op.apply(s); err != nil {
				t.Fatalf("%s: %v", f.op, err)
			}
			if _, err := os.Stat(filepath.Join(dir, "compact.journal")); err != nil {
				t.Fatalf("no journal after a Compact that moved records: %v", err)
			}
			lostChunk := false
			if err := fs.PowerCut(func(path string, i int) bool {
				if strings.HasSuffix(path, ".chunk") {
					lostChunk = true
					return false
				}
				return true
			}); err != nil {
				t.Fatal(err)
			}
			if !lostChunk {
				t.Fatal("the Compact wrote no chunk bytes")
			}
			f.reopenAndContinue(t, dir, rng, "new copies lost", f.after)
			if _, err := os.Stat(filepath.Join(dir, "compact.journal")); !os.IsNotExist(err) {
				t.Fatalf("compact.journal left after recovery: %v", err)
			}
		})
	}
}

// Compacting a single-chunk store writes the moved records once: the bytes
// written are those of the records after the first hole, plus the journal
// and the table entries, and the Compact syncs one file (its journal).
func TestCompactWritesMovedBytesOnce(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "s")
	s, err := zrecord.Create(dir)
	if err != nil {
		t.Fatal(err)
	}
	const n, size = 100, 10 << 10
	recs := make([][]byte, n)
	for i := range recs {
		recs[i] = ztRecord(i, size)
	}
	if _, err := s.Append(recs); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	fs := faultfs.New(zrecord.OSFS)
	s, err = zrecord.Open(dir, zrecord.WithFS(fs))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// Holes at records 40 and 80, filled by records 99 and 98: after the
	// first hole lie records 41-79, 81-97, 98 and 99, 58 in all.
	if err := s.Delete([]int64{40, 80}); err != nil {
		t.Fatal(err)
	}
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	fs.KeepLog(true)
	if err := s.Compact(); err != nil {
		t.Fatal(err)
	}
	written, syncs := maintCounts(fs.Log())
	moved := int64(58 * size)
	if written < moved || written > moved+moved/20 {
		t.Fatalf("Compact wrote %d bytes for %d bytes of moved records: %v", written, moved, fs.Log())
	}
	if syncs != 2 {
		t.Fatalf("Compact made %d fsyncs, want 2 (its journal and the directory entry that finds it): %v", syncs, fs.Log())
	}
	want := ztDeleted(recs, []int64{40, 80})
	ztExpect(t, s, want)
	st, _ := s.Stats()
	if st.ChunkBytes != st.LiveBytes {
		t.Fatalf("after Compact: %+v", st)
	}
}

// Delete syncs nothing and writes only its log record.
func TestDeleteSyncsNothing(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "s")
	fs := faultfs.New(zrecord.OSFS)
	s, err := zrecord.Create(dir, zrecord.WithFS(fs), zrecord.WithCodec(zrecord.Zstd))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	recs := make([][]byte, 50)
	for i := range recs {
		recs[i] = ztRecord(i, 3000)
	}
	if _, err := s.Append(recs); err != nil {
		t.Fatal(err)
	}
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	want := recs
	for _, idx := range [][]int64{{3, 49, 10}, {0, 45}, {20}} {
		fs.KeepLog(true)
		if err := s.Delete(idx); err != nil {
			t.Fatal(err)
		}
		for _, op := range fs.Log() {
			if op.Kind == "sync" || !strings.HasSuffix(op.Path, "delete.intent") {
				t.Fatalf("Delete %v made %s", idx, op)
			}
		}
		want = ztDeleted(want, idx)
		ztExpect(t, s, want)
	}
	// A read-only handle opened now sees the pending deletes.
	r, err := zrecord.Open(dir, zrecord.WithReadOnly())
	if err != nil {
		t.Fatal(err)
	}
	ztExpect(t, r, want)
	r.Close()
}

// A power cut during a Compact that takes in a Delete still pending (made
// after the last sync), or right after it returned: the store reopens to
// the state of the last sync, after the Delete, or after the Compact
// (which holds the same records).
func TestPowerCutCompactAfterPendingDelete(t *testing.T) {
	rng, seed := seeded(t)
	for ci, c := range faultCases {
		if c.pre == nil || c.op(newRand(0), make(model, 64)).kind != "compact" {
			continue
		}
		t.Run(c.name, func(t *testing.T) {
			f := newFaultFixture(t, c, seed+int64(ci))
			for k := len(f.pre) - 1; k >= 0; k-- {
				if f.pre[k].kind != "delete" {
					t.Skip("the pre operations are not all deletes")
				}
			}
			// The model before the pre operations: rebuild it from setup.
			var synced model
			srng := newRand(seed + int64(ci))
			for _, op := range c.setup(srng) {
				synced = op.model(synced)
			}
			for k := 1; k <= f.opWrites+1; k++ {
				for trial := range 3 {
					dir, fs, s := f.openDurable(t)
					fs.KeepLog(true)
					fs.Arm(k, faultfs.Crash)
					err := f.op.apply(s)
					keepSeed := rng.Uint64()
					if perr := fs.PowerCut(func(path string, i int) bool {
						if trial == 0 {
							return i%2 == 0
						}
						return newRand(int64(keepSeed^uint64(i)*0x9e3779b97f4a7c15^uint64(len(path)))).IntN(2) == 0
					}); perr != nil {
						t.Fatal(perr)
					}
					f.reopenAndContinue(t, dir, rng, fmt.Sprintf("%s after a pending delete, power cut at write %d (call returned %v)", f.op, k, err),
						synced, f.before, f.after)
					if t.Failed() {
						t.Fatalf("seed %d, writes: %v", seed, fs.Log())
					}
				}
			}
		})
	}
}

// A read-only Open after a power cut that lost some unsynced entry writes
// of a compaction that took in a pending Delete reads what a writable Open
// recovers: the Delete's entries come from its log, not from a table that
// may have lost them. Each lost write is tried in turn.
func TestReadOnlyOpenAfterPowerCutInChainedCompaction(t *testing.T) {
	rec := func(i int) []byte { return bytes.Repeat([]byte(fmt.Sprintf("r%03d-", i)), 20) }
	const n, size = 20, 100
	for lost := 0; ; lost++ {
		dir := filepath.Join(t.TempDir(), "s")
		s, err := zrecord.Create(dir, zrecord.WithCodec(zrecord.Raw))
		if err != nil {
			t.Fatal(err)
		}
		var recs [][]byte
		for i := range n {
			recs = append(recs, rec(i))
		}
		if _, err := s.Append(recs); err != nil {
			t.Fatal(err)
		}
		if err := s.Delete([]int64{0, 1}); err != nil {
			t.Fatal(err)
		}
		if err := s.Compact(); err != nil {
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		fs := faultfs.New(zrecord.OSFS)
		fs.TrackDurability(true)
		if s, err = zrecord.Open(dir, zrecord.WithFS(fs)); err != nil {
			t.Fatal(err)
		}
		if err := s.Delete([]int64{0}); err != nil {
			t.Fatal(err)
		}
		if err := s.Compact(); err != nil {
			t.Fatal(err)
		}
		tabWrites := 0
		if err := fs.PowerCut(func(path string, i int) bool {
			if strings.HasSuffix(path, ".tab") {
				tabWrites++
				return tabWrites-1 != lost
			}
			return true
		}); err != nil {
			t.Fatal(err)
		}
		if lost >= tabWrites {
			if lost == 0 {
				t.Fatal("the compaction wrote no table entries unsynced: the case is not exercised")
			}
			return
		}
		read := func(opts ...zrecord.Option) [][]byte {
			s, err := zrecord.Open(dir, opts...)
			if errors.Is(err, zrecord.ErrCorrupt) && len(opts) > 0 && strings.Contains(err.Error(), "writable once") {
				return nil // refusing until a writable Open repairs is right too
			}
			if err != nil {
				t.Fatalf("lost write %d: open: %v", lost, err)
			}
			defer s.Close()
			out := make([][]byte, s.Len())
			for i := range out {
				out[i] = make([]byte, size)
				if err := s.Gather([]int64{int64(i)}, out[i], size); err != nil {
					t.Fatalf("lost write %d: record %d: %v", lost, i, err)
				}
			}
			return out
		}
		ro := read(zrecord.WithReadOnly())
		rw := read()
		if ro == nil {
			if lost == 0 {
				t.Fatal("lost write 0 (the pending Delete's entry): the read-only Open refused instead of reading the log")
			}
			continue
		}
		if len(ro) != len(rw) {
			t.Fatalf("lost write %d: read-only Len %d, writable %d", lost, len(ro), len(rw))
		}
		for i := range rw {
			if !bytes.Equal(ro[i], rw[i]) {
				t.Fatalf("lost write %d: record %d reads %q read-only, %q writable", lost, i, ro[i][:5], rw[i][:5])
			}
		}
	}
}
