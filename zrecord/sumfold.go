package zrecord

import (
	"sync"
	"time"
)

// A stored record that is decoded on its way out (a frame, a narrowed
// record) is checked before it is decoded: dataSum of its stored bytes,
// which hash/crc32 computes with the CRC32 instruction. That instruction
// is not equally fast everywhere: on the first AMD Zen cores it issues once
// every three cycles, and there dataSum of a 4 KiB narrowed record read
// from memory took 1.7 µs, against 1.1 µs through the folding path of
// copyCRC (carry-less multiplications), which needs somewhere to copy to.
// The record's own destination is that place: it is at least as long as
// the stored bytes (a record is stored encoded only when that makes it
// smaller) and the decoding overwrites it next.
//
// Which way is faster is measured once per process, on a buffer in the L1
// cache, the first time a decoded record is checked; either way gives the
// same checksum.

// sumFoldMin is the shortest input sumInto sends through the copy: below
// it the difference is the cost of a call.
const sumFoldMin = 256

// sumInto returns dataSum(src), computed with copyCRC into dst where that
// is the faster way on this CPU (dst, at least as long as src, then holds
// a copy of it); dst and src do not overlap.
func sumInto(dst, src []byte) uint32 {
	if len(src) >= sumFoldMin && len(dst) >= len(src) && foldSums() {
		return copyCRC(dst[:len(src)], src, 0)
	}
	return dataSum(src)
}

// foldSums says whether copyCRC checksums faster than dataSum here, by a
// tenth or more (a tie keeps dataSum, which writes nothing).
var foldSums = sync.OnceValue(func() bool {
	if copyCRCImpl.name == genericCRCPath.name {
		return false // the generic path is a copy and then dataSum's own loop
	}
	src := make([]byte, 16<<10)
	for i := range src {
		src[i] = byte(i * 131)
	}
	dst := make([]byte, len(src))
	fold := fastest(func() { copyCRC(dst, src, 0) })
	plain := fastest(func() { dataSum(src) })
	return fold*10 < plain*9
})

// fastest is the shortest of several timed runs of f, after one untimed.
func fastest(f func()) time.Duration {
	f()
	best := time.Duration(1<<63 - 1)
	for range 16 {
		t0 := time.Now()
		f()
		best = min(best, time.Since(t0))
	}
	return best
}
