package zrecord

import (
	"testing"
)

// TestGatherCostWeighsDecoding checks the fan-out decision: a batch of 256
// compressed 2 KiB records (512 KiB logical) is worth two workers, because
// decoding is far slower than copying, while the same batch stored raw
// stays on one goroutine, and raw records in a compressed store (frames
// that would not be smaller) count as copies.
func TestGatherCostWeighsDecoding(t *testing.T) {
	defer SetThreads(0)
	SetThreads(2)
	const size, n = 2 << 10, 256
	compressible := make([]byte, size)
	for i := range compressible {
		compressible[i] = byte(i / 64)
	}
	for _, tc := range []struct {
		codec   Codec
		rec     []byte
		workers int
	}{
		{Zstd, compressible, 2},
		{Raw, compressible, 1},
		{Zstd, ztRecordInternal(size), 1}, // incompressible: stored raw
	} {
		s, err := Create(t.TempDir(), WithCodec(tc.codec))
		if err != nil {
			t.Fatal(err)
		}
		recs := make([][]byte, n)
		for i := range recs {
			recs[i] = tc.rec
		}
		if _, err := s.Append(recs); err != nil {
			t.Fatal(err)
		}
		idx := make([]int64, n)
		for k := range idx {
			idx[k] = int64(k)
		}
		g := getGatherScratch(n)
		if _, err := s.locate("gather", idx, g); err != nil {
			t.Fatal(err)
		}
		cost := s.gatherCost(g.locs, n*size)
		if got := workersFor(cost, n, fanOutBytes); got != tc.workers {
			t.Errorf("%v records, first %d/%d bytes stored: cost %d gives %d workers, want %d",
				tc.codec, g.locs[0].phys, g.locs[0].logic, cost, got, tc.workers)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// ztRecordInternal returns size bytes zstd cannot shrink.
func ztRecordInternal(size int) []byte {
	b := make([]byte, size)
	x := uint64(0x9e3779b97f4a7c15)
	for i := range b {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		b[i] = byte(x >> 32)
	}
	return b
}

// A gather's raw copies stream (write past the caches) for batches that
// outgrow them (streamMin), and a data loader's slots, several in flight,
// from their path's streamSlotMin, whatever the records and the
// goroutines.
func TestSetStream(t *testing.T) {
	for _, p := range copyCRCPaths() {
		if p.slotStreamMin <= 0 || p.slotStreamMin > streamMin {
			t.Errorf("path %s streams slots from %d bytes: want a positive figure no larger than streamMin", p.name, p.slotStreamMin)
		}
	}
	for _, tc := range []struct {
		total      int64
		slot, want bool
	}{
		{256 << 8, true, false},          // 256 B records, 64 KiB
		{256 << 10, true, false},         // 1 KiB records, 256 KiB
		{4 << 20, false, false},          // 64 KiB records, 4 MiB
		{16 << 20, false, false},         // 1 MiB records, 16 MiB
		{16 << 20, true, true},           // the same into a slot
		{64 << 20, false, true},          // 64 MiB
		{streamMin, false, true},         // the least
		{streamMin - 1, false, false},    // below it
		{streamSlotMin, true, true},      // the least into a slot
		{streamSlotMin - 1, true, false}, // below it
		{0, true, false},                 // an empty call
	} {
		var g gatherScratch
		g.setStream(tc.total, tc.slot)
		if g.stream != tc.want {
			t.Errorf("setStream(%d bytes, slot %v) = %v, want %v", tc.total, tc.slot, g.stream, tc.want)
		}
	}
}
