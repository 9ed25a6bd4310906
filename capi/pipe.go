package main

// The exports of the step pipeline (package steppipe): a loader's steps
// drawn and gathered ahead of the caller on worker goroutines, into buffers
// the caller owns, handed out in step order by one call per step.

/*
#include <stdint.h>
*/
import "C"

import (
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"time"
	"unsafe"

	"github.com/loaderx/loaderx/steppack"
	"github.com/loaderx/loaderx/steppipe"
	"github.com/loaderx/loaderx/zrecord"
	"github.com/loaderx/loaderx/zsampler"
)

// pipes maps the handles given to C to running pipelines, with the store
// handles of each (for messages). Handles count up from 1, never reused.
var pipes = struct {
	sync.Mutex
	m    map[int64]*pipeEntry
	last int64
}{m: make(map[int64]*pipeEntry)}

type pipeEntry struct {
	p       *steppipe.Pipeline
	streams int
	kinds   []int64
	batch   int
	// packs holds the packed streams by stream number (their plans grow
	// through lx_pipe_plan)
	packs map[int]*steppack.Concat
}

// bufsOf is the buffers one stream of kind has in a slot.
func bufsOf(kind int64) int {
	if kind == pipePacked {
		return 2 + pipePackedAux
	}
	return 2
}

// slotWidth is the buffers of one slot: its indices, then every stream's.
func slotWidth(kinds []int64) int {
	n := 1
	for _, k := range kinds {
		n += bufsOf(k)
	}
	return n
}

func lookupPipe(h int64) (*pipeEntry, error) {
	pipes.Lock()
	defer pipes.Unlock()
	e, ok := pipes.m[h]
	if ok {
		return e, nil
	}
	if h > 0 && h <= pipes.last {
		return nil, &statusError{status: statusClosed, msg: fmt.Sprintf("pipeline handle %d is closed", h)}
	}
	return nil, invalidf("%d is not a pipeline handle", h)
}

// slotBuffers reads one slot's buffers: slotWidth(kinds) pointers at ptrs
// with their byte lengths at lens (the indices, then per stream its data
// and its sizes, NULL for a dense stream, and a packed stream's others).
func slotBuffers(ptrs []unsafe.Pointer, lens []int64, kinds []int64, k int) (steppipe.Slot, error) {
	var s steppipe.Slot
	view := func(j int, what string) (unsafe.Pointer, int64, error) {
		p, n := ptrs[j], lens[j]
		if n < 0 || (n > 0 && p == nil) {
			return nil, 0, invalidf("slot %d, %s: pointer %p with length %d", k, what, p, n)
		}
		return p, n, nil
	}
	p, n, err := view(0, "indices")
	if err != nil {
		return s, err
	}
	if n > 0 {
		s.Indices = unsafe.Slice((*int64)(p), n/8)
	}
	at := 1
	for i, kind := range kinds {
		var b steppipe.Buffers
		p, n, err := view(at, fmt.Sprintf("stream %d data", i))
		if err != nil {
			return s, err
		}
		if n > 0 {
			b.Data = unsafe.Slice((*byte)(p), n)
		}
		if kind == pipeRagged || kind == pipePacked {
			p, n, err := view(at+1, fmt.Sprintf("stream %d sizes", i))
			if err != nil {
				return s, err
			}
			if n > 0 {
				b.Sizes = unsafe.Slice((*int64)(p), n/8)
			}
		}
		if kind == pipePacked {
			for j := range pipePackedAux {
				p, n, err := view(at+2+j, fmt.Sprintf("stream %d packed buffer %d", i, j))
				if err != nil {
					return s, err
				}
				var aux []byte
				if n > 0 {
					aux = unsafe.Slice((*byte)(p), n)
				}
				b.Aux = append(b.Aux, aux)
			}
		}
		at += bufsOf(kind)
		s.Streams = append(s.Streams, b)
	}
	return s, nil
}

// lx_pipe_new makes a step pipeline and starts its workers; its handle goes
// to *handle. config holds LX_PIPE_CONFIG_LEN values (enum
// lx_pipe_config); streams nstreams times LX_PIPE_STREAM_LEN (enum
// lx_pipe_stream); bufs and buf_lens nslots times 1 + 2*nstreams pointers
// and their lengths in bytes: each slot's indices (batch int64_t), then per
// stream its data buffer and (ragged) its sizes (batch int64_t; NULL for a
// dense stream). order, with order_len values, is the permutation of an
// epoch draw, or NULL. The pipeline writes into every buffer, and reads
// order, until lx_pipe_close returns: the caller keeps them alive until
// then, and reads a slot only while it holds it (from the lx_pipe_next
// that hands it out to the one that gives it back).
//
//export lx_pipe_new
func lx_pipe_new(config *C.int64_t, configLen C.int64_t, streams *C.int64_t, nstreams C.int64_t,
	bufs *unsafe.Pointer, bufLens *C.int64_t, nslots C.int64_t, order *C.int64_t, orderLen C.int64_t,
	handle *C.int64_t, errBuf *C.char, errLen C.int64_t) C.int {
	return call("lx_pipe_new", errBuf, errLen, func() error {
		if handle == nil {
			return nullArg("handle")
		}
		if configLen != pipeConfigLen {
			return invalidf("config holds %d values, want %d", configLen, pipeConfigLen)
		}
		cf, err := int64s(config, configLen, "config")
		if err != nil {
			return err
		}
		if nstreams < 0 || nstreams > 1<<16 || nslots <= 0 || nslots > 1<<16 {
			return invalidf("%d streams and %d slots: want 0 to 65536 streams and 1 to 65536 slots", nstreams, nslots)
		}
		st, err := int64s(streams, nstreams*pipeStreamLen, "streams")
		if err != nil {
			return err
		}
		kinds := make([]int64, nstreams)
		for i := range kinds {
			kinds[i] = st[i*pipeStreamLen+pipeStreamKind]
		}
		per := slotWidth(kinds)
		if bufs == nil {
			return nullArg("bufs")
		}
		ptrs := unsafe.Slice(bufs, int(nslots)*per)
		lens, err := int64s(bufLens, nslots*C.int64_t(per), "buf_lens")
		if err != nil {
			return err
		}
		cfg := steppipe.Config{
			Batch:    int(cf[pipeBatch]),
			Workers:  int(cf[pipeWorkers]),
			Prefetch: int(cf[pipePrefetch]),
			Start:    cf[pipeStart],
			End:      cf[pipeEnd],
			// The consumer makes steps while its own is not ready, rather
			// than sleep until a worker wakes it (steppipe.Config.Help).
			Help: true,
		}
		if cfg.Batch <= 0 || cfg.Batch > 1<<40 {
			return invalidf("batch %d", cf[pipeBatch])
		}
		if cfg.Workers <= 0 || cfg.Workers > 1<<12 {
			return invalidf("workers %d: want 1 to %d", cf[pipeWorkers], 1<<12)
		}
		n, rank, world := cf[pipeN], cf[pipeRank], cf[pipeWorld]
		switch cf[pipeDraw] {
		case pipeDrawSampler:
			mode := cf[pipeMode]
			if mode < 0 || mode > 255 {
				return invalidf("mode %d is not a sampler mode", mode)
			}
			spec := zsampler.Spec{Mode: zsampler.Mode(mode), N: n, BatchSize: int64(cfg.Batch),
				Seed: uint64(cf[pipeSeed]), Shard: zsampler.Shard{Rank: rank, World: world}}
			if err := spec.Validate(); err != nil {
				return err
			}
			cfg.Draw = steppipe.Sampler{Spec: spec}
		case pipeDrawEpoch:
			e := steppipe.Epoch{N: n, Batch: int64(cfg.Batch), Rank: rank, World: world}
			if order != nil {
				if e.Order, err = int64s(order, orderLen, "order"); err != nil {
					return err
				}
			}
			if err := e.Validate(); err != nil {
				return err
			}
			cfg.Draw = e
		case pipeDrawNone: // every stream packed (steppipe checks)
		default:
			return invalidf("draw %d is not a pipeline draw", cf[pipeDraw])
		}
		packs := map[int]*steppack.Concat{}
		for i := range int(nstreams) {
			row := st[i*pipeStreamLen : (i+1)*pipeStreamLen]
			h := row[pipeStreamHandle]
			r, err := lookupReader(h)
			if err != nil {
				return fmt.Errorf("stream %d: %w", i, err)
			}
			name := fmt.Sprintf("%d", i)
			switch kinds[i] {
			case pipeDense:
				stride := row[pipeStreamStride]
				if stride < 0 || stride > maxRecordSize {
					return invalidf("stream %d: stride %d", i, stride)
				}
				cfg.Streams = append(cfg.Streams, steppipe.Stream{Name: name, Dense: slotSource{r}, Stride: int(stride)})
			case pipeRagged:
				cfg.Streams = append(cfg.Streams, steppipe.Stream{Name: name, Ragged: r})
			case pipePacked:
				c, err := packedStream(r, row)
				if err != nil {
					return fmt.Errorf("stream %d: %w", i, err)
				}
				packs[i] = c
				cfg.Streams = append(cfg.Streams, steppipe.Stream{Name: name, Packed: c})
				cfg.Limited, cfg.Limit = true, 0
			default:
				return invalidf("stream %d: kind %d is not a stream kind", i, kinds[i])
			}
		}
		for k := range int(nslots) {
			s, err := slotBuffers(ptrs[k*per:(k+1)*per], lens[k*per:(k+1)*per], kinds, k)
			if err != nil {
				return err
			}
			cfg.Slots = append(cfg.Slots, s)
		}
		p, err := steppipe.New(cfg)
		if err != nil {
			return err
		}
		p.Start()
		pipes.Lock()
		pipes.last++
		pipes.m[pipes.last] = &pipeEntry{p: p, streams: int(nstreams), kinds: kinds, batch: cfg.Batch, packs: packs}
		*handle = C.int64_t(pipes.last)
		pipes.Unlock()
		return nil
	})
}

// packedStream is the concat packing of a packed stream's row of
// lx_pipe_new: over a set of a mixture's sources, its stores are the
// sources of its segments.
func packedStream(r reader, row []int64) (*steppack.Concat, error) {
	plan, err := steppack.NewPlan(row[pipeStreamBase], row[pipeStreamStep])
	if err != nil {
		return nil, err
	}
	c := &steppack.Concat{Source: r, Plan: plan, Rows: row[pipeStreamRows], Length: row[pipeStreamLength],
		RowBytes: row[pipeStreamStride], Rank: row[pipeStreamRank], World: row[pipeStreamWorld],
		WideOffsets: row[pipeStreamWide] != 0}
	if t, ok := r.(*zrecord.Set); ok && row[pipeStreamSrcs] != 0 {
		for k := range t.NumStores() {
			c.SourceStarts = append(c.SourceStarts, t.Start(k))
		}
	}
	return c, c.Validate()
}

// lx_pipe_plan appends n records idx of lens tokens each, the records of
// the sampler steps [step, step+steps) in order, to the plan of packed
// stream (the records that follow in its stream of tokens), lets go of the
// records the steps handed out need no more, and writes to state[0] the
// first step the plan does not hold to the end (which the workers may not
// claim yet) and to state[1] the sampler step the next append starts at.
// Steps the plan holds already are passed over (the same append made again
// by a caller that was interrupted before it read state); steps may be 0,
// to read state.
//
//export lx_pipe_plan
func lx_pipe_plan(h C.int64_t, stream C.int64_t, step C.int64_t, steps C.int64_t, idx *C.int64_t, lens *C.int64_t,
	n C.int64_t, state *C.int64_t, errBuf *C.char, errLen C.int64_t) C.int {
	return call("lx_pipe_plan", errBuf, errLen, func() error {
		e, err := lookupPipe(int64(h))
		if err != nil {
			return err
		}
		c, ok := e.packs[int(stream)]
		if !ok {
			return invalidf("stream %d of the pipeline is not packed", stream)
		}
		if n < 0 || n > 1<<40 || steps < 0 {
			return invalidf("%d records of %d steps", n, steps)
		}
		out, err := int64s(state, 2, "state")
		if err != nil {
			return err
		}
		if steps > 0 {
			var is, ls []int64
			if n > 0 {
				if is, err = int64s(idx, n, "idx"); err != nil {
					return err
				}
				if ls, err = int64s(lens, n, "lens"); err != nil {
					return err
				}
			}
			if err := c.Plan.Append(int64(step), int64(steps), is, ls); err != nil {
				return err
			}
		}
		c.Plan.Prune(c.First(e.p.NextOut()))
		at := c.Limit()
		e.p.SetLimit(at)
		out[0], out[1] = at, c.Plan.Step()
		return nil
	})
}

// lx_pipe_next gives back the slots listed in io (a slot the caller does
// not hold is passed over: a caller interrupted as an earlier call returned
// may list one again) and hands out the next
// step, waiting for it up to the timeout io gives (see enum lx_pipe_io and
// enum lx_pipe_got): a batch (its step, slot and rows; the slot is the
// caller's until it gives it back), or nothing yet (PENDING), or the end of
// a finite pass (END), or STARVED when every slot is held by the caller.
// A step that failed is FAILED, with its step and stream in io and the
// failure's status and message as for any failing call; it counts as
// handed out. io_len is the values io holds.
//
//export lx_pipe_next
func lx_pipe_next(h C.int64_t, io *C.int64_t, ioLen C.int64_t, errBuf *C.char, errLen C.int64_t) (status C.int) {
	defer guard("lx_pipe_next", &status, errBuf, errLen)
	defer debug.SetPanicOnFault(faultsPanic())
	e, err := lookupPipe(int64(h))
	if err != nil {
		return fail(errBuf, errLen, err)
	}
	if ioLen < pipeIOHead+C.int64_t(e.streams) {
		return fail(errBuf, errLen, invalidf("io holds %d values, this pipeline needs at least %d", ioLen, pipeIOHead+e.streams))
	}
	v, err := int64s(io, ioLen, "io")
	if err != nil {
		return fail(errBuf, errLen, err)
	}
	head := pipeIOHead + e.streams
	nrel := v[pipeIONRelease]
	if nrel < 0 || nrel > int64(len(v)-head) {
		return fail(errBuf, errLen, invalidf("%d slots to give back, io holds %d", nrel, len(v)-head))
	}
	release := make([]int, nrel)
	for k := range release {
		release[k] = int(v[head+k])
	}
	timeout := time.Duration(v[pipeIOTimeout]) * time.Microsecond
	b, err := e.p.Next(timeout, release)
	v[pipeIONRelease] = 0
	v[pipeIOStatus] = int64(statusOK)
	var se *steppipe.StepError
	switch {
	case err == nil:
		v[pipeIOKind] = pipeGotBatch
		v[pipeIOStep] = b.Step
		v[pipeIOSlot] = int64(b.Slot)
		v[pipeIORows] = int64(b.Rows)
		for i := range e.streams {
			var n int64
			if b.Needed != nil {
				n = b.Needed[i]
			}
			v[pipeIOHead+i] = n
		}
		return statusOK
	case errors.Is(err, steppipe.ErrPending):
		v[pipeIOKind] = pipeGotPending
		return statusOK
	case errors.Is(err, steppipe.ErrEnd):
		v[pipeIOKind] = pipeGotEnd
		return statusOK
	case errors.Is(err, steppipe.ErrStarved):
		v[pipeIOKind] = pipeGotStarved
		return statusOK
	case errors.Is(err, steppipe.ErrUnplanned):
		v[pipeIOKind] = pipeGotUnplanned
		return statusOK
	case errors.As(err, &se):
		v[pipeIOKind] = pipeGotFailed
		v[pipeIOStep] = se.Step
		v[pipeIOStream] = int64(se.Stream)
		st := fail(errBuf, errLen, se.Err)
		v[pipeIOStatus] = int64(st)
		return st
	}
	st := fail(errBuf, errLen, err)
	v[pipeIOStatus] = int64(st)
	return st
}

// lx_pipe_replace gives back slot, which the caller holds, with new
// buffers (ptrs and lens as one slot of lx_pipe_new's bufs and buf_lens,
// n values each): the pipeline never touches the old ones again.
//
//export lx_pipe_replace
func lx_pipe_replace(h C.int64_t, slot C.int64_t, kinds *C.int64_t, ptrs *unsafe.Pointer, lens *C.int64_t, n C.int64_t,
	errBuf *C.char, errLen C.int64_t) C.int {
	return call("lx_pipe_replace", errBuf, errLen, func() error {
		e, err := lookupPipe(int64(h))
		if err != nil {
			return err
		}
		ks, err := int64s(kinds, C.int64_t(e.streams), "kinds")
		if err != nil {
			return err
		}
		for i, k := range ks {
			if k != e.kinds[i] {
				return invalidf("stream %d is of kind %d, not %d", i, e.kinds[i], k)
			}
		}
		per := slotWidth(ks)
		if n != C.int64_t(per) {
			return invalidf("%d buffers for a slot of %d streams, want %d", n, e.streams, per)
		}
		if ptrs == nil {
			return nullArg("ptrs")
		}
		ls, err := int64s(lens, n, "lens")
		if err != nil {
			return err
		}
		s, err := slotBuffers(unsafe.Slice(ptrs, per), ls, ks, int(slot))
		if err != nil {
			return err
		}
		return e.p.Replace(int(slot), s)
	})
}

// lx_pipe_close stops the pipeline and waits for its workers: when it
// returns, nothing of the pipeline runs or touches its buffers. Closing a
// closed pipeline does nothing.
//
//export lx_pipe_close
func lx_pipe_close(h C.int64_t, errBuf *C.char, errLen C.int64_t) C.int {
	return call("lx_pipe_close", errBuf, errLen, func() error {
		pipes.Lock()
		e, ok := pipes.m[int64(h)]
		delete(pipes.m, int64(h))
		last := pipes.last
		pipes.Unlock()
		if !ok {
			if h > 0 && int64(h) <= last {
				return nil
			}
			return invalidf("%d is not a pipeline handle", h)
		}
		e.p.Close()
		return nil
	})
}

// lx_pipe_live writes to *n the worker goroutines of every pipeline still
// running (none once every pipeline is closed).
//
//export lx_pipe_live
func lx_pipe_live(n *C.int64_t, errBuf *C.char, errLen C.int64_t) C.int {
	return call("lx_pipe_live", errBuf, errLen, func() error {
		return setOut(n, "n", steppipe.Live())
	})
}

// slotSource is a dense stream of a pipeline: its batches go to slots, each
// written once and read later by the consumer (see Store.GatherSlot).
type slotSource struct{ r reader }

func (s slotSource) Gather(indices []int64, dst []byte, stride int) error {
	return s.r.GatherSlot(indices, dst, stride)
}
