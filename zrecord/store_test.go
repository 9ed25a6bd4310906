package zrecord_test

import (
	"bytes"
	"errors"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/loaderx/loaderx/zrecord"
)

var ztCodecs = []zrecord.Codec{zrecord.Raw, zrecord.Zstd, zrecord.ZstdDict}

// ztSizes are the record sizes every codec is checked with.
var ztSizes = []int{0, 1, 12 << 10, 256 << 10, 3 << 20}

func TestRoundTrip(t *testing.T) {
	for _, codec := range ztCodecs {
		for _, size := range ztSizes {
			t.Run(codec.String()+"/"+ztByteSize(size), func(t *testing.T) {
				t.Parallel()
				s, dir := ztCreate(t, codec)
				count := 5
				if size >= 1<<20 {
					count = 3
				}
				var want [][]byte
				for i := range count {
					want = append(want, ztRecord(i, size))
				}
				first, err := s.Append(want)
				if err != nil || first != 0 {
					t.Fatalf("Append = %d, %v", first, err)
				}
				ztExpect(t, s, want)
				if err := s.Close(); err != nil {
					t.Fatal(err)
				}
				r, err := zrecord.Open(dir, zrecord.WithReadOnly())
				if err != nil {
					t.Fatal(err)
				}
				defer r.Close()
				if r.Codec() != codec {
					t.Fatalf("Codec after reopen = %v", r.Codec())
				}
				ztExpect(t, r, want)
			})
		}
	}
}

func ztByteSize(n int) string {
	switch {
	case n >= 1<<20:
		return strconv.Itoa(n>>20) + "MiB"
	case n >= 1<<10:
		return strconv.Itoa(n>>10) + "KiB"
	}
	return strconv.Itoa(n) + "B"
}

// Mixed sizes across several appends, with a chunk capacity small enough
// that the batch rolls over many chunks (and a 3 MiB record exceeds it).
func TestRoundTripChunkRollover(t *testing.T) {
	for _, codec := range ztCodecs {
		t.Run(codec.String(), func(t *testing.T) {
			t.Parallel()
			const capacity = 600 << 10
			s, dir := ztCreate(t, codec, zrecord.WithChunkCapacity(capacity))
			var want [][]byte
			for batch := range 4 {
				var recs [][]byte
				for i, size := range ztSizes {
					recs = append(recs, ztRecord(batch*100+i, size))
				}
				for i := range 20 {
					recs = append(recs, ztRecord(batch*100+50+i, 12<<10+i))
				}
				first, err := s.Append(recs)
				if err != nil {
					t.Fatal(err)
				}
				if first != int64(len(want)) {
					t.Fatalf("first = %d, want %d", first, len(want))
				}
				want = append(want, recs...)
			}
			ztExpect(t, s, want)
			st, err := s.Stats()
			if err != nil {
				t.Fatal(err)
			}
			if st.Chunks < 4 {
				t.Fatalf("Chunks = %d, expected a rollover", st.Chunks)
			}
			var logical int64
			for _, r := range want {
				logical += int64(len(r))
			}
			if st.LogicalBytes != logical || st.Length != int64(len(want)) {
				t.Fatalf("Stats = %+v, logical %d", st, logical)
			}
			if st.ChunkBytes != st.LiveBytes {
				t.Fatalf("fresh store: ChunkBytes %d != LiveBytes %d", st.ChunkBytes, st.LiveBytes)
			}
			if codec != zrecord.Raw && st.LiveBytes >= logical {
				t.Fatalf("%v did not compress: %d >= %d", codec, st.LiveBytes, logical)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			s2, err := zrecord.Open(dir, zrecord.WithChunkCapacity(capacity))
			if err != nil {
				t.Fatal(err)
			}
			defer s2.Close()
			ztExpect(t, s2, want)
			st2, _ := s2.Stats()
			if st2 != st {
				t.Fatalf("Stats after reopen %+v, before %+v", st2, st)
			}
			// Appending after reopen continues at the frontier.
			more := [][]byte{ztRecord(9000, 300<<10), ztRecord(9001, 5)}
			if _, err := s2.Append(more); err != nil {
				t.Fatal(err)
			}
			ztExpect(t, s2, append(want, more...))
		})
	}
}

func TestDenseMatchesPacked(t *testing.T) {
	for _, codec := range ztCodecs {
		t.Run(codec.String(), func(t *testing.T) {
			s, _ := ztCreate(t, codec)
			const size = 4096
			var recs [][]byte
			for i := range 64 {
				recs = append(recs, ztRecord(i, size))
			}
			if _, err := s.Append(recs); err != nil {
				t.Fatal(err)
			}
			idx := []int64{63, 0, 17, 17, 5, 42, 0}
			dense := make([]byte, len(idx)*size)
			if err := s.Gather(idx, dense, size); err != nil {
				t.Fatal(err)
			}
			offsets := make([]int64, len(idx)+1)
			for k := range idx {
				offsets[k+1] = offsets[k] + size
			}
			packed := make([]byte, len(dense))
			if err := s.GatherPacked(idx, packed, offsets); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(dense, packed) {
				t.Fatal("dense and packed gathers differ")
			}
			for k, i := range idx {
				if !bytes.Equal(dense[k*size:(k+1)*size], recs[i]) {
					t.Fatalf("slot %d: record %d differs", k, i)
				}
			}
		})
	}
}

// Gathers large enough to fan out, with several thread settings, including
// records of mixed sizes split by bytes across workers.
func TestGatherFanOut(t *testing.T) {
	defer zrecord.SetThreads(0)
	for _, codec := range []zrecord.Codec{zrecord.Raw, zrecord.Zstd} {
		s, _ := ztCreate(t, codec)
		var recs [][]byte
		for i := range 40 {
			recs = append(recs, ztRecord(i, 200<<10+i*1000))
		}
		if _, err := s.Append(recs); err != nil {
			t.Fatal(err)
		}
		for _, th := range []int{1, 2, 3, 8} {
			zrecord.SetThreads(th)
			if zrecord.Threads() != th {
				t.Fatalf("Threads = %d after SetThreads(%d)", zrecord.Threads(), th)
			}
			ztExpect(t, s, recs)
		}
	}
}

func TestEmptyBatches(t *testing.T) {
	s, dir := ztCreate(t, zrecord.Zstd)
	if _, err := s.Append([][]byte{ztRecord(1, 100)}); err != nil {
		t.Fatal(err)
	}
	before := ztDirDigest(t, dir)
	if first, err := s.Append(nil); err != nil || first != 1 {
		t.Fatalf("Append(nil) = %d, %v", first, err)
	}
	if err := s.Gather(nil, nil, 100); err != nil {
		t.Fatal(err)
	}
	if err := s.GatherPacked(nil, nil, []int64{0}); err != nil {
		t.Fatal(err)
	}
	if err := s.Sizes(nil, nil); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(nil); err != nil {
		t.Fatal(err)
	}
	if ztDirDigest(t, dir) != before {
		t.Fatal("empty batches changed the store")
	}
}

func TestCloseAndLock(t *testing.T) {
	s, dir := ztCreate(t, zrecord.Raw)
	if _, err := s.Append([][]byte{[]byte("abc")}); err != nil {
		t.Fatal(err)
	}
	_, err := zrecord.Open(dir)
	ztIs(t, err, zrecord.ErrLocked)
	ro, err := zrecord.Open(dir, zrecord.WithReadOnly())
	if err != nil {
		t.Fatalf("read-only open beside a writer: %v", err)
	}
	if ro.Len() != 1 {
		t.Fatalf("read-only Len = %d", ro.Len())
	}
	_, err = ro.Append([][]byte{[]byte("x")})
	ztIs(t, err, zrecord.ErrReadOnly)
	ztIs(t, ro.Delete([]int64{0}), zrecord.ErrReadOnly)
	ztIs(t, ro.Compact(), zrecord.ErrReadOnly)
	ztIs(t, ro.Sync(), zrecord.ErrReadOnly)
	if err := ro.Close(); err != nil {
		t.Fatal(err)
	}

	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	_, err = s.Append([][]byte{[]byte("x")})
	ztIs(t, err, zrecord.ErrClosed)
	ztIs(t, s.Gather([]int64{0}, make([]byte, 3), 3), zrecord.ErrClosed)
	ztIs(t, s.GatherPacked([]int64{0}, make([]byte, 3), []int64{0, 3}), zrecord.ErrClosed)
	ztIs(t, s.Sizes([]int64{0}, make([]int64, 1)), zrecord.ErrClosed)
	ztIs(t, s.Delete([]int64{0}), zrecord.ErrClosed)
	ztIs(t, s.Compact(), zrecord.ErrClosed)
	ztIs(t, s.Sync(), zrecord.ErrClosed)
	_, err = s.Stats()
	ztIs(t, err, zrecord.ErrClosed)

	// The lock is released by Close.
	s2, err := zrecord.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if s2.Len() != 1 || s2.Dir() != dir {
		t.Fatalf("reopened: Len %d Dir %q", s2.Len(), s2.Dir())
	}
}

func TestCodecNames(t *testing.T) {
	for _, c := range ztCodecs {
		got, err := zrecord.ParseCodec(c.String())
		if err != nil || got != c {
			t.Fatalf("ParseCodec(%q) = %v, %v", c.String(), got, err)
		}
	}
	if c, err := zrecord.ParseCodec("zstdict"); err != nil || c != zrecord.ZstdDict {
		t.Fatalf("ParseCodec(zstdict) = %v, %v", c, err)
	}
	_, err := zrecord.ParseCodec("lz4")
	ztIs(t, err, zrecord.ErrInvalidArgument)
	if !bytes.Contains([]byte(err.Error()), []byte(`"lz4"`)) {
		t.Fatalf("error does not quote the value: %v", err)
	}
	for _, tier := range []zrecord.DictTier{zrecord.TierFast, zrecord.TierBalanced, zrecord.TierMax} {
		got, err := zrecord.ParseDictTier(tier.String())
		if err != nil || got != tier {
			t.Fatalf("ParseDictTier(%q) = %v, %v", tier.String(), got, err)
		}
		if tier.SampleBudget() <= 0 || tier.DictSize() <= 0 {
			t.Fatalf("tier %v: budget %d, size %d", tier, tier.SampleBudget(), tier.DictSize())
		}
	}
	if !(zrecord.TierFast.SampleBudget() < zrecord.TierBalanced.SampleBudget() && zrecord.TierBalanced.SampleBudget() < zrecord.TierMax.SampleBudget()) {
		t.Fatal("tier budgets are not increasing")
	}
	_, err = zrecord.ParseDictTier("ultra")
	ztIs(t, err, zrecord.ErrInvalidArgument)
}

func TestThreads(t *testing.T) {
	defer zrecord.SetThreads(0)
	zrecord.SetThreads(3)
	if zrecord.Threads() != 3 {
		t.Fatal(zrecord.Threads())
	}
	zrecord.SetThreads(-1)
	if zrecord.Threads() < 1 {
		t.Fatal(zrecord.Threads())
	}
}

func TestCreateRejects(t *testing.T) {
	root := t.TempDir()
	// Non-empty directory.
	busy := filepath.Join(root, "busy")
	s, err := zrecord.Create(busy)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	_, err = zrecord.Create(busy)
	ztIs(t, err, zrecord.ErrExists)
	if !bytes.Contains([]byte(err.Error()), []byte(busy)) {
		t.Fatalf("error does not name the directory: %v", err)
	}
	// Options that make no sense.
	cases := []struct {
		name string
		opts []zrecord.Option
		want error
	}{
		{"read-only", []zrecord.Option{zrecord.WithReadOnly()}, zrecord.ErrInvalidArgument},
		{"bad codec", []zrecord.Option{zrecord.WithCodec(9)}, zrecord.ErrInvalidArgument},
		{"dict without dict", []zrecord.Option{zrecord.WithCodec(zrecord.ZstdDict)}, zrecord.ErrMissingDict},
		{"garbage dict", []zrecord.Option{zrecord.WithCodec(zrecord.ZstdDict), zrecord.WithDict([]byte("not a dictionary at all"))}, zrecord.ErrInvalidArgument},
		{"dict for zstd", []zrecord.Option{zrecord.WithCodec(zrecord.Zstd), zrecord.WithDict(ztTrainedDict(t))}, zrecord.ErrInvalidArgument},
		{"zero capacity", []zrecord.Option{zrecord.WithChunkCapacity(0)}, zrecord.ErrInvalidArgument},
		{"huge capacity", []zrecord.Option{zrecord.WithChunkCapacity(1 << 32)}, zrecord.ErrInvalidArgument},
		{"bad tier", []zrecord.Option{zrecord.WithDictTier(7)}, zrecord.ErrInvalidArgument},
	}
	for _, c := range cases {
		dir := filepath.Join(root, "x")
		_, err := zrecord.Create(dir, c.opts...)
		if !errors.Is(err, c.want) {
			t.Fatalf("%s: err %v, want %v", c.name, err, c.want)
		}
		if ents, _ := ztDirNames(dir); len(ents) != 0 {
			t.Fatalf("%s: failed Create left %v", c.name, ents)
		}
	}
}
