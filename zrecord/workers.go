package zrecord

import (
	"runtime"
	"sync/atomic"
)

// threadSetting is the value given to SetThreads; 0 means the default:
// defaultThreads when set, else GOMAXPROCS.
var threadSetting atomic.Int32

// defaultThreads is the value given to SetDefaultThreads; 0 means GOMAXPROCS.
var defaultThreads atomic.Int32

// SetDefaultThreads sets what SetThreads(0) restores: n goroutines, or
// runtime.GOMAXPROCS(0) at the time of each call when n <= 0. A program
// that raises GOMAXPROCS above its CPUs, to keep a P free for threads that
// call into Go from C, sets it to the CPUs, so that one call still fans out
// no wider than the machine.
func SetDefaultThreads(n int) {
	defaultThreads.Store(int32(min(max(n, 0), maxThreads)))
}

// maxThreads bounds SetThreads.
const maxThreads = 1024

// SetThreads sets the package-wide number of goroutines a single Gather or
// Append may fan out to. n <= 0 restores the default (SetDefaultThreads;
// runtime.GOMAXPROCS(0) at the time of each call unless that was set).
// Small batches do not fan out: a worker is only started when it gets about
// fanOutBytes of work, except that a batch of 32 KiB to 256 KiB of small raw
// records is split over two (gather_split.go).
func SetThreads(n int) {
	if n <= 0 {
		threadSetting.Store(0)
		return
	}
	threadSetting.Store(int32(min(n, maxThreads)))
}

// Threads returns the fan-out width set by SetThreads.
func Threads() int {
	if n := threadSetting.Load(); n > 0 {
		return int(n)
	}
	if n := defaultThreads.Load(); n > 0 {
		return int(n)
	}
	return runtime.GOMAXPROCS(0)
}

// fanOutBytes is the least work, in bytes copied, that justifies one more
// goroutine: handing a block to a parked helper costs a few µs when the
// caller is a C thread, and a block should dwarf that. A gather counts a
// decoded byte as decodeWeight copied ones (gatherCost). At 1 MiB, a
// random batch of 256 records of 4 KiB stayed on one goroutine; at 512
// KiB it is spread over two, which took it from 1.07-1.15x to 1.72-1.95x
// np.take unchecked and from 0.94-1.02x to 1.55-1.63x checked (two
// alternated runs on two cores; 256 KiB measured the same). Batches of
// 64 KiB gained nothing from two goroutines, at 16 or 32 KiB a goroutine:
// there the hand-over costs what the second core saves. On a first
// generation Zen host, once helpers were woken through a futex
// (wake_linux.go), the same 1 MiB batch took 120-130 µs on two goroutines
// against about 204 µs on one.
const fanOutBytes = 512 << 10

// compressFanOutBytes is the same threshold for compression, which is far
// slower per byte than copying.
const compressFanOutBytes = 128 << 10

// workersFor returns how many goroutines should share total bytes of work
// spread over n items.
func workersFor(total int64, n int, per int64) int {
	w := int64(Threads())
	w = min(w, total/per, int64(n))
	return int(max(w, 1))
}

// inGathers counts the gathers running, of every store and set, from the
// call to its return (enterGather).
var inGathers atomic.Int32

// enterGather counts a gather as running until the function it returns is
// called: defer enterGather()().
func enterGather() func() {
	inGathers.Add(1)
	return leaveGather
}

func leaveGather() { inGathers.Add(-1) }

// gatherWorkers is workersFor for a gather copying total bytes of n
// records, less one goroutine for each other gather running: those have
// cores of their own to fill, and a helper of this one would take a core
// from them. A data loader's workers gather side by side, one a core by
// default; on two cores (Zen 1), two goroutines filling rings of 2 or 12
// slots moved 1.01-1.15x the bytes a second with this rule as without it,
// for records of 4 KiB to 1 MiB, cached or streamed, and never fewer
// (BenchmarkGatherSlots, three alternated runs, medians).
func gatherWorkers(total int64, n int) int {
	w := workersFor(total, n, fanOutBytes)
	if others := int(inGathers.Load()) - 1; others > 0 {
		w = min(w, max(1, Threads()-others))
	}
	return w
}

// wakeAhead wakes the helpers that a gather copying at least total bytes
// of n records will fan out to, before the call's serial part (checking
// its indices and locating its records, 12-17 µs for 256 records), so
// that their wake-up overlaps it instead of delaying their first block.
func wakeAhead(total int64, n int) {
	if w := gatherWorkers(total, n); w > 1 && inParallel.Load() == 0 {
		wakeHelpers(w - 1)
	}
}

// parallel runs work(0..n-1) on the calling goroutine and the package's
// persistent helpers (pool.go), and waits. Every block runs with memory
// faults turned into panics and every panic turned into an error. It
// returns the error of the lowest-numbered failing block.
func parallel(n int, op string, work func(w int) error) error {
	return parallelBlocks(n, n, op, work)
}

// blocksPerWorker is how many blocks a fanned-out gather is cut into per
// goroutine. Blocks are claimed one at a time, so a goroutine that gets its
// core late (the machine is shared, or its records decode slower) takes
// fewer of them instead of holding the whole call up; each block boundary
// costs one record decoded with exact copies (see Gather).
const blocksPerWorker = 4

// gatherBlocks returns how many blocks a gather of n records spread over
// workers goroutines is cut into: one without a fan-out.
func gatherBlocks(workers, n int) int {
	if workers <= 1 {
		return 1
	}
	return min(n, workers*blocksPerWorker)
}

// parallelBlocks runs work(0..blocks-1) on the calling goroutine and up to
// workers-1 persistent helpers, each claiming the next block until none is
// left, and waits; otherwise as parallel.
// A call made while others run fans out only onto the cores they leave:
// with Threads() 2, the second of two concurrent calls (two workers of a
// step pipeline, each gathering a batch of 4 MiB) runs on its caller
// alone, instead of four goroutines sharing two cores.
func parallelBlocks(workers, blocks int, op string, work func(b int) error) error {
	busy := int(inParallel.Add(1))
	defer inParallel.Add(-1)
	if blocks <= 1 {
		return guarded(op, 0, work)
	}
	if busy > 1 {
		workers = min(workers, max(1, Threads()-busy+1))
	}
	if workers <= 1 {
		for b := range blocks {
			if err := guarded(op, b, work); err != nil {
				return err
			}
		}
		return nil
	}
	return fanOut(blocks, min(workers, blocks)-1, op, work)
}

// inParallel counts the calls of parallelBlocks running.
var inParallel atomic.Int32

// guarded runs work(w) with memory faults turned into panics and every
// panic turned into an error.
func guarded(op string, w int, work func(w int) error) (err error) {
	old := guardFaults()
	defer func() {
		restoreFaults(old)
		if r := recover(); r != nil {
			err = panicError(op, r)
		}
	}()
	return work(w)
}
