package zrecord_test

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/loaderx/loaderx/zrecord"
)

func TestProbeCodecMatchesTheStore(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var recs [][]byte
	for i := range 40 {
		r := make([]byte, 4096)
		if i%2 == 0 { // noise: stays raw in a zstd store
			for k := range r {
				r[k] = byte(rng.Uint32())
			}
		} else { // runs: compresses
			copy(r, bytes.Repeat([]byte{byte(i)}, len(r)))
		}
		recs = append(recs, r)
	}
	recs = append(recs, []byte{})
	p, err := zrecord.ProbeCodec(zrecord.Zstd, zrecord.TierBalanced, nil, recs)
	if err != nil {
		t.Fatal(err)
	}
	if p.Records != 41 || p.LogicalBytes != 40*4096 || p.Compressed != 20 || p.Passes < 3 || p.DecodeNanos <= 0 {
		t.Fatalf("probe = %+v", p)
	}
	s, err := zrecord.Create(t.TempDir(), zrecord.WithCodec(zrecord.Zstd))
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
	if st.LiveBytes != p.StoredBytes {
		t.Fatalf("store holds %d bytes, the probe says %d", st.LiveBytes, p.StoredBytes)
	}
	raw, err := zrecord.ProbeCodec(zrecord.Raw, zrecord.TierBalanced, nil, recs)
	if err != nil || raw.StoredBytes != raw.LogicalBytes || raw.Compressed != 0 {
		t.Fatalf("raw probe = %+v, %v", raw, err)
	}
}

func TestProbeCodecRefusesBadArguments(t *testing.T) {
	recs := [][]byte{[]byte("abc")}
	if _, err := zrecord.ProbeCodec(zrecord.ZstdDict, zrecord.TierFast, nil, recs); !errors.Is(err, zrecord.ErrInvalidArgument) {
		t.Fatalf("zstd_dict without a dictionary: %v", err)
	}
	if _, err := zrecord.ProbeCodec(zrecord.Codec(9), zrecord.TierFast, nil, recs); !errors.Is(err, zrecord.ErrInvalidArgument) {
		t.Fatalf("codec 9: %v", err)
	}
}
