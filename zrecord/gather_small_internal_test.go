package zrecord

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
)

// TestGatherSmallTakesOrDeclines calls gatherSmall directly: a batch of
// the common case (raw records of the stride, in range) is taken and
// gathered right, in random order with repeats and over several chunks;
// every other case is declined with dst untouched, so that Gather's
// general path reports it; a damaged record is reported by gatherSmall
// itself when verification is on, naming the record, and copied as it is
// when it is off.
func TestGatherSmallTakesOrDeclines(t *testing.T) {
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
		done, err := s.gatherSmall(idx, dst, stride, g)
		return done, dst, err
	}
	random := make([]int64, 300)
	for k := range random {
		random[k] = rng.Int64N(count)
	}
	random[7] = random[3] // a repeat
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
	for _, idx := range [][]int64{{2, bad, 9}, {2, 8, bad, 9, 10, 11}, {2, 8, 9, 10, 11, bad}} {
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
