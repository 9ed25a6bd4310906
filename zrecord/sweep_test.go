package zrecord_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/loaderx/loaderx/zrecord"
)

// The corruption sweep damages a small store of each codec in every way a
// disk or a careless hand might, one mutation at a time: it cuts each file
// at many lengths and flips single bits at many places (every bit of the
// header, every byte of the dictionary and the table, a sample of the
// chunks), then opens the store (read-only, and writable for part of the
// cases) with the default options and gathers every record. Each outcome
// falls in one class: the identical records, an error (by sentinel), or a
// silent failure (wrong bytes, fewer or more records, without an error), a
// panic or a hang. Silent failures, panics and hangs fail the test.

// sweepMutation is one damage to one file.
type sweepMutation struct {
	file     string
	trunc    bool  // cut the file to at; else flip bit of byte at
	at       int64 // length or byte offset
	bit      uint8
	writable bool // open writable (with recovery) instead of read-only
}

func (m sweepMutation) String() string {
	mode := "read-only"
	if m.writable {
		mode = "writable"
	}
	if m.trunc {
		return fmt.Sprintf("%s cut to %d bytes, %s", m.file, m.at, mode)
	}
	return fmt.Sprintf("%s bit %d of byte %d flipped, %s", m.file, m.bit, m.at, mode)
}

const (
	classIdentical = "identical"
	classWrong     = "SILENT wrong data"
	classFewer     = "SILENT fewer records"
	classMore      = "SILENT more records"
	classPanic     = "PANIC"
	classHang      = "HANG"
)

func classSilentOrFatal(c string) bool {
	return c == classWrong || c == classFewer || c == classMore || strings.HasPrefix(c, classPanic) || c == classHang
}

var sweepSentinels = []struct {
	err  error
	name string
}{
	{zrecord.ErrCorrupt, "ErrCorrupt"},
	{zrecord.ErrNotStore, "ErrNotStore"},
	{zrecord.ErrVersion, "ErrVersion"},
	{zrecord.ErrMissingDict, "ErrMissingDict"},
	{zrecord.ErrDecode, "ErrDecode"},
}

func errorClass(err error) string {
	for _, s := range sweepSentinels {
		if errors.Is(err, s.err) {
			return "error " + s.name
		}
	}
	return "error other: " + err.Error()
}

// sweepMutations lists the damage done to the store's files. short keeps
// fewer of the sampled positions.
func sweepMutations(files map[string][]byte, short bool) []sweepMutation {
	var out []sweepMutation
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	slices.Sort(names)
	step := func(size, want int64) int64 { return max(1, size/max(want, 1)) }
	for _, name := range names {
		size := int64(len(files[name]))
		var flips, cuts []int64
		every := int64(1)
		switch {
		case name == "meta.zr":
			for at := range size {
				for bit := range uint8(8) {
					out = append(out, sweepMutation{file: name, at: at, bit: bit, writable: bit%2 == 1})
				}
			}
			for at := range size {
				cuts = append(cuts, at)
			}
		case name == "dict.zr" || strings.HasSuffix(name, ".tab"):
			if short {
				every = 8
			}
			for at := int64(0); at < size; at += every {
				flips = append(flips, at)
			}
			for at := int64(0); at < size; at += step(size, 24) {
				cuts = append(cuts, at)
			}
		default: // chunks
			n := int64(48)
			if short {
				n = 8
			}
			for at := int64(0); at < size; at += step(size, n) {
				flips = append(flips, at)
			}
			for at := int64(0); at < size; at += step(size, 12) {
				cuts = append(cuts, at)
			}
		}
		if size > 0 {
			flips = append(flips, size-1)
			cuts = append(cuts, size-1)
		}
		for k, at := range flips {
			out = append(out, sweepMutation{file: name, at: at, bit: uint8(at+int64(k)) % 8, writable: k%3 == 0})
		}
		for _, at := range cuts {
			out = append(out, sweepMutation{file: name, trunc: true, at: at}, sweepMutation{file: name, trunc: true, at: at, writable: true})
		}
	}
	return out
}

// writeStore lays files out in dir, replacing what it held.
func writeStore(t *testing.T, dir string, files map[string][]byte) {
	t.Helper()
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func (m sweepMutation) apply(t *testing.T, dir string) {
	t.Helper()
	p := filepath.Join(dir, m.file)
	if m.trunc {
		if err := os.Truncate(p, m.at); err != nil {
			t.Fatal(err)
		}
		return
	}
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	b[m.at] ^= 1 << m.bit
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// sweepRead opens the store in dir and gathers every record, and says how
// the outcome compares with want.
func sweepRead(dir string, want [][]byte, writable bool) (class string) {
	defer func() {
		if r := recover(); r != nil {
			class = fmt.Sprintf("%s: %v", classPanic, r)
		}
	}()
	// Every default left alone, raw verification included: what a user
	// gets must never be wrong bytes without an error.
	opts := []zrecord.Option{zrecord.WithChunkCapacity(4 << 10)}
	if !writable {
		opts = append(opts, zrecord.WithReadOnly())
	}
	s, err := zrecord.Open(dir, opts...)
	if err != nil {
		return errorClass(err)
	}
	defer s.Close()
	n := s.Len()
	if n > 1<<20 {
		return classMore
	}
	idx := make([]int64, n)
	for i := range idx {
		idx[i] = int64(i)
	}
	sizes := make([]int64, n)
	if err := s.Sizes(idx, sizes); err != nil {
		return errorClass(err)
	}
	offsets := make([]int64, n+1)
	for i, sz := range sizes {
		if sz > 1<<24 {
			return classWrong // a size no record of the store has, without error
		}
		offsets[i+1] = offsets[i] + sz
	}
	dst := make([]byte, offsets[n])
	if err := s.GatherPacked(idx, dst, offsets); err != nil {
		return errorClass(err)
	}
	for i := range min(n, int64(len(want))) {
		if !bytes.Equal(dst[offsets[i]:offsets[i+1]], want[i]) {
			return classWrong
		}
	}
	switch {
	case n < int64(len(want)):
		return classFewer
	case n > int64(len(want)):
		return classMore
	}
	return classIdentical
}

// buildNarrowSweepStore writes a small Narrow store for the sweep: int32
// records narrowed to 0, 1 and 2 bytes per value, one that stays raw, one
// larger than a chunk, and an empty one, over two appends.
func buildNarrowSweepStore(t *testing.T) *fuzzStore {
	t.Helper()
	fsx := &fuzzStore{dir: filepath.Join(t.TempDir(), "narrow"), codec: zrecord.Narrow}
	s, err := zrecord.Create(fsx.dir, zrecord.WithCodec(zrecord.Narrow), zrecord.WithElement(4, true), zrecord.WithChunkCapacity(4<<10))
	if err != nil {
		t.Fatal(err)
	}
	rng := newRand(77)
	for i := range 12 {
		span := []uint64{0, 200, 40000, 1 << 31}[i%4]
		n := 100 + rng.IntN(400)
		if i == 5 {
			n = 3000 // narrowed, still larger than a chunk
		}
		if i == 7 {
			n = 0
		}
		fsx.recs = append(fsx.recs, narrowSpanRecord(rng, 4, int64(i)-1000, span, n))
	}
	for _, part := range [][][]byte{fsx.recs[:5], fsx.recs[5:]} {
		if _, err := s.Append(part); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	fsx.files = readSmallFiles(t, fsx.dir)
	return fsx
}

func TestCorruptionSweep(t *testing.T) {
	stores := append(buildFuzzStores(t), buildNarrowSweepStore(t))
	for _, fsx := range stores {
		t.Run(fsx.codec.String(), func(t *testing.T) {
			muts := sweepMutations(fsx.files, testing.Short())
			dir := filepath.Join(t.TempDir(), "s")
			writeStore(t, dir, fsx.files)
			if c := sweepRead(dir, fsx.recs, true); c != classIdentical {
				t.Fatalf("the undamaged store reads as %q", c)
			}
			counts := map[string]int{}
			bad := 0
			start := time.Now()
			for k, m := range muts {
				// A read-only case changes only the file it damages, so
				// the next case restores just that file.
				if k == 0 || muts[k-1].writable {
					writeStore(t, dir, fsx.files)
				} else {
					prev := muts[k-1].file
					if err := os.WriteFile(filepath.Join(dir, prev), fsx.files[prev], 0o644); err != nil {
						t.Fatal(err)
					}
				}
				m.apply(t, dir)
				done := make(chan string, 1)
				go func() { done <- sweepRead(dir, fsx.recs, m.writable) }()
				var class string
				select {
				case class = <-done:
				case <-time.After(30 * time.Second):
					class = classHang
				}
				key := class
				if strings.HasPrefix(class, classPanic) {
					key = classPanic
				}
				counts[key]++
				if classSilentOrFatal(class) {
					bad++
					if bad <= 20 {
						t.Errorf("%s: %s", m, class)
					}
					if class == classHang {
						t.FailNow() // the goroutine still holds the directory
					}
				}
			}
			keys := make([]string, 0, len(counts))
			for k := range counts {
				keys = append(keys, k)
			}
			slices.Sort(keys)
			var lines []string
			for _, k := range keys {
				lines = append(lines, fmt.Sprintf("%6d  %s", counts[k], k))
			}
			t.Logf("%s store, %d mutations in %v:\n%s", fsx.codec, len(muts), time.Since(start).Round(time.Millisecond), strings.Join(lines, "\n"))
			for _, want := range []string{classWrong, classFewer, classMore, classPanic, classHang} {
				if counts[want] > 0 {
					t.Errorf("%d outcomes of class %q", counts[want], want)
				}
			}
		})
	}
}
