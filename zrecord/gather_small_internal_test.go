package zrecord

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
	"unsafe"
)

// TestGatherSmallTakesOrDeclines calls gatherSmall directly: a batch of
// the common case (raw records of the stride, in range) is taken and
// gathered right, in random order with repeats and over several chunks;
// every other case is declined with dst untouched, so that Gather's
// general path reports it; a damaged record is reported by gatherSmall
// itself when verification is on, naming the record, and copied as it is
// when it is off. It runs on one goroutine and with every batch of
// splitSmallMin records or more split over two (gather_split.go), where
// a case that declines in either half must leave dst untouched too.
func TestGatherSmallTakesOrDeclines(t *testing.T) {
	inSplitModes(t, testGatherSmallTakesOrDeclines)
}

// inSplitModes runs test with the short path on one goroutine, and with
// every batch of splitSmallMin records or more split over two, and checks
// that only the second split any.
func inSplitModes(t *testing.T, test func(t *testing.T)) {
	for _, c := range []struct {
		name  string
		bytes int64
	}{{"one goroutine", 1 << 62}, {"split", 1}} {
		t.Run(c.name, func(t *testing.T) {
			old, oldThreads := splitSmallBytes, threadSetting.Load()
			splitSmallBytes = c.bytes
			SetThreads(2)
			defer func() { splitSmallBytes = old; threadSetting.Store(oldThreads) }()
			before := splitGathers.Load()
			test(t)
			if split := splitGathers.Load() - before; (split > 0) != (c.bytes == 1) {
				t.Fatalf("%d split calls", split)
			}
		})
	}
}

func testGatherSmallTakesOrDeclines(t *testing.T) {
	const size, count, bad = 256, 700, 33
	dir := filepath.Join(t.TempDir(), "s")
	s, err := Create(dir, WithCodec(Raw), WithChunkCapacity(64<<10))
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(9, 10))
	recs := make([][]byte, count)
	for i := range recs {
		recs[i] = make([]byte, size)
		for k := range recs[i] {
			recs[i][k] = byte(rng.Uint32())
		}
	}
	if _, err := s.Append(recs); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Append([][]byte{make([]byte, size/2)}); err != nil { // record 700: another size
		t.Fatal(err)
	}
	chunks := *s.chunks.Load()
	if len(chunks) < 2 {
		t.Fatalf("%d chunks, want several", len(chunks))
	}
	call := func(idx []int64, stride int) (bool, []byte, error) {
		t.Helper()
		dst := bytes.Repeat([]byte{0xAA}, len(idx)*max(stride, 1))
		g := getGatherScratch(len(idx))
		defer gatherPool.Put(g)
		done, err := s.gatherSmall(idx, dst, stride, false, g)
		return done, dst, err
	}
	random := make([]int64, 300)
	for k := range random {
		random[k] = rng.Int64N(count)
	}
	random[7] = random[3] // a repeat
	// random with idx[at] = i.
	with := func(at int, i int64) []int64 {
		b := append([]int64(nil), random...)
		b[at] = i
		return b
	}
	done, dst, err := call(random, size)
	if !done || err != nil {
		t.Fatalf("a random batch of raw records: done %v, %v; want it taken", done, err)
	}
	for k, i := range random {
		if !bytes.Equal(dst[k*size:(k+1)*size], recs[i]) {
			t.Fatalf("slot %d holds other bytes than record %d", k, i)
		}
	}

	for _, c := range []struct {
		name   string
		idx    []int64
		stride int
	}{
		{"an index past the end", []int64{1, count + 1, 2}, size},
		{"a negative index", []int64{1, -1}, size},
		{"a record of another size", []int64{4, count}, size},
		{"a stride other than the records'", []int64{4, 5}, size - 1},
		{"a stride of zero", []int64{4}, 0},
		{"an index past the end, in the first half of a batch", with(10, count+1), size},
		{"an index past the end, in the second half of a batch", with(250, count+1), size},
		{"a record of another size, in the second half of a batch", with(299, count), size},
		{"a negative index, in the first half of a batch", with(0, -5), size},
	} {
		done, dst, err := call(c.idx, c.stride)
		if done || err != nil {
			t.Fatalf("%s: done %v, %v; want it declined", c.name, done, err)
		}
		if bytes.Count(dst, []byte{0xAA}) != len(dst) {
			t.Fatalf("%s: declined, but dst was written", c.name)
		}
		// Gather's general path reports it.
		if err := s.Gather(c.idx, make([]byte, len(c.idx)*c.stride), c.stride); err == nil {
			t.Fatalf("%s: Gather returned no error", c.name)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	// Damage one record's bytes on disk.
	path := filepath.Join(dir, chunkName(0))
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[bad*size+5] ^= 1
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	s, err = Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// The damaged record alone, among the records checked four at a time,
	// and after them.
	for _, idx := range [][]int64{{2, bad, 9}, {2, 8, bad, 9, 10, 11}, {2, 8, 9, 10, 11, bad}, with(20, bad), with(280, bad)} {
		done, _, err = call(idx, size)
		if !done || !errors.Is(err, ErrCorrupt) || !bytes.Contains([]byte(err.Error()), []byte("record 33 ")) {
			t.Fatalf("a damaged record in %v: done %v, %v; want ErrCorrupt naming record %d", idx, done, err, bad)
		}
	}
	s.SetVerify(false)
	done, dst, err = call([]int64{2, bad, 9}, size)
	if !done || err != nil || !bytes.Equal(dst[size:2*size], b[bad*size:(bad+1)*size]) {
		t.Fatalf("verification off: done %v, %v; want the damaged bytes copied", done, err)
	}
}

// TestSetGatherSmallTakesOrDeclines calls a Set's gatherSmall directly,
// on an eager set (NewSet) and a lazy one (OpenSet): a random batch over
// several stores, with repeats, is taken and lands in call order; a batch
// with a store that does not take part (compressed, or checked where the
// others are not) is declined with dst untouched, and Gather's general
// path still reads it right; a damaged record is reported by gatherSmall
// itself, naming its store's file and its index in that store, when
// verification is on, and copied as it is when it is off. As
// TestGatherSmallTakesOrDeclines, on one goroutine and split.
func TestSetGatherSmallTakesOrDeclines(t *testing.T) {
	inSplitModes(t, testSetGatherSmallTakesOrDeclines)
}

func testSetGatherSmallTakesOrDeclines(t *testing.T) {
	const size, per, parts, bad = 256, 300, 4, 77
	root := t.TempDir()
	rng := rand.New(rand.NewPCG(11, 12))
	var recs [][]byte
	var shards []Shard
	for p := range parts + 1 {
		codec := Raw
		if p == parts {
			codec = Zstd // the last store: outside the first parts
		}
		dir := filepath.Join(root, fmt.Sprint(p))
		s, err := Create(dir, WithCodec(codec))
		if err != nil {
			t.Fatal(err)
		}
		batch := make([][]byte, per)
		for i := range batch {
			batch[i] = make([]byte, size)
			for k := range batch[i] {
				batch[i][k] = byte(rng.Uint32() % 7) // compressible, for the zstd store
			}
		}
		if _, err := s.Append(batch); err != nil {
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		recs = append(recs, batch...)
		shards = append(shards, Shard{Dir: dir, Len: per})
	}
	open := func(t *testing.T, lazy bool) *Set {
		t.Helper()
		var set *Set
		var err error
		if lazy {
			set, err = OpenSet(shards, nil)
		} else {
			stores := make([]*Store, len(shards))
			for p, sh := range shards {
				if stores[p], err = Open(sh.Dir, WithReadOnly()); err != nil {
					t.Fatal(err)
				}
			}
			set, err = NewSet(stores)
		}
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { set.Close() })
		return set
	}
	call := func(t *testing.T, set *Set, idx []int64) (bool, []byte, error) {
		t.Helper()
		dst := bytes.Repeat([]byte{0xAA}, len(idx)*size)
		done, err := set.gatherSmall(idx, dst, size, false)
		return done, dst, err
	}
	random := make([]int64, 203) // not a multiple of four
	for k := range random {
		random[k] = rng.Int64N(parts * per)
	}
	random[9] = random[2] // a repeat
	withZstd := append([]int64{parts*per + 3}, random[:20]...)
	zstdLate := append(append([]int64(nil), random[:100]...), parts*per+3) // in a batch's second half
	for _, lazy := range []bool{false, true} {
		t.Run(map[bool]string{false: "eager", true: "lazy"}[lazy], func(t *testing.T) {
			set := open(t, lazy)
			done, dst, err := call(t, set, random)
			if !done || err != nil {
				t.Fatalf("a random batch of raw records: done %v, %v; want it taken", done, err)
			}
			for k, i := range random {
				if !bytes.Equal(dst[k*size:(k+1)*size], recs[i]) {
					t.Fatalf("slot %d holds other bytes than record %d", k, i)
				}
			}
			declined := func(what string, idx []int64) {
				t.Helper()
				done, dst, err := call(t, set, idx)
				if done || err != nil {
					t.Fatalf("%s: done %v, %v; want it declined", what, done, err)
				}
				if bytes.Count(dst, []byte{0xAA}) != len(dst) {
					t.Fatalf("%s: declined, but dst was written", what)
				}
				got := make([]byte, len(idx)*size)
				if err := set.Gather(idx, got, size); err != nil {
					t.Fatalf("%s: Gather: %v", what, err)
				}
				for k, i := range idx {
					if !bytes.Equal(got[k*size:(k+1)*size], recs[i]) {
						t.Fatalf("%s: Gather's slot %d holds other bytes than record %d", what, k, i)
					}
				}
			}
			done, dst, err = call(t, set, []int64{7, 3, 7, per - 1}) // one store's records
			if !done || err != nil || !bytes.Equal(dst[3*size:], recs[per-1]) {
				t.Fatalf("a batch of one store: done %v, %v; want it taken and gathered", done, err)
			}
			past := []int64{1, (parts+1)*per + 5}
			if done, dst, err := call(t, set, past); done || err != nil || bytes.Count(dst, []byte{0xAA}) != len(dst) {
				t.Fatalf("an index past the end: done %v, %v; want it declined, dst untouched", done, err)
			}
			if err := set.Gather(past, make([]byte, 2*size), size); !errors.Is(err, ErrIndexOutOfRange) {
				t.Fatalf("an index past the end: Gather returned %v, want ErrIndexOutOfRange", err)
			}
			declined("a batch with a compressed store", withZstd)
			declined("a batch with a compressed store in its second half", zstdLate)
			if !lazy { // a lazy set's stores follow the set's SetVerify
				set.Stores()[1].SetVerify(false)
				declined("checked and unchecked stores", random)
			}
		})
	}

	// Damage one record's bytes on disk: record bad of store 2.
	path := filepath.Join(shards[2].Dir, chunkName(0))
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[bad*size+9] ^= 4
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	global := int64(2*per + bad)
	late := append([]int64(nil), random...) // a batch of 203 with it in its second half
	late[150] = global
	for _, lazy := range []bool{false, true} {
		set := open(t, lazy)
		// Among the records checked four at a time, and after them.
		for _, idx := range [][]int64{{5, global, 700, 9, 1000}, {5, 700, 9, 1000, global}, late} {
			done, _, err := call(t, set, idx)
			if !done || !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), fmt.Sprintf("record %d in %s", bad, shards[2].Dir)) {
				t.Fatalf("lazy %v, a damaged record in %v: done %v, %v; want ErrCorrupt naming record %d of %s", lazy, idx, done, err, bad, shards[2].Dir)
			}
		}
		set.SetVerify(false)
		done, dst, err := call(t, set, []int64{5, 700, global, 9})
		if !done || err != nil || !bytes.Equal(dst[2*size:3*size], b[bad*size:(bad+1)*size]) {
			t.Fatalf("lazy %v, verification off: done %v, %v; want the damaged bytes copied", lazy, done, err)
		}
	}
}

// TestSplitGathersConcurrently runs split short-path gathers from several
// goroutines at once, with two Ps and with one (where a block waiting for
// a half must let the goroutine locating it run): every batch lands right,
// and no call waits forever.
func TestSplitGathersConcurrently(t *testing.T) {
	const size, count = 256, 4096
	s, err := Create(filepath.Join(t.TempDir(), "s"), WithCodec(Raw))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	recs := make([][]byte, count)
	for i := range recs {
		recs[i] = bytes.Repeat([]byte{byte(i), byte(i >> 8)}, size/2)
	}
	if _, err := s.Append(recs); err != nil {
		t.Fatal(err)
	}
	for _, procs := range []int{2, 1} {
		t.Run(fmt.Sprintf("GOMAXPROCS=%d", procs), func(t *testing.T) {
			defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
			oldThreads := threadSetting.Load()
			SetThreads(2)
			defer threadSetting.Store(oldThreads)
			before := splitGathers.Load()
			errs := make(chan error, 4)
			for w := range 4 {
				go func() {
					rng := rand.New(rand.NewPCG(uint64(w), 1))
					idx := make([]int64, 200)
					dst := make([]byte, len(idx)*size)
					for range 300 {
						for k := range idx {
							idx[k] = rng.Int64N(count)
						}
						if err := s.Gather(idx, dst, size); err != nil {
							errs <- err
							return
						}
						for k, i := range idx {
							if !bytes.Equal(dst[k*size:(k+1)*size], recs[i]) {
								errs <- fmt.Errorf("slot %d holds other bytes than record %d", k, i)
								return
							}
						}
					}
					errs <- nil
				}()
			}
			for range 4 {
				select {
				case err := <-errs:
					if err != nil {
						t.Fatal(err)
					}
				case <-time.After(60 * time.Second):
					t.Fatal("concurrent split gathers did not end in 60 s")
				}
			}
			if splitGathers.Load() == before {
				t.Fatal("no gather was split")
			}
		})
	}
}

// TestCopySrcsBothRoutes runs copySrcs on every path this CPU has, with
// its checked records sent both to copyCRCStrided (stridedMax above the
// stride) and to copyCRC one at a time (stridedMax 0), whichever the path
// would choose: each route copies every record to its place, passes a
// batch whose checksums match, and reports the first record whose stored
// checksum does not match, with the checksum it computed, wherever that
// record falls (in a group of four, or in the tail the groups leave).
func TestCopySrcsBothRoutes(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	pool := make([]byte, 1<<20)
	for i := range pool {
		pool[i] = byte(rng.Uint32())
	}
	for _, p := range copyCRCPaths() {
		for _, strided := range []bool{true, false} {
			forced := p
			forced.stridedMax = 0
			if strided {
				forced.stridedMax = 1 << 30
			}
			for _, stride := range []int{8, 64, 100, 128, 256, 1024, 2048} {
				t.Run(fmt.Sprintf("%s/strided=%v/%dB", p.name, strided, stride), func(t *testing.T) {
					const n = 23 // five groups of four and a tail of three
					srcs := make([]unsafe.Pointer, n)
					locs := make([]entry, n)
					want := make([]byte, 0, n*stride)
					for k := range n {
						o := rng.IntN(len(pool) - stride)
						srcs[k] = unsafe.Pointer(&pool[o])
						locs[k].sum = dataSum(pool[o : o+stride])
						want = append(want, pool[o:o+stride]...)
					}
					withPath(t, forced, func() {
						dst := make([]byte, n*stride)
						sums := make([]uint32, n)
						if k, _, bad := copySrcs(dst, srcs, locs, stride, true, sums); bad {
							t.Fatalf("a sound batch reported record %d", k)
						}
						if !bytes.Equal(dst, want) {
							t.Fatal("the checked copy differs from the records")
						}
						for _, k := range []int{0, 6, 19, 20, 22} {
							damaged := append([]entry(nil), locs...)
							damaged[k].sum ^= 1 << 7
							clear(dst)
							got, sum, bad := copySrcs(dst, srcs, damaged, stride, true, sums)
							if !bad || got != k || sum != locs[k].sum {
								t.Fatalf("stored checksum of record %d wrong: reported (%d, %08x, %v), want (%d, %08x, true)", k, got, sum, bad, k, locs[k].sum)
							}
						}
					})
				})
			}
		}
	}
}
