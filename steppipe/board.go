package steppipe

import (
	"sync/atomic"
)

// Board is memory the pipeline shares with a consumer in another runtime
// (the Python binding), so that a step already made is handed over without
// a call into Go: a call from a thread that spent a while outside Go costs
// that thread tens of microseconds to get back in (the runtime took its P
// meanwhile), more than the hand-over itself.
//
// The workers publish each step they make in a ring of R entries, entry
// step mod R: Slots and Rows first, then Steps = step+1, each an atomic
// store (a failed step publishes slot -1: the consumer then calls Next,
// which returns its error). A consumer that finds Steps[next mod R] ==
// next+1 takes the step, stores next+1 to Consumed, and gives a slot back
// by storing to its Release flag the step+1 of the batch it let go of; the pipeline reads both (sync) when a
// worker claims, when Next is called and when the consumer writes a byte
// to the wake pipe, which it does when Waiting (the workers waiting for
// room) is nonzero. A worker waiting for room looks again every
// millisecond whatever happens, so a wake-up lost to the race between the
// consumer's store and its read of Waiting costs at most that. R must
// exceed Prefetch, so that an entry is not written again before it is read.
//
// The consumer's loads and stores are plain ones: the protocol relies on
// the x86-64 memory order (stores seen in program order, loads not
// reordered with loads), and the binding uses it there only.
type Board struct {
	Consumed *int64
	Waiting  *int64
	Steps    []int64
	Slots    []int64
	Rows     []int64
	Release  []int64
	// Wake is the read end of the wake pipe and WakeW its write end (the
	// pipeline writes to it at Close, to end its reader); -1 without one.
	Wake, WakeW int
}

// publish puts step, made into slot (-1: failed) with rows records, on the
// board.
func (b *Board) publish(step int64, slot, rows int) {
	i := step % int64(len(b.Steps))
	atomic.StoreInt64(&b.Slots[i], int64(slot))
	atomic.StoreInt64(&b.Rows[i], int64(rows))
	atomic.StoreInt64(&b.Steps[i], step+1)
}

// sync takes in what the consumer did on the board: the steps it took and
// the slots it gave back; p.mu is held. It reports whether anything changed.
func (p *Pipeline) sync() bool {
	b := p.cfg.Board
	if b == nil {
		return false
	}
	changed := false
	c := atomic.LoadInt64(b.Consumed)
	for p.nextOut < c {
		if r, ok := p.results[p.nextOut]; ok {
			delete(p.results, p.nextOut)
			if r.err == nil {
				p.state[r.slot] = slotOut
			}
		}
		p.nextOut++
		changed = true
	}
	for k := range b.Release {
		// a flag names the step whose batch the consumer let go of: one for
		// a step not yet seen as taken (its Consumed not read yet) waits
		// until it is, and one for an earlier step of the slot is stale
		if atomic.LoadInt64(&b.Release[k]) == p.stepOf[k]+1 && p.state[k] == slotOut {
			atomic.StoreInt64(&b.Release[k], 0)
			p.state[k] = slotFree
			p.free = append(p.free, k)
			changed = true
		}
	}
	if changed {
		p.signal()
	}
	return changed
}

// readWakes syncs each time the consumer writes to the wake pipe, until the
// pipeline closes.
func (p *Pipeline) readWakes() {
	defer p.wg.Done()
	buf := make([]byte, 64)
	for {
		n, err := readWake(p.cfg.Board.Wake, buf)
		p.mu.Lock()
		closed := p.closed
		if !closed {
			p.sync()
		}
		p.mu.Unlock()
		if closed || (err != nil && !retryable(err)) || (n == 0 && err == nil) { // closed, failed, or the pipe's end
			return
		}
	}
}
