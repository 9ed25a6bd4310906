package zrecord

import (
	"sync/atomic"
	"syscall"
	"unsafe"
)

// An idle helper sleeps on a futex, not on the jobs channel. A goroutine
// parked on a channel is made runnable by the sender on the sender's own P,
// as the next goroutine that P runs; the caller of fanOut never yields it,
// so another P has to steal the helper from there, and the runtime sleeps
// 3 µs before it takes a P's next goroutine, which Linux's default timer
// slack of 50 µs stretches to about 53. On two cores a helper woken that
// way started 43-54 µs after the offer (a 4 KiB gather of 256 records
// takes 110-140 µs on two goroutines); woken through the futex, the kernel
// wakes the helper's thread itself, and it started 1.5-3 µs after it.
//
// A helper that finds no job for helperSpin announces itself in sleepers,
// looks at the queue once more and then waits for bell to move from the
// value it read before announcing; fanOut, after offering a job, moves bell
// and wakes as many sleepers as it offered the job to. Either the helper's
// second look finds the job or fanOut sees the announcement, so no offer is
// missed; a wake-up that finds no job (another helper took it) only costs
// the helper a turn of its loop.

var (
	bell     uint32       // moved by every wake-up (atomically)
	sleepers atomic.Int32 // helpers asleep or about to sleep on bell

	// futexBroken is set when the futex call fails in a way that is not a
	// wake-up (a kernel or sandbox without it): helpers then park on the
	// queue instead.
	futexBroken atomic.Bool
)

const (
	futexWaitPrivate = 0 | 128 // FUTEX_WAIT | FUTEX_PRIVATE_FLAG
	futexWakePrivate = 1 | 128 // FUTEX_WAKE | FUTEX_PRIVATE_FLAG
)

// sleepForJob waits for a job offered to the queue and returns it, or nil
// when woken before one was offered.
func sleepForJob() *job {
	if !futexBroken.Load() {
		seq := atomic.LoadUint32(&bell)
		sleepers.Add(1)
		select {
		case j := <-jobs:
			sleepers.Add(-1)
			return j
		default:
		}
		// syscall.Syscall6, not a raw call: the thread may sleep for long,
		// and the runtime must be able to hand its P to other goroutines.
		_, _, errno := syscall.Syscall6(syscall.SYS_FUTEX, uintptr(unsafe.Pointer(&bell)), futexWaitPrivate, uintptr(seq), 0, 0, 0)
		sleepers.Add(-1)
		if errno != 0 && errno != syscall.EAGAIN && errno != syscall.EINTR {
			futexBroken.Store(true)
		}
		select {
		case j := <-jobs:
			return j
		default:
			return nil
		}
	}
	return <-jobs
}

// wakeHelpers wakes up to n sleeping helpers, for a job just offered or
// about to be: a helper woken finds the job, or polls for it for
// helperSpin.
func wakeHelpers(n int) {
	if n <= 0 || sleepers.Load() == 0 {
		return
	}
	atomic.AddUint32(&bell, 1)
	syscall.Syscall6(syscall.SYS_FUTEX, uintptr(unsafe.Pointer(&bell)), futexWakePrivate, uintptr(n), 0, 0, 0)
}
