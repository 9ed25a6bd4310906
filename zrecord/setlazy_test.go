package zrecord_test

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/loaderx/loaderx/zrecord"
)

// The lazy set (OpenSet): it reads like its records whatever its cap, opens
// only the stores a call touches, keeps no more open than its cap while
// goroutines read at once, never closes a store a call uses, checks a store
// it opens again, and loses nothing when a store fails to open.

// ztShards writes one closed store per shard (records of size bytes, or of
// varied sizes when size is 0) and returns the shard list and the records.
func ztShards(t *testing.T, size int, shards []setShard) ([]zrecord.Shard, [][]byte) {
	t.Helper()
	root := t.TempDir()
	var all [][]byte
	var list []zrecord.Shard
	for k, sh := range shards {
		dir := filepath.Join(root, fmt.Sprintf("shard%d", k))
		s, err := zrecord.Create(dir, zrecord.WithCodec(sh.codec))
		if err != nil {
			t.Fatal(err)
		}
		var recs [][]byte
		for range sh.count {
			n := size
			if n == 0 {
				n = 1 + (len(all)*37)%3000
			}
			recs = append(recs, ztRecord(len(all)+len(recs), n))
		}
		if len(recs) > 0 {
			if _, err := s.Append(recs); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		all = append(all, recs...)
		list = append(list, zrecord.Shard{Dir: dir, Len: int64(sh.count)})
	}
	return list, all
}

// countingOpener opens stores read-only, counting the opens of each shard,
// and lets a test fail an open or look at the set while a store opens.
type countingOpener struct {
	mu    sync.Mutex
	opens map[int]int
	total atomic.Int64
	fail  func(k int) error // nil: never
	while func()            // nil: nothing
}

func newCountingOpener() *countingOpener { return &countingOpener{opens: map[int]int{}} }

func (o *countingOpener) open(k int, dir string) (*zrecord.Store, error) {
	if o.while != nil {
		o.while()
	}
	if o.fail != nil {
		if err := o.fail(k); err != nil {
			return nil, err
		}
	}
	o.mu.Lock()
	o.opens[k]++
	o.mu.Unlock()
	o.total.Add(1)
	return zrecord.Open(dir, zrecord.WithReadOnly())
}

func (o *countingOpener) count(k int) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.opens[k]
}

// ztLazy opens a lazy set over shards with o, capped at maxOpen (0: the
// shared cache), closed at the test's end.
func ztLazy(t *testing.T, shards []zrecord.Shard, o *countingOpener, maxOpen int) *zrecord.Set {
	t.Helper()
	var opts []zrecord.SetOption
	if maxOpen > 0 {
		opts = append(opts, zrecord.WithMaxOpen(maxOpen))
	}
	set, err := zrecord.OpenSet(shards, o.open, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { set.Close() })
	return set
}

// storeOfRecord returns the shard that holds global index i.
func storeOfRecord(shards []zrecord.Shard, i int64) (int, int64) {
	for k, sh := range shards {
		if i < sh.Len {
			return k, i
		}
		i -= sh.Len
	}
	return -1, -1
}

func TestLazySetReadsLikeItsRecords(t *testing.T) {
	mixed := []setShard{{zrecord.Zstd, 30}, {zrecord.Raw, 0}, {zrecord.Raw, 41}, {zrecord.Narrow, 25}, {zrecord.Raw, 1}, {zrecord.Zstd, 60}}
	cases := []struct {
		name    string
		size    int
		shards  []setShard
		maxOpen int
	}{
		{"one store, cap 1", 512, []setShard{{zrecord.Raw, 200}}, 1},
		{"mixed, shared cache", 1024, mixed, 0},
		{"mixed, cap 1", 1024, mixed, 1},
		{"mixed, cap 2", 1024, mixed, 2},
		{"mixed, cap 5", 1024, mixed, 5},
		{"ragged, cap 3", 0, mixed, 3},
		{"big batch fans out, cap 2", 64 << 10, []setShard{{zrecord.Raw, 20}, {zrecord.Raw, 20}, {zrecord.Raw, 20}}, 2},
		{"many tiny, cap 4", 64, []setShard{{zrecord.Raw, 1}, {zrecord.Raw, 2}, {zrecord.Raw, 1}, {zrecord.Raw, 3}, {zrecord.Raw, 1}, {zrecord.Raw, 2}, {zrecord.Raw, 1}}, 4},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			shards, recs := ztShards(t, tc.size, tc.shards)
			o := newCountingOpener()
			set := ztLazy(t, shards, o, tc.maxOpen)
			if set.Len() != int64(len(recs)) || set.NumStores() != len(shards) {
				t.Fatalf("Len %d, %d stores; want %d, %d", set.Len(), set.NumStores(), len(recs), len(shards))
			}
			if o.total.Load() != 0 {
				t.Fatalf("OpenSet opened %d stores", o.total.Load())
			}
			rng := rand.New(rand.NewPCG(7, uint64(len(tc.name))))
			for round := range 30 {
				n := 1 + rng.IntN(3*len(recs))
				idx := make([]int64, n)
				for k := range idx {
					idx[k] = rng.Int64N(int64(len(recs)))
				}
				if round == 0 { // every record, reversed
					idx = idx[:0]
					for i := len(recs) - 1; i >= 0; i-- {
						idx = append(idx, int64(i))
					}
					n = len(idx)
				}
				var want []byte
				offsets := []int64{0}
				for _, i := range idx {
					want = append(want, recs[i]...)
					offsets = append(offsets, int64(len(want)))
				}
				if tc.size > 0 {
					dst := make([]byte, len(want))
					if err := set.Gather(idx, dst, tc.size); err != nil {
						t.Fatal(err)
					}
					if !bytes.Equal(dst, want) {
						t.Fatalf("round %d: Gather of %d records differs", round, n)
					}
				}
				sizes := make([]int64, n)
				got := make([]byte, len(want))
				need, err := set.GatherRagged(idx, sizes, got)
				if err != nil || need != int64(len(want)) || !bytes.Equal(got, want) {
					t.Fatalf("round %d: GatherRagged = %d, %v; same bytes %v", round, need, err, bytes.Equal(got, want))
				}
				short := make([]byte, len(want)/2)
				if need, err := set.GatherRagged(idx, sizes, short); err != nil || need != int64(len(want)) {
					t.Fatalf("round %d: GatherRagged into a short buffer = %d, %v", round, need, err)
				}
				packed := make([]byte, len(want))
				if err := set.GatherPacked(idx, packed, offsets); err != nil || !bytes.Equal(packed, want) {
					t.Fatalf("round %d: GatherPacked: %v", round, err)
				}
				if err := set.Sizes(idx, sizes); err != nil {
					t.Fatal(err)
				}
				store, chunk, off, length := make([]uint32, n), make([]uint32, n), make([]uint32, n), make([]uint32, n)
				if err := set.Spans(idx, store, chunk, off, length); err != nil {
					t.Fatal(err)
				}
				for k, i := range idx {
					if sizes[k] != int64(len(recs[i])) {
						t.Fatalf("Sizes[%d] = %d, want %d", k, sizes[k], len(recs[i]))
					}
					if s, _ := storeOfRecord(shards, i); int(store[k]) != s {
						t.Fatalf("Spans: record %d in store %d, want %d", i, store[k], s)
					}
				}
				if p := zrecord.SetPinned(set); p != 0 {
					t.Fatalf("round %d: %d pins left after the calls returned", round, p)
				}
				if mine, _ := zrecord.SetOpenNow(set); tc.maxOpen > 0 && mine > tc.maxOpen {
					t.Fatalf("round %d: %d stores open, cap %d", round, mine, tc.maxOpen)
				}
			}
			nonEmpty := 0
			for k, sh := range shards {
				if sh.Len > 0 {
					nonEmpty++
				}
				if tc.maxOpen == 0 || tc.maxOpen >= len(shards) {
					if c := o.count(k); c > 1 {
						t.Fatalf("store %d opened %d times with room for all", k, c)
					}
				}
			}
			if tc.maxOpen > 0 && tc.maxOpen < nonEmpty && o.total.Load() <= int64(nonEmpty) {
				t.Fatalf("%d opens of %d stores under a cap of %d: nothing was evicted", o.total.Load(), nonEmpty, tc.maxOpen)
			}
		})
	}
}

// A call opens only the stores its batch touches: a set of 20,000 shards,
// almost none of which exist, reads the records of the few that do.
func TestLazySetOpensOnlyWhatABatchTouches(t *testing.T) {
	real, recs := ztShards(t, 256, []setShard{{zrecord.Raw, 10}, {zrecord.Zstd, 10}, {zrecord.Raw, 10}})
	const n = 20000
	shards := make([]zrecord.Shard, n)
	root := t.TempDir()
	for k := range shards {
		shards[k] = zrecord.Shard{Dir: filepath.Join(root, fmt.Sprint("absent", k)), Len: 10}
	}
	at := []int{17, 9000, n - 1} // where the real stores sit
	for j, k := range at {
		shards[k] = real[j]
	}
	o := newCountingOpener()
	set := ztLazy(t, shards, o, 0)
	idx := []int64{9000*10 + 3, 17*10 + 9, (n-1)*10 + 0, 17*10 + 1, 9000*10 + 3}
	want := [][]byte{recs[10+3], recs[9], recs[20], recs[1], recs[13]}
	dst := make([]byte, len(idx)*256)
	for range 3 {
		if err := set.Gather(idx, dst, 256); err != nil {
			t.Fatal(err)
		}
		for k := range idx {
			if !bytes.Equal(dst[k*256:(k+1)*256], want[k]) {
				t.Fatalf("slot %d differs", k)
			}
		}
	}
	if got := o.total.Load(); got != 3 {
		t.Fatalf("3 gathers over 3 stores of %d opened %d stores", n, got)
	}
	err := set.Gather([]int64{17 * 10, 5*10 + 2}, dst, 256)
	if !errors.Is(err, zrecord.ErrNotStore) || !strings.Contains(err.Error(), shards[5].Dir) {
		t.Fatalf("a batch touching an absent store: %v", err)
	}
	if zrecord.SetPinned(set) != 0 {
		t.Fatal("a failed call left pins")
	}
}

// Goroutines reading at once never see more stores open than the cap, and
// never a store closed under them; every record reads right.
func TestLazySetPinsUnderConcurrency(t *testing.T) {
	const size = 2048
	var specs []setShard
	for k := range 12 {
		specs = append(specs, setShard{[]zrecord.Codec{zrecord.Raw, zrecord.Zstd, zrecord.Raw}[k%3], 5 + k})
	}
	shards, recs := ztShards(t, size, specs)
	rounds := 150
	if testing.Short() {
		rounds = 40
	}
	for _, maxOpen := range []int{1, 3, 7} {
		t.Run(fmt.Sprint("cap ", maxOpen), func(t *testing.T) {
			o := newCountingOpener()
			var set *zrecord.Set
			var over atomic.Int64
			o.while = func() { // a store is about to open: the cache has reserved its room
				if _, open := zrecord.SetOpenNow(set); open > maxOpen {
					over.Store(int64(open))
				}
			}
			set = ztLazy(t, shards, o, maxOpen)
			var wg sync.WaitGroup
			errs := make(chan error, 8)
			for g := range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					rng := rand.New(rand.NewPCG(uint64(g), 11))
					for r := range rounds {
						n := 1 + rng.IntN(24)
						idx := make([]int64, n)
						for k := range idx {
							idx[k] = rng.Int64N(int64(len(recs)))
						}
						dst := make([]byte, n*size)
						var err error
						if r%2 == 0 {
							err = set.Gather(idx, dst, size)
						} else {
							_, err = set.GatherRagged(idx, make([]int64, n), dst)
						}
						if err != nil {
							errs <- err
							return
						}
						for k, i := range idx {
							if !bytes.Equal(dst[k*size:(k+1)*size], recs[i]) {
								errs <- fmt.Errorf("goroutine %d round %d: record %d differs", g, r, i)
								return
							}
						}
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			if v := over.Load(); v > 0 {
				t.Fatalf("%d stores open or opening at once, cap %d", v, maxOpen)
			}
			if p := zrecord.SetPinned(set); p != 0 {
				t.Fatalf("%d pins left", p)
			}
			if o.total.Load() <= int64(maxOpen) {
				t.Fatalf("only %d opens: the cap was never reached", o.total.Load())
			}
		})
	}
}

// A store opened again must be the one the set first opened; a store that
// is not what the set was made with is refused at its first open.
func TestLazySetChecksTheStoresItOpens(t *testing.T) {
	const size = 128
	shards, recs := ztShards(t, size, []setShard{{zrecord.Raw, 6}, {zrecord.Raw, 6}, {zrecord.Raw, 6}})
	set := ztLazy(t, shards, newCountingOpener(), 1)
	dst := make([]byte, 2*size)
	read := func(i int64) error { return set.Gather([]int64{i}, dst, size) }
	if err := read(0); err != nil { // store 0 opens
		t.Fatal(err)
	}
	if err := read(6); err != nil { // store 1 opens, store 0 is closed
		t.Fatal(err)
	}
	// Store 0 is replaced by one of the same length and record size.
	fresh := filepath.Join(t.TempDir(), "other")
	s, err := zrecord.Create(fresh)
	if err != nil {
		t.Fatal(err)
	}
	other := make([][]byte, 6)
	for i := range other {
		other[i] = bytes.Repeat([]byte{byte(i)}, size)
	}
	if _, err := s.Append(other); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if err := os.RemoveAll(shards[0].Dir); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(fresh, shards[0].Dir); err != nil {
		t.Fatal(err)
	}
	before := bytes.Clone(dst)
	err = read(2)
	if !errors.Is(err, zrecord.ErrCorrupt) || !strings.Contains(err.Error(), shards[0].Dir) || !strings.Contains(err.Error(), "changed since the set first opened it") {
		t.Fatalf("reading a replaced store: %v", err)
	}
	if !bytes.Equal(dst, before) {
		t.Fatal("a refused read wrote into dst")
	}
	if err := read(13); err != nil { // the others still read
		t.Fatal(err)
	}
	if !bytes.Equal(dst[:size], recs[13]) {
		t.Fatal("record 13 differs")
	}
	// A store removed while the set has it closed.
	if err := os.RemoveAll(shards[1].Dir); err != nil {
		t.Fatal(err)
	}
	if err := read(7); !errors.Is(err, zrecord.ErrNotStore) || !strings.Contains(err.Error(), shards[1].Dir) {
		t.Fatalf("reading a removed store: %v", err)
	}

	// Lengths that are not the stores' are refused at the first open.
	wrong := append([]zrecord.Shard(nil), shards[2])
	wrong[0].Len = 5
	bad := ztLazy(t, wrong, newCountingOpener(), 0)
	err = bad.Gather([]int64{0}, dst, size)
	if !errors.Is(err, zrecord.ErrCorrupt) || !strings.Contains(err.Error(), "holds 6 records, the set was made with 5") {
		t.Fatalf("a store of another length: %v", err)
	}
	w, err := zrecord.OpenSet(shards[2:], func(_ int, dir string) (*zrecord.Store, error) { return zrecord.Open(dir) })
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := w.Gather([]int64{0}, dst, size); !errors.Is(err, zrecord.ErrInvalidArgument) || !strings.Contains(err.Error(), "read-only") {
		t.Fatalf("an opener that opens writable: %v", err)
	}
}

// A store that fails to open fails the call before a byte is written and
// leaves nothing pinned or reserved; running out of descriptors or
// mappings names the limit; the next call opens the store.
func TestLazySetOpenFailuresLoseNothing(t *testing.T) {
	const size = 256
	shards, recs := ztShards(t, size, []setShard{{zrecord.Raw, 4}, {zrecord.Raw, 4}, {zrecord.Raw, 4}})
	for _, tc := range []struct {
		cause error
		names []string
	}{
		{&os.PathError{Op: "open", Path: "x", Err: syscall.EMFILE}, []string{"RLIMIT_NOFILE", "ulimit -n", "WithMaxOpen, 2 now", "max_open_shards"}},
		{&os.PathError{Op: "open", Path: "x", Err: syscall.ENFILE}, []string{"fs.file-max", "WithMaxOpen"}},
		{fmt.Errorf("map x: %w", syscall.ENOMEM), []string{"vm.max_map_count", "RLIMIT_AS", "WithMaxOpen", "max_open_shards"}},
		{errors.New("the opener's own failure"), []string{"the opener's own failure"}},
	} {
		t.Run(tc.cause.Error(), func(t *testing.T) {
			o := newCountingOpener()
			var failing atomic.Bool
			failing.Store(true)
			o.fail = func(k int) error {
				if k == 2 && failing.Load() {
					return tc.cause
				}
				return nil
			}
			set := ztLazy(t, shards, o, 2)
			idx := []int64{0, 9, 5}
			dst := make([]byte, len(idx)*size)
			err := set.Gather(idx, dst, size)
			if !errors.Is(err, tc.cause) {
				t.Fatalf("err = %v, want one wrapping %v", err, tc.cause)
			}
			for _, w := range tc.names {
				if !strings.Contains(err.Error(), w) {
					t.Fatalf("%v does not name %q", err, w)
				}
			}
			if !bytes.Equal(dst, make([]byte, len(dst))) {
				t.Fatal("a failed gather wrote into dst")
			}
			if p := zrecord.SetPinned(set); p != 0 {
				t.Fatalf("%d pins left", p)
			}
			if _, open := zrecord.SetOpenNow(set); open > 2 {
				t.Fatalf("%d stores open or reserved after the failure, cap 2", open)
			}
			failing.Store(false)
			if err := set.Gather(idx, dst, size); err != nil {
				t.Fatal(err)
			}
			for k, i := range idx {
				if !bytes.Equal(dst[k*size:(k+1)*size], recs[i]) {
					t.Fatalf("slot %d differs", k)
				}
			}
		})
	}
}

// A batch read in rounds (more stores than the cap) checks every index and
// size, in every store, before it writes a byte.
func TestLazySetRoundsCheckBeforeWriting(t *testing.T) {
	const size = 64
	shards, _ := ztShards(t, size, []setShard{{zrecord.Raw, 3}, {zrecord.Raw, 3}, {zrecord.Raw, 3}, {zrecord.Raw, 3}})
	odd, _ := ztShards(t, size+8, []setShard{{zrecord.Raw, 3}}) // the last store's records are larger
	shards = append(shards, odd...)
	set := ztLazy(t, shards, newCountingOpener(), 2)
	idx := []int64{0, 3, 6, 9, 12, 1}
	for _, tc := range []struct {
		name string
		err  error
		run  func(dst []byte) error
	}{
		{"a record of another size", zrecord.ErrSizeMismatch, func(dst []byte) error { return set.Gather(idx, dst, size) }},
		{"an index past the end", zrecord.ErrIndexOutOfRange, func(dst []byte) error { return set.Gather([]int64{0, 3, 6, 9, 15}, dst, size) }},
		{"a slot of another size", zrecord.ErrSizeMismatch, func(dst []byte) error {
			return set.GatherPacked(idx, dst, []int64{0, 64, 128, 192, 256, 320, 384})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dst := bytes.Repeat([]byte{0xa5}, 8*(size+8))
			before := bytes.Clone(dst)
			err := tc.run(dst)
			if !errors.Is(err, tc.err) {
				t.Fatalf("err = %v, want %v", err, tc.err)
			}
			if tc.err == zrecord.ErrSizeMismatch && !strings.Contains(err.Error(), shards[4].Dir) {
				t.Fatalf("%v does not name %s", err, shards[4].Dir)
			}
			if !bytes.Equal(dst, before) {
				t.Fatal("a refused call wrote into dst")
			}
		})
	}
}

// A residency map given to a position holds for its store whenever it
// opens, before its first open and after it was closed for room.
func TestLazySetKeepsResidencyPerPosition(t *testing.T) {
	const size = 512
	shards, recs := ztShards(t, size, []setShard{{zrecord.Raw, 8}, {zrecord.Raw, 8}})
	set := ztLazy(t, shards, newCountingOpener(), 1)
	held := make([]byte, 1) // the one page of store 1's one chunk
	if err := set.SetResidency(1, chunkMap(held, 1<<20)); err != nil {
		t.Fatal(err)
	}
	dst := make([]byte, size)
	ztIs(t, set.Gather([]int64{9}, dst, size), zrecord.ErrNotResident) // the store opens with the map
	held[0] = 1
	if err := set.Gather([]int64{9}, dst, size); err != nil || !bytes.Equal(dst, recs[9]) {
		t.Fatalf("a held page: %v", err)
	}
	if err := set.Gather([]int64{1}, dst, size); err != nil { // store 0 takes the only room
		t.Fatal(err)
	}
	held[0] = 0
	ztIs(t, set.Gather([]int64{9}, dst, size), zrecord.ErrNotResident) // opened again, with the map
	if err := set.SetResidency(1, nil); err != nil {
		t.Fatal(err)
	}
	if err := set.Gather([]int64{9}, dst, size); err != nil {
		t.Fatalf("the map removed: %v", err)
	}
	ztIs(t, set.SetResidency(1, chunkMap(held, 0)), zrecord.ErrInvalidArgument)
	ztIs(t, set.SetResidency(2, chunkMap(held, 1<<20)), zrecord.ErrInvalidArgument)
	// CheckBytes goes to the store at its position, opening it.
	data, err := os.ReadFile(filepath.Join(shards[0].Dir, "0.chunk"))
	if err != nil {
		t.Fatal(err)
	}
	if err := set.CheckBytes(0, []int64{3}, 0, 0, data); err != nil {
		t.Fatal(err)
	}
	data[3*size] ^= 1
	ztIs(t, set.CheckBytes(0, []int64{3}, 0, 0, data), zrecord.ErrCorrupt)
}

// Codec, Stats and SetVerify cover every store, open or not.
func TestLazySetCodecStatsAndVerify(t *testing.T) {
	shards, recs := ztShards(t, 300, []setShard{{zrecord.Raw, 5}, {zrecord.Zstd, 5}, {zrecord.Raw, 5}})
	set := ztLazy(t, shards, newCountingOpener(), 1)
	if c := set.Codec(); c != zrecord.Zstd {
		t.Fatalf("Codec = %v", c)
	}
	set.SetVerify(false)
	st, err := set.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if st.Length != int64(len(recs)) || st.Codec != zrecord.Zstd || st.Verified {
		t.Fatalf("Stats = %+v", st)
	}
	set.SetVerify(true)
	if st, err = set.Stats(); err != nil || !st.Verified {
		t.Fatalf("Stats after SetVerify(true) = %+v, %v", st, err)
	}
}

// Close while goroutines read: each call returns its records or ErrClosed,
// and every call after it ErrClosed.
func TestLazySetCloseDuringReads(t *testing.T) {
	const size = 1024
	shards, recs := ztShards(t, size, []setShard{{zrecord.Raw, 20}, {zrecord.Zstd, 20}, {zrecord.Raw, 20}, {zrecord.Raw, 20}})
	set, err := zrecord.OpenSet(shards, nil, zrecord.WithMaxOpen(2))
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var closed atomic.Bool
	var reads atomic.Int64
	errs := make(chan error, 4)
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 3))
			for {
				idx := []int64{rng.Int64N(80), rng.Int64N(80), rng.Int64N(80)}
				dst := make([]byte, 3*size)
				was := closed.Load()
				err := set.Gather(idx, dst, size)
				if errors.Is(err, zrecord.ErrClosed) {
					return
				}
				if err != nil || was {
					errs <- fmt.Errorf("err %v (closed before the call: %v)", err, was)
					return
				}
				for k, i := range idx {
					if !bytes.Equal(dst[k*size:(k+1)*size], recs[i]) {
						errs <- fmt.Errorf("record %d differs", i)
						return
					}
				}
				reads.Add(1)
			}
		}()
	}
	for reads.Load() < 40 && len(errs) == 0 {
		runtime.Gosched()
	}
	closed.Store(true)
	if err := set.Close(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	ztIs(t, set.Gather([]int64{0}, make([]byte, size), size), zrecord.ErrClosed)
	if err := set.Close(); err != nil {
		t.Fatalf("closing twice: %v", err)
	}
}

func TestOpenSetRefusesBadInput(t *testing.T) {
	shards, _ := ztShards(t, 16, []setShard{{zrecord.Raw, 2}, {zrecord.Raw, 2}})
	for _, tc := range []struct {
		name   string
		shards []zrecord.Shard
		opts   []zrecord.SetOption
	}{
		{"no shard", nil, nil},
		{"a negative length", []zrecord.Shard{{Dir: shards[0].Dir, Len: -1}}, nil},
		{"a directory twice", []zrecord.Shard{shards[0], shards[1], shards[0]}, nil},
		{"a cap of 0", shards, []zrecord.SetOption{zrecord.WithMaxOpen(0)}},
		{"a negative cap", shards, []zrecord.SetOption{zrecord.WithMaxOpen(-3)}},
		{"lengths past 2^62", []zrecord.Shard{{Dir: "a", Len: 1 << 61}, {Dir: "b", Len: 1 << 61}, {Dir: "c", Len: 1}}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := zrecord.OpenSet(tc.shards, nil, tc.opts...)
			ztIs(t, err, zrecord.ErrInvalidArgument)
		})
	}
	if n := zrecord.DefaultMaxOpen(); n < 64 || n > 1<<20 {
		t.Fatalf("DefaultMaxOpen = %d", n)
	}
}
