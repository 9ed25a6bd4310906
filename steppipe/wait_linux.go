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
type gate struct {
	seq     atomic.Uint32
	waiters atomic.Int32
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
	if g.opened.Swap(false) && g.waiters.Load() > 0 {
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
	g.waiters.Add(-1)
}
