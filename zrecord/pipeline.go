package zrecord

import (
	"errors"
	"fmt"
	"hash/crc32"
	"sync/atomic"
	"syscall"
)

// A large batch is appended as a pipeline of parts: a compressor goroutine
// compresses part k+1 (fanned out over Threads() goroutines) while the
// caller writes the frames of part k into the chunk files. Without it the
// cores sit idle while a piece is written (copying the frames into the page
// cache is a single thread's work, and on a machine whose fresh page-cache
// pages are slow to touch it takes about as long as compressing them), and
// the frames of a whole batch are held in memory at once. A raw batch is
// cut into parts too, but each is written first and checksummed right after
// on the same goroutine (see appendRawParts).
//
// Visibility is unchanged: the parts only write record bytes past the tail;
// the table entries and the header of the whole batch are written after the
// last part, so the batch appears at once or, if anything fails or the
// process dies, not at all. At most two parts' frames exist at a time.

// pipeStepPerThread is the logical bytes of a part per compressing
// goroutine: large enough that fanning a part out costs nothing next to
// compressing it (a few µs against milliseconds), small enough that a
// part's frames are still in the CPU caches when they are written, and
// that filling and draining the pipeline at the ends of a batch is short.
var pipeStepPerThread atomic.Int64

func init() { pipeStepPerThread.Store(1 << 20) }

// pipelinedAppends counts the appends that took the pipeline (for tests).
var pipelinedAppends atomic.Int64

// pipeStep is the logical size of one part of a pipelined append; a batch
// of at least two parts is pipelined.
func pipeStep() int64 {
	return pipeStepPerThread.Load() * int64(Threads())
}

// pipeParts cuts records into consecutive parts of about step logical bytes
// (a part holds at least one record) and returns the n+1 bounds of the n
// parts and the logical bytes of each.
func pipeParts(records [][]byte, step int64) (bounds []int, sizes []int64) {
	bounds = append(bounds, 0)
	var acc int64
	for k, r := range records {
		acc += int64(len(r))
		if acc >= step || k == len(records)-1 {
			bounds = append(bounds, k+1)
			sizes = append(sizes, acc)
			acc = 0
		}
	}
	return bounds, sizes
}

// appendPipelined is Append for a batch of at least two parts; total is
// its logical size. The caller has checked the
// batch and holds mu for reading.
func (s *Store) appendPipelined(records [][]byte, total int64) (first int64, err error) {
	pipelinedAppends.Add(1)
	if s.codec == Raw {
		return s.appendRawParts(records)
	}
	bounds, sizes := pipeParts(records, pipeStep())
	parts := len(sizes)

	var slots [2]*appendScratch
	for i := range slots {
		slots[i] = appendPool.Get().(*appendScratch)
	}
	batch := appendPool.Get().(*appendScratch)
	batch.resetEntries(len(records), int(layoutV4.entSize))

	// The compressor takes a slot token before it compresses a part into
	// slot k%2 and hands the part over on ready; the writer gives the token
	// back once the part's bytes are written. stop ends the compressor
	// early. The slots go back to the pool only after the compressor has
	// closed ready, so it never writes into a slot someone else holds.
	ready := make(chan int, 1)
	free := make(chan struct{}, len(slots))
	for range slots {
		free <- struct{}{}
	}
	stop := make(chan struct{})
	errs := make([]error, parts)
	go func() {
		defer close(ready)
		for k := range parts {
			select {
			case <-free:
			case <-stop:
				return
			}
			lo, hi := bounds[k], bounds[k+1]
			recs := records[lo:hi]
			errs[k] = guarded("append", 0, func(int) error {
				a := slots[k%2]
				workers := 1 // a raw part only needs its checksums: one goroutine keeps up
				if s.codec != Raw {
					workers = workersFor(sizes[k], len(recs), compressFanOutBytes)
				}
				a.reset(len(recs), workers, int(layoutV4.entSize))
				return s.compress(recs, a, workers, sizes[k])
			})
			ready <- k
			if errs[k] != nil {
				return
			}
		}
	}()
	defer func() {
		close(stop)
		for range ready { // wait for the compressor to end
		}
		for _, a := range slots {
			a.release()
		}
		batch.release()
	}()

	// The first part compresses before the append lock is taken, as a
	// batch that is not pipelined does.
	k, ok := <-ready
	if !ok || errs[k] != nil {
		return 0, pipeErr(errs, k, ok, parts)
	}
	s.appendMu.Lock()
	defer s.appendMu.Unlock()
	w, err := s.newBatch(len(records), batch.entries[:0])
	if err != nil {
		return 0, err
	}
	tw := w.tableAside(batch.table)
	defer tw.wait()
	for {
		a := slots[k%2]
		if err := w.write(records[bounds[k]:bounds[k+1]], a.phys, a.sums, &a.iov); err != nil {
			return 0, err
		}
		clear(a.phys) // the slot is reused: drop references to this part
		free <- struct{}{}
		if tw != nil {
			tw.add(bounds[k], bounds[k+1])
		}
		if k == parts-1 {
			break
		}
		if k, ok = <-ready; !ok || errs[k] != nil {
			return 0, pipeErr(errs, k, ok, parts)
		}
	}
	if tw == nil {
		return w.publish(batch.table)
	}
	if err := tw.wait(); err != nil {
		return 0, err
	}
	return w.finish()
}

// pipeErr is the error that ended the compressor: that of part k, or, if
// it ended without handing a part over (which only an error does), an
// internal error.
func pipeErr(errs []error, k int, ok bool, parts int) error {
	if ok {
		return errs[k]
	}
	return fmt.Errorf("zrecord: append: internal error: the compressor stopped before part %d of %d", k, parts)
}

// rawPartBytes is the most record bytes a pipelined raw append writes in one
// part before it checksums them. Parts are 2 MiB, and cut where a record
// ends at or before a multiple of 2 MiB of its chunk (rawParts), so that a
// batch of records of a power-of-two size writes whole 2 MiB pieces of the
// file at 2 MiB boundaries: a file system with large folios (ext4 since
// Linux 6.16, XFS) then holds them in the page cache as 2 MiB folios, which
// a mapping maps through one TLB entry each (2 MiB pages), where writes of
// 512 KiB left 512 KiB folios mapped through 4 KiB pages; a folio is at
// most as large as the write. np.save, one write of the whole array, gets
// the 2 MiB folios too. Side by side in one process, on random batches from
// 128 MiB of records read through the two mappings, the one through 2 MiB
// pages gathered 64 KiB records at 1.14-1.23x the rate unchecked (checked,
// within the noise) and 1 MiB records at 1.22-1.23x, checked or not;
// 256-byte ones moved by less than the noise.
//
// A part's source bytes, which the kernel has just read to copy them into
// the page cache, are checksummed right after its write: at 2 MiB they have
// left the L2 cache of a core (1-2 MiB) for the L3, but 512 KiB, 1 MiB and
// 2 MiB parts measured the same end to end, and larger writes are cheaper
// for the kernel, which does some work per folio (into blocks not reserved
// first, 625 MiB took 15-20 % more system time in 512 KiB writes than in
// 2 MiB or larger ones; preallocate takes most of that away).
const rawPartBytes = 2 << 20

// appendRawParts appends a raw batch of at least rawPartBytes, pipelined or
// not (Append and appendPipelined send it here). A raw record is stored
// as it is, so the only work besides the write is its checksum, and the
// order is reversed: each part is written first and checksummed right
// after, on the same goroutine, while its bytes are still in the cache that
// the kernel's copy brought them into. Checksumming first (on this core or
// another) reads the whole batch from memory one more time: on this machine
// checksums of cold bytes run at about 7.5 GB/s against 27 GB/s for cached
// ones, and the write costs the same whether its source is cached or not,
// since it is bound by the page-cache pages it fills. Two other layouts
// were measured on this two-core machine and lost: a second goroutine
// writing and checksumming every other part (the writes into one file take
// the inode's lock in turn, and the contention cost half again the CPU time
// for little wall time), and a second goroutine checksumming each part
// after this one wrote it (a wake-up per part, and the bytes are read from
// the other core's cache); both also need a core that is free, which a
// shared machine often does not have.
//
// The whole batch is placed first and its blocks are reserved with one
// fallocate per chunk (preallocate), which takes ext4's delayed allocation
// out of every write. The entries get their checksums after their bytes
// are written but before the table is: publish still writes the table
// entries, then the header, after the last part, so visibility and the
// crash contract are those of any append. Blocks reserved past the end of
// a chunk by an append that failed or was killed before writing them hold
// disk space but not file size: a failed append gives them back
// (unreserve), and the next writable Open cuts the tail chunk back to the
// published end, which frees those a killed append left.
func (s *Store) appendRawParts(records [][]byte) (int64, error) {
	step := min(pipeStep(), rawPartBytes)
	batch := appendPool.Get().(*appendScratch)
	defer batch.release()
	batch.resetEntries(len(records), int(layoutV4.entSize))

	s.appendMu.Lock()
	defer s.appendMu.Unlock()
	w, err := s.newBatch(len(records), batch.entries[:0])
	if err != nil {
		return 0, err
	}
	// The whole batch is placed at once, with zero checksums that are
	// filled in after each part's write, and the blocks of each chunk's
	// share of it are reserved before the first write (see preallocate).
	ents, err := w.place(records, records, make([]uint32, len(records)))
	if err != nil {
		return 0, err
	}
	w.preallocate(ents)
	bounds := rawParts(ents, step)
	tw := w.tableAside(batch.table)
	defer tw.wait()
	for k := range len(bounds) - 1 {
		lo, hi := bounds[k], bounds[k+1]
		part := records[lo:hi]
		if len(part) == 1 && int64(len(part[0])) > step {
			// A record larger than a part is written and checksummed in
			// slices of a part, for the same reason.
			err = w.writeRawSlices(&ents[lo], part[0], int(step))
		} else {
			pents := ents[lo:hi]
			err = w.writePlaced(pents, part, &batch.iov)
			if err == nil {
				err = guarded("append", 0, func(int) error {
					for i, r := range part {
						pents[i].sum = dataSum(r)
					}
					return nil
				})
			}
		}
		if err != nil {
			w.unreserve(ents)
			return 0, rawSourceErr(err, lo, hi)
		}
		if tw != nil {
			tw.add(lo, hi)
		}
	}
	if tw == nil {
		return w.publish(batch.table)
	}
	if err := tw.wait(); err != nil {
		w.unreserve(ents)
		return 0, err
	}
	return w.finish()
}

// preallocate reserves the blocks of each chunk's run of ents, placed
// records that are about to be written (see the function preallocate).
func (w *batchWriter) preallocate(ents []entry) {
	chunks := *w.s.chunks.Load()
	for k := 0; k < len(ents); {
		j := k
		for j < len(ents) && ents[j].chunk == ents[k].chunk {
			j++
		}
		start, end := int64(ents[k].off), int64(ents[j-1].end())
		preallocate(chunks[ents[k].chunk].f, start, end-start)
		k = j
	}
}

// unreserve gives back the blocks preallocate reserved past the end of each
// chunk of ents, after a failed append: cutting a file to its own size
// frees what was reserved beyond it. It is best effort, as preallocate is.
func (w *batchWriter) unreserve(ents []entry) {
	chunks := *w.s.chunks.Load()
	for k := 0; k < len(ents); {
		c := chunks[ents[k].chunk]
		for k < len(ents) && ents[k].chunk == c.id {
			k++
		}
		_ = c.f.Truncate(c.size)
	}
}

// rawParts cuts the records placed as ents into consecutive parts and
// returns the n+1 bounds of the n parts. A part runs from its first record
// to the last that ends by the first multiple of step (of the chunk's
// offsets) at or past the first record's end, so parts of records that
// tile the step start and end on its multiples; a part also ends where the
// next record is in another chunk. A part holds at least one record, and a
// record larger than step is a part alone.
func rawParts(ents []entry, step int64) []int {
	bounds := []int{0}
	var limit int64 // the end the current part may reach
	for k := range ents {
		e := &ents[k]
		off, size := int64(e.off), int64(e.phys)
		if k > bounds[len(bounds)-1] {
			prev := &ents[k-1]
			if e.chunk != prev.chunk || off+size > limit || size > step || int64(prev.phys) > step {
				bounds = append(bounds, k)
			}
		}
		if k == bounds[len(bounds)-1] {
			limit = ((off+size-1)/step + 1) * step
		}
	}
	return append(bounds, len(ents))
}

// writeRawSlices writes r, a raw record placed as e, in slices of step
// bytes, each checksummed right after its write, and sets e.sum.
func (w *batchWriter) writeRawSlices(e *entry, r []byte, step int) error {
	c := (*w.s.chunks.Load())[e.chunk]
	sum := uint32(0)
	for off := 0; off < len(r); off += step {
		b := r[off:min(len(r), off+step)]
		at := int64(e.off) + int64(off)
		if err := w.writeAt(c, [][]byte{b}, at, at+int64(len(b))); err != nil {
			return err
		}
		if err := guarded("append", 0, func(int) error {
			sum = crc32.Update(sum, castagnoli, b)
			return nil
		}); err != nil {
			return err
		}
	}
	e.sum = sum
	return nil
}

// rawSourceErr is the error of a failed write of records [lo, hi) of a raw
// batch: the kernel reports a fault in the records' memory (a mapped source
// file truncated under the append, say) as EFAULT where a read of it by
// this process would have faulted; it is reported as such a fault is.
func rawSourceErr(err error, lo, hi int) error {
	if errors.Is(err, syscall.EFAULT) {
		return fmt.Errorf("zrecord: append: memory fault reading records %d to %d of the batch (a mapped source truncated or changed under the append?): %v: %w", lo, hi-1, err, ErrCorrupt)
	}
	return err
}
