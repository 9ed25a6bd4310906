package steppipe

import (
	"fmt"

	"github.com/loaderx/loaderx/zsampler"
)

// A Draw writes the record indices of one step into dst (which holds the
// batch size) and returns how many it wrote: the batch size, or fewer for
// the short last step of a pass. It must be a pure function of the step and
// safe for concurrent use.
type Draw interface {
	Draw(step int64, dst []int64) (int, error)
}

// Sampler draws with a zsampler specification: every step a full batch.
type Sampler struct {
	Spec zsampler.Spec
}

// Draw fills dst[:BatchSize] with the indices of step.
func (s Sampler) Draw(step int64, dst []int64) (int, error) {
	b := int(s.Spec.BatchSize)
	if b > len(dst) {
		return 0, fmt.Errorf("%w: batch size %d, the slot's indices hold %d", ErrInvalid, b, len(dst))
	}
	if err := s.Spec.Fill(step, dst[:b]); err != nil {
		return 0, err
	}
	return b, nil
}

// Epoch is one pass over N records, each exactly once: in order, or in the
// order of Order (a permutation of [0, N), the caller's memory). Step s
// covers the positions [s*G, min((s+1)*G, N)) of the pass (G = Batch *
// World) and rank r takes [lo + r*m/World, lo + (r+1)*m/World) of its m
// positions: Batch of them every step but a short last one.
type Epoch struct {
	N, Batch, Rank, World int64
	Order                 []int64 // nil: the records in order
}

// Steps is the number of steps of the pass, a short last one included
// unless dropLast.
func (e Epoch) Steps(dropLast bool) int64 {
	g := e.Batch * e.World
	if dropLast {
		return e.N / g
	}
	return (e.N + g - 1) / g
}

// Validate checks the pass's numbers.
func (e Epoch) Validate() error {
	switch {
	case e.N <= 0:
		return fmt.Errorf("%w: epoch of n=%d records", ErrInvalid, e.N)
	case e.Batch <= 0:
		return fmt.Errorf("%w: epoch batch size %d", ErrInvalid, e.Batch)
	case e.World <= 0 || e.Rank < 0 || e.Rank >= e.World:
		return fmt.Errorf("%w: shard (%d, %d)", ErrInvalid, e.Rank, e.World)
	case e.Batch > (1<<62)/e.World:
		return fmt.Errorf("%w: global batch %d*%d overflows", ErrInvalid, e.Batch, e.World)
	case e.Order != nil && int64(len(e.Order)) != e.N:
		return fmt.Errorf("%w: order holds %d indices for n=%d", ErrInvalid, len(e.Order), e.N)
	}
	return nil
}

// Draw writes this rank's part of step's positions.
func (e Epoch) Draw(step int64, dst []int64) (int, error) {
	g := e.Batch * e.World
	start := step * g
	if step < 0 || start >= e.N {
		return 0, fmt.Errorf("%w: step %d is past the end of the pass (%d steps)", ErrInvalid, step, e.Steps(false))
	}
	m := min(g, e.N-start)
	lo := start + e.Rank*m/e.World
	hi := start + (e.Rank+1)*m/e.World
	k := int(hi - lo)
	if k > len(dst) {
		return 0, fmt.Errorf("%w: step %d draws %d indices, the slot holds %d", ErrInvalid, step, k, len(dst))
	}
	if e.Order == nil {
		for i := range k {
			dst[i] = lo + int64(i)
		}
	} else {
		copy(dst[:k], e.Order[lo:hi])
	}
	return k, nil
}
