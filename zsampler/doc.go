// Package zsampler generates the sample indices of a training loop.
//
// A sampler is described by a [Spec]: a [Mode], the size N of the index
// space, the per-rank batch size, a seed and a [Shard]. [Spec.Fill] writes the
// indices of one step into a caller-owned slice; [Fill] is the same call with
// flat arguments, shaped for a C ABI that makes one call per batch. Every
// index lies in [0, N). Nothing is allocated on success, and no state is kept
// between calls.
//
// # Modes
//
// [Sequential] walks the index space in order, treating it as a circular
// queue: position k of the global batch of step s is (s·G + k) mod N, where G
// is the global batch size. A batch never truncates at the end of the space;
// it wraps around to 0.
//
// [IID] draws every index uniformly at random with replacement. Each draw is
// a 64-bit word from a counter-based generator keyed by (seed, step,
// position, attempt), reduced to [0, N) by Lemire's multiply-shift with
// rejection, which adds no bias for any N, including N just above a power
// of two and N close to 2^63.
//
// [Cyclic] draws without replacement. A cycle is P = ⌊N/G⌋ steps long; step s
// belongs to cycle c = s/P at position j = s mod P, and its global batch is
// perm_c(j·G + k) for k in [0, G). perm_c is a keyed Feistel network over the
// smallest power of two at least N, with round keys derived from (seed, c),
// brought into [0, N) by cycle walking: applied again until the value falls
// inside. From N > 2^15 on it has four rounds, each one 32×32-bit multiply
// by a keyed multiplier; below, where the halves of the network are only a
// few bits wide, more rounds of a full-avalanche mixer. Within a cycle no
// index repeats. The
// N − P·G indices that a cycle does not reach are dropped; every cycle has a
// fresh permutation and so drops different ones, and every index is reached
// within a few cycles. Nothing the size of N is ever materialized, so a cycle
// over 2^62 indices costs the same per index as one over a million. Cyclic
// mode requires G ≤ N.
//
// # Sharding
//
// A [Shard] names the rank of this process and the number of ranks (the
// world). The global batch of a step has G = BatchSize × World positions;
// rank r takes positions [r·BatchSize, (r+1)·BatchSize). The ranks of a
// world together produce exactly the batch that a single process with
// BatchSize G would produce, every rank gets a full batch on every step, and
// in cyclic mode the ranks never share an index within a step. Each rank
// computes only its own positions. A Spec without sharding uses [NoShard];
// the zero Shard, with World 0, is invalid.
//
// # Determinism
//
// Every mode is a pure function of (mode, N, BatchSize, seed, step, shard):
// the same arguments give the same indices on every call, in every process,
// on every platform. There is no epoch or stream position to save, so
// resuming a run at step s is just calling Fill with step s, and step s costs
// the same whether it is the first step computed or the millionth. All
// arithmetic on steps and positions is exact for every step up to the
// largest int64. Calls share nothing, so any number of goroutines may fill
// batches at once.
//
// The permutation of cycles over more than 2^15 indices changed once, when
// its rounds moved from a 64-bit mixer to one multiply each (twice as
// fast): for such N, a step computed by a version before that change
// and the same step computed now hold different indices. A run resumed
// across that change still draws without replacement within every cycle it
// starts afresh, but the cycle it resumes in mixes two orders.
//
// Invalid arguments are reported by errors that wrap [ErrInvalid] and name
// the offending field and value.
package zsampler
