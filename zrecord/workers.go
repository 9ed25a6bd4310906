package zrecord

import (
	"runtime"
	"sync"
	"sync/atomic"
)

// threadSetting is the value given to SetThreads; 0 means GOMAXPROCS.
var threadSetting atomic.Int32

// maxThreads bounds SetThreads.
const maxThreads = 1024

// SetThreads sets the package-wide number of goroutines a single Gather or
// Append may fan out to. n <= 0 restores the default, runtime.GOMAXPROCS(0)
// at the time of each call. Small batches never fan out: a worker is only
// started when it gets about fanOutBytes of work.
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
	return runtime.GOMAXPROCS(0)
}

// fanOutBytes is the least work (bytes copied or decoded) that justifies one
// more goroutine: waking a goroutine costs on the order of 10 µs when the
// caller is a C thread, about what copying 1 MiB takes.
const fanOutBytes = 1 << 20

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

// parallel runs work(0..n-1): work(0) on the calling goroutine, the rest on
// new goroutines, and waits. Every goroutine turns memory faults and panics
// into errors. It returns the error of the lowest-numbered failing worker.
func parallel(n int, op string, work func(w int) error) error {
	if n <= 1 {
		return guarded(op, 0, work)
	}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for w := 1; w < n; w++ {
		wg.Go(func() { errs[w] = guarded(op, w, work) })
	}
	errs[0] = guarded(op, 0, work)
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

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
