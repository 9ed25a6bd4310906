package steppipe

import (
	"math"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The operations of futex(2) (linux/futex.h: FUTEX_WAIT 0, FUTEX_WAKE 1,
// FUTEX_PRIVATE_FLAG 128), which golang.org/x/sys/unix does not name.
const (
	futexWaitPrivate = 0 | 128
	futexWakePrivate = 1 | 128
)

// gate, on Linux: seq counts the changes, and a waiter blocks in futex(2)
// while seq is still the count it read.
//
// waiters counts those that came to wait since the last wake-up, not those
// still asleep: a wake-up wakes every waiter there is, and one that came
// after it found seq changed (open comes before flush) and does not sleep.
// A waker that finds none to wake makes no system call, even while the ones
// it woke last have not run yet: a consumer faster than its workers opens
// the gate at every step, and on cores shared with other work the workers
// it woke may not run for several steps (it had been one futex wake-up a
// step, each a system call of the consumer's). One that stopped waiting on
// its own (a timeout, EINTR) stays counted until the next wake-up, which
// then wakes nobody: one system call lost, no wake-up missed.
type gate struct {
	seq     atomic.Uint32
	waiters atomic.Int32 // came to wait since the last wake-up
	opened  atomic.Bool  // since the last flush
	wakes   atomic.Int64 // futex wake-ups made (for tests)
}

type gateToken = uint32

func (g *gate) token() gateToken { return g.seq.Load() }

func (g *gate) open() {
	g.seq.Add(1)
	g.opened.Store(true)
}

func (g *gate) flush() {
	if g.opened.Swap(false) && g.waiters.Load() > 0 && g.waiters.Swap(0) > 0 {
		g.wakes.Add(1)
		_, _, _ = unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(&g.seq)), futexWakePrivate, math.MaxInt32, 0, 0, 0)
	}
}

func (g *gate) wait(seen gateToken, timeout time.Duration) {
	var ts *unix.Timespec
	if timeout > 0 {
		t := unix.NsecToTimespec(int64(timeout))
		ts = &t
	}
	g.waiters.Add(1)
	// EAGAIN (changed already), EINTR and ETIMEDOUT all mean: look again.
	_, _, _ = unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(&g.seq)), futexWaitPrivate, uintptr(seen),
		uintptr(unsafe.Pointer(ts)), 0, 0)
}
