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

// mappedRecords writes count records of size bytes to a file and returns
// them read from a shared mapping of it, with the file, which the test may
// shrink under the mapping; both are released when the test ends.
func mappedRecords(t *testing.T, size, count int) ([][]byte, *os.File) {
	t.Helper()
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
	t.Cleanup(func() { f.Close() })
	m, err := syscall.Mmap(int(f.Fd()), 0, len(data), syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Munmap(m) })
	recs := make([][]byte, count)
	for i := range recs {
		recs[i] = m[i*size : (i+1)*size]
	}
	return recs, f
}

func testAppendSourceFault(t *testing.T, codec zrecord.Codec) {
	defer zrecord.SetPipeStepPerThread(zrecord.SetPipeStepPerThread(64 << 10))
	const size, count = 32 << 10, 64
	recs, f := mappedRecords(t, size, count)
	s, dir := ztCreate(t, codec, zrecord.WithChunkCapacity(256<<10))
	if _, err := s.Append(recs[:4]); err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(size * count / 2); err != nil { // the second half of the batch now faults
		t.Fatal(err)
	}
	before := zrecord.PipelinedAppends()
	_, err := s.Append(recs)
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

// allocated is how many bytes of disk the file at path holds.
func allocated(t *testing.T, path string) int64 {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Blocks * 512
}

// A raw append reserves its blocks before writing them. One that fails
// gives them back at once, and one that was killed leaves them to the next
// writable Open, which gives them back too: neither leaves disk space
// allocated past the end of a chunk.
func TestRawAppendReservationsGiveBack(t *testing.T) {
	const size, count = 32 << 10, 64
	recs, f := mappedRecords(t, size, count)
	s, dir := ztCreate(t, zrecord.Raw, zrecord.WithChunkCapacity(4<<20))
	if _, err := s.Append(recs[:4]); err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(size * count / 2); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Append(recs); !errors.Is(err, zrecord.ErrCorrupt) {
		t.Fatalf("Append from a truncated mapping: %v, want ErrCorrupt", err)
	}
	chunk := filepath.Join(dir, "0.chunk")
	fi, err := os.Stat(chunk)
	if err != nil {
		t.Fatal(err)
	}
	if a := allocated(t, chunk); a > fi.Size()+64<<10 {
		t.Fatalf("after the failed append: 0.chunk of %d bytes holds %d on disk", fi.Size(), a)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// What a killed append leaves: blocks reserved past the end of a chunk
	// whose size is the published end.
	c, err := os.OpenFile(chunk, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Truncate(4 * size); err != nil {
		c.Close()
		t.Fatal(err)
	}
	if err := syscall.Fallocate(int(c.Fd()), 1 /* FALLOC_FL_KEEP_SIZE */, 4*size, 2<<20); err != nil {
		c.Close()
		t.Skipf("fallocate: %v", err)
	}
	c.Close()
	if a := allocated(t, chunk); a < 2<<20 {
		t.Skipf("the file system did not reserve the blocks (%d bytes held)", a)
	}
	s, err = zrecord.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if a := allocated(t, chunk); a > 4*size+64<<10 {
		t.Fatalf("after a writable Open: 0.chunk of %d bytes holds %d on disk", 4*size, a)
	}
	var want model
	for i := range 4 {
		want = append(want, ztRecord(i, size))
	}
	if err := diffStore(s, want, newRand(3)); err != nil {
		t.Fatal(err)
	}
}
