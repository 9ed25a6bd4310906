package zrecord_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/klauspost/compress/zstd"
	"github.com/loaderx/loaderx/zrecord"
)

// On small records that share their structure, a trained dictionary must
// beat plain per-record zstd, and the records must round-trip.
func TestDictCompressesStructuredRecords(t *testing.T) {
	var recs [][]byte
	var logical int64
	for i := range 400 {
		r := ztStructured(i)
		recs = append(recs, r)
		logical += int64(len(r))
	}
	live := map[zrecord.Codec]int64{}
	for _, codec := range []zrecord.Codec{zrecord.Zstd, zrecord.ZstdDict} {
		s, dir := ztCreate(t, codec)
		if _, err := s.Append(recs); err != nil {
			t.Fatal(err)
		}
		ztExpect(t, s, recs)
		st, err := s.Stats()
		if err != nil {
			t.Fatal(err)
		}
		live[codec] = st.LiveBytes
		if codec == zrecord.ZstdDict {
			d, err := os.ReadFile(filepath.Join(dir, "dict.zr"))
			if err != nil {
				t.Fatal(err)
			}
			if st.DictBytes != int64(len(d)) || len(d) == 0 || len(d) > 16<<10 {
				t.Fatalf("DictBytes %d, dict.zr %d bytes (cap 16 KiB)", st.DictBytes, len(d))
			}
			s.Close()
			r, err := zrecord.Open(dir, zrecord.WithReadOnly())
			if err != nil {
				t.Fatal(err)
			}
			ztExpect(t, r, recs)
			r.Close()
		}
	}
	t.Logf("logical %d, zstd %d (%.2fx), zstd_dict %d (%.2fx)", logical,
		live[zrecord.Zstd], float64(logical)/float64(live[zrecord.Zstd]),
		live[zrecord.ZstdDict], float64(logical)/float64(live[zrecord.ZstdDict]))
	if live[zrecord.ZstdDict] >= live[zrecord.Zstd]*9/10 {
		t.Fatalf("dictionary gained less than 10%%: %d vs %d bytes", live[zrecord.ZstdDict], live[zrecord.Zstd])
	}
}

// Every tier's encoder level reads back, also on a handle opened with a
// different tier than the one that wrote.
func TestDictTiers(t *testing.T) {
	var recs [][]byte
	for i := range 50 {
		recs = append(recs, ztStructured(5000+i))
	}
	for _, tier := range []zrecord.DictTier{zrecord.TierFast, zrecord.TierBalanced, zrecord.TierMax} {
		s, dir := ztCreate(t, zrecord.ZstdDict, zrecord.WithDictTier(tier))
		if _, err := s.Append(recs); err != nil {
			t.Fatal(err)
		}
		s.Close()
		r, err := zrecord.Open(dir, zrecord.WithDictTier(zrecord.TierFast))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := r.Append(recs[:5]); err != nil {
			t.Fatal(err)
		}
		ztExpect(t, r, append(recs, recs[:5]...))
		r.Close()
	}
}

func TestTrainDictRejects(t *testing.T) {
	few := [][]byte{ztStructured(1), ztStructured(2), ztStructured(3)}
	if _, err := zrecord.TrainDict(few, zrecord.TierFast, 0); !errors.Is(err, zrecord.ErrInvalidArgument) {
		t.Fatalf("3 samples: %v, want ErrInvalidArgument", err)
	}
	tiny := make([][]byte, 100)
	for i := range tiny {
		tiny[i] = []byte{byte(i), 1, 2}
	}
	if _, err := zrecord.TrainDict(tiny, zrecord.TierFast, 0); !errors.Is(err, zrecord.ErrInvalidArgument) {
		t.Fatalf("3-byte samples: %v, want ErrInvalidArgument", err)
	}
	var ok [][]byte
	for i := range 50 {
		ok = append(ok, ztStructured(i))
	}
	if _, err := zrecord.TrainDict(ok, zrecord.TierFast, 100); !errors.Is(err, zrecord.ErrInvalidArgument) {
		t.Fatalf("100-byte cap: %v, want ErrInvalidArgument", err)
	}
	if _, err := zrecord.TrainDict(ok, zrecord.DictTier(9), 0); !errors.Is(err, zrecord.ErrInvalidArgument) {
		t.Fatalf("bad tier: %v, want ErrInvalidArgument", err)
	}
	// Samples far beyond the budget are thinned, not refused.
	var big [][]byte
	for i := range 40 {
		big = append(big, ztRecord(i, 256<<10))
	}
	d, err := zrecord.TrainDict(big, zrecord.TierFast, 8<<10)
	if err != nil {
		t.Fatalf("10 MiB of samples: %v", err)
	}
	if len(d) > 8<<10+1024 {
		t.Fatalf("dictionary of %d bytes, cap 8 KiB", len(d))
	}
}

// Training is a pure function of its samples: the same input gives the same
// dictionary bytes (content, entropy tables and ID) every time, on noisy and
// on highly repetitive records alike.
func TestTrainDictIsDeterministic(t *testing.T) {
	sets := map[string][][]byte{}
	for i := range 600 {
		sets["structured"] = append(sets["structured"], ztStructured(i))
		sets["noisy"] = append(sets["noisy"], ztRecord(i, 3000))
	}
	runs := 3
	if testing.Short() { // the race run: one repeat is what it needs to see two trainings race
		runs = 1
	}
	for name, samples := range sets {
		for _, tier := range []zrecord.DictTier{zrecord.TierFast, zrecord.TierBalanced} {
			first, err := zrecord.TrainDict(samples, tier, 0)
			if err != nil {
				t.Fatalf("%s %v: %v", name, tier, err)
			}
			for run := range runs {
				again, err := zrecord.TrainDict(samples, tier, 0)
				if err != nil {
					t.Fatalf("%s %v run %d: %v", name, tier, run, err)
				}
				if !bytes.Equal(first, again) {
					t.Fatalf("%s %v: run %d trained a different dictionary (%d vs %d bytes, first difference at %d)",
						name, tier, run+1, len(first), len(again), firstDiff(first, again))
				}
			}
		}
	}
}

// The size cap holds for the whole dictionary (header, entropy tables and
// content), and the chosen content pays: on records that share short
// strings at varying places (log lines, which a per-record compressor sees
// only once each), the dictionary must shrink them well below plain zstd.
func TestTrainDictCapAndGain(t *testing.T) {
	var recs [][]byte
	users := []string{"ada", "grace", "linus", "ken", "barbara", "edsger"}
	events := []string{"click", "view", "purchase", "scroll", "login", "logout"}
	for i := range 4000 {
		recs = append(recs, []byte(fmt.Sprintf(`{"user":"%s%03d","event":"%s","ts":%d,"page":"/p/%d","ms":%d,"ok":%t}`,
			users[i*7%6], i*31%997, events[i*5%6], 1700000000+i*37/10, i*13%500, i*101%5000, i%3 == 0)))
	}
	for _, tier := range []zrecord.DictTier{zrecord.TierFast, zrecord.TierBalanced} {
		for _, limit := range []int{0, 2000, 9000} {
			d, err := zrecord.TrainDict(recs, tier, limit)
			if err != nil {
				t.Fatalf("%v, cap %d: %v", tier, limit, err)
			}
			want := tier.DictSize()
			if limit > 0 {
				want = limit
			}
			if len(d) > want {
				t.Fatalf("%v, cap %d: %d-byte dictionary", tier, limit, len(d))
			}
		}
	}
	d, err := zrecord.TrainDict(recs, zrecord.TierBalanced, 16<<10)
	if err != nil {
		t.Fatal(err)
	}
	sizes := map[bool]int{}
	for _, withDict := range []bool{false, true} {
		opts := []zstd.EOption{zstd.WithEncoderConcurrency(1)}
		if withDict {
			opts = append(opts, zstd.WithEncoderDict(d))
		}
		enc, err := zstd.NewWriter(nil, opts...)
		if err != nil {
			t.Fatal(err)
		}
		for i := 1; i < len(recs); i += 3 {
			sizes[withDict] += len(enc.EncodeAll(recs[i], nil))
		}
		enc.Close()
	}
	t.Logf("plain %d bytes, with a %d-byte dictionary %d (%.2fx)", sizes[false], len(d), sizes[true], float64(sizes[false])/float64(sizes[true]))
	if sizes[true]*2 > sizes[false] {
		t.Fatalf("dictionary gained under 2x: %d vs %d bytes", sizes[true], sizes[false])
	}
}
