package zsampler

import (
	"math"
	"math/bits"
)

// Shard places one process in a data-parallel world of World ranks. Rank
// must lie in [0, World) and World must be at least 1; the zero Shard is
// therefore invalid, and a single process uses NoShard.
type Shard struct {
	Rank  int64
	World int64
}

// NoShard is the shard of a process that trains alone: rank 0 of a world of 1.
var NoShard = Shard{Rank: 0, World: 1}

// Spec describes a sampler. The indices of a step depend on nothing but the
// Spec and the step number.
type Spec struct {
	// Mode selects the sampling scheme.
	Mode Mode
	// N is the size of the index space: every index lies in [0, N).
	N int64
	// BatchSize is the number of indices this rank receives per step.
	BatchSize int64
	// Seed keys the random modes; Sequential ignores it.
	Seed uint64
	// Shard is this process's place in the world; use NoShard when alone.
	Shard Shard
}

// Validate returns nil if s describes a sampler: a defined Mode; positive
// N, BatchSize and World; a Rank in [0, World); and a global batch
// BatchSize × World that fits in an int64 and, in Cyclic mode, is at most N.
// Otherwise its error wraps ErrInvalid and names the field and its value.
func (s Spec) Validate() error {
	_, err := s.global()
	return err
}

// global validates s and returns its global batch size G = BatchSize × World.
func (s Spec) global() (uint64, error) {
	if !s.Mode.valid() {
		return 0, invalidf("mode %v: want Sequential, IID or Cyclic", s.Mode)
	}
	if s.N <= 0 {
		return 0, invalidf("n %d: must be positive", s.N)
	}
	if s.BatchSize <= 0 {
		return 0, invalidf("batch size %d: must be positive", s.BatchSize)
	}
	if s.Shard.World <= 0 {
		return 0, invalidf("world %d: must be positive", s.Shard.World)
	}
	if s.Shard.Rank < 0 || s.Shard.Rank >= s.Shard.World {
		return 0, invalidf("rank %d: must be in [0, %d) for world %d",
			s.Shard.Rank, s.Shard.World, s.Shard.World)
	}
	hi, g := bits.Mul64(uint64(s.BatchSize), uint64(s.Shard.World))
	if hi != 0 || g > math.MaxInt64 {
		return 0, invalidf("global batch (batch size %d * world %d): overflows int64",
			s.BatchSize, s.Shard.World)
	}
	if s.Mode == Cyclic && g > uint64(s.N) {
		return 0, invalidf("global batch %d (batch size %d * world %d): cyclic mode needs it at most n = %d",
			g, s.BatchSize, s.Shard.World, s.N)
	}
	return g, nil
}

// Fill writes the BatchSize indices that this rank draws at step into dst,
// whose length must equal BatchSize. The result depends only on s and step:
// calling Fill for the same step always gives the same indices, whatever was
// computed before. Fill does not allocate unless it returns an error, and it
// writes nothing to dst when it does.
func (s Spec) Fill(step int64, dst []int64) error {
	if step < 0 {
		return invalidf("step %d: must not be negative", step)
	}
	g, err := s.global()
	if err != nil {
		return err
	}
	if int64(len(dst)) != s.BatchSize {
		return invalidf("dst length %d: must equal batch size %d", len(dst), s.BatchSize)
	}
	n := uint64(s.N)
	// First global position of this rank; below G, so it fits.
	first := uint64(s.Shard.Rank) * uint64(s.BatchSize)
	switch s.Mode {
	case Sequential:
		fillSequential(dst, n, g, uint64(step), first)
	case IID:
		fillIID(dst, n, s.Seed, uint64(step), first)
	case Cyclic:
		fillCyclic(dst, n, g, s.Seed, uint64(step), first)
	}
	return nil
}

// Fill is Spec.Fill with flat arguments, the form a C ABI calls once per
// batch: it fills dst with the indices that rank of world draws at step.
func Fill(mode Mode, n, batchSize int64, seed uint64, step int64, rank, world int64, dst []int64) error {
	s := Spec{Mode: mode, N: n, BatchSize: batchSize, Seed: seed, Shard: Shard{Rank: rank, World: world}}
	return s.Fill(step, dst)
}
