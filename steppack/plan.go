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
// pruned. Safe for concurrent use.
type Plan struct {
	mu     sync.RWMutex
	chunks []*chunk
	start  int64 // the first token held (the base of the first chunk)
	end    int64 // the token after the last one held
}

// chunk is one Append: records idx, the tokens up to and through each in
// ends (ends[i] is the stream's token after record i).
type chunk struct {
	idx  []int64
	ends []int64
}

func (c *chunk) last() int64 { return c.ends[len(c.ends)-1] }

// NewPlan is an empty plan whose first record will start at token base.
func NewPlan(base int64) (*Plan, error) {
	if base < 0 {
		return nil, fmt.Errorf("%w: plan base token %d", ErrInvalid, base)
	}
	return &Plan{start: base, end: base}, nil
}

// Append adds records idx of lens tokens each after the last held
// (copies of both: the caller keeps its arrays).
func (p *Plan) Append(idx, lens []int64) error {
	if len(idx) != len(lens) {
		return fmt.Errorf("%w: %d records with %d lengths", ErrInvalid, len(idx), len(lens))
	}
	if len(idx) == 0 {
		return nil
	}
	p.mu.RLock()
	at := p.end
	p.mu.RUnlock() // only the consumer appends: at stays the end
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
	if p.end != c.ends[0]-lens[0] {
		return fmt.Errorf("%w: appends to one plan must not run concurrently", ErrInvalid)
	}
	p.chunks = append(p.chunks, c)
	p.end = at
	return nil
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
