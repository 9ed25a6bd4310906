package zrecord

import (
	"runtime"
	"sync/atomic"
	"time"
)

// A short-path batch (gather_small.go) of splitSmallBytes or more is
// shared by the caller and one helper: each locates half of the batch,
// which asks for that half's entries and records from its own core, and
// once both halves are located, each copies the half it located, from its
// own caches. Nothing is copied until the whole batch is located, so a
// call that is declined, or whose index or size is wrong, has written no
// byte of dst, as on one goroutine.
//
// A half is claimed (free, then locating, then located) by whichever
// block gets to it first, so a helper that starts late, or not at all,
// leaves the caller to locate and copy both halves; a block waits only for
// a half another block is locating, so it never waits for a block that
// has not started.
//
// On a first-generation Zen host with two cores (2 GHz, CRC32 issued once
// per three cycles, the helper woken through a futex in 1.5-3 µs), random
// batches from 64 MiB of records (BenchmarkGatherSplit: four shuffled
// rounds, medians, one goroutine -> split):
//
//	128 records of 256 B   checked 15.8 -> 13.9 µs   unchecked 11.7 -> 10.3 µs
//	256 records of 256 B   checked 33.6 -> 21.6 µs   unchecked 24.1 -> 19.1 µs
//	512 records of 256 B   checked 63.7 -> 38.5 µs   unchecked 52.9 -> 28.3 µs
//	32 records of 4 KiB    checked 25.5 -> 19.0 µs   unchecked 17.2 -> 14.6 µs
//	16 records of 4 KiB    checked 13.3 -> 12.4 µs   unchecked  8.5 ->  9.4 µs
//
// hence at least 32 KiB and 32 records. In `scripts/bench memory` on that
// host, the 256 B gathers from Python (256 records into out=) went from
// 0.58x np.take verified and 0.71x unverified to 0.75x and 0.88x.
//
// A data loader's own workers (GatherSlot) already keep every core busy
// and never split.

// splitSmallBytes is the smallest short-path batch, in bytes copied, that
// splitsSmall shares with a helper; splitSmallMin the fewest records.
var splitSmallBytes int64 = 32 << 10

const splitSmallMin = 32

// splitGathers counts the calls of splitSmall, for the tests.
var splitGathers atomic.Int64

// splitsSmall says whether a short-path batch of n records of stride
// bytes is split over two goroutines: not into a data loader's slot, not
// while another gather runs, and not with one thread.
func splitsSmall(n, stride int, slot bool) bool {
	return !slot && stride > 0 && n >= splitSmallMin && int64(n)*int64(stride) >= splitSmallBytes &&
		Threads() >= 2 && inParallel.Load() == 0 && inGathers.Load() <= 1
}

// The states of a half of a split batch.
const (
	halfFree int32 = iota
	halfLocating
	halfLocated
)

// splitSmall runs a short-path batch of n records of stride bytes into dst
// on the caller and one helper (see above): locate(lo, hi) locates records
// lo..hi-1 into g (their entries in g.locs, their addresses in g.srcs) and
// reports false to decline the call; each half is then copied by copySrcs,
// checked or not, with g.sums as its scratch. splitSmall reports
// whether it took the call and, when it did, the position and checksum of
// the first bad record (at -1 when none), or the error of a block that
// failed (a memory fault).
func splitSmall(dst []byte, stride int, checked bool, g *gatherScratch, n int, locate func(lo, hi int) bool) (took bool, at int, sum uint32, err error) {
	splitGathers.Add(1)
	var state [2]atomic.Int32
	var declined atomic.Bool
	var bad [2]bool
	var ats [2]int
	var sums [2]uint32
	err = parallelBlocks(2, 2, "gather", func(b int) error {
		var mine [2]bool
		for _, h := range [2]int{b, 1 - b} {
			if !state[h].CompareAndSwap(halfFree, halfLocating) {
				continue
			}
			mine[h] = true
			func() {
				ok := false
				// Declined and located even when locate faults: the other
				// block waits for the half, and then copies nothing.
				defer func() {
					if !ok {
						declined.Store(true)
					}
					state[h].Store(halfLocated)
				}()
				ok = locate(n*h/2, n*(h+1)/2)
			}()
		}
		for h := range 2 {
			waitLocated(&state[h])
		}
		if declined.Load() {
			return nil
		}
		for h := range 2 {
			if mine[h] {
				lo, hi := n*h/2, n*(h+1)/2
				ats[h], sums[h], bad[h] = copySrcs(dst[lo*stride:hi*stride], g.srcs[lo:hi], g.locs[lo:hi], stride, checked, g.sums[lo:hi])
				ats[h] += lo
			}
		}
		return nil
	})
	if declined.Load() && err == nil {
		return false, 0, 0, nil
	}
	if err != nil {
		return true, 0, 0, err
	}
	for h := range 2 {
		if bad[h] {
			return true, ats[h], sums[h], nil
		}
	}
	return true, -1, 0, nil
}

// waitLocated waits for a half another block is locating: without
// yielding for fanOutSpin, as fanOut waits for its helpers (a goroutine
// that yields while locked to a C thread, as a call from C is, hands its
// thread's P away and waits to get one back: a split 256-record batch took
// 73-98 µs from Python that way, against 47-55 on one goroutine), then
// yielding, for a runtime whose other goroutines need this P to go on.
func waitLocated(h *atomic.Int32) {
	var deadline time.Time
	for i := 0; h.Load() != halfLocated; i++ {
		if i%64 != 63 {
			continue
		}
		if deadline.IsZero() {
			deadline = time.Now().Add(fanOutSpin)
		} else if time.Now().After(deadline) {
			runtime.Gosched()
		}
	}
}
