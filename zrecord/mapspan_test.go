package zrecord_test

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/loaderx/loaderx/zrecord"
)

// spanRecord is record i of the mapping tests: size bytes, each 8-byte word
// holding i and its position, so a gather that reads the wrong place, or a
// stale or short mapping, shows.
func spanRecord(i int64, size int) []byte {
	b := make([]byte, size)
	for w := 0; w+8 <= size; w += 8 {
		binary.LittleEndian.PutUint64(b[w:], uint64(i)<<20|uint64(w))
	}
	return b
}

func checkSpanRecord(i int64, got []byte) error {
	for w := 0; w+8 <= len(got); w += 8 {
		if v, want := binary.LittleEndian.Uint64(got[w:]), uint64(i)<<20|uint64(w); v != want {
			return fmt.Errorf("record %d, byte %d: %#x, want %#x", i, w, v, want)
		}
	}
	return nil
}

// A small store is mapped at the smallest span, not the files' whole range;
// appending past that span maps the tail chunk again, larger, while readers
// gather without pause and always read the right bytes.
func TestMappingGrowsUnderReaders(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("no file is mapped on Windows")
	}
	const size = 64 << 10
	dir := filepath.Join(t.TempDir(), "s")
	s, err := zrecord.Create(dir, zrecord.WithChunkCapacity(1<<30))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	batch := make([][]byte, 16)
	appendBatch := func() {
		t.Helper()
		n := s.Len()
		for k := range batch {
			batch[k] = spanRecord(n+int64(k), size)
		}
		if _, err := s.Append(batch); err != nil {
			t.Fatal(err)
		}
	}
	appendBatch()
	chunks, segs, retired := zrecord.MappedSpans(s)
	if len(chunks) != 1 || chunks[0] != zrecord.MinSpan || len(segs) != 1 || segs[0] != zrecord.MinSpan || retired != 0 {
		t.Fatalf("small store mapped at chunks %v, segments %v (%d retired), want one of each at %d", chunks, segs, retired, zrecord.MinSpan)
	}

	// Readers gather random committed records until the writer is done.
	var done atomic.Bool
	var reads atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for r := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(r), 1))
			idx := make([]int64, 4)
			dst := make([]byte, len(idx)*size)
			for !done.Load() {
				n := s.Len()
				for k := range idx {
					idx[k] = rng.Int64N(n)
				}
				idx[0] = n - 1 // the newest record, the one most likely past an old span
				if err := s.Gather(idx, dst, size); err != nil {
					errs <- err
					return
				}
				for k, i := range idx {
					if err := checkSpanRecord(i, dst[k*size:(k+1)*size]); err != nil {
						errs <- err
						return
					}
				}
				reads.Add(1)
			}
		}()
	}
	// Past twice the first span: the tail chunk is mapped again twice.
	for s.Len()*size < 2*zrecord.MinSpan+size {
		appendBatch()
	}
	done.Store(true)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	chunks, _, retired = zrecord.MappedSpans(s)
	if len(chunks) != 1 || chunks[0] != 4*zrecord.MinSpan || retired != 2 {
		t.Fatalf("after %d bytes: chunks mapped at %v (%d retired), want one at %d with 2 retired", s.Len()*size, chunks, retired, 4*zrecord.MinSpan)
	}
	if reads.Load() == 0 {
		t.Fatal("no gather ran while the store grew")
	}

	// Every record reads back, through this handle and a fresh one.
	check := func(s *zrecord.Store) {
		t.Helper()
		dst := make([]byte, size)
		for i := range s.Len() {
			if err := s.Gather([]int64{i}, dst, size); err != nil {
				t.Fatal(err)
			}
			if err := checkSpanRecord(i, dst); err != nil {
				t.Fatal(err)
			}
		}
	}
	check(s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	r, err := zrecord.Open(dir, zrecord.WithReadOnly())
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	// A read-only handle never sees the file grow: it maps what it reads.
	if chunks, _, _ := zrecord.MappedSpans(r); chunks[0] != r.Len()*size {
		t.Fatalf("reopened read-only store maps its chunk at %d, want its %d bytes", chunks[0], r.Len()*size)
	}
	check(r)
}

// A table segment grows its mapping the same way once its entries pass the
// first span.
func TestSegmentMappingGrows(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("no file is mapped on Windows")
	}
	if testing.Short() {
		t.Skip("appends about 2.8 million records")
	}
	dir := filepath.Join(t.TempDir(), "s")
	s, err := zrecord.Create(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const entSize = 24
	target := int64(zrecord.MinSpan/entSize + 1000)
	batch := make([][]byte, 1<<16)
	for s.Len() < target {
		n := s.Len()
		for k := range batch {
			batch[k] = spanRecord(n+int64(k), 8)
		}
		if _, err := s.Append(batch); err != nil {
			t.Fatal(err)
		}
	}
	_, segs, _ := zrecord.MappedSpans(s)
	if len(segs) != 1 || segs[0] != 2*zrecord.MinSpan {
		t.Fatalf("%d entries: segments mapped at %v, want one at %d", s.Len(), segs, 2*zrecord.MinSpan)
	}
	idx := []int64{0, target / 2, zrecord.MinSpan/entSize - 1, zrecord.MinSpan / entSize, s.Len() - 1}
	dst := make([]byte, 8*len(idx))
	if err := s.Gather(idx, dst, 8); err != nil {
		t.Fatal(err)
	}
	for k, i := range idx {
		if err := checkSpanRecord(i, dst[8*k:8*k+8]); err != nil {
			t.Fatal(err)
		}
	}
}
