package zrecord

import (
	"math"
	"os"
	"sync"
	"sync/atomic"
	"unsafe"
)

// appendScratch is the per-call working memory of Append, reused across calls.
type appendScratch struct {
	phys    [][]byte // what is stored for each record
	sums    []uint32 // the checksum of each record's stored bytes
	entries []entry
	spans   []int   // start and end of each record's frame in its arena; -1 if stored raw
	owner   []int32 // the worker whose arena holds each record's frame
	iov     [][]byte
	table   []byte
	arenas  [][]byte // compressed bytes, one arena per worker
}

var appendPool = sync.Pool{New: func() any { return new(appendScratch) }}

func (a *appendScratch) reset(n, workers int, entSize int) {
	if cap(a.phys) < n {
		a.phys = make([][]byte, n)
		a.sums = make([]uint32, n)
		a.entries = make([]entry, n)
		a.spans = make([]int, 2*n)
		a.owner = make([]int32, n)
	}
	a.spans, a.owner = a.spans[:2*n], a.owner[:n]
	a.phys, a.sums, a.entries = a.phys[:n], a.sums[:n], a.entries[:n]
	if cap(a.table) < n*entSize {
		a.table = make([]byte, n*entSize)
	}
	a.table = a.table[:n*entSize]
	for len(a.arenas) < workers {
		a.arenas = append(a.arenas, nil)
	}
}

// resetEntries sizes only the entries and the table, for n records.
func (a *appendScratch) resetEntries(n int, entSize int) {
	if cap(a.entries) < n {
		a.entries = make([]entry, n)
	}
	a.entries = a.entries[:n]
	if cap(a.table) < n*entSize {
		a.table = make([]byte, n*entSize)
	}
	a.table = a.table[:n*entSize]
}

// release drops references to caller memory so the pool does not pin it.
func (a *appendScratch) release() {
	clear(a.phys)
	clear(a.iov[:cap(a.iov)])
	a.iov = a.iov[:0]
	// Arenas larger than 64 MiB are not worth keeping around.
	for i, b := range a.arenas {
		if cap(b) > 64<<20 {
			a.arenas[i] = nil
		}
	}
	appendPool.Put(a)
}

// Append adds records at the end of the store and returns the index of the
// first one; the batch occupies [first, first+len(records)). An empty batch
// is a no-op that returns Len(). A record may be empty and at most
// MaxRecordSize bytes (else ErrRecordTooLarge, and nothing is written).
//
// Compression runs in parallel across Threads() goroutines for large
// batches. A large compressed batch is compressed and written in parts of
// about pipeStep() bytes, the next part compressing while the previous one
// is written (see appendPipelined); a small one is compressed before the
// append lock is taken. A raw batch of at least rawPartBytes is written in
// parts, each checksummed right after its write (see appendRawParts); a
// smaller one is checksummed before the append lock is taken. Either way
// all the record bytes are written first, then the table entries, then the
// header; only then does Len include the batch. Concurrent Gathers never
// see part of a batch.
func (s *Store) Append(records [][]byte) (first int64, err error) {
	defer recoverTo(&err, "append")
	if len(records) > 0 {
		if err := s.upgradeFor("append"); err != nil {
			return 0, err
		}
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if err := s.checkWrite("append"); err != nil {
		return 0, err
	}
	var total int64
	for k, r := range records {
		if len(r) > MaxRecordSize {
			return 0, errf(ErrRecordTooLarge, "append to %s: record %d of the batch has %d bytes, limit %d", s.dir, k, len(r), MaxRecordSize)
		}
		total += int64(len(r))
	}
	if len(records) == 0 {
		return s.length.Load(), nil
	}
	if total >= 2*pipeStep() {
		return s.appendPipelined(records, total)
	}
	if s.codec == Raw && total >= rawPartBytes {
		return s.appendRawParts(records)
	}
	a := appendPool.Get().(*appendScratch)
	defer a.release()
	workers := 1
	if s.codec != Raw {
		workers = workersFor(total, len(records), compressFanOutBytes)
	}
	a.reset(len(records), workers, int(layoutV4.entSize))
	if err := s.compress(records, a, workers, total); err != nil {
		return 0, err
	}

	s.appendMu.Lock()
	defer s.appendMu.Unlock()
	return s.commit(records, a)
}

// beginAppend readies the store for a batch, whole or pipelined; the caller
// holds appendMu. The batch's entries go where pending Deletes moved records
// from, so those go into the table first; and chunk files past the frontier
// that still hold the old copies of records a Compact moved may not be
// reused before the moved records are durable.
func (s *Store) beginAppend() error {
	if err := s.checkWrite("append"); err != nil {
		return err
	}
	if err := s.settleDeletes(); err != nil {
		return err
	}
	if c := s.cleanup; c != nil && len(c.remove) > 0 {
		return s.syncLocked()
	}
	return nil
}

// compress fills a.phys with what each record is stored as: its zstd frame
// (with plain or entropy-coded literals, see encodeRecord) or narrowed form
// when that is smaller, else the record itself; and a.sums with the
// checksums of those bytes.
func (s *Store) compress(records [][]byte, a *appendScratch, workers int, total int64) error {
	if s.codec == Raw {
		copy(a.phys, records)
		for k, r := range records {
			a.sums[k] = dataSum(r)
		}
		return nil
	}
	if s.codec.zstdFrames() {
		s.encOnce.Do(func() { s.enc, s.encErr = newRecordEncoder(s.codec, s.dict, s.opts.tier) })
		if s.encErr != nil {
			return s.encErr
		}
	}
	n := len(records)
	// Records are handed out in blocks of about compressBlockBytes from a
	// shared counter rather than split evenly up front, so a worker that is
	// descheduled on a busy machine, or meets harder records, does not hold
	// the others up at the end.
	per := max(1, min(n, int(int64(compressBlockBytes)*int64(n)/max(total, 1))))
	blocks := (n + per - 1) / per
	var next atomic.Int64
	err := parallel(workers, "append", func(w int) error {
		arena := a.arenas[w][:0]
		if want := int(total/int64(workers)) + 64*n/workers; cap(arena) < want {
			arena = make([]byte, 0, want)
		}
		for {
			blk := int(next.Add(1)) - 1
			if blk >= blocks {
				break
			}
			for k := blk * per; k < min(n, (blk+1)*per); k++ {
				r := records[k]
				start := len(arena)
				var smaller bool
				arena, smaller = encodeRecord(s.enc, s.elem, r, arena)
				if !smaller {
					arena = arena[:start]
					a.spans[2*k] = -1
					a.sums[k] = dataSum(r)
					continue
				}
				// Frames are located by offsets and worker, because the
				// arena may move while it grows; slices are taken at the end.
				a.spans[2*k], a.spans[2*k+1] = start, len(arena)
				a.owner[k] = int32(w)
				a.sums[k] = dataSum(arena[start:])
			}
		}
		a.arenas[w] = arena
		return nil
	})
	if err != nil {
		return err
	}
	for k := range records {
		if start, end := a.spans[2*k], a.spans[2*k+1]; start < 0 {
			a.phys[k] = records[k]
		} else {
			a.phys[k] = a.arenas[a.owner[k]][start:end] // capacity to the arena's end: neighbours coalesce (extend)
		}
	}
	return nil
}

// compressBlockBytes is about how many record bytes a compression worker
// takes from the shared counter at a time.
const compressBlockBytes = 256 << 10

// commit places, writes and publishes a compressed batch. The caller holds
// appendMu.
func (s *Store) commit(records [][]byte, a *appendScratch) (int64, error) {
	w, err := s.newBatch(len(records), a.entries[:0])
	if err != nil {
		return 0, err
	}
	if err := w.write(records, a.phys, a.sums, &a.iov); err != nil {
		return 0, err
	}
	return w.publish(a.table)
}

// batchWriter places and writes the record bytes of one batch, in one step
// or in several consecutive parts, and then publishes the whole batch at
// once: table entries, then the header. Nothing of the batch is visible
// before publish. Its methods run under appendMu.
type batchWriter struct {
	s       *Store
	length  int64   // Len() before the batch
	n       int64   // records in the batch
	entries []entry // entries of the records written so far; cap n
	pos     position
	live    int64
	logical int64
}

// newBatch readies the store for a batch (beginAppend) and starts one of n
// records after the current tail, with entries (length 0, capacity n) to
// collect their table entries in. The caller holds appendMu.
func (s *Store) newBatch(n int, entries []entry) (*batchWriter, error) {
	if err := s.beginAppend(); err != nil {
		return nil, err
	}
	length := s.length.Load()
	if err := s.growSegments(length + int64(n)); err != nil {
		return nil, err
	}
	return &batchWriter{s: s, length: length, n: int64(n), entries: entries, pos: s.tail}, nil
}

// write places the next records of the batch after those written so far
// and writes their stored forms phys (with checksums sums). iov is scratch.
func (w *batchWriter) write(records, phys [][]byte, sums []uint32, iov *[][]byte) error {
	ents, err := w.place(records, phys, sums)
	if err != nil {
		return err
	}
	return w.writePlaced(ents, phys, iov)
}

// place gives the next records of the batch, stored as phys with checksums
// sums, their places after those placed so far, makes sure their chunks
// exist, and returns their entries (the tail of w.entries).
func (w *batchWriter) place(records, phys [][]byte, sums []uint32) ([]entry, error) {
	s := w.s
	capacity := uint64(s.opts.capacity)
	first := len(w.entries)
	if first+len(phys) > int(w.n) {
		return nil, errf(ErrInvalidArgument, "append to %s: a part of %d records past the batch of %d", s.dir, len(phys), w.n)
	}

	// Place every record. A record never straddles chunks: one that does
	// not fit the rest of the chunk starts the next chunk, unless the chunk
	// is still empty (a record larger than the capacity gets a chunk alone).
	pos := w.pos
	for k, p := range phys {
		size := uint64(len(p))
		if pos.off > 0 && uint64(pos.off)+size > capacity {
			if pos.chunk == math.MaxUint32 {
				return nil, errf(ErrInvalidArgument, "append to %s: out of chunk ids", s.dir)
			}
			pos = position{pos.chunk + 1, 0}
		}
		w.entries = append(w.entries, entry{off: pos.off, phys: uint32(size), logic: uint32(len(records[k])), chunk: pos.chunk, sum: sums[k]})
		pos.off += uint32(size)
		w.live += int64(size)
		w.logical += int64(len(records[k]))
	}
	w.pos = pos
	if err := s.growChunks(pos.chunk); err != nil {
		return nil, err
	}
	return w.entries[first:], nil
}

// writePlaced writes phys, the stored forms of the records placed as ents.
func (w *batchWriter) writePlaced(ents []entry, phys [][]byte, iov *[][]byte) error {
	s := w.s
	chunks := *s.chunks.Load()
	// Data: one vectored write per run of records in the same chunk.
	for k := 0; k < len(phys); {
		c := chunks[ents[k].chunk]
		start := int64(ents[k].off)
		*iov = (*iov)[:0]
		j := k
		for ; j < len(phys) && ents[j].chunk == c.id; j++ {
			if p := phys[j]; len(p) > 0 {
				if t := len(*iov) - 1; t >= 0 {
					if run, ok := extend((*iov)[t], p); ok {
						(*iov)[t] = run
						continue
					}
				}
				*iov = append(*iov, p)
			}
		}
		last := ents[j-1]
		if err := w.writeAt(c, *iov, start, int64(last.end())); err != nil {
			return err
		}
		k = j
	}
	return nil
}

// extend returns run grown by the bytes of p when p is the continuation of
// run in the same array (run's capacity reaches over it), so that records
// packed back to back in the caller's buffer go out as one piece of a
// vectored write instead of one piece each: for records of a few bytes the
// pieces, not the bytes, are the cost (and a write takes at most iovMax).
func extend(run, p []byte) ([]byte, bool) {
	n := len(run)
	if cap(run)-n < len(p) || len(p) == 0 || n == 0 {
		return run, false
	}
	if uintptr(unsafe.Pointer(unsafe.SliceData(run)))+uintptr(n) != uintptr(unsafe.Pointer(unsafe.SliceData(p))) {
		return run, false
	}
	return run[:n+len(p)], true
}

// writeAt writes bufs into chunk c at off; they end at end.
func (w *batchWriter) writeAt(c *chunk, bufs [][]byte, off, end int64) error {
	s := w.s
	// Mapped far enough before the bytes exist, and so before the
	// length that publishes them (see mmap.go).
	if err := c.cover(c.f, end); err != nil {
		return wrapf(err, "append: map %s", s.path(chunkName(c.id)))
	}
	if len(bufs) > 0 {
		if err := writeVec(c.f, bufs, off); err != nil {
			return wrapf(err, "append: write %s", s.path(chunkName(c.id)))
		}
		c.dirty = true
	}
	c.size = max(c.size, end)
	return nil
}

// publish writes the table entries of the whole batch (table is scratch of
// at least n entries), cuts off what a failed earlier append left in the
// chunks the batch moved past, and writes the header; then the batch is
// visible. Every record of the batch must have been written.
func (w *batchWriter) publish(table []byte) (int64, error) {
	s := w.s
	if int64(len(w.entries)) != w.n {
		return 0, errf(ErrInvalidArgument, "append to %s: %d of a batch of %d records written", s.dir, len(w.entries), w.n)
	}
	if err := w.writeTable(w.entries, table, 0, int(w.n)); err != nil {
		return 0, err
	}
	return w.finish()
}

// writeTable encodes the table entries ents[lo:hi], those of records [lo,
// hi) of the batch, into their place in table (scratch of at least n
// entries) and writes them, one write per segment they fall in.
func (w *batchWriter) writeTable(ents []entry, table []byte, lo, hi int) error {
	s := w.s
	l := s.lay
	es := l.entSize
	if l.checksummed() {
		putEntries(table[int64(lo)*es:int64(hi)*es], w.length+int64(lo), ents[lo:hi])
	} else {
		for k := lo; k < hi; k++ {
			l.putEntry(table[int64(k)*es:int64(k+1)*es], w.length+int64(k), ents[k])
		}
	}
	segs := *s.segs.Load()
	for i, end := w.length+int64(lo), w.length+int64(hi); i < end; {
		g := segs[i>>l.shift]
		cnt := min(end-i, l.segEntries()-(i&l.segMask()))
		b := table[(i-w.length)*es : (i-w.length+cnt)*es]
		if err := g.cover(g.f, l.segOff(i)+cnt*es); err != nil {
			return wrapf(err, "append: map %s", s.path(l.segName(g.id)))
		}
		if err := writeFull(g.f, b, l.segOff(i)); err != nil {
			return wrapf(err, "append: write %s", s.path(l.segName(g.id)))
		}
		g.dirty = true
		i += cnt
	}
	return nil
}

// finish publishes a batch whose record bytes and table entries are all
// written: it cuts off what a failed earlier append left in the chunks the
// batch moved past, and writes the header; then the batch is visible.
func (w *batchWriter) finish() (int64, error) {
	s := w.s
	if int64(len(w.entries)) != w.n {
		return 0, errf(ErrInvalidArgument, "append to %s: %d of a batch of %d records written", s.dir, len(w.entries), w.n)
	}
	length, n, pos := w.length, w.n, w.pos
	chunks := *s.chunks.Load()

	// Chunks the batch moved past are sealed at their last record; cut off
	// anything a failed earlier append left behind in them.
	for id := s.tail.chunk; id < pos.chunk; id++ {
		c := chunks[id]
		end := sealedEnd(c, id, s.tail, w.entries)
		if c.size > end {
			if err := c.f.Truncate(end); err != nil {
				return 0, wrapf(err, "append: truncate %s", s.path(chunkName(id)))
			}
			c.size = end
			c.dirty = true
		}
	}

	// Header last. If it fails, what reached meta.zr is unknown, so the
	// handle stops writing; reopening reads whichever header is on disk,
	// and both describe complete batches.
	if err := s.writeHeader(pos, length+n); err != nil {
		s.breakHandle(err)
		return 0, err
	}
	for id := s.tail.chunk; id < pos.chunk; id++ {
		chunks[id].end.Store(sealedEnd(chunks[id], id, s.tail, w.entries))
	}
	chunks[pos.chunk].end.Store(int64(pos.off))
	s.tail = pos
	s.live += w.live
	s.logical += w.logical
	s.length.Store(length + n)
	return length, nil
}

// sealedEnd is where chunk id ends once the batch placed by entries has moved
// past it.
func sealedEnd(c *chunk, id uint32, tail position, entries []entry) int64 {
	end := int64(0)
	if id == tail.chunk {
		end = int64(tail.off)
	}
	for k := len(entries) - 1; k >= 0; k-- {
		if entries[k].chunk == id {
			return max(end, int64(entries[k].end()))
		}
		if entries[k].chunk < id {
			break
		}
	}
	return end
}

// growChunks makes sure chunk files up to id exist, are mapped and are in
// the published chunk list. The caller holds appendMu or mu exclusively.
func (s *Store) growChunks(id uint32) error {
	old := *s.chunks.Load()
	if int64(id) < int64(len(old)) {
		return nil
	}
	list := make([]*chunk, len(old), int(id)+1)
	copy(list, old)
	for next := uint32(len(old)); next <= id; next++ {
		p := s.path(chunkName(next))
		f, err := s.fsys.OpenFile(p, os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			return wrapf(err, "create %s", p)
		}
		s.dirDirty = true
		c := &chunk{id: next, f: f}
		c.random = true
		if c.size, err = fileSize(f); err != nil {
			f.Close()
			return wrapf(err, "stat %s", p)
		}
		if err = c.mapFile(f, c.size, chunkSpan); err != nil {
			f.Close()
			return wrapf(err, "map %s", p)
		}
		list = append(list, c)
		// Publish each chunk as it is ready, so a failure part way keeps
		// the ones already opened (they are closed with the store).
		snapshot := list
		s.chunks.Store(&snapshot)
	}
	return nil
}

// growSegments makes sure the record table can hold length entries.
func (s *Store) growSegments(length int64) error {
	old := *s.segs.Load()
	need := s.lay.segCount(length)
	if need <= int64(len(old)) {
		return nil
	}
	list := make([]*segment, len(old), need)
	copy(list, old)
	for id := int64(len(old)); id < need; id++ {
		g, err := s.openSegment(uint32(id), true)
		if err != nil {
			return err
		}
		s.dirDirty = true
		list = append(list, g)
		snapshot := list
		s.segs.Store(&snapshot)
	}
	return nil
}
