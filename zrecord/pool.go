package zrecord

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// The helpers of parallel are persistent goroutines, started on first use
// and never stopped. Starting goroutines per call and waiting for them is
// expensive when the caller is a cgo export: the export's goroutine is
// locked to its C thread, so parking it in a WaitGroup and waking it again
// hands the thread's P to another thread and back, two cross-thread wake-ups
// on top of the helpers' own (about 17 µs a call on two cores). Here the
// caller never parks while its helpers are running: it takes blocks of the
// job itself until none is left and then spins, without yielding, until
// the blocks a helper took are done, and only parks after fanOutSpin. A
// helper that finishes a job polls for the next one for helperSpin, yielding
// between polls, before it sleeps (sleepForJob), so back-to-back calls find
// it awake.

// job is one call of parallel: blocks 0..n-1 of work, claimed in order by
// the caller and by whichever helpers pick the job up. A job is never
// reused, so a helper that takes it from the queue after the call returned
// finds no block left and drops it.
type job struct {
	op   string
	work func(w int) error
	n    int32
	next atomic.Int32 // the next block to claim
	left atomic.Int32 // blocks not finished
	errs []error      // errs[w] is the error of block w
	done chan struct{}
}

// run claims and runs blocks until none is left to claim.
func (j *job) run() {
	for {
		w := j.next.Add(1) - 1
		if w >= j.n {
			return
		}
		j.errs[w] = guarded(j.op, int(w), j.work)
		if j.left.Add(-1) == 0 {
			j.done <- struct{}{} // buffered: the one send of the job never blocks
		}
	}
}

// fanOutSpin is how long the caller of parallel spins for its helpers'
// blocks before it parks; helperSpin how long an idle helper polls for work
// before it parks.
const (
	fanOutSpin = 50 * time.Microsecond
	helperSpin = 20 * time.Microsecond
)

var (
	// jobs is the queue helpers take jobs from; parallel offers a job once
	// per helper it wants, and skips the offer when the queue is full.
	jobs = make(chan *job, maxThreads)

	helpersMu sync.Mutex
	helpers   atomic.Int32 // helper goroutines started
)

// ensureHelpers starts helpers until there are at least n.
func ensureHelpers(n int) {
	if int(helpers.Load()) >= n {
		return
	}
	helpersMu.Lock()
	defer helpersMu.Unlock()
	for int(helpers.Load()) < n {
		helpers.Add(1)
		go helper()
	}
}

// helper runs jobs from the queue forever. Every block runs under guarded,
// which turns memory faults into panics and panics into the block's error.
func helper() {
	for {
		var j *job
		deadline := time.Now().Add(helperSpin)
		for j == nil {
			select {
			case j = <-jobs:
			default:
				if time.Now().After(deadline) {
					// Woken without a job (see wakeHelpers), it polls
					// again: the job is on its way.
					j = sleepForJob()
					deadline = time.Now().Add(helperSpin)
				} else {
					runtime.Gosched()
				}
			}
		}
		j.run()
	}
}

// fanOut runs work(0..n-1), n ≥ 2, on the caller and up to helpers
// persistent helpers (1 ≤ helpers < n), and returns the error of the
// lowest-numbered failing block.
func fanOut(n, helpers int, op string, work func(w int) error) error {
	j := &job{op: op, work: work, n: int32(n), errs: make([]error, n), done: make(chan struct{}, 1)}
	j.left.Store(int32(n))
	ensureHelpers(helpers)
	offered := 0
	for range helpers {
		select {
		case jobs <- j:
			offered++
		default: // the queue is full: the caller takes the block itself
		}
	}
	wakeHelpers(offered)
	j.run()
	if j.left.Load() != 0 {
		// Only blocks a helper is running are left: they end about when
		// the caller's own did.
		deadline := time.Now().Add(fanOutSpin)
		for i := 0; j.left.Load() != 0; i++ {
			if i%64 == 63 && time.Now().After(deadline) {
				<-j.done
				break
			}
		}
	}
	for _, err := range j.errs {
		if err != nil {
			return err
		}
	}
	return nil
}
