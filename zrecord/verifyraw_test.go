package zrecord_test

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/loaderx/loaderx/zrecord"
)

// TestRawFlipDefaults flips one byte of a raw record on disk and reads the
// store with every option left at its default: each gather that returns
// the record must fail with ErrCorrupt naming the record and its chunk
// file, whether the record is copied alone (a random batch), as part of a
// run of neighbours (a sequential batch, large enough to fan out), or by
// the packed and ragged gathers. A zstd store keeps incompressible records
// raw, so it is damaged the same way. SetVerify(false), the opt-out, then
// returns the damaged bytes without an error.
func TestRawFlipDefaults(t *testing.T) {
	const size, count, bad = 4 << 10, 600, 17
	for _, codec := range []zrecord.Codec{zrecord.Raw, zrecord.Zstd} {
		t.Run(codec.String(), func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "s")
			s, err := zrecord.Create(dir, zrecord.WithCodec(codec))
			if err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(7, 8))
			recs := make([][]byte, count)
			for i := range recs {
				recs[i] = make([]byte, size)
				for k := range recs[i] {
					recs[i][k] = byte(rng.Uint32()) // incompressible: stored raw
				}
			}
			if _, err := s.Append(recs); err != nil {
				t.Fatal(err)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			chunk := filepath.Join(dir, "0.chunk")
			b, err := os.ReadFile(chunk)
			if err != nil {
				t.Fatal(err)
			}
			if len(b) != size*count {
				t.Fatalf("%s holds %d bytes, want the %d records raw", chunk, len(b), size*count)
			}
			b[bad*size+100] ^= 0x10
			if err := os.WriteFile(chunk, b, 0o644); err != nil {
				t.Fatal(err)
			}

			s, err = zrecord.Open(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if st, err := s.Stats(); err != nil || !st.Verified {
				t.Fatalf("Stats with defaults: verified %v (%v), want true", st.Verified, err)
			}
			all := make([]int64, count)
			for i := range all {
				all[i] = int64(i)
			}
			random := []int64{3, 599, bad, 5}
			want := func(what string, err error) {
				t.Helper()
				name := fmt.Sprintf("record %d in %s:", bad, chunk)
				if !errors.Is(err, zrecord.ErrCorrupt) || !strings.Contains(err.Error(), name) || !strings.Contains(err.Error(), "table says") {
					t.Fatalf("%s: got %v, want ErrCorrupt naming %q and both checksums", what, err, name)
				}
			}
			for _, batch := range [][]int64{random, all, all[bad : bad+1], all[bad-2 : bad+3]} {
				dst := make([]byte, len(batch)*size)
				want("Gather", s.Gather(batch, dst, size))
				offsets := make([]int64, len(batch)+1)
				for k := range batch {
					offsets[k+1] = offsets[k] + size
				}
				want("GatherPacked", s.GatherPacked(batch, dst, offsets))
				sizes := make([]int64, len(batch))
				_, err := s.GatherRagged(batch, sizes, dst)
				want("GatherRagged", err)
			}
			// The records around the damaged one read back intact.
			dst := make([]byte, 2*size)
			if err := s.Gather([]int64{bad - 1, bad + 1}, dst, size); err != nil {
				t.Fatalf("neighbours of the damaged record: %v", err)
			}
			if !bytes.Equal(dst[:size], recs[bad-1]) || !bytes.Equal(dst[size:], recs[bad+1]) {
				t.Fatal("neighbours of the damaged record differ")
			}

			s.SetVerify(false)
			if st, _ := s.Stats(); st.Verified {
				t.Fatal("Stats after SetVerify(false): verified")
			}
			dst = make([]byte, size)
			if err := s.Gather([]int64{bad}, dst, size); err != nil {
				t.Fatalf("Gather with verification off: %v", err)
			}
			if bytes.Equal(dst, recs[bad]) {
				t.Fatal("with verification off the damaged record reads intact: the flip did not reach it")
			}
		})
	}
}
