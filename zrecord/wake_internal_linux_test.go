package zrecord

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
)

// pairedBlocks returns work for parallel(2, ...) in which each block waits
// for the other to start: a call returns nil only if a helper took a block
// while the caller ran the other one, and fails after two seconds if no
// helper was woken for it.
func pairedBlocks() func(int) error {
	var arrived atomic.Int32
	return func(w int) error {
		arrived.Add(1)
		deadline := time.Now().Add(2 * time.Second)
		for arrived.Load() < 2 {
			if time.Now().After(deadline) {
				return fmt.Errorf("block %d ran alone for 2 s: no helper took the other one", w)
			}
			runtime.Gosched()
		}
		return nil
	}
}

// waitFor polls cond for up to two seconds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after 2 s: %s", what)
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// TestSleepingHelpersAreWoken: a helper idle for longer than helperSpin
// sleeps on the futex (it is counted in sleepers), and a call made then
// wakes it, every time; so does a call after a wake-up that found no job
// (wakeAhead's, when the call it was made for did not fan out after all).
func TestSleepingHelpersAreWoken(t *testing.T) {
	SetThreads(2)
	defer SetThreads(0)
	runtime.LockOSThread() // as a cgo export's goroutine is
	defer runtime.UnlockOSThread()
	if err := parallel(2, "test", pairedBlocks()); err != nil { // starts the helper
		t.Fatal(err)
	}
	for round := range 40 {
		waitFor(t, "no helper went to sleep", func() bool { return sleepers.Load() > 0 })
		if round%2 == 1 {
			before := atomic.LoadUint32(&bell)
			wakeHelpers(maxThreads) // no job follows
			if atomic.LoadUint32(&bell) == before {
				t.Fatal("wakeHelpers with sleepers did not move the bell")
			}
			// The helpers woken for nothing go back to sleep.
			waitFor(t, "a helper woken without a job did not sleep again", func() bool { return sleepers.Load() > 0 })
		}
		if err := parallel(2, "test", pairedBlocks()); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
	}
}

// TestHelpersParkOnTheQueueWithoutFutex: where the futex fails, helpers
// park on the jobs channel instead, and calls still reach them; once it
// works again they return to it.
func TestHelpersParkOnTheQueueWithoutFutex(t *testing.T) {
	SetThreads(2)
	defer SetThreads(0)
	if err := parallel(2, "test", pairedBlocks()); err != nil {
		t.Fatal(err)
	}
	futexBroken.Store(true)
	restored := false
	defer func() {
		if !restored {
			futexBroken.Store(false)
		}
	}()
	wakeHelpers(maxThreads) // out of the futex, onto the channel
	waitFor(t, "helpers still counted asleep on the futex", func() bool { return sleepers.Load() == 0 })
	for round := range 10 {
		time.Sleep(time.Millisecond) // past helperSpin: parked
		if sleepers.Load() != 0 {
			t.Fatalf("round %d: a helper slept on the futex after it was marked broken", round)
		}
		if err := parallel(2, "test", pairedBlocks()); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
	}
	futexBroken.Store(false)
	restored = true
	if err := parallel(2, "test", pairedBlocks()); err != nil { // takes a helper off the channel
		t.Fatal(err)
	}
	waitFor(t, "no helper returned to the futex", func() bool { return sleepers.Load() > 0 })
	if err := parallel(2, "test", pairedBlocks()); err != nil {
		t.Fatal(err)
	}
}
