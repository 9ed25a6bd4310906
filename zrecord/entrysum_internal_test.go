package zrecord

import (
	"encoding/binary"
	"hash/crc32"
	"math/rand/v2"
	"testing"
)

// TestEntrySumFast checks the fast entry checksum against a CRC-32C of the
// index and the entry's first 20 bytes computed from scratch, for indices
// and bytes that exercise every bit.
func TestEntrySumFast(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	tab := crc32.MakeTable(crc32.Castagnoli)
	for n := range 10000 {
		var b [24]byte
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		idx := int64(rng.Uint64())
		switch n {
		case 0:
			idx = 0
		case 1:
			idx = -1
		case 2:
			idx = 1 << 62
		}
		var msg [28]byte
		binary.LittleEndian.PutUint64(msg[:8], uint64(idx))
		copy(msg[8:], b[:20])
		want := crc32.Checksum(msg[:], tab)
		if got := entrySumFast(idx, b[:]); got != want {
			t.Fatalf("entry %d bytes %x: fast sum %#08x, want %#08x", idx, b[:20], got, want)
		}
		if got := entrySum(idx, b[:]); got != want {
			t.Fatalf("entry %d bytes %x: sum %#08x, want %#08x", idx, b[:20], got, want)
		}
	}
}

func BenchmarkEntrySum(b *testing.B) {
	var buf [24]byte
	var sink uint32
	b.Run("crc32", func(b *testing.B) {
		for i := range b.N {
			sink += entrySum(int64(i), buf[:])
		}
	})
	b.Run("fast", func(b *testing.B) {
		for i := range b.N {
			sink += entrySumFast(int64(i), buf[:])
		}
	})
	_ = sink
}
