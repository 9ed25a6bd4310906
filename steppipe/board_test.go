//go:build unix

package steppipe

import (
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

func newBoard(t *testing.T, r, slots int) *Board {
	t.Helper()
	var fds [2]int
	if err := syscall.Pipe(fds[:]); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fds[0]); syscall.Close(fds[1]) })
	return &Board{Consumed: new(int64), Waiting: new(int64), Steps: make([]int64, r), Slots: make([]int64, r),
		Rows: make([]int64, r), Release: make([]int64, slots), Wake: fds[0], WakeW: fds[1]}
}

// TestBoardHandsOverWithoutNext takes steps as the Python binding does:
// from the board when they are there, through Next when not, giving slots
// back through the release flags; the steps come in order with their
// records, and a failed step still comes through Next, named.
func TestBoardHandsOverWithoutNext(t *testing.T) {
	const batch = 8
	for _, tc := range []struct{ workers, prefetch, slots int }{{1, 1, 3}, {2, 4, 8}, {4, 6, 12}} {
		t.Run(fmt.Sprintf("w%d-p%d", tc.workers, tc.prefetch), func(t *testing.T) {
			base := Live()
			store := noFault()
			draw := cyclic(store.n, batch)
			idx := make([]int64, batch)
			if _, err := draw.Draw(77, idx); err != nil {
				t.Fatal(err)
			}
			store.failAt = idx[2] // step 77 fails
			b := newBoard(t, tc.prefetch+1, tc.slots)
			p, err := New(Config{Draw: draw, Batch: batch, Workers: tc.workers, Prefetch: tc.prefetch, End: 300,
				Slots: slots(tc.slots, batch, []int{4}, 0), Streams: []Stream{{Name: "x", Dense: store, Stride: 4}},
				Board: b})
			if err != nil {
				t.Fatal(err)
			}
			p.Start()
			fast, failed, held, heldStep := 0, 0, -1, int64(0)
			for s := int64(0); s < 300; s++ {
				time.Sleep(100 * time.Microsecond) // the consumer's own work: the workers get ahead
				i := s % int64(len(b.Steps))
				var slot, rows int
				if atomic.LoadInt64(&b.Steps[i]) == s+1 && atomic.LoadInt64(&b.Slots[i]) >= 0 {
					slot, rows = int(atomic.LoadInt64(&b.Slots[i])), int(atomic.LoadInt64(&b.Rows[i]))
					if held >= 0 {
						atomic.StoreInt64(&b.Release[held], heldStep+1)
					}
					atomic.StoreInt64(b.Consumed, s+1)
					if atomic.LoadInt64(b.Waiting) != 0 {
						writeWake(b.WakeW)
					}
					fast++
				} else {
					var release []int
					if held >= 0 {
						release = []int{held}
					}
					got, err := p.Next(5*time.Second, release)
					if _, err := draw.Draw(s, idx); err != nil {
						t.Fatal(err)
					}
					if slices.Contains(idx, store.failAt) { // step 77, and the same record in later cycles
						var se *StepError
						if !errors.As(err, &se) || se.Step != s || !errors.Is(err, errDamaged) {
							t.Fatalf("step %d: %v", s, err)
						}
						failed++
						held = -1
						continue
					}
					if err != nil || got.Step != s {
						t.Fatalf("step %d: %+v %v", s, got, err)
					}
					slot, rows = got.Slot, got.Rows
				}
				if rows != batch {
					t.Fatalf("step %d: %d rows", s, rows)
				}
				if _, err := draw.Draw(s, idx); err != nil {
					t.Fatal(err)
				}
				checkDense(t, p.cfg.Slots[slot].Streams[0].Data, idx, 4)
				held, heldStep = slot, s
			}
			t0 := time.Now()
			p.Close()
			if time.Since(t0) > 500*time.Millisecond || Live() != base {
				t.Fatalf("Close took %v, %d workers left", time.Since(t0), Live()-base)
			}
			if fast == 0 || failed < 2 {
				t.Fatalf("%d steps came through the board, %d failed", fast, failed)
			}
		})
	}
}

func TestBadBoards(t *testing.T) {
	store := noFault()
	for _, tc := range []struct {
		name string
		edit func(b *Board)
	}{
		{"ring no longer than the prefetch", func(b *Board) { b.Steps, b.Slots, b.Rows = b.Steps[:2], b.Slots[:2], b.Rows[:2] }},
		{"ring arrays of other lengths", func(b *Board) { b.Rows = b.Rows[:3] }},
		{"release flags for other slots", func(b *Board) { b.Release = b.Release[:1] }},
		{"no counters", func(b *Board) { b.Waiting = nil }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newBoard(t, 4, 3)
			tc.edit(b)
			_, err := New(Config{Draw: cyclic(store.n, 4), Batch: 4, Workers: 1, Prefetch: 2, End: -1,
				Slots: slots(3, 4, []int{4}, 0), Streams: []Stream{{Name: "x", Dense: store, Stride: 4}}, Board: b})
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("New: %v, want ErrInvalid", err)
			}
		})
	}
}
