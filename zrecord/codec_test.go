package zrecord_test

import (
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/loaderx/loaderx/zrecord"
)

// noisyImage is a smooth gradient plus a few levels of noise: no byte
// sequence repeats, but the byte distribution is skewed, as in photographs.
func noisyImage(rng *rand.Rand, side int) []byte {
	b := make([]byte, side*side)
	base := rng.IntN(64)
	for y := 0; y < side; y++ {
		for x := 0; x < side; x++ {
			b[y*side+x] = byte(base + (x+y)*96/(2*side) + rng.IntN(24))
		}
	}
	return b
}

func TestZstdCompressesMatchlessRecords(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	recs := make([][]byte, 16)
	for i := range recs {
		recs[i] = noisyImage(rng, 256)
	}
	s, err := zrecord.Create(filepath.Join(t.TempDir(), "s"), zrecord.WithCodec(zrecord.Zstd))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Append(recs); err != nil {
		t.Fatal(err)
	}
	st, err := s.Stats()
	if err != nil {
		t.Fatal(err)
	}
	ratio := float64(st.LogicalBytes) / float64(st.LiveBytes)
	t.Logf("logical %d, stored %d: %.3fx", st.LogicalBytes, st.LiveBytes, ratio)
	if ratio < 1.1 {
		t.Fatalf("zstd stored noisy records at %.3fx; entropy coding of literals is off", ratio)
	}
	got := make([]byte, len(recs[0])*len(recs))
	idx := make([]int64, len(recs))
	for i := range idx {
		idx[i] = int64(i)
	}
	if err := s.Gather(idx, got, len(recs[0])); err != nil {
		t.Fatal(err)
	}
	for i, r := range recs {
		if string(got[i*len(r):(i+1)*len(r)]) != string(r) {
			t.Fatalf("record %d differs after a round trip", i)
		}
	}
}
