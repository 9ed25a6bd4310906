package zrecord

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The fan-out is measured from a goroutine locked to its OS thread, as a cgo
// export's goroutine is:
//
//	go test -run '^$' -bench 'FanOut' ./zrecord/

// BenchmarkFanOut is the per-call cost of parallel itself: two blocks that
// do nothing.
func BenchmarkFanOut(b *testing.B) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var sink atomic.Int64
	work := func(w int) error { sink.Add(int64(w)); return nil }
	for b.Loop() {
		if err := parallel(2, "bench", work); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkFanOutBusy is parallel over blocks of about 20 µs of computation
// each, so that a helper does take a block: with perfect fan-out, blocks=2
// takes as long as blocks=1, and the difference is the cost of the hand-off.
func BenchmarkFanOutBusy(b *testing.B) {
	var sink atomic.Uint64
	work := func(w int) error {
		x := uint64(w) + 1
		for range 20_000 {
			x ^= x << 13
			x ^= x >> 7
			x ^= x << 17
		}
		sink.Add(x)
		return nil
	}
	for _, n := range []int{1, 2} {
		b.Run(fmt.Sprintf("blocks=%d", n), func(b *testing.B) {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			for b.Loop() {
				if err := parallel(n, "bench", work); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkFanOutGather gathers 9 raw records of 256 KiB (2.25 MiB, just
// above the threshold of two workers) at one and two threads.
func BenchmarkFanOutGather(b *testing.B) {
	const size, count, batch = 256 << 10, 64, 9
	s, err := Create(b.TempDir(), WithCodec(Raw))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	recs := make([][]byte, count)
	for i := range recs {
		recs[i] = make([]byte, size)
		for k := range recs[i] {
			recs[i][k] = byte(i + k)
		}
	}
	if _, err := s.Append(recs); err != nil {
		b.Fatal(err)
	}
	idx := make([]int64, batch)
	for k := range idx {
		idx[k] = int64(k * 7 % count)
	}
	dst := make([]byte, batch*size)
	defer SetThreads(0)
	for _, threads := range []int{1, 2} {
		b.Run(fmt.Sprintf("threads=%d", threads), func(b *testing.B) {
			SetThreads(threads)
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			b.SetBytes(int64(len(dst)))
			for b.Loop() {
				if err := s.Gather(idx, dst, size); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestParallelRunsEveryBlockOnce checks parallel at several widths, from
// locked and unlocked goroutines calling at once: every block runs exactly
// once per call, and the call returns only after all of them finished.
func TestParallelRunsEveryBlockOnce(t *testing.T) {
	var wg sync.WaitGroup
	for c := range 4 {
		wg.Go(func() {
			if c%2 == 0 {
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
			}
			for it := range 200 {
				n := 2 + (it+c)%7
				counts := make([]atomic.Int32, n)
				if err := parallel(n, "test", func(w int) error {
					counts[w].Add(1)
					return nil
				}); err != nil {
					t.Error(err)
					return
				}
				for w := range counts {
					if got := counts[w].Load(); got != 1 {
						t.Errorf("caller %d call %d: block %d of %d ran %d times", c, it, w, n, got)
						return
					}
				}
			}
		})
	}
	wg.Wait()
}

// TestParallelErrorsAndPanics checks that parallel reports the error of the
// lowest-numbered failing block, turns a panic in any block into an error
// naming the operation, and keeps working afterwards.
func TestParallelErrorsAndPanics(t *testing.T) {
	boom := errors.New("boom")
	err := parallel(4, "gather", func(w int) error {
		if w >= 2 {
			return fmt.Errorf("block %d: %w", w, boom)
		}
		return nil
	})
	if err == nil || !errors.Is(err, boom) || err.Error() != "block 2: boom" {
		t.Fatalf("error = %v, want block 2's", err)
	}
	for range 20 {
		err = parallel(3, "gather", func(w int) error {
			if w == 1 {
				panic("bad block")
			}
			return nil
		})
		if err == nil || !strings.Contains(err.Error(), "gather: internal error: bad block") {
			t.Fatalf("a panicking block gave %v", err)
		}
	}
	if err := parallel(3, "gather", func(int) error { return nil }); err != nil {
		t.Fatalf("after panics: %v", err)
	}
}

// TestParallelBlocksMoreThanWorkers checks parallelBlocks with more blocks
// than goroutines: every block runs exactly once, at most workers of them
// at a time, and the error returned is the lowest-numbered failing block's,
// with and without helpers.
func TestParallelBlocksMoreThanWorkers(t *testing.T) {
	for _, tc := range []struct{ workers, blocks int }{{2, 8}, {3, 7}, {1, 5}, {4, 4}} {
		counts := make([]atomic.Int32, tc.blocks)
		var running, most atomic.Int32
		err := parallelBlocks(tc.workers, tc.blocks, "test", func(b int) error {
			now := running.Add(1)
			defer running.Add(-1)
			for {
				m := most.Load()
				if now <= m || most.CompareAndSwap(m, now) {
					break
				}
			}
			counts[b].Add(1)
			runtime.Gosched()
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		for b := range counts {
			if got := counts[b].Load(); got != 1 {
				t.Errorf("%d workers: block %d of %d ran %d times", tc.workers, b, tc.blocks, got)
			}
		}
		if m := most.Load(); int(m) > tc.workers {
			t.Errorf("%d workers, %d blocks: %d blocks ran at once", tc.workers, tc.blocks, m)
		}
		boom := errors.New("boom")
		err = parallelBlocks(tc.workers, tc.blocks, "test", func(b int) error {
			if b >= tc.blocks-2 {
				return fmt.Errorf("block %d: %w", b, boom)
			}
			return nil
		})
		if want := fmt.Sprintf("block %d: boom", tc.blocks-2); err == nil || err.Error() != want {
			t.Errorf("%d workers, %d blocks: error %v, want %q", tc.workers, tc.blocks, err, want)
		}
	}
}

// TestFanOutLeavesCoresToCallsBeside: a call of parallelBlocks made while
// another runs fans out only onto the cores that one leaves; alone, the
// same call spreads its blocks over Threads() goroutines.
func TestFanOutLeavesCoresToCallsBeside(t *testing.T) {
	SetThreads(2)
	defer SetThreads(0)
	widest := func() int32 {
		var now, most atomic.Int32
		work := func(int) error {
			n := now.Add(1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
			deadline := time.Now().Add(2 * time.Millisecond)
			for time.Now().Before(deadline) { // busy, so that a helper takes blocks meanwhile
			}
			now.Add(-1)
			return nil
		}
		if err := parallelBlocks(2, 8, "test", work); err != nil {
			t.Fatal(err)
		}
		return most.Load()
	}
	if runtime.GOMAXPROCS(0) >= 2 {
		alone := int32(0)
		for range 20 { // a helper may miss a short job on a busy machine: it only has to take part once
			if alone = max(alone, widest()); alone == 2 {
				break
			}
		}
		if alone != 2 {
			t.Fatalf("alone, 8 blocks ran at most %d at a time, want 2", alone)
		}
	}
	inParallel.Add(1) // another call running
	defer inParallel.Add(-1)
	for range 5 {
		if got := widest(); got != 1 {
			t.Fatalf("beside another call, 8 blocks ran %d at a time, want 1 (Threads() %d)", got, Threads())
		}
	}
}

// TestGatherWorkersLeaveCoresToOtherGathers: a gather's fan-out is
// workersFor's less one goroutine for each other gather running, never
// below one, and a gather counts itself as running only until it returns.
func TestGatherWorkersLeaveCoresToOtherGathers(t *testing.T) {
	defer SetThreads(0)
	const big = 64 << 20 // enough bytes for every thread
	for _, tc := range []struct {
		threads, running, want int
	}{
		{2, 0, 2}, // asked outside a gather: as workersFor
		{2, 1, 2}, // the only gather
		{2, 2, 1},
		{2, 5, 1},
		{4, 2, 3},
		{4, 3, 2},
		{8, 4, 5},
		{1, 3, 1},
	} {
		SetThreads(tc.threads)
		inGathers.Add(int32(tc.running))
		got := gatherWorkers(big, 1000)
		inGathers.Add(-int32(tc.running))
		if got != tc.want {
			t.Errorf("%d threads, %d gathers running: %d workers, want %d", tc.threads, tc.running, got, tc.want)
		}
	}
	SetThreads(4)
	if got := gatherWorkers(fanOutBytes, 1000); got != 1 {
		t.Errorf("%d bytes alone: %d workers, want 1", fanOutBytes, got)
	}

	before := inGathers.Load()
	s, err := Create(t.TempDir(), WithCodec(Raw))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	recs := [][]byte{make([]byte, 64), make([]byte, 64)}
	if _, err := s.Append(recs); err != nil {
		t.Fatal(err)
	}
	dst := make([]byte, 128)
	if err := s.Gather([]int64{1, 0}, dst, 64); err != nil {
		t.Fatal(err)
	}
	if err := s.Gather([]int64{7}, dst, 64); err == nil {
		t.Fatal("gather of record 7 of 2 succeeded")
	}
	if _, err := s.GatherRagged([]int64{0, 1}, []int64{64, 64}, dst); err != nil {
		t.Fatal(err)
	}
	if got := inGathers.Load(); got != before {
		t.Fatalf("after three gathers (one failed) %d are counted as running, want %d", got, before)
	}
}
