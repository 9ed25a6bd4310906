package zrecord_test

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/loaderx/loaderx/zrecord"
)

// ztDeleted applies the store's delete rule to a slice: highest index first,
// each hole filled by the current last record.
func ztDeleted(recs [][]byte, idx []int64) [][]byte {
	out := slices.Clone(recs)
	desc := slices.Clone(idx)
	slices.Sort(desc)
	for k := len(desc) - 1; k >= 0; k-- {
		last := len(out) - 1
		out[desc[k]] = out[last]
		out = out[:last]
	}
	return out
}

func TestDeleteSwapsTailIntoHoles(t *testing.T) {
	s, _ := ztCreate(t, zrecord.Raw)
	var recs [][]byte
	for i := range 10 {
		recs = append(recs, []byte{byte('a' + i)})
	}
	if _, err := s.Append(recs); err != nil {
		t.Fatal(err)
	}
	// 9 is the tail and goes; 8 fills 5; then 7 (now last) fills 0...
	// and a hole filled earlier (5 ← 8) can itself become the tail.
	if err := s.Delete([]int64{0, 5, 9}); err != nil {
		t.Fatal(err)
	}
	want := [][]byte{{'h'}, {'b'}, {'c'}, {'d'}, {'e'}, {'i'}, {'g'}}
	ztExpect(t, s, want)
	if err := s.Delete([]int64{6, 5}); err != nil { // both at the end
		t.Fatal(err)
	}
	ztExpect(t, s, want[:5])
	if err := s.Delete([]int64{0, 1, 2, 3, 4}); err != nil {
		t.Fatal(err)
	}
	ztExpect(t, s, nil)
	if _, err := s.Append([][]byte{[]byte("again")}); err != nil {
		t.Fatal(err)
	}
	ztExpect(t, s, [][]byte{[]byte("again")})
}

func TestDeleteThenCompact(t *testing.T) {
	for _, codec := range ztCodecs {
		t.Run(codec.String(), func(t *testing.T) {
			t.Parallel()
			const capacity = 96 << 10
			s, dir := ztCreate(t, codec, zrecord.WithChunkCapacity(capacity))
			rng := rand.New(rand.NewPCG(7, uint64(codec)))
			var want [][]byte
			id := 0
			for round := range 6 {
				var batch [][]byte
				for range 40 {
					// Mostly small, some large, so that compaction moves
					// records by less than their length (overlapping moves).
					size := 100 + rng.IntN(3000)
					if rng.IntN(8) == 0 {
						size = 20<<10 + rng.IntN(40<<10)
					}
					if rng.IntN(20) == 0 {
						size = 0
					}
					batch = append(batch, ztRecord(id, size))
					id++
				}
				if _, err := s.Append(batch); err != nil {
					t.Fatal(err)
				}
				want = append(want, batch...)
				// Delete a random set, including the current tail.
				k := 5 + rng.IntN(20)
				perm := rng.Perm(len(want))[:k]
				idx := []int64{int64(len(want) - 1)}
				for _, p := range perm {
					if p != len(want)-1 {
						idx = append(idx, int64(p))
					}
				}
				if err := s.Delete(idx); err != nil {
					t.Fatal(err)
				}
				want = ztDeleted(want, idx)
				ztExpect(t, s, want)
				if round%2 == 1 {
					before, _ := s.Stats()
					if err := s.Compact(); err != nil {
						t.Fatal(err)
					}
					ztExpect(t, s, want)
					after, _ := s.Stats()
					if after.ChunkBytes > before.ChunkBytes || after.LiveBytes != before.LiveBytes {
						t.Fatalf("Compact: %+v -> %+v", before, after)
					}
					var largest int64
					for _, r := range want {
						largest = max(largest, int64(len(r)))
					}
					if slack := after.ChunkBytes - after.LiveBytes; slack > after.Chunks*largest {
						t.Fatalf("after Compact %d bytes of garbage remain over %d chunks", slack, after.Chunks)
					}
				}
			}
			// Compacting a compact store changes nothing.
			if err := s.Compact(); err != nil {
				t.Fatal(err)
			}
			disk := ztDirDigest(t, dir)
			if err := s.Compact(); err != nil {
				t.Fatal(err)
			}
			if ztDirDigest(t, dir) != disk {
				t.Fatal("a second Compact rewrote a compact store")
			}
			st, _ := s.Stats()
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			// Only chunks up to the frontier remain, and the store reopens.
			names, _ := ztDirNames(dir)
			chunks := 0
			for _, n := range names {
				if filepath.Ext(n) == ".chunk" {
					chunks++
				}
			}
			if int64(chunks) != st.Chunks {
				t.Fatalf("%d chunk files, Stats.Chunks %d", chunks, st.Chunks)
			}
			if _, err := os.Stat(filepath.Join(dir, "compact.journal")); err == nil {
				t.Fatal("compact.journal left behind")
			}
			r, err := zrecord.Open(dir, zrecord.WithChunkCapacity(capacity))
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			ztExpect(t, r, want)
			if st2, _ := r.Stats(); st2 != st {
				t.Fatalf("Stats after reopen %+v, before %+v", st2, st)
			}
		})
	}
}

// Compacting everything away leaves one empty chunk, and the store works on.
func TestCompactEmpty(t *testing.T) {
	s, _ := ztCreate(t, zrecord.Zstd, zrecord.WithChunkCapacity(4096))
	var recs [][]byte
	for i := range 20 {
		recs = append(recs, ztRecord(i, 1500))
	}
	if _, err := s.Append(recs); err != nil {
		t.Fatal(err)
	}
	all := make([]int64, len(recs))
	for i := range all {
		all[i] = int64(i)
	}
	if err := s.Delete(all); err != nil {
		t.Fatal(err)
	}
	if err := s.Compact(); err != nil {
		t.Fatal(err)
	}
	st, err := s.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if st != (zrecord.Stats{Codec: zrecord.Zstd, Chunks: 1, Version: 4, Checksummed: true, Verified: true}) {
		t.Fatalf("Stats of an emptied store: %+v", st)
	}
	if _, err := s.Append(recs[:3]); err != nil {
		t.Fatal(err)
	}
	ztExpect(t, s, recs[:3])
}
