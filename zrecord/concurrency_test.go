package zrecord_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/loaderx/loaderx/zrecord"
)

// ztSized is a self-describing record: its id and its size are recoverable
// from its bytes, so a reader can tell a correct record from a torn one.
func ztSized(id int) []byte {
	size := 16 + (id*7919)%5000
	b := ztRecord(id, size)
	binary.LittleEndian.PutUint64(b[8:], uint64(size))
	return b
}

func ztCheckSized(b []byte) error {
	if len(b) < 16 {
		return fmt.Errorf("%d bytes, too short", len(b))
	}
	id := int(binary.LittleEndian.Uint64(b))
	if id < 0 || id > 1<<30 {
		return fmt.Errorf("bad id %d", id)
	}
	if want := ztSized(id); !bytes.Equal(b, want) {
		return fmt.Errorf("record %d: content differs", id)
	}
	return nil
}

// Readers gather below Len() while a writer appends: every record they get is
// complete and is the one Append put at that index.
func TestGatherDuringAppend(t *testing.T) {
	for _, codec := range []zrecord.Codec{zrecord.Raw, zrecord.Zstd} {
		t.Run(codec.String(), func(t *testing.T) {
			s, _ := ztCreate(t, codec, zrecord.WithChunkCapacity(64<<10))
			const total = 1500
			var stop atomic.Bool
			var wg sync.WaitGroup
			errs := make(chan error, 8)
			for r := range 3 {
				wg.Go(func() {
					rng := rand.New(rand.NewPCG(uint64(r), 1))
					var sizes []int64
					var offsets []int64
					var dst []byte
					for !stop.Load() {
						n := s.Len()
						if n == 0 {
							continue
						}
						idx := make([]int64, 1+rng.IntN(32))
						for k := range idx {
							if k%3 == 0 {
								idx[k] = n - 1 // the newest record
							} else {
								idx[k] = rng.Int64N(n)
							}
						}
						sizes = append(sizes[:0], make([]int64, len(idx))...)
						if err := s.Sizes(idx, sizes); err != nil {
							errs <- err
							return
						}
						offsets = append(offsets[:0], 0)
						for _, sz := range sizes {
							offsets = append(offsets, offsets[len(offsets)-1]+sz)
						}
						dst = append(dst[:0], make([]byte, offsets[len(idx)])...)
						if err := s.GatherPacked(idx, dst, offsets); err != nil {
							errs <- err
							return
						}
						for k, i := range idx {
							got := dst[offsets[k]:offsets[k+1]]
							if err := ztCheckSized(got); err != nil {
								errs <- fmt.Errorf("index %d (Len %d): %v", i, n, err)
								return
							}
							if id := binary.LittleEndian.Uint64(got); id != uint64(i) {
								errs <- fmt.Errorf("index %d holds record %d", i, id)
								return
							}
						}
					}
				})
			}
			rng := rand.New(rand.NewPCG(99, 1))
			for next := 0; next < total; {
				k := min(1+rng.IntN(40), total-next)
				batch := make([][]byte, k)
				for j := range batch {
					batch[j] = ztSized(next + j)
				}
				first, err := s.Append(batch)
				if err != nil {
					t.Fatal(err)
				}
				if first != int64(next) {
					t.Fatalf("Append returned %d, want %d", first, next)
				}
				next += k
			}
			stop.Store(true)
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
		})
	}
}

// Gathers running beside Delete and Compact see either side of each call,
// never a record in motion.
func TestGatherDuringDeleteCompact(t *testing.T) {
	s, _ := ztCreate(t, zrecord.Zstd, zrecord.WithChunkCapacity(32<<10))
	var recs [][]byte
	for i := range 600 {
		recs = append(recs, ztSized(i))
	}
	if _, err := s.Append(recs); err != nil {
		t.Fatal(err)
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	var failed atomic.Value
	for r := range 2 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(r), 2))
			for !stop.Load() {
				n := s.Len()
				idx := []int64{rng.Int64N(n), rng.Int64N(n), n - 1}
				sizes := make([]int64, len(idx))
				// Between Sizes and GatherPacked a Delete may run: the
				// gather then fails with a size mismatch or an index out
				// of range, or succeeds with whole records.
				if err := s.Sizes(idx, sizes); err != nil {
					if !errors.Is(err, zrecord.ErrIndexOutOfRange) {
						failed.Store(err)
					}
					continue
				}
				off := []int64{0, sizes[0], sizes[0] + sizes[1], sizes[0] + sizes[1] + sizes[2]}
				dst := make([]byte, off[3])
				err := s.GatherPacked(idx, dst, off)
				if err != nil {
					if !errors.Is(err, zrecord.ErrSizeMismatch) && !errors.Is(err, zrecord.ErrIndexOutOfRange) {
						failed.Store(err)
					}
					continue
				}
				for k := range idx {
					if err := ztCheckSized(dst[off[k]:off[k+1]]); err != nil {
						failed.Store(err)
					}
				}
			}
		})
	}
	rng := rand.New(rand.NewPCG(5, 5))
	for round := range 30 {
		n := s.Len()
		if err := s.Delete([]int64{rng.Int64N(n), n - 1}); err != nil && !errors.Is(err, zrecord.ErrDuplicateIndex) {
			t.Fatal(err)
		}
		if round%5 == 4 {
			if err := s.Compact(); err != nil {
				t.Fatal(err)
			}
		}
	}
	stop.Store(true)
	wg.Wait()
	if err := failed.Load(); err != nil {
		t.Fatal(err)
	}
}

// A chunk file truncated under a reader (by another process, say) must make
// Gather fail, not kill the process.
func TestGatherAfterTruncation(t *testing.T) {
	s, dir := ztCreate(t, zrecord.Raw)
	recs := [][]byte{ztRecord(0, 64<<10), ztRecord(1, 64<<10)}
	if _, err := s.Append(recs); err != nil {
		t.Fatal(err)
	}
	s.Close()
	r, err := zrecord.Open(dir, zrecord.WithReadOnly())
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	dst := make([]byte, 128<<10)
	if err := r.Gather([]int64{0, 1}, dst, 64<<10); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(filepath.Join(dir, "0.chunk"), 4096); err != nil {
		t.Fatal(err)
	}
	err = r.Gather([]int64{1}, dst, 64<<10)
	ztIs(t, err, zrecord.ErrCorrupt)
	// Unchecked, where a small batch is copied by one assembly loop.
	r.SetVerify(false)
	err = r.Gather([]int64{0, 1}, dst, 64<<10)
	ztIs(t, err, zrecord.ErrCorrupt)
	r.SetVerify(true)
	// And with a fan-out across goroutines.
	defer zrecord.SetThreads(0)
	zrecord.SetThreads(4)
	idx := make([]int64, 64)
	for k := range idx {
		idx[k] = 1
	}
	err = r.Gather(idx, make([]byte, 64*(64<<10)), 64<<10)
	ztIs(t, err, zrecord.ErrCorrupt)
}

// ztNoMapFS hides file descriptors, so the store reads with ReadAt instead
// of mappings.
type ztNoMapFS struct{ zrecord.FS }

type ztNoMapFile struct{ zrecord.File }

func (f ztNoMapFS) OpenFile(name string, flag int, perm os.FileMode) (zrecord.File, error) {
	file, err := f.FS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return ztNoMapFile{file}, nil
}

func (ztNoMapFile) Fd() uintptr { return zrecord.NoFd }

func TestWithoutMappings(t *testing.T) {
	fsys := ztNoMapFS{zrecord.OSFS}
	for _, codec := range ztCodecs {
		s, dir := ztCreate(t, codec, zrecord.WithFS(fsys), zrecord.WithChunkCapacity(100<<10))
		var recs [][]byte
		for i := range 30 {
			recs = append(recs, ztRecord(i, i*1000))
		}
		if _, err := s.Append(recs); err != nil {
			t.Fatal(err)
		}
		ztExpect(t, s, recs)
		if err := s.Delete([]int64{0, 3, 29}); err != nil {
			t.Fatal(err)
		}
		recs = ztDeleted(recs, []int64{0, 3, 29})
		if err := s.Compact(); err != nil {
			t.Fatal(err)
		}
		ztExpect(t, s, recs)
		s.Close()
		r, err := zrecord.Open(dir, zrecord.WithFS(fsys), zrecord.WithReadOnly())
		if err != nil {
			t.Fatal(err)
		}
		ztExpect(t, r, recs)
		r.Close()
	}
}
