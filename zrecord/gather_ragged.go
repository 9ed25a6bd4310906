package zrecord

import "sync"

// offsetsPool recycles GatherRagged's per-call offsets.
var offsetsPool = sync.Pool{New: func() any { return new([]int64) }}

// pooledOffsets returns n+1 offsets from offsetsPool, the first 0, and the
// pooled slice to put back once they are no longer used.
func pooledOffsets(n int) (*[]int64, []int64) {
	op := offsetsPool.Get().(*[]int64)
	if cap(*op) < n+1 {
		*op = make([]int64, n+1)
	}
	offsets := (*op)[:n+1]
	offsets[0] = 0
	return op, offsets
}

// GatherRagged reads the records at indices, whatever their sizes, back to
// back into dst, from one consistent view of the store: the sizes and the
// bytes come from the same table state, under one read lock, so a Delete or
// Compact on another goroutine lands either wholly before or wholly after
// the call.
//
// It writes the logical size of record indices[k] to sizes[k] (sizes must
// hold len(indices) values, else ErrBufferTooSmall) and returns needed, the
// sum of the sizes. When needed <= len(dst), record indices[k] is in
// dst[o_k:o_k+sizes[k]], o_k being the sum of the sizes before it. When dst
// is too small, nothing is written to dst, the sizes are still reported,
// and the error is nil: the caller retries with a buffer of at least needed
// bytes (the store may have changed by then, so it checks needed again).
// Indices are range-checked against the published length
// (ErrIndexOutOfRange) and may repeat.
func (s *Store) GatherRagged(indices []int64, sizes []int64, dst []byte) (needed int64, err error) {
	defer recoverTo(&err, "gather")
	defer enterGather()()
	old := guardFaults()
	defer restoreFaults(old)
	s.mu.RLock()
	defer s.mu.RUnlock()
	if err := s.checkRead("gather"); err != nil {
		return 0, err
	}
	n := len(indices)
	if len(sizes) < n {
		return 0, errf(ErrBufferTooSmall, "gather from %s: %d size slots for %d indices", s.dir, len(sizes), n)
	}
	if n == 0 {
		return 0, nil
	}
	g := getGatherScratch(n)
	defer gatherPool.Put(g)
	chunks, err := s.locate("gather", indices, g)
	if err != nil {
		return 0, err
	}
	g.adviseRuns(chunks)
	defer g.restoreRuns()
	op, offsets := pooledOffsets(n)
	defer offsetsPool.Put(op)
	for k, e := range g.locs {
		sizes[k] = int64(e.logic)
		offsets[k+1] = offsets[k] + int64(e.logic)
	}
	needed = offsets[n]
	if needed > int64(len(dst)) {
		return needed, nil
	}
	// As GatherPacked: decoding weighs in the fan-out decision, and blocks
	// of about equal bytes, each record's spare capacity running to its
	// block's end.
	workers := gatherWorkers(s.gatherCost(g.locs, needed), n)
	blocks := gatherBlocks(workers, n)
	g.prepare(blocks)
	g.setStream(needed, true)
	return needed, parallelBlocks(workers, blocks, "gather", func(w int) error {
		lo := splitPoint(offsets, w, blocks)
		hi := splitPoint(offsets, w+1, blocks)
		limit := offsets[hi]
		for k := lo; k < hi; k++ {
			a, b := offsets[k], offsets[k+1]
			if err := s.fill(g, w, k, chunks, indices[k], dst[a:b:limit]); err != nil {
				return err
			}
		}
		return nil
	})
}
