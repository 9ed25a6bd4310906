package zrecord_test

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/loaderx/loaderx/zrecord"
)

// pipelineBatch is a batch that exercises every corner of a pipelined
// append: empty records, incompressible ones (stored raw), records larger
// than a part, and enough bytes for many parts and several chunks.
func pipelineBatch(rng *rand.Rand) [][]byte {
	recs := genBatch(rng, 40, 24<<10)
	recs = append(recs, nil, bigRecord(rng, 40<<10, 70<<10), []byte{})
	recs = append(recs, genBatch(rng, 30, 6<<10)...)
	recs = append(recs, bigRecord(rng, 1, 64), nil)
	return recs
}

// storeFiles reads every file of a store directory.
func storeFiles(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		files[e.Name()] = b
	}
	return files
}

// A batch appended in pipelined parts leaves the same bytes on disk, file
// for file, as the same batch compressed whole and then written, and reads
// back as the model says, before and after a reopen; appends of either kind
// go on after it.
func TestAppendPipelinedMatchesWhole(t *testing.T) {
	rng, _ := seeded(t)
	for _, c := range codecCases {
		t.Run(c.name, func(t *testing.T) {
			pre := genBatch(rng, 5, 8<<10)
			batch := pipelineBatch(rng)
			after := genBatch(rng, 4, 8<<10)
			var dirs []string
			var pipelined []int64 // pipelined appends the batch's Append made
			// whole, then two part sizes, then a part size with the table
			// written aside (the runs' files must all be the same)
			for run, step := range []int64{1 << 40, 8 << 10, 3 << 10, 3 << 10} {
				dir := filepath.Join(t.TempDir(), fmt.Sprintf("run%d", run))
				aside := int64(0)
				if run == 3 {
					aside = 1
				}
				s, err := zrecord.Create(dir, createOpts(t, c, 32<<10)...)
				if err != nil {
					t.Fatal(err)
				}
				var m model
				for i, b := range [][][]byte{pre, batch, after} {
					before := zrecord.PipelinedAppends()
					func() {
						defer zrecord.SetPipeStepPerThread(zrecord.SetPipeStepPerThread(step))
						defer zrecord.SetTableAsideEntries(zrecord.SetTableAsideEntries(aside))
						first, err := s.Append(b)
						if err != nil {
							t.Fatalf("step %d: Append of %d records: %v", step, len(b), err)
						}
						if first != int64(len(m)) {
							t.Fatalf("step %d: Append returned %d, want %d", step, first, len(m))
						}
					}()
					if i == 1 {
						pipelined = append(pipelined, zrecord.PipelinedAppends()-before)
					}
					m = m.appended(b)
					if err := diffStore(s, m, rng); err != nil {
						t.Fatalf("step %d: %v", step, err)
					}
				}
				st, err := s.Stats()
				if err != nil {
					t.Fatal(err)
				}
				if st.Chunks < 3 {
					t.Fatalf("step %d: %d chunks; the batch should span several", step, st.Chunks)
				}
				if err := s.Close(); err != nil {
					t.Fatal(err)
				}
				s, err = zrecord.Open(dir, zrecord.WithReadOnly())
				if err != nil {
					t.Fatal(err)
				}
				if err := diffStore(s, m, rng); err != nil {
					t.Fatalf("step %d, reopened: %v", step, err)
				}
				s.Close()
				dirs = append(dirs, dir)
			}
			// Every codec's batch is pipelined when its parts are smaller
			// than the batch.
			for i, p := range pipelined {
				if want := int64(min(i, 1)); p != want {
					t.Fatalf("run %d: %d pipelined appends for the batch, want %d", i, p, want)
				}
			}
			want := storeFiles(t, dirs[0])
			for _, dir := range dirs[1:] {
				got := storeFiles(t, dir)
				if len(got) != len(want) {
					t.Fatalf("%s holds %d files, the whole append %d", dir, len(got), len(want))
				}
				for name, b := range want {
					if !bytes.Equal(got[name], b) {
						t.Fatalf("%s: %s differs from the whole append's (%d vs %d bytes)", dir, name, len(got[name]), len(b))
					}
				}
			}
		})
	}
}

// Readers running beside pipelined appends only ever see whole batches:
// Len moves from one batch boundary to the next, and every record below it
// reads back intact.
func TestAppendPipelinedReadersSeeWholeBatches(t *testing.T) {
	defer zrecord.SetPipeStepPerThread(zrecord.SetPipeStepPerThread(4 << 10))
	s, _ := ztCreate(t, zrecord.Zstd, zrecord.WithChunkCapacity(64<<10))
	const batches = 60
	var bounds sync.Map // Len values at batch boundaries
	bounds.Store(int64(0), true)
	var stop atomic.Bool
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for r := range 2 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(r), 3))
			var dst []byte
			for !stop.Load() {
				n := s.Len()
				if _, ok := bounds.Load(n); !ok {
					errs <- fmt.Errorf("Len() = %d is not a batch boundary", n)
					return
				}
				if n == 0 {
					continue
				}
				idx := []int64{n - 1, rng.Int64N(n), rng.Int64N(n)}
				sizes := make([]int64, len(idx))
				if err := s.Sizes(idx, sizes); err != nil {
					errs <- err
					return
				}
				offsets := []int64{0}
				for _, sz := range sizes {
					offsets = append(offsets, offsets[len(offsets)-1]+sz)
				}
				dst = append(dst[:0], make([]byte, offsets[len(idx)])...)
				if err := s.GatherPacked(idx, dst, offsets); err != nil {
					errs <- err
					return
				}
				for k, i := range idx {
					if err := ztCheckSized(dst[offsets[k]:offsets[k+1]]); err != nil {
						errs <- fmt.Errorf("index %d (Len %d): %v", i, n, err)
						return
					}
				}
			}
		})
	}
	rng := rand.New(rand.NewPCG(7, 7))
	next := 0
	for range batches {
		k := 8 + rng.IntN(40)
		batch := make([][]byte, k)
		for j := range batch {
			batch[j] = ztSized(next + j)
		}
		bounds.Store(int64(next+k), true) // before the batch can become visible
		if _, err := s.Append(batch); err != nil {
			t.Fatal(err)
		}
		next += k
	}
	stop.Store(true)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// A pipelined append takes pending Deletes into the table first, as a whole
// one does: the batch's entries land where the Deletes moved records from,
// and the header written when the Deletes settle does not fall back to the
// length before the batch.
func TestAppendPipelinedAfterDelete(t *testing.T) {
	defer zrecord.SetPipeStepPerThread(zrecord.SetPipeStepPerThread(4 << 10))
	rng, _ := seeded(t)
	for _, c := range codecCases {
		t.Run(c.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "s")
			s, err := zrecord.Create(dir, createOpts(t, c, 32<<10)...)
			if err != nil {
				t.Fatal(err)
			}
			want := genBatch(rng, 10, 1<<10)
			if _, err := s.Append(want); err != nil {
				t.Fatal(err)
			}
			if err := s.Sync(); err != nil {
				t.Fatal(err)
			}
			if err := s.Delete([]int64{2}); err != nil {
				t.Fatal(err)
			}
			want[2] = want[9] // the last record moves into the hole
			want = want[:9]
			batch := pipelineBatch(rng)
			if _, err := s.Append(batch); err != nil {
				t.Fatal(err)
			}
			want = append(want, batch...)
			for range 2 { // before and after a reopen
				ztExpect(t, s, want)
				if err := s.Close(); err != nil {
					t.Fatal(err)
				}
				if s, err = zrecord.Open(dir); err != nil {
					t.Fatal(err)
				}
			}
			s.Close()
		})
	}
}
