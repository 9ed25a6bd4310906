package zrecord_test

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/loaderx/loaderx/zrecord"
)

// A pipelined append whose records are read from a mapped file that shrinks
// under it, part way through the batch, fails with ErrCorrupt instead of
// crashing, leaves the store as it was, and the store takes the next append;
// after a reopen it reads exactly the records that were published and
// verifies clean. In a zstd store the fault is met by a compressing
// goroutine; in a raw store, whose parts are written before they are
// checksummed, by the kernel while it copies the records (EFAULT from the
// write rather than a fault in this process), and the chunk bytes the failed
// append left past the tail must not survive into the records that replace
// them.
func TestAppendPipelinedSourceFault(t *testing.T) {
	for _, codec := range []zrecord.Codec{zrecord.Zstd, zrecord.Raw} {
		t.Run(codec.String(), func(t *testing.T) { testAppendSourceFault(t, codec) })
	}
}

func testAppendSourceFault(t *testing.T, codec zrecord.Codec) {
	defer zrecord.SetPipeStepPerThread(zrecord.SetPipeStepPerThread(64 << 10))
	const size, count = 32 << 10, 64
	src := filepath.Join(t.TempDir(), "src")
	data := make([]byte, size*count)
	for i := range count {
		copy(data[i*size:], ztRecord(i, size))
	}
	if err := os.WriteFile(src, data, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(src, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m, err := syscall.Mmap(int(f.Fd()), 0, len(data), syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Munmap(m)
	recs := make([][]byte, count)
	for i := range recs {
		recs[i] = m[i*size : (i+1)*size]
	}
	s, dir := ztCreate(t, codec, zrecord.WithChunkCapacity(256<<10))
	if _, err := s.Append(recs[:4]); err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(int64(len(data) / 2)); err != nil { // the second half of the batch now faults
		t.Fatal(err)
	}
	before := zrecord.PipelinedAppends()
	_, err = s.Append(recs)
	if !errors.Is(err, zrecord.ErrCorrupt) {
		t.Fatalf("Append from a truncated mapping: %v, want ErrCorrupt", err)
	}
	if zrecord.PipelinedAppends() != before+1 {
		t.Fatal("the batch was not pipelined")
	}
	if n := s.Len(); n != 4 {
		t.Fatalf("Len() = %d after the failed append, want 4", n)
	}
	good := [][]byte{ztRecord(100, 9000), ztRecord(101, 300<<10), nil}
	if first, err := s.Append(good); err != nil || first != 4 {
		t.Fatalf("Append after the failed one: %d, %v", first, err)
	}
	var want model
	for i := range 4 {
		want = append(want, ztRecord(i, size))
	}
	want = want.appended(good)
	if err := diffStore(s, want, newRand(1)); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = zrecord.Open(dir, zrecord.WithReadOnly())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := diffStore(s, want, newRand(2)); err != nil {
		t.Fatalf("reopened: %v", err)
	}
	r, err := s.Verify()
	if err != nil || len(r.Faults) != 0 {
		t.Fatalf("Verify after the failed append: %v, faults %v", err, r.Faults)
	}
}
