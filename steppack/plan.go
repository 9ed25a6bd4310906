package steppack

import (
	"errors"
	"fmt"
	"sort"
	"sync"
)

// Errors of the package.
var (
	// ErrInvalid: a configuration, a buffer or a plan that cannot be used.
	ErrInvalid = errors.New("steppack: invalid argument")
	// ErrUnplanned: a step's tokens are not (or no longer) in the plan.
	ErrUnplanned = errors.New("steppack: the step's tokens are not in the plan")
	// ErrChanged: a record's size is not what its length in the plan said.
	ErrChanged = errors.New("steppack: a record is not the size the plan was made with")
)

// Plan is the stream of tokens as records in order, each with its length
// in tokens, from a first token on: what the caller appended, less what it
// pruned. Each append is of the records of some sampler steps, which the
// plan counts, so that an append made twice (by a caller interrupted
// before it learnt that the first went in) is known and passed over. Safe
// for concurrent use.
type Plan struct {
	mu     sync.RWMutex
	chunks []*chunk
	start  int64 // the first token held (the base of the first chunk)
	end    int64 // the token after the last one held
	step   int64 // the sampler step whose records the next append holds
}

// chunk is one Append: records idx, the tokens up to and through each in
// ends (ends[i] is the stream's token after record i).
type chunk struct {
	idx  []int64
	ends []int64
}

func (c *chunk) last() int64 { return c.ends[len(c.ends)-1] }

// NewPlan is an empty plan whose first record, of sampler step step,
// will start at token base.
func NewPlan(base, step int64) (*Plan, error) {
	if base < 0 || step < 0 {
		return nil, fmt.Errorf("%w: plan base token %d, step %d", ErrInvalid, base, step)
	}
	return &Plan{start: base, end: base, step: step}, nil
}

// Append adds records idx of lens tokens each after the last held
// (copies of both: the caller keeps its arrays): the records of the
// sampler steps [step, step+steps). Steps the plan holds already are
// passed over (an append made again); a gap is an error.
func (p *Plan) Append(step, steps int64, idx, lens []int64) error {
	if len(idx) != len(lens) || steps <= 0 || step < 0 {
		return fmt.Errorf("%w: %d records with %d lengths for %d steps from %d", ErrInvalid, len(idx), len(lens), steps, step)
	}
	p.mu.RLock()
	at, next := p.end, p.step
	p.mu.RUnlock() // only the consumer appends: at and next stay as read
	switch {
	case step+steps <= next:
		return nil // in already
	case step != next:
		return fmt.Errorf("%w: an append of sampler steps [%d, %d) to a plan that goes on at step %d", ErrInvalid, step, step+steps, next)
	case len(idx) == 0:
		p.mu.Lock()
		p.step += steps
		p.mu.Unlock()
		return nil
	}
	c := &chunk{idx: append([]int64(nil), idx...), ends: make([]int64, len(lens))}
	for i, n := range lens {
		if n < 0 || idx[i] < 0 {
			return fmt.Errorf("%w: record %d of the chunk: index %d, length %d", ErrInvalid, i, idx[i], n)
		}
		if at > (1<<62)-n {
			return fmt.Errorf("%w: the plan's tokens overflow", ErrInvalid)
		}
		at += n
		c.ends[i] = at
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.end != c.ends[0]-lens[0] || p.step != step {
		return fmt.Errorf("%w: appends to one plan must not run concurrently", ErrInvalid)
	}
	p.chunks = append(p.chunks, c)
	p.end = at
	p.step += steps
	return nil
}

// Step is the sampler step the next append starts at.
func (p *Plan) Step() int64 {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.step
}

// End is the token after the last one the plan holds.
func (p *Plan) End() int64 {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.end
}

// Start is the first token the plan still holds.
func (p *Plan) Start() int64 {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.start
}

// Prune drops the chunks whose every token comes before token (steps
// handed out need them no more); the last chunk stays.
func (p *Plan) Prune(token int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	k := 0
	for k < len(p.chunks)-1 && p.chunks[k].last() <= token {
		k++
	}
	if k == 0 {
		return
	}
	p.start = p.chunks[k-1].last()
	p.chunks = append(p.chunks[:0:0], p.chunks[k:]...)
}

// Records finds the records holding tokens [first, first+n) (n > 0): from
// the one holding token first to the one holding token first+n-1, records
// of no tokens between them included. It writes as many of them as fit
// into idx and their lengths into lens, and returns how many there are
// and how many tokens of the first one come before token first.
func (p *Plan) Records(first, n int64, idx, lens []int64) (count, skip int64, err error) {
	if n <= 0 || first < 0 {
		return 0, 0, fmt.Errorf("%w: tokens [%d, %d+%d)", ErrInvalid, first, first, n)
	}
	room := int64(min(len(idx), len(lens)))
	p.mu.RLock()
	defer p.mu.RUnlock()
	last := first + n - 1
	if first < p.start || last >= p.end {
		return 0, 0, fmt.Errorf("%w: tokens [%d, %d) against a plan of [%d, %d)", ErrUnplanned, first, first+n, p.start, p.end)
	}
	// the chunk, then the record, whose end is the first past token first
	k := sort.Search(len(p.chunks), func(k int) bool { return p.chunks[k].last() > first })
	c := p.chunks[k]
	a := sort.Search(len(c.ends), func(i int) bool { return c.ends[i] > first })
	before := c.ends[a] - p.length(k, a)
	skip = first - before
	for {
		if count < room {
			idx[count] = c.idx[a]
			lens[count] = p.length(k, a)
		}
		count++
		if c.ends[a] > last {
			return count, skip, nil
		}
		if a++; a == len(c.ends) {
			k, a = k+1, 0
			c = p.chunks[k]
		}
	}
}

// length is the tokens of record a of chunk k; p.mu is held.
func (p *Plan) length(k, a int) int64 {
	c := p.chunks[k]
	switch {
	case a > 0:
		return c.ends[a] - c.ends[a-1]
	case k > 0:
		return c.ends[0] - p.chunks[k-1].last()
	}
	return c.ends[0] - p.start
}
