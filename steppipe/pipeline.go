package steppipe

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// Errors of the package. A failing step is a *StepError instead.
var (
	// ErrInvalid: a configuration or an argument that cannot be used.
	ErrInvalid = errors.New("steppipe: invalid argument")
	// ErrClosed: the pipeline is closed.
	ErrClosed = errors.New("steppipe: pipeline is closed")
	// ErrEnd: a finite pipeline handed out its last step.
	ErrEnd = errors.New("steppipe: end of the pass")
	// ErrPending: the next step was not ready within the timeout.
	ErrPending = errors.New("steppipe: step not ready yet")
	// ErrStarved: the next step cannot be made because the consumer holds
	// every slot; give one back (or Replace one) first.
	ErrStarved = errors.New("steppipe: every slot is held by the consumer")
	// ErrUnplanned: the next step is at or past the claim limit (see
	// [Pipeline.SetLimit]): what it needs to be made is not known yet.
	ErrUnplanned = errors.New("steppipe: the next step is past the claim limit")
)

// DenseSource gathers fixed-size records: record indices[i] at dst[i*stride:].
type DenseSource interface {
	Gather(indices []int64, dst []byte, stride int) error
}

// RaggedSource gathers records of any size back to back into dst, writing
// each one's size to sizes and returning their sum; when the sum exceeds
// len(dst) it fills nothing and still reports it.
type RaggedSource interface {
	GatherRagged(indices []int64, sizes []int64, dst []byte) (int64, error)
}

// PackedSource makes a stream's whole batch itself, from its own plan of
// which records each step holds (a packed stream's rows, whose records are
// not the step's draw: see package steppack). It returns the bytes of Data
// the step needed (as a ragged source does) and may use every buffer of b.
// Like a Draw, it must be a pure function of the step, and safe for
// concurrent use.
type PackedSource interface {
	MakeStep(step int64, b Buffers) (needed int64, err error)
}

// Stream is one stream of the batch: Dense with records of Stride bytes,
// Ragged, or Packed.
type Stream struct {
	Name   string
	Dense  DenseSource
	Stride int
	Ragged RaggedSource
	Packed PackedSource
}

// Buffers is one stream's memory in one slot: Data receives the batch
// (Batch*Stride bytes for a dense stream, any size for a ragged one) and,
// for a ragged stream, Sizes (Batch values) each record's size. Aux holds
// a packed stream's other arrays, in the order its source defines.
type Buffers struct {
	Data  []byte
	Sizes []int64
	Aux   [][]byte
}

// Slot is the memory of one step in flight: the step's indices (Batch
// values) and the Buffers of each stream, in the order of Config.Streams.
type Slot struct {
	Indices []int64
	Streams []Buffers
}

// Config describes a pipeline.
type Config struct {
	// Draw gives each step's indices; nil when every stream is Packed
	// (each picks its own records), the steps then holding no indices.
	Draw    Draw
	Batch   int // indices per step at most
	Streams []Stream
	Slots   []Slot
	// Workers is the number of worker goroutines (at least 1).
	Workers int
	// Prefetch is how many steps may be claimed ahead of the consumer (at least 1).
	Prefetch int
	// Start is the first step handed out; End the first step not made, or
	// negative for an endless pipeline.
	Start, End int64
	// Limited makes Limit the first step workers may not claim yet;
	// [Pipeline.SetLimit] raises it (a packed stream's plan grows).
	Limited bool
	Limit   int64
	// Help lets the consumer make steps too: a Next whose step is not
	// ready claims the next step a worker could, makes it on the calling
	// thread and looks again, instead of going to sleep (see Next).
	Help bool
}

// Batch is a step handed to the consumer: its slot and how many records it
// holds; Needed[i] is the bytes ragged stream i needed (the stream's Data
// holds its records only when Needed[i] <= len(Data); else the consumer
// gathers the step's records itself into a larger buffer). Needed is
// the consumer's to keep.
type Batch struct {
	Step   int64
	Slot   int
	Rows   int
	Needed []int64
}

// StepError is the failure of one step: its draw (Stream is -1) or the
// gather of one stream.
type StepError struct {
	Step   int64
	Stream int
	Name   string
	Err    error
}

func (e *StepError) Error() string {
	if e.Stream < 0 {
		return fmt.Sprintf("step %d: %v", e.Step, e.Err)
	}
	return fmt.Sprintf("step %d, stream %q: %v", e.Step, e.Name, e.Err)
}

func (e *StepError) Unwrap() error { return e.Err }

type slotState uint8

const (
	slotFree  slotState = iota // in the free list
	slotBusy                   // a worker fills it
	slotReady                  // made, waiting to be handed out
	slotOut                    // the consumer's
)

// result is a made step.
type result struct {
	slot   int
	rows   int
	needed []int64
	err    error
}

var live atomic.Int64

// Live is the number of worker goroutines of all pipelines still running.
func Live() int64 { return live.Load() }

// Pipeline runs the steps of one Config; see the package documentation.
type Pipeline struct {
	cfg Config

	mu sync.Mutex
	// ready opens when a step is made (or the pipeline closes), for the
	// consumer; room when the window moves or a slot comes free (or the
	// pipeline closes), for the workers.
	ready, room gate
	nextOut     int64 // the next step handed out
	nextClaim   int64 // the next step a worker claims
	limit       int64 // the first step not claimable yet (negative: none)
	free        []int // free slots, the most recently released last
	state       []slotState
	results     map[int64]result
	closed      bool
	started     bool
	wg          sync.WaitGroup
}

// New checks cfg and makes a pipeline; Start starts its workers.
func New(cfg Config) (*Pipeline, error) {
	if err := check(&cfg); err != nil {
		return nil, err
	}
	p := &Pipeline{
		cfg:       cfg,
		nextOut:   cfg.Start,
		nextClaim: cfg.Start,
		limit:     -1,
		state:     make([]slotState, len(cfg.Slots)),
		results:   make(map[int64]result),
	}
	if cfg.Limited {
		p.limit = max(cfg.Limit, 0)
	}
	for k := len(cfg.Slots) - 1; k >= 0; k-- {
		p.free = append(p.free, k)
	}
	return p, nil
}

func check(cfg *Config) error {
	packed := len(cfg.Streams) > 0
	for _, st := range cfg.Streams {
		packed = packed && st.Packed != nil
	}
	switch {
	case cfg.Draw == nil && !packed:
		return fmt.Errorf("%w: no draw (only a pipeline of packed streams has none)", ErrInvalid)
	case cfg.Batch <= 0:
		return fmt.Errorf("%w: batch %d", ErrInvalid, cfg.Batch)
	case cfg.Workers <= 0:
		return fmt.Errorf("%w: %d workers", ErrInvalid, cfg.Workers)
	case cfg.Prefetch <= 0:
		return fmt.Errorf("%w: prefetch %d", ErrInvalid, cfg.Prefetch)
	case len(cfg.Slots) == 0:
		return fmt.Errorf("%w: no slots", ErrInvalid)
	case cfg.Start < 0:
		return fmt.Errorf("%w: start step %d", ErrInvalid, cfg.Start)
	}
	for i, st := range cfg.Streams {
		kinds := 0
		for _, set := range []bool{st.Dense != nil, st.Ragged != nil, st.Packed != nil} {
			if set {
				kinds++
			}
		}
		if kinds != 1 {
			return fmt.Errorf("%w: stream %d (%q) needs exactly one of a dense, a ragged and a packed source", ErrInvalid, i, st.Name)
		}
		if st.Dense != nil && st.Stride < 0 {
			return fmt.Errorf("%w: stream %q: stride %d", ErrInvalid, st.Name, st.Stride)
		}
	}
	for k := range cfg.Slots {
		if err := checkSlot(cfg, k, cfg.Slots[k]); err != nil {
			return err
		}
	}
	return nil
}

func checkSlot(cfg *Config, k int, s Slot) error {
	if len(s.Indices) < cfg.Batch {
		return fmt.Errorf("%w: slot %d holds %d indices, the batch needs %d", ErrInvalid, k, len(s.Indices), cfg.Batch)
	}
	if len(s.Streams) != len(cfg.Streams) {
		return fmt.Errorf("%w: slot %d has buffers for %d streams, the pipeline has %d", ErrInvalid, k, len(s.Streams), len(cfg.Streams))
	}
	for i, st := range cfg.Streams {
		b := s.Streams[i]
		if st.Dense != nil {
			if want := cfg.Batch * st.Stride; len(b.Data) < want {
				return fmt.Errorf("%w: slot %d, stream %q: %d bytes, the batch needs %d", ErrInvalid, k, st.Name, len(b.Data), want)
			}
		} else if c, ok := st.Packed.(interface{ CheckBuffers(Buffers) error }); ok {
			if err := c.CheckBuffers(b); err != nil {
				return fmt.Errorf("slot %d, stream %q: %w", k, st.Name, err)
			}
		} else if st.Ragged != nil && len(b.Sizes) < cfg.Batch {
			return fmt.Errorf("%w: slot %d, stream %q: sizes hold %d values, the batch needs %d", ErrInvalid, k, st.Name, len(b.Sizes), cfg.Batch)
		}
	}
	return nil
}

// Start starts the workers (once; a closed pipeline starts none).
func (p *Pipeline) Start() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.started || p.closed {
		return
	}
	p.started = true
	p.wg.Add(p.cfg.Workers)
	live.Add(int64(p.cfg.Workers))
	for range p.cfg.Workers {
		go p.work()
	}
}

// claim waits for a step inside the window and a free slot; ok is false when
// the pipeline closes or a finite pass is fully claimed.
func (p *Pipeline) claim() (step int64, slot int, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for {
		if p.closed || (p.cfg.End >= 0 && p.nextClaim >= p.cfg.End) {
			return 0, 0, false
		}
		if p.claimable() {
			break
		}
		t := p.room.token()
		p.mu.Unlock()
		p.room.wait(t, 0)
		p.mu.Lock()
	}
	step, slot = p.take()
	return step, slot, true
}

// claimable says whether a step can be claimed now: inside the window and
// the limit, a slot free, the pipeline open and its pass not fully claimed.
// p.mu is held.
func (p *Pipeline) claimable() bool {
	return !p.closed && (p.cfg.End < 0 || p.nextClaim < p.cfg.End) &&
		p.nextClaim < p.nextOut+int64(p.cfg.Prefetch) && len(p.free) > 0 &&
		(p.limit < 0 || p.nextClaim < p.limit)
}

// take claims the next step into a free slot; claimable holds and p.mu is
// held.
func (p *Pipeline) take() (step int64, slot int) {
	step = p.nextClaim
	p.nextClaim++
	slot = p.free[len(p.free)-1]
	p.free = p.free[:len(p.free)-1]
	p.state[slot] = slotBusy
	return step, slot
}

// publish records the made step r of slot; p.mu is held. It reports false
// when the pipeline closed meanwhile (the step is then dropped: Close took
// the results away).
func (p *Pipeline) publish(step int64, slot int, r result) bool {
	if p.closed {
		return false
	}
	if r.err != nil {
		p.state[slot] = slotFree
		p.free = append(p.free, slot)
		r.slot = -1
	} else {
		p.state[slot] = slotReady
	}
	p.results[step] = r
	p.ready.open()
	if r.err != nil {
		p.room.open() // its slot is free again
	}
	return true
}

func (p *Pipeline) work() {
	defer p.wg.Done() // last: Close returns with Live already counting this worker out
	defer live.Add(-1)
	for {
		step, slot, ok := p.claim()
		if !ok {
			return
		}
		r := p.make(step, slot)
		p.mu.Lock()
		if !p.publish(step, slot, r) {
			p.mu.Unlock()
			return
		}
		p.mu.Unlock()
		p.ready.flush()
		p.room.flush()
	}
}

// make draws and gathers step into slot. A panic of a source is the step's
// error, not the process's end.
func (p *Pipeline) make(step int64, slot int) (r result) {
	stream := -1
	defer func() {
		if v := recover(); v != nil {
			r = result{err: p.stepError(step, stream, fmt.Errorf("internal error: %v", v))}
		}
	}()
	s := p.cfg.Slots[slot]
	k := 0
	var err error
	if p.cfg.Draw != nil {
		k, err = p.cfg.Draw.Draw(step, s.Indices[:p.cfg.Batch])
	}
	if err != nil {
		return result{err: p.stepError(step, -1, err)}
	}
	if k < 0 || k > p.cfg.Batch {
		return result{err: p.stepError(step, -1, fmt.Errorf("%w: the draw gave %d indices for a batch of %d", ErrInvalid, k, p.cfg.Batch))}
	}
	idx := s.Indices[:k]
	r = result{slot: slot, rows: k}
	for i, st := range p.cfg.Streams {
		stream = i
		b := s.Streams[i]
		if st.Packed != nil {
			needed, err := st.Packed.MakeStep(step, b)
			if err != nil {
				return result{err: p.stepError(step, i, err)}
			}
			if r.needed == nil {
				r.needed = make([]int64, len(p.cfg.Streams))
			}
			r.needed[i] = needed
			continue
		}
		if st.Dense != nil {
			if st.Stride == 0 || k == 0 {
				continue
			}
			if err := st.Dense.Gather(idx, b.Data[:k*st.Stride], st.Stride); err != nil {
				return result{err: p.stepError(step, i, err)}
			}
			continue
		}
		needed, err := st.Ragged.GatherRagged(idx, b.Sizes[:k], b.Data)
		if err != nil {
			return result{err: p.stepError(step, i, err)}
		}
		if r.needed == nil {
			r.needed = make([]int64, len(p.cfg.Streams))
		}
		r.needed[i] = needed
	}
	return r
}

func (p *Pipeline) stepError(step int64, stream int, err error) *StepError {
	name := ""
	if stream >= 0 {
		name = p.cfg.Streams[stream].Name
	}
	return &StepError{Step: step, Stream: stream, Name: name, Err: err}
}

// giveBack returns a slot the consumer held; p.mu is held.
func (p *Pipeline) giveBack(slot int) error {
	if slot < 0 || slot >= len(p.state) {
		return fmt.Errorf("%w: slot %d of %d", ErrInvalid, slot, len(p.state))
	}
	if p.state[slot] != slotOut {
		return fmt.Errorf("%w: slot %d is not held by the consumer", ErrInvalid, slot)
	}
	p.state[slot] = slotFree
	p.free = append(p.free, slot)
	return nil
}

// Next gives back the slots in release (passing over those the consumer
// does not hold: one listed twice), then hands out the next step: its
// Batch, or its *StepError (the step counts as handed out either way). It
// waits up to timeout for the step; ErrPending when it is not ready by
// then, ErrStarved when it cannot be made before the consumer gives a slot
// back, ErrEnd past the end of a finite pipeline, ErrClosed once closed.
// Without a started pipeline the step is made in the caller.
func (p *Pipeline) Next(timeout time.Duration, release []int) (Batch, error) {
	defer p.room.flush() // after the unlock below: see gate
	p.mu.Lock()
	defer p.mu.Unlock()
	// A worker waits for a slot only while none is free: slots given back
	// to a list that had some let no worker go on that could not before.
	starved := len(p.free) == 0
	for _, s := range release {
		if s < 0 || s >= len(p.state) {
			return Batch{}, fmt.Errorf("%w: slot %d of %d", ErrInvalid, s, len(p.state))
		}
		if p.state[s] == slotOut { // one given back twice is passed over
			_ = p.giveBack(s)
		}
	}
	released := starved && len(p.free) > 0
	defer p.openRoom(&released) // before the unlock
	var deadline time.Time
	for {
		if p.closed {
			return Batch{}, ErrClosed
		}
		step := p.nextOut
		if p.cfg.End >= 0 && step >= p.cfg.End {
			return Batch{}, ErrEnd
		}
		if r, ok := p.results[step]; ok {
			delete(p.results, step)
			p.nextOut++
			if r.err != nil {
				return Batch{}, r.err
			}
			p.state[r.slot] = slotOut
			return Batch{Step: step, Slot: r.slot, Rows: r.rows, Needed: r.needed}, nil
		}
		if p.nextClaim <= step && len(p.free) == 0 {
			return Batch{}, ErrStarved
		}
		if p.nextClaim <= step && p.limit >= 0 && step >= p.limit {
			return Batch{}, ErrUnplanned
		}
		if !p.started {
			return p.makeHere(step)
		}
		if p.cfg.Help && p.claimable() {
			p.help()
			continue
		}
		if deadline.IsZero() {
			if timeout <= 0 {
				return Batch{}, ErrPending
			}
			deadline = time.Now().Add(timeout)
		}
		left := time.Until(deadline)
		if left <= 0 {
			return Batch{}, ErrPending
		}
		p.openRoom(&released)
		t := p.ready.token()
		p.mu.Unlock()
		p.room.flush()
		p.ready.wait(t, left)
		p.mu.Lock()
	}
}

// openRoom opens the workers' gate after the consumer took steps or gave
// slots back to a pipeline that had none free (released), when that can
// let a waiting worker go on: a worker waits for a free slot inside the
// window, or for the window to move. Given the first free slot with the
// window not full, it opens at once (a consumer that gives a slot back
// every step, to a pipeline with slots to spare, would otherwise wake the
// workers every step: a futex call and a context switch a step; on a
// 2 GHz guest at batch size 1, 324,000 context switches in 300,000 steps
// and 17-25 µs a step, against 38,000 and 13-17 µs once it did not); a moved
// window, only once the steps claimed ahead of the consumer are down to
// half the window, so that workers faster than the consumer wake once for
// every few steps instead of once a step (each wake a system call of the
// consumer's, and at batch size 1 the steps themselves cost less). A
// consumer about to wait for a step no worker claimed always finds the
// gate open: none is then claimed ahead. p.mu is held.
func (p *Pipeline) openRoom(released *bool) {
	ahead := p.nextClaim - p.nextOut
	window := int64(p.cfg.Prefetch)
	if ahead*2 <= window || (*released && ahead < window) {
		p.room.open()
		*released = false
	}
}

// help makes the next claimable step on the consumer's thread, as a worker
// would, and publishes it; p.mu is held on entry and on return, and let go
// while the step is made. A consumer that waits for its step sleeps in the
// kernel and is woken by the worker that made it: a system call and a
// context switch on each side, a few µs a step, which on small batches is
// a large part of the step. Making the next step instead keeps the thread
// busy with work the pipeline needs anyway; the step it waited for is
// usually ready by the time it has made one. Close waits for a step being
// made here as for a worker's.
func (p *Pipeline) help() {
	step, slot := p.take()
	p.wg.Add(1)
	p.mu.Unlock()
	r := p.make(step, slot)
	p.mu.Lock()
	p.wg.Done()
	p.publish(step, slot, r)
}

// makeHere makes step in the caller (a pipeline not started); p.mu is held
// and a slot is free.
func (p *Pipeline) makeHere(step int64) (Batch, error) {
	slot := p.free[len(p.free)-1]
	p.free = p.free[:len(p.free)-1]
	p.nextClaim = step + 1
	p.nextOut = step + 1
	r := p.make(step, slot)
	if r.err != nil {
		p.free = append(p.free, slot)
		return Batch{}, r.err
	}
	p.state[slot] = slotOut
	return Batch{Step: step, Slot: slot, Rows: r.rows, Needed: r.needed}, nil
}

// Replace gives back a slot the consumer held with new buffers for it (the
// consumer keeps the old ones: the pipeline never touches them again).
func (p *Pipeline) Replace(slot int, s Slot) error {
	defer p.room.flush()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return ErrClosed
	}
	if slot < 0 || slot >= len(p.state) {
		return fmt.Errorf("%w: slot %d of %d", ErrInvalid, slot, len(p.state))
	}
	if p.state[slot] != slotOut {
		return fmt.Errorf("%w: slot %d is not held by the consumer", ErrInvalid, slot)
	}
	if err := checkSlot(&p.cfg, slot, s); err != nil {
		return err
	}
	p.cfg.Slots[slot] = s
	err := p.giveBack(slot)
	p.room.open()
	return err
}

// Close stops the workers and waits for them: each finishes the gather it
// is in. Afterwards no buffer is touched. Safe to call twice, and
// concurrently with Next (which then returns ErrClosed).
func (p *Pipeline) Close() {
	p.mu.Lock()
	if !p.closed {
		p.closed = true
		p.results = nil
		p.ready.open()
		p.room.open()
	}
	p.mu.Unlock()
	p.ready.flush()
	p.room.flush()
	p.wg.Wait()
}

// SetLimit lets the workers claim the steps before limit (negative: every
// step); a lower limit than the present one is passed over, since steps
// may have been claimed up to it.
func (p *Pipeline) SetLimit(limit int64) {
	defer p.room.flush()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.limit < 0 || (limit >= 0 && limit <= p.limit) {
		return
	}
	p.limit = limit
	p.room.open()
}

// NextOut is the next step Next hands out.
func (p *Pipeline) NextOut() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.nextOut
}

// Slots is the number of slots.
func (p *Pipeline) Slots() int { return len(p.state) }
