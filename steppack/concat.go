package steppack

import (
	"fmt"
	"sort"
	"sync"

	"github.com/loaderx/loaderx/steppipe"
)

// The buffers of a packed stream in a slot, besides Data (the records,
// back to back) and Sizes (each one's size in bytes, up to its capacity):
// Buffers.Aux in this order. T is Rows*Length, S the step's segments.
const (
	AuxIdx  = iota // int64: the step's records, in order (its capacity bounds them, with Sizes')
	AuxSeg         // int32, T: each token's segment id, from 1 in each row
	AuxPos         // int32, T: each token's position, from 0 in each segment
	AuxCu          // int32 or int64 (Concat.WideOffsets), S+1: each segment's first token over the flattened rows, then T
	AuxNSeg        // int32, Rows: the segments of each row
	AuxRec         // int64, S: each segment's record
	AuxAt          // int64, S: the token of its record each segment starts at
	AuxSrc         // int32, S: the source of each segment's record
	AuxMeta        // int64, MetaLen: what the step holds (the Meta* values)
	AuxLen
)

// The values of a slot's meta array.
const (
	MetaRecords  = iota // the step's records (written only if they fit AuxIdx and Sizes)
	MetaSkip            // the tokens of its first record before the step's first
	MetaSegments        // its segments (written only if they fit AuxCu, AuxRec, AuxAt and AuxSrc)
	MetaLen
)

// Concat is a packed stream in concat mode: step s is tokens
// [(s*World+Rank)*T, +T) of Plan's stream, T = Rows*Length, gathered from
// Source, a record of RowBytes bytes a token.
type Concat struct {
	Source      steppipe.RaggedSource
	Plan        *Plan
	Rows        int64
	Length      int64
	RowBytes    int64
	Rank, World int64
	// WideOffsets: cu_seqlens are int64, not int32.
	WideOffsets bool
	// SourceStarts: where each source's records start in the index space
	// (a mixture's: the source of a record is the last start at or before
	// it); nil for one store, all of whose segments are source 0.
	SourceStarts []int64
}

// Validate checks c's numbers.
func (c *Concat) Validate() error {
	switch {
	case c.Source == nil || c.Plan == nil:
		return fmt.Errorf("%w: a concat stream needs a source and a plan", ErrInvalid)
	case c.Rows <= 0 || c.Length <= 0 || c.Length > maxLength || c.Rows > (1<<31-1)/c.Length:
		return fmt.Errorf("%w: %d rows of %d tokens (rows of at most %d tokens, a batch of at most 2^31-1)",
			ErrInvalid, c.Rows, c.Length, maxLength)
	case c.RowBytes <= 0:
		return fmt.Errorf("%w: %d bytes a token", ErrInvalid, c.RowBytes)
	case c.World <= 0 || c.Rank < 0 || c.Rank >= c.World:
		return fmt.Errorf("%w: shard (%d, %d)", ErrInvalid, c.Rank, c.World)
	case c.World > (1<<62)/(c.Rows*c.Length):
		return fmt.Errorf("%w: world %d of %d-token steps overflows", ErrInvalid, c.World, c.Rows*c.Length)
	}
	if !sort.SliceIsSorted(c.SourceStarts, func(i, j int) bool { return c.SourceStarts[i] < c.SourceStarts[j] }) {
		return fmt.Errorf("%w: source starts %v are not sorted", ErrInvalid, c.SourceStarts)
	}
	return nil
}

func (c *Concat) tokens() int64 { return c.Rows * c.Length }

// First is the stream's token that step starts at.
func (c *Concat) First(step int64) int64 { return (step*c.World + c.Rank) * c.tokens() }

// Limit is the first step whose tokens the plan does not hold to the end
// (the plan's steps before it can be made; the caller appends beyond it).
func (c *Concat) Limit() int64 {
	t := c.tokens()
	end := c.Plan.End()
	if end < (c.Rank+1)*t {
		return 0
	}
	return (end-(c.Rank+1)*t)/(c.World*t) + 1
}

// CheckBuffers checks that a slot's buffers hold a step's fixed-size
// arrays (steppipe calls it for every slot it is given).
func (c *Concat) CheckBuffers(b steppipe.Buffers) error {
	if len(b.Aux) != AuxLen {
		return fmt.Errorf("%w: %d packed buffers, want %d", ErrInvalid, len(b.Aux), AuxLen)
	}
	t := c.tokens()
	for _, need := range []struct {
		aux   int
		bytes int64
		what  string
	}{{AuxSeg, 4 * t, "segment ids"}, {AuxPos, 4 * t, "positions"}, {AuxNSeg, 4 * c.Rows, "segment counts"},
		{AuxMeta, 8 * MetaLen, "meta"}, {AuxCu, c.offsetSize(), "cu_seqlens"}} {
		if int64(len(b.Aux[need.aux])) < need.bytes {
			return fmt.Errorf("%w: %s: %d bytes, a step needs %d", ErrInvalid, need.what, len(b.Aux[need.aux]), need.bytes)
		}
	}
	return nil
}

func (c *Concat) offsetSize() int64 {
	if c.WideOffsets {
		return 8
	}
	return 4
}

// views is a slot's packed buffers as their types.
type views struct {
	idx, rec, at, meta []int64
	seg, pos, nseg     []int32
	src                []int32
	cu32               []int32
	cu64               []int64
}

func (c *Concat) views(b steppipe.Buffers) (v views, err error) {
	if err := c.CheckBuffers(b); err != nil {
		return v, err
	}
	for _, x := range []struct {
		dst *[]int64
		aux int
	}{{&v.idx, AuxIdx}, {&v.rec, AuxRec}, {&v.at, AuxAt}, {&v.meta, AuxMeta}} {
		if *x.dst, err = int64s(b.Aux[x.aux], "packed buffer"); err != nil {
			return v, err
		}
	}
	for _, x := range []struct {
		dst *[]int32
		aux int
	}{{&v.seg, AuxSeg}, {&v.pos, AuxPos}, {&v.nseg, AuxNSeg}, {&v.src, AuxSrc}} {
		if *x.dst, err = int32s(b.Aux[x.aux], "packed buffer"); err != nil {
			return v, err
		}
	}
	if c.WideOffsets {
		v.cu64, err = int64s(b.Aux[AuxCu], "cu_seqlens")
	} else {
		v.cu32, err = int32s(b.Aux[AuxCu], "cu_seqlens")
	}
	return v, err
}

var lensPool = sync.Pool{New: func() any { return new([]int64) }}

// MakeStep makes step into b (see the package documentation); the bytes
// the records needed are returned, as a ragged gather returns them, and
// what did not fit is in the meta array.
func (c *Concat) MakeStep(step int64, b steppipe.Buffers) (int64, error) {
	v, err := c.views(b)
	if err != nil {
		return 0, err
	}
	t := c.tokens()
	first := c.First(step)
	room := min(len(v.idx), len(b.Sizes))
	lp := lensPool.Get().(*[]int64)
	defer lensPool.Put(lp)
	lens := *lp
	if cap(lens) < room {
		lens = make([]int64, room)
		*lp = lens
	}
	lens = lens[:room]
	n, skip, err := c.Plan.Records(first, t, v.idx[:room], lens)
	if err != nil {
		return 0, err
	}
	v.meta[MetaRecords], v.meta[MetaSkip], v.meta[MetaSegments] = n, skip, 0
	if n > int64(room) {
		return 0, nil
	}
	idx, sizes := v.idx[:n], b.Sizes[:n]
	needed, err := c.Source.GatherRagged(idx, sizes, b.Data)
	if err != nil || needed > int64(len(b.Data)) {
		return needed, err
	}
	for i, size := range sizes {
		if size != lens[i]*c.RowBytes {
			return 0, fmt.Errorf("record %d has %d bytes (%d rows of %d), but its table entry said %d rows when the "+
				"batch was planned (was the store changed meanwhile?): %w", idx[i], size, size/c.RowBytes, c.RowBytes, lens[i], ErrChanged)
		}
	}
	v.meta[MetaSegments] = c.marks(v, idx, lens[:n], skip)
	return needed, nil
}

// marks writes the segments of the step whose records are idx (of lens
// tokens, the first skip tokens into the first) and returns their count.
// A segment starts at every row start and every record start; the
// per-segment arrays get what fits them.
func (c *Concat) marks(v views, idx, lens []int64, skip int64) int64 {
	t, length := c.tokens(), c.Length
	room := int64(min(len(v.rec), len(v.at), len(v.src)))
	if c.WideOffsets {
		room = min(room, int64(len(v.cu64))-1)
	} else {
		room = min(room, int64(len(v.cu32))-1)
	}
	seg, pos := v.seg[:t], v.pos[:t]
	var s, at int64 // segments so far; the next token of the step
	var id int32    // the last segment id of the row
	i, off := 0, skip
	for at < t {
		if off >= lens[i] { // the record is used up (or has no tokens)
			i, off = i+1, 0
			continue
		}
		col := at % length
		if col == 0 {
			id = 0
		}
		id++
		run := min(lens[i]-off, length-col)
		if s < room {
			v.rec[s], v.at[s], v.src[s] = idx[i], off, c.source(idx[i])
			if c.WideOffsets {
				v.cu64[s] = at
			} else {
				v.cu32[s] = int32(at)
			}
		}
		s++
		fill(seg[at:at+run], id)
		copy(pos[at:at+run], iota32[:run])
		at += run
		off += run
		if at%length == 0 {
			v.nseg[at/length-1] = id
		}
	}
	if s < room+1 {
		if c.WideOffsets {
			v.cu64[s] = t
		} else {
			v.cu32[s] = int32(t)
		}
	}
	return s
}

// iota32 is 0, 1, 2, ...: the positions of a segment of up to its length
// (the longest row Validate allows is shorter).
var iota32 = func() []int32 {
	out := make([]int32, maxLength)
	for j := range out {
		out[j] = int32(j)
	}
	return out
}()

// maxLength is the longest row a concat stream takes (a segment is at most
// one row): 1 Mi tokens.
const maxLength = 1 << 20

// fill sets every value of dst to x, by doubling copies (memmove runs).
func fill(dst []int32, x int32) {
	if len(dst) == 0 {
		return
	}
	dst[0] = x
	for k := 1; k < len(dst); k *= 2 {
		copy(dst[k:], dst[:k])
	}
}

// source is the source of record i: the last of SourceStarts at or before it.
func (c *Concat) source(i int64) int32 {
	st := c.SourceStarts
	if len(st) < 2 {
		return 0
	}
	k := sort.Search(len(st), func(k int) bool { return st[k] > i })
	return int32(k - 1)
}
