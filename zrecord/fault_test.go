package zrecord_test

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/loaderx/loaderx/zrecord"
	"github.com/loaderx/loaderx/zrecord/internal/faultfs"
)

// copyTree copies a store directory, keeping sparse files sparse.
func copyTree(t testing.TB, src, dst string) {
	t.Helper()
	if err := os.MkdirAll(dst, 0o755); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		s, d := filepath.Join(src, e.Name()), filepath.Join(dst, e.Name())
		if e.IsDir() {
			copyTree(t, s, d)
			continue
		}
		if err := copySparse(s, d); err != nil {
			t.Fatalf("copy %s: %v", s, err)
		}
	}
}

func copySparse(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	fi, err := in.Stat()
	if err != nil {
		return err
	}
	out, err := os.OpenFile(dst, os.O_RDWR|os.O_CREATE|os.O_TRUNC, fi.Mode())
	if err != nil {
		return err
	}
	defer out.Close()
	size := fi.Size()
	buf := make([]byte, 1<<20)
	copyRange := func(from, to int64) error {
		for from < to {
			n := int(min(int64(len(buf)), to-from))
			if _, err := in.ReadAt(buf[:n], from); err != nil && err != io.EOF {
				return err
			}
			if _, err := out.WriteAt(buf[:n], from); err != nil {
				return err
			}
			from += int64(n)
		}
		return nil
	}
	for off := int64(0); off < size; {
		data, err := seekData(in, off)
		if onlyHoleLeft(err) {
			break // only a hole is left
		}
		if err != nil { // no SEEK_DATA here: copy the rest
			if err := copyRange(off, size); err != nil {
				return err
			}
			break
		}
		hole, err := seekHole(in, data)
		if err != nil {
			hole = size
		}
		if err := copyRange(data, min(hole, size)); err != nil {
			return err
		}
		off = hole
	}
	return out.Truncate(size)
}

// faultCase is a store state built by setup and one operation on it.
type faultCase struct {
	name     string
	codec    codecCase
	capacity int64
	setup    func(rng *rand.Rand) []crashOp
	pre      func(rng *rand.Rand) []crashOp // run on the opened handle before the fault is armed
	op       func(rng *rand.Rand, m model) crashOp
}

func bigRecord(rng *rand.Rand, lo, hi int) []byte {
	b := make([]byte, lo+rng.IntN(hi-lo+1))
	fillRandom(rng, b)
	return b
}

var faultCases = []faultCase{
	{
		name: "append-rollover-raw", codec: codecCases[0], capacity: 64 << 10,
		setup: func(rng *rand.Rand) []crashOp {
			return []crashOp{{kind: "append", recs: genBatch(rng, 10, 8<<10)}}
		},
		op: func(rng *rand.Rand, m model) crashOp {
			// About 80 KiB: crosses into at least one new chunk.
			recs := genBatch(rng, 6, 4<<10)
			for range 4 {
				recs = append(recs, bigRecord(rng, 14<<10, 20<<10))
			}
			return crashOp{kind: "append", recs: recs}
		},
	},
	{
		name: "append-zstd", codec: codecCases[1], capacity: 64 << 10,
		setup: func(rng *rand.Rand) []crashOp {
			return []crashOp{{kind: "append", recs: genBatch(rng, 12, 10<<10)}}
		},
		op: func(rng *rand.Rand, m model) crashOp {
			return crashOp{kind: "append", recs: genBatch(rng, 8, 30<<10)}
		},
	},
	{
		// A batch written in pipelined parts of about 16 KiB per thread,
		// across several chunks: a fault in any part's write leaves the
		// store as it was.
		name: "append-pipelined-zstd", codec: codecCases[1], capacity: 64 << 10,
		setup: func(rng *rand.Rand) []crashOp {
			return []crashOp{{kind: "append", recs: genBatch(rng, 12, 10<<10)}}
		},
		op: func(rng *rand.Rand, m model) crashOp {
			recs := genBatch(rng, 10, 24<<10)
			for range 3 {
				recs = append(recs, bigRecord(rng, 20<<10, 40<<10))
			}
			return crashOp{kind: "append", recs: recs, pipeStep: 16 << 10}
		},
	},
	{
		// The same, with the table entries of each part written aside by
		// a second goroutine while the next part is written: a fault in
		// either writer's files leaves the store as it was.
		name: "append-pipelined-zstd-aside", codec: codecCases[1], capacity: 64 << 10,
		setup: func(rng *rand.Rand) []crashOp {
			return []crashOp{{kind: "append", recs: genBatch(rng, 12, 10<<10)}}
		},
		op: func(rng *rand.Rand, m model) crashOp {
			return crashOp{kind: "append", recs: genBatch(rng, 40, 6<<10), pipeStep: 16 << 10, aside: true}
		},
	},
	{
		// A raw batch in parts, its table written aside.
		name: "append-pipelined-raw-aside", codec: codecCases[0], capacity: 64 << 10,
		setup: func(rng *rand.Rand) []crashOp {
			return []crashOp{{kind: "append", recs: genBatch(rng, 10, 8<<10)}}
		},
		op: func(rng *rand.Rand, m model) crashOp {
			return crashOp{kind: "append", recs: genBatch(rng, 60, 4<<10), pipeStep: 16 << 10, aside: true}
		},
	},
	{
		name: "append-zstddict", codec: codecCases[2], capacity: 64 << 10,
		setup: func(rng *rand.Rand) []crashOp {
			return []crashOp{{kind: "append", recs: genBatch(rng, 12, 10<<10)}}
		},
		op: func(rng *rand.Rand, m model) crashOp {
			return crashOp{kind: "append", recs: genBatch(rng, 8, 30<<10)}
		},
	},
	{
		name: "sync-zstd", codec: codecCases[1], capacity: 64 << 10,
		setup: func(rng *rand.Rand) []crashOp {
			return []crashOp{{kind: "append", recs: genBatch(rng, 12, 10<<10)}}
		},
		pre: func(rng *rand.Rand) []crashOp {
			// Unsynced work for the Sync to make durable.
			return []crashOp{{kind: "append", recs: genBatch(rng, 6, 20<<10)}, {kind: "delete", idx: []int64{0, 3}},
				{kind: "append", recs: genBatch(rng, 3, 10<<10)}}
		},
		op: func(rng *rand.Rand, m model) crashOp { return crashOp{kind: "sync"} },
	},
	{
		name: "delete-zstd", codec: codecCases[1], capacity: 64 << 10,
		setup: func(rng *rand.Rand) []crashOp {
			return []crashOp{{kind: "append", recs: genBatch(rng, 20, 6<<10)}, {kind: "append", recs: genBatch(rng, 10, 6<<10)}}
		},
		op: func(rng *rand.Rand, m model) crashOp {
			n := int64(len(m))
			return crashOp{kind: "delete", idx: []int64{n - 1, 0, 5, n - 3, 17, 11}}
		},
	},
	{
		name: "delete-all-raw", codec: codecCases[0], capacity: 64 << 10,
		setup: func(rng *rand.Rand) []crashOp {
			return []crashOp{{kind: "append", recs: genBatch(rng, 5, 6<<10)}}
		},
		op: func(rng *rand.Rand, m model) crashOp {
			return crashOp{kind: "delete", idx: []int64{2, 0, 4, 1, 3}}
		},
	},
	{
		name: "compact-overlap-raw", codec: codecCases[0], capacity: 512 << 10,
		setup: func(rng *rand.Rand) []crashOp {
			// small, large, small, large, ...: deleting the small ones moves
			// each large record down by less than its length.
			var recs [][]byte
			for range 5 {
				recs = append(recs, bigRecord(rng, 1<<10, 6<<10), bigRecord(rng, 100<<10, 200<<10))
			}
			return []crashOp{{kind: "append", recs: recs}, {kind: "delete", idx: []int64{0, 4}}}
		},
		op: func(rng *rand.Rand, m model) crashOp { return crashOp{kind: "compact"} },
	},
	{
		name: "compact-zstd", codec: codecCases[1], capacity: 64 << 10,
		setup: func(rng *rand.Rand) []crashOp {
			return []crashOp{{kind: "append", recs: genBatch(rng, 16, 12<<10)}, {kind: "delete", idx: []int64{0, 2, 5, 6, 15}},
				{kind: "append", recs: genBatch(rng, 4, 12<<10)}, {kind: "delete", idx: []int64{1, 3}}}
		},
		op: func(rng *rand.Rand, m model) crashOp { return crashOp{kind: "compact"} },
	},
	{
		// The Delete is still pending (only in its log) when Compact runs:
		// the compaction writes its entries into the table with its own.
		name: "compact-pending-delete-raw", codec: codecCases[0], capacity: 256 << 10,
		setup: func(rng *rand.Rand) []crashOp {
			var recs [][]byte
			for range 6 {
				recs = append(recs, bigRecord(rng, 1<<10, 6<<10), bigRecord(rng, 40<<10, 90<<10))
			}
			return []crashOp{{kind: "append", recs: recs}}
		},
		pre: func(rng *rand.Rand) []crashOp { return []crashOp{{kind: "delete", idx: []int64{2, 0, 7}}} },
		op:  func(rng *rand.Rand, m model) crashOp { return crashOp{kind: "compact"} },
	},
}

// faultFixture is a case's before-state on disk (to be copied), its model,
// and the operation.
type faultFixture struct {
	faultCase
	tmpl          string
	pre           []crashOp
	before, after model
	op            crashOp
	opWrites      int // mutating FS operations of the op
	closeWrites   int // and of the Close after it
	opBytes       int64
}

func newFaultFixture(t *testing.T, c faultCase, seed int64) *faultFixture {
	t.Helper()
	rng := newRand(seed)
	f := &faultFixture{faultCase: c, tmpl: filepath.Join(t.TempDir(), "tmpl")}
	s, err := zrecord.Create(f.tmpl, createOpts(t, c.codec, c.capacity)...)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	for _, op := range c.setup(rng) {
		if err := op.apply(s); err != nil {
			t.Fatalf("setup %s: %v", op, err)
		}
		f.before = op.model(f.before)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if c.pre != nil {
		f.pre = c.pre(rng)
		for _, op := range f.pre {
			f.before = op.model(f.before)
		}
	}
	f.op = c.op(rng, f.before)
	f.after = f.op.model(f.before)

	// A clean run counts the operation's writes.
	dir := filepath.Join(t.TempDir(), "count")
	copyTree(t, f.tmpl, dir)
	fs := faultfs.New(zrecord.OSFS)
	s = f.open(t, dir, fs)
	fs.KeepLog(true)
	fs.Arm(0, faultfs.Fail)
	if err := f.op.apply(s); err != nil {
		t.Fatalf("%s without faults: %v", f.op, err)
	}
	f.opWrites = fs.Count()
	log := fs.Log()
	for _, op := range log {
		if op.Kind == "write" {
			f.opBytes += int64(op.N)
		}
	}
	if err := diffStore(s, f.after, rng); err != nil {
		t.Fatalf("%s without faults: %v", f.op, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	f.closeWrites = fs.Count() - f.opWrites
	var lines []string
	for i, op := range fs.Log() {
		if i == f.opWrites {
			lines = append(lines, "-- Close")
		}
		lines = append(lines, fmt.Sprintf("%d: %s", i+1, op))
	}
	t.Logf("%s: %d writes (%d bytes), Close %d writes:\n  %s", f.op, f.opWrites, f.opBytes, f.closeWrites, strings.Join(lines, "\n  "))
	return f
}

// open opens a copy of the template through fs and runs the pre operations.
func (f *faultFixture) open(t *testing.T, dir string, fs zrecord.FS) *zrecord.Store {
	t.Helper()
	s, err := zrecord.Open(dir, zrecord.WithFS(fs), zrecord.WithChunkCapacity(f.capacity))
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	for _, op := range f.pre {
		if err := op.apply(s); err != nil {
			t.Fatalf("%s: %v", op, err)
		}
	}
	return s
}

// refusesOrMatches checks a handle after a failed call: it either refuses
// reads (it cannot vouch for its state until reopened) or shows one of the
// states exactly. Len must be one of theirs either way.
func refusesOrMatches(s *zrecord.Store, rng *rand.Rand, states ...model) error {
	n := s.Len()
	ok := false
	for _, m := range states {
		ok = ok || int64(len(m)) == n
	}
	if !ok {
		return fmt.Errorf("Len() = %d matches no candidate state", n)
	}
	idx := make([]int64, n)
	for i := range idx {
		idx[i] = int64(i)
	}
	if err := s.Sizes(idx, make([]int64, n)); err != nil {
		return nil
	}
	_, err := matchAny(s, rng, states...)
	return err
}

// reopenAndContinue opens dir with the plain OS file system, expects one of
// states, and checks the store still takes appends and compacts.
func (f *faultFixture) reopenAndContinue(t *testing.T, dir string, rng *rand.Rand, what string, states ...model) {
	t.Helper()
	s, err := zrecord.Open(dir, zrecord.WithChunkCapacity(f.capacity))
	if err != nil {
		t.Errorf("%s: reopen: %v", what, err)
		return
	}
	defer s.Close()
	which, err := matchAny(s, rng, states...)
	if err != nil {
		t.Errorf("%s: reopened store: %v", what, err)
		return
	}
	m := states[which]
	recs := genBatch(rng, 3, 20<<10)
	if _, err := s.Append(recs); err != nil {
		t.Errorf("%s: Append after reopen: %v", what, err)
		return
	}
	m = m.appended(recs)
	if err := s.Compact(); err != nil {
		t.Errorf("%s: Compact after reopen: %v", what, err)
		return
	}
	if err := diffStore(s, m, rng); err != nil {
		t.Errorf("%s: after Append+Compact following reopen: %v", what, err)
	}
}

func TestFaultInjection(t *testing.T) {
	rng, seed := seeded(t)
	for ci, c := range faultCases {
		t.Run(c.name, func(t *testing.T) {
			f := newFaultFixture(t, c, seed+int64(ci))
			total := f.opWrites + f.closeWrites
			for _, mode := range []faultfs.Mode{faultfs.Fail, faultfs.Crash, faultfs.TornCrash} {
				for k := 1; k <= total; k++ {
					f.inject(t, rng, mode, k)
					if t.Failed() {
						t.Fatalf("stopping at the first failing position (seed %d)", seed)
					}
				}
			}
		})
	}
}

// inject runs the op with the k-th mutating operation (counted from the
// start of the op, through the Close after it) faulting in mode.
func (f *faultFixture) inject(t *testing.T, rng *rand.Rand, mode faultfs.Mode, k int) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "s")
	copyTree(t, f.tmpl, dir)
	fs := faultfs.New(zrecord.OSFS)
	fs.KeepLog(true)
	s := f.open(t, dir, fs)
	fs.Arm(k, mode)
	defer fs.CloseAll()
	what := fmt.Sprintf("%s, %s at write %d", f.op, mode, k)
	var err error
	func() {
		defer func() {
			if p := recover(); p != nil {
				t.Errorf("%s: panic: %v", what, p)
			}
		}()
		err = f.op.apply(s)
	}()
	if t.Failed() {
		return
	}
	opFired := fs.Fired()
	var fault faultfs.Op
	if opFired {
		fault, _ = fs.LastFault()
		what += fmt.Sprintf(" (%s)", fault)
	}
	switch {
	case opFired && err == nil && fault.Kind == "remove":
		// Removing a finished journal is cleanup: the operation has taken
		// effect, which the reopen below checks.
	case opFired && err == nil:
		t.Errorf("%s: the operation returned nil after its write failed", what)
	case !opFired && err != nil:
		t.Errorf("%s: failed before the fault: %v", what, err)
	case opFired && f.op.kind != "sync" && !errors.Is(err, faultfs.ErrInjected) && !errors.Is(err, faultfs.ErrCrashed):
		t.Logf("%s: error does not wrap the cause: %v", what, err)
	}
	states := []model{f.before, f.after}
	if err == nil {
		states = []model{f.after} // a returned operation is on disk
	}
	if mode == faultfs.Fail && err != nil {
		// The handle is still open: it refuses reads or shows a consistent state.
		if merr := refusesOrMatches(s, rng, states...); merr != nil {
			t.Errorf("%s: in-process state after the failed call: %v", what, merr)
		}
	}
	closeFired := false
	func() {
		defer func() {
			if p := recover(); p != nil {
				t.Errorf("%s: Close panicked: %v", what, p)
			}
		}()
		cerr := s.Close()
		closeFired = !opFired && fs.Fired()
		if closeFired && cerr == nil {
			op, _ := fs.LastFault()
			t.Errorf("%s: Close returned nil after its write (%s) failed", what, op)
		}
	}()
	fs.CloseAll()
	f.reopenAndContinue(t, dir, rng, what, states...)
}

// TestDiskFull runs each case's operation with the disk filling up after a
// number of bytes: the call fails with ENOSPC naming the file, and nothing
// committed is lost.
func TestDiskFull(t *testing.T) {
	rng, seed := seeded(t)
	for ci, c := range faultCases {
		t.Run(c.name, func(t *testing.T) {
			f := newFaultFixture(t, c, seed+int64(ci))
			if f.opBytes == 0 {
				t.Skip("the operation writes no bytes")
			}
			budgets := []int64{0, 1, 15, 16, 17, f.opBytes / 3, f.opBytes / 2, f.opBytes - 32, f.opBytes - 1}
			for range 3 {
				budgets = append(budgets, rng.Int64N(f.opBytes))
			}
			for _, short := range []bool{false, true} {
				for _, b := range budgets {
					if b < 0 {
						continue
					}
					f.diskFull(t, rng, b, short)
				}
			}
			if t.Failed() {
				t.Logf("seed %d", seed)
			}
		})
	}
	t.Run("create", func(t *testing.T) {
		for _, b := range []int64{0, 8, 31, 32, 33} {
			fs := faultfs.New(zrecord.OSFS)
			fs.SetSpaceLimit(b, true)
			dir := filepath.Join(t.TempDir(), "s")
			s, err := zrecord.Create(dir, zrecord.WithFS(fs), zrecord.WithCodec(zrecord.ZstdDict), zrecord.WithDict(mustDict(t)))
			if err == nil {
				if fs.Full() {
					t.Errorf("budget %d: Create succeeded after a write failed with ENOSPC", b)
				}
				s.Close()
				continue
			}
			if !errors.Is(err, syscall.ENOSPC) {
				t.Errorf("budget %d: Create: %v, want ENOSPC", b, err)
			}
			if op, ok := fs.LastFault(); ok && !strings.Contains(err.Error(), filepath.Base(op.Path)) {
				t.Errorf("budget %d: Create error %q does not name %s", b, err, op.Path)
			}
			fs.CloseAll()
		}
	})
}

func (f *faultFixture) diskFull(t *testing.T, rng *rand.Rand, budget int64, short bool) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "s")
	copyTree(t, f.tmpl, dir)
	fs := faultfs.New(zrecord.OSFS)
	s := f.open(t, dir, fs)
	defer fs.CloseAll()
	fs.SetSpaceLimit(budget, short)
	what := fmt.Sprintf("%s with %d bytes of space (short writes %v)", f.op, budget, short)
	err := f.op.apply(s)
	states := []model{f.before, f.after}
	switch {
	case err == nil && fs.Full():
		op, _ := fs.LastFault()
		t.Errorf("%s: returned nil after a write (%s) failed with ENOSPC", what, op)
	case err == nil:
		states = []model{f.after}
	case !errors.Is(err, syscall.ENOSPC):
		t.Errorf("%s: %v, want an error wrapping ENOSPC", what, err)
	default:
		// The error names a file that ran out of space (an append that
		// writes its table aside has two writers, each of which may).
		named := false
		var paths []string
		for _, op := range fs.Faults() {
			named = named || strings.Contains(err.Error(), filepath.Base(op.Path))
			paths = append(paths, op.Path)
		}
		if !named {
			t.Errorf("%s: error %q names none of the files %v", what, err, paths)
		}
	}
	if merr := refusesOrMatches(s, rng, states...); merr != nil {
		t.Errorf("%s: in-process state after the call: %v", what, merr)
	}
	fs.SetSpaceLimit(-1, false)
	if err := s.Close(); err != nil {
		t.Logf("%s: Close: %v", what, err)
	}
	fs.CloseAll()
	f.reopenAndContinue(t, dir, rng, what, states...)
}

// TestPowerCut loses power during a Delete or a Compact of a store whose
// before-state was made durable (Close syncs), or right after the call
// returned: every write not made durable by a Sync may or may not have
// reached the disk, in any combination. Records that were durable before the
// call must survive it: the store reopens to the before- or the after-state.
func TestPowerCut(t *testing.T) {
	rng, seed := seeded(t)
	trials := 4
	if testing.Short() {
		trials = 1
	}
	for ci, c := range faultCases {
		if c.pre != nil {
			continue
		}
		kind := c.op(newRand(0), make(model, 64)).kind
		if kind != "delete" && kind != "compact" {
			continue // appended records are durable only after a Sync
		}
		t.Run(c.name, func(t *testing.T) {
			f := newFaultFixture(t, c, seed+int64(ci))
			for k := 1; k <= f.opWrites+1; k++ { // opWrites+1: the cut comes after the call
				for trial := range trials {
					f.powerCut(t, rng, k, trial)
					if t.Failed() {
						t.Fatalf("stopping at the first failing position (seed %d)", seed)
					}
				}
			}
		})
	}
}

// openDurable opens a fresh copy of the fixture's store on a fault layer
// that tracks which writes are durable, as the power-cut tests need.
func (f *faultFixture) openDurable(t *testing.T) (string, *faultfs.FS, *zrecord.Store) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "s")
	copyTree(t, f.tmpl, dir)
	fs := faultfs.New(zrecord.OSFS)
	fs.TrackDurability(true)
	return dir, fs, f.open(t, dir, fs)
}

func (f *faultFixture) powerCut(t *testing.T, rng *rand.Rand, k, trial int) {
	t.Helper()
	dir, fs, s := f.openDurable(t)
	fs.KeepLog(true)
	fs.Arm(k, faultfs.Crash)
	err := f.op.apply(s)
	// Which unsynced writes reach the disk: trial 0 keeps every other one,
	// the rest are random.
	keepSeed := rng.Uint64()
	kept := map[string][]int{}
	keep := func(path string, i int) bool {
		var ok bool
		if trial == 0 {
			ok = i%2 == 0
		} else {
			h := keepSeed ^ uint64(i)*0x9e3779b97f4a7c15 ^ uint64(len(path))<<32
			ok = newRand(int64(h)).IntN(2) == 0
		}
		if ok {
			kept[filepath.Base(path)] = append(kept[filepath.Base(path)], i)
		}
		return ok
	}
	if perr := fs.PowerCut(keep); perr != nil {
		t.Fatalf("PowerCut: %v", perr)
	}
	what := fmt.Sprintf("%s, power cut at write %d", f.op, k)
	f.reopenAndContinue(t, dir, rng, what, f.before, f.after)
	if t.Failed() {
		var lines []string
		for i, op := range fs.Log() {
			lines = append(lines, fmt.Sprintf("%d: %s", i+1, op))
		}
		t.Logf("the call returned %v; its writes:\n  %s\nunsynced writes that reached the disk (by file, in order per file): %v",
			err, strings.Join(lines, "\n  "), kept)
	}
}
