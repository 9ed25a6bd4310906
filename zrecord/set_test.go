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

// setShard describes one store of a test set: its codec and how many of the
// records it holds.
type setShard struct {
	codec zrecord.Codec
	count int
}

// ztSet writes records [0, sum of counts) of size bytes (or of varied sizes
// when size is 0) into one store per shard, in order, and returns the set,
// the stores' directories and the records.
func ztSet(t *testing.T, size int, shards []setShard) (*zrecord.Set, []string, [][]byte) {
	t.Helper()
	var all [][]byte
	var stores []*zrecord.Store
	var dirs []string
	id := 0
	for k, sh := range shards {
		dir := filepath.Join(t.TempDir(), fmt.Sprintf("shard%d", k))
		opts := []zrecord.Option{zrecord.WithCodec(sh.codec)}
		s, err := zrecord.Create(dir, opts...)
		if err != nil {
			t.Fatal(err)
		}
		var recs [][]byte
		for range sh.count {
			n := size
			if n == 0 {
				n = 1 + (id*37)%3000
			}
			recs = append(recs, ztRecord(id, n))
			id++
		}
		if len(recs) > 0 {
			if _, err := s.Append(recs); err != nil {
				t.Fatal(err)
			}
		}
		all = append(all, recs...)
		stores = append(stores, s)
		dirs = append(dirs, dir)
	}
	set, err := zrecord.NewSet(stores)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { set.Close() })
	return set, dirs, all
}

func TestSetGatherMatchesRecords(t *testing.T) {
	cases := []struct {
		name   string
		size   int
		shards []setShard
	}{
		{"one store", 512, []setShard{{zrecord.Raw, 300}}},
		{"equal raw", 512, []setShard{{zrecord.Raw, 100}, {zrecord.Raw, 100}, {zrecord.Raw, 100}}},
		{"unequal with empty", 256, []setShard{{zrecord.Raw, 7}, {zrecord.Raw, 0}, {zrecord.Raw, 250}, {zrecord.Raw, 1}}},
		{"mixed codecs", 2048, []setShard{{zrecord.Zstd, 90}, {zrecord.Raw, 60}, {zrecord.Zstd, 30}}},
		{"big batch fans out", 64 << 10, []setShard{{zrecord.Raw, 40}, {zrecord.Raw, 40}}},
		{"many tiny", 64, []setShard{{zrecord.Raw, 1}, {zrecord.Raw, 2}, {zrecord.Raw, 1}, {zrecord.Raw, 3}, {zrecord.Raw, 1}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			set, _, recs := ztSet(t, tc.size, tc.shards)
			if set.Len() != int64(len(recs)) {
				t.Fatalf("Len = %d, want %d", set.Len(), len(recs))
			}
			rng := rand.New(rand.NewPCG(1, 2))
			for _, verify := range []bool{true, false} {
				set.SetVerify(verify)
				for round := range 20 {
					n := 1 + rng.IntN(3*len(recs))
					idx := make([]int64, n)
					for k := range idx {
						idx[k] = rng.Int64N(int64(len(recs)))
					}
					if round == 0 { // every record, reversed
						idx = idx[:0]
						for i := len(recs) - 1; i >= 0; i-- {
							idx = append(idx, int64(i))
						}
					}
					dst := make([]byte, len(idx)*tc.size)
					if err := set.Gather(idx, dst, tc.size); err != nil {
						t.Fatal(err)
					}
					for k, i := range idx {
						if got := dst[k*tc.size : (k+1)*tc.size]; !bytes.Equal(got, recs[i]) {
							t.Fatalf("verify=%v: slot %d (index %d) holds another record", verify, k, i)
						}
					}
					sizes := make([]int64, len(idx))
					packed := make([]byte, len(idx)*tc.size)
					need, err := set.GatherRagged(idx, sizes, packed)
					if err != nil || need != int64(len(packed)) || !bytes.Equal(packed, dst) {
						t.Fatalf("GatherRagged = %d, %v; same bytes: %v", need, err, bytes.Equal(packed, dst))
					}
				}
			}
		})
	}
}

func TestSetRaggedRecords(t *testing.T) {
	set, _, recs := ztSet(t, 0, []setShard{{zrecord.Zstd, 50}, {zrecord.Raw, 1}, {zrecord.Raw, 80}})
	rng := rand.New(rand.NewPCG(3, 4))
	idx := make([]int64, 300)
	for k := range idx {
		idx[k] = rng.Int64N(int64(len(recs)))
	}
	sizes := make([]int64, len(idx))
	need, err := set.GatherRagged(idx, sizes, nil)
	if err != nil || need == 0 {
		t.Fatalf("GatherRagged(nil dst) = %d, %v", need, err)
	}
	dst := make([]byte, need)
	if _, err := set.GatherRagged(idx, sizes, dst); err != nil {
		t.Fatal(err)
	}
	offsets := make([]int64, len(idx)+1)
	off := 0
	for k, i := range idx {
		if sizes[k] != int64(len(recs[i])) || !bytes.Equal(dst[off:off+len(recs[i])], recs[i]) {
			t.Fatalf("record %d (slot %d) differs", i, k)
		}
		off += len(recs[i])
		offsets[k+1] = int64(off)
	}
	again := make([]byte, need)
	if err := set.GatherPacked(idx, again, offsets); err != nil || !bytes.Equal(again, dst) {
		t.Fatalf("GatherPacked: %v, same bytes %v", err, bytes.Equal(again, dst))
	}
	got := make([]int64, len(idx))
	if err := set.Sizes(idx, got); err != nil {
		t.Fatal(err)
	}
	for k := range got {
		if got[k] != sizes[k] {
			t.Fatalf("Sizes[%d] = %d, want %d", k, got[k], sizes[k])
		}
	}
}

func TestSetBadInput(t *testing.T) {
	set, _, recs := ztSet(t, 128, []setShard{{zrecord.Raw, 10}, {zrecord.Raw, 10}})
	dst := make([]byte, 4*128)
	for _, tc := range []struct {
		name string
		err  error
		run  func() error
	}{
		{"index past the end", zrecord.ErrIndexOutOfRange, func() error { return set.Gather([]int64{0, int64(len(recs))}, dst, 128) }},
		{"negative index", zrecord.ErrIndexOutOfRange, func() error { return set.Gather([]int64{-1}, dst, 128) }},
		{"wrong stride", zrecord.ErrSizeMismatch, func() error { return set.Gather([]int64{15}, dst, 64) }},
		{"small dst", zrecord.ErrBufferTooSmall, func() error { return set.Gather([]int64{1, 2, 3, 4, 5}, dst, 128) }},
		{"few sizes", zrecord.ErrBufferTooSmall, func() error { return set.Sizes([]int64{1, 2}, make([]int64, 1)) }},
		{"bad offsets", zrecord.ErrInvalidArgument, func() error { return set.GatherPacked([]int64{1, 2}, dst, []int64{0, 128}) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := bytes.Clone(dst)
			err := tc.run()
			if !errors.Is(err, tc.err) {
				t.Fatalf("err = %v, want %v", err, tc.err)
			}
			if !bytes.Equal(before, dst) {
				t.Fatal("a refused call wrote into dst")
			}
		})
	}
	if _, err := zrecord.NewSet(nil); !errors.Is(err, zrecord.ErrInvalidArgument) {
		t.Fatalf("NewSet(nil) = %v", err)
	}
	s := set.Stores()[0]
	if _, err := zrecord.NewSet([]*zrecord.Store{s, s}); !errors.Is(err, zrecord.ErrInvalidArgument) {
		t.Fatalf("a store listed twice: %v", err)
	}
}

// A flipped byte in a raw record of the second store fails the gather with
// ErrCorrupt naming that store's chunk file and its local index.
func TestSetCorruptRecordNamesItsShard(t *testing.T) {
	const size = 4096
	set, dirs, _ := ztSet(t, size, []setShard{{zrecord.Raw, 20}, {zrecord.Raw, 20}})
	stores := set.Stores()
	stores[1].Close()
	chunk := filepath.Join(dirs[1], "0.chunk")
	b, err := os.ReadFile(chunk)
	if err != nil {
		t.Fatal(err)
	}
	b[5*size+100] ^= 0x40 // local record 5, global 25
	if err := os.WriteFile(chunk, b, 0o644); err != nil {
		t.Fatal(err)
	}
	re, err := zrecord.Open(dirs[1], zrecord.WithReadOnly())
	if err != nil {
		t.Fatal(err)
	}
	set2, err := zrecord.NewSet([]*zrecord.Store{stores[0], re})
	if err != nil {
		t.Fatal(err)
	}
	defer re.Close()
	dst := make([]byte, 3*size)
	for _, idx := range [][]int64{{3, 25, 30}, {25}} {
		err = set2.Gather(idx, dst, size)
		if !errors.Is(err, zrecord.ErrCorrupt) || !strings.Contains(err.Error(), "record 5 ") || !strings.Contains(err.Error(), chunk) {
			t.Fatalf("Gather(%v) = %v, want ErrCorrupt naming record 5 of %s", idx, err, chunk)
		}
	}
	if err := set2.Gather([]int64{3, 24, 26}, dst, size); err != nil {
		t.Fatalf("records beside the damaged one: %v", err)
	}
	if _, err := set2.GatherRagged([]int64{25}, make([]int64, 1), dst); !errors.Is(err, zrecord.ErrCorrupt) {
		t.Fatalf("GatherRagged of the damaged record: %v", err)
	}
}

func TestSetClosedStore(t *testing.T) {
	set, _, _ := ztSet(t, 64, []setShard{{zrecord.Raw, 4}, {zrecord.Raw, 4}})
	set.Stores()[1].Close()
	for _, idx := range [][]int64{{5}, {0, 5}} { // a record of the closed store, alone or beside another's
		if err := set.Gather(idx, make([]byte, 2*64), 64); !errors.Is(err, zrecord.ErrClosed) {
			t.Fatalf("Gather(%v) with a closed store = %v, want ErrClosed", idx, err)
		}
	}
}
