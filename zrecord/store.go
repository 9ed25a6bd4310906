package zrecord

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"

	"github.com/klauspost/compress/zstd"
)

// Store is an open record store. Its methods are safe for concurrent use:
// Gather, Sizes and Append run side by side; Delete, Compact and Close wait
// for them and run alone.
type Store struct {
	dir      string
	fsys     FS
	opts     options
	readOnly bool
	codec    Codec
	dict     []byte
	dec      *zstd.Decoder // nil for Raw and Narrow stores
	// elem is the element type of a Narrow store's records; its Size is
	// zero for the other codecs.
	elem Element
	// lay is the table layout of the store's format version. It changes
	// only with mu held exclusively (Upgrade).
	lay layout
	// dictSum is the CRC-32C of dict (ZstdDict stores).
	dictSum uint32
	// verifyRaw: Gather checks the checksum of raw records too (see
	// WithVerify); compressed records of a checksummed store always are.
	verifyRaw atomic.Bool
	// resident, when set, is the map every read checks its records
	// against before it touches their bytes (SetResidency).
	resident atomic.Pointer[residency]

	encOnce sync.Once
	enc     *recordEncoder
	encErr  error

	// mu is held shared by Gather, Sizes, Append, Stats and Sync, and
	// exclusively by Delete, Compact and Close.
	mu     sync.RWMutex
	closed bool // guarded by mu

	// appendMu serialises the part of Append that places records and
	// commits them. The fields below it are guarded by appendMu or by mu
	// held exclusively (which excludes every appendMu holder).
	appendMu sync.Mutex
	meta     File
	tail     position
	live     int64 // sum of phys lengths of live records, once totalsKnown
	logical  int64 // sum of logic lengths of live records, once totalsKnown
	// totalsKnown: live and logical hold the table's sums. Open does not
	// walk the table, so they are summed at the first Stats (sumTotals)
	// and kept up to date by every write from then on.
	totalsKnown bool
	dirDirty    bool // files were created or removed since the last Sync
	metaDirty   bool
	// pend holds the Deletes logged but not yet written into the table;
	// nil when there are none.
	pend *pendingDelete
	// cleanup is what the last Compact left for the next sync: the old
	// copies of the records it moved, and its journal.
	cleanup *compactCleanup

	// length is the published record count. Readers load it first and use
	// only entries below it; Append stores it last.
	length atomic.Int64
	// chunks and segs are replaced, never modified in place, so readers
	// can use a loaded slice without locks.
	chunks atomic.Pointer[[]*chunk]
	segs   atomic.Pointer[[]*segment]

	// broken is set when a write failed at a point the handle cannot
	// undo; the handle then refuses writes until the store is reopened.
	broken atomic.Pointer[brokenState]
	// ident is what the handle saw of the store when it opened it
	// (noteIdentity): a Set compares it when it opens the store again.
	ident storeIdentity

	// overlay holds entries readers must take from memory instead of the
	// table: the entry writes of pending Deletes (see settleDeletes). A
	// published overlay is never changed while readers may use it: Delete,
	// which runs alone, is the only writer that changes its map in place.
	overlay atomic.Pointer[overlay]
}

type brokenState struct{ err error }

// overlay maps indices to the entry readers must use instead of the
// table's: the entries of deletes the table has not taken yet.
type overlay struct {
	recs map[int64]entry
}

// position is a place in the chunk files: the write frontier, or where a
// record goes during compaction.
type position struct {
	chunk uint32
	off   uint32
}

// chunk is an open {id}.chunk file. The fields readers use come first, in
// the chunk's first cache line.
type chunk struct {
	// mapping is the read-only view of f (addressable range chunkSpan),
	// unmapped when f cannot be mapped.
	mapping
	// end bounds what readers may touch: every committed record of the
	// chunk lies in [0, end).
	end atomic.Int64
	id  uint32
	f   File
	// size is how far the file is known to extend (writer side).
	size  int64
	dirty bool
	// trust: whether the chunk's long runs are taken to be in the page
	// cache without asking the kernel for each (see trustCached).
	trust cacheTrust
}

// segment is an open {id}.loc record-table file.
type segment struct {
	id uint32
	f  File
	// mapping is the read-only view of f (addressable range the layout's
	// segBytes), unmapped when f cannot be mapped.
	mapping
	dirty bool
}

func (s *Store) path(name string) string { return filepath.Join(s.dir, name) }

// Dir returns the store's directory as given to Create or Open.
func (s *Store) Dir() string { return s.dir }

// Codec returns the store's codec.
func (s *Store) Codec() Codec { return s.codec }

// Len returns the number of records. Concurrent appends may raise it at any
// moment; only Delete lowers it.
func (s *Store) Len() int64 { return s.length.Load() }

func (s *Store) fileFlag() int {
	if s.readOnly {
		return os.O_RDONLY
	}
	return os.O_RDWR
}

// entryBytes returns the bytes of table entry i (i below the table's
// extent), in buf's memory when the segment is not mapped.
func (s *Store) entryBytes(segs []*segment, i int64, buf *[maxEntrySize]byte) ([]byte, error) {
	l := s.lay
	g := segs[i>>l.shift]
	off := l.segOff(i)
	if d := g.bytes(); d != nil {
		return d[off : off+l.entSize], nil
	}
	b := buf[:l.entSize]
	if err := readFull(g.f, b, off); err != nil {
		return nil, wrapf(err, "read entry %d from %s", i, s.path(l.segName(g.id)))
	}
	return b, nil
}

// readEntry returns table entry i (i below the table's extent), checking
// its checksum: a damaged entry is ErrCorrupt naming the segment and i.
func (s *Store) readEntry(segs []*segment, i int64) (entry, error) {
	var buf [maxEntrySize]byte
	b, err := s.entryBytes(segs, i, &buf)
	if err != nil {
		return entry{}, err
	}
	e, bad := s.lay.getEntryAt(b, i)
	if bad != nil {
		return entry{}, s.entryError(i, bad)
	}
	return e, nil
}

// readLiveEntry is readEntry for an entry below the length, checked
// against the chunks too (checkEntry), as locate checks the entries a read
// uses: Open does not walk the table, so a write that rewrites entries
// checks each one it reads.
func (s *Store) readLiveEntry(segs []*segment, chunks []*chunk, i int64) (entry, error) {
	e, err := s.readEntry(segs, i)
	if err != nil {
		return entry{}, err
	}
	if err := s.checkEntry(&e, chunks); err != nil {
		return entry{}, fmt.Errorf("zrecord: %s: entry %d: %v: %w", s.path(s.lay.segName(uint32(i>>s.lay.shift))), i, err, ErrCorrupt)
	}
	return e, nil
}

// entryError reports a table entry whose checksum does not match.
func (s *Store) entryError(i int64, f *entryFault) error {
	return errf(ErrCorrupt, "record %d in %s: table entry checksum %#08x, its bytes give %#08x",
		i, s.path(s.lay.segName(uint32(i>>s.lay.shift))), f.stored, f.computed)
}

// writeEntry stores table entry i.
func (s *Store) writeEntry(i int64, e entry) error {
	segs := *s.segs.Load()
	l := s.lay
	g := segs[i>>l.shift]
	var b [maxEntrySize]byte
	l.putEntry(b[:l.entSize], i, e)
	if err := writeFull(g.f, b[:l.entSize], l.segOff(i)); err != nil {
		return wrapf(err, "write %s", s.path(l.segName(g.id)))
	}
	g.dirty = true
	return nil
}

// headerFor returns the header of the store's format with a frontier and
// a length.
func (s *Store) headerFor(tail position, length int64) header {
	h := header{version: s.lay.version, codec: s.codec, tailChunk: tail.chunk, tailOffset: tail.off, length: uint64(length)}
	if s.lay.checksummed() && s.codec == ZstdDict {
		h.dictSum = s.dictSum
	}
	h.elem = s.elem
	return h
}

// writeHeader stores a frontier and a length in meta.zr.
func (s *Store) writeHeader(tail position, length int64) error {
	b := s.headerFor(tail, length).encode()
	if err := writeFull(s.meta, b[:], 0); err != nil {
		return wrapf(err, "write %s", s.path(metaName))
	}
	s.metaDirty = true
	return nil
}

// removeFile removes a file of the store; a missing file is not an error.
func (s *Store) removeFile(name string) error {
	if err := s.fsys.Remove(s.path(name)); err != nil && !isNotExist(err) {
		return wrapf(err, "remove %s", s.path(name))
	}
	s.dirDirty = true
	return nil
}

// checkRead returns the error a reading call must fail with, or nil.
// The caller holds mu.
func (s *Store) checkRead(op string) error {
	if s.closed {
		return errf(ErrClosed, "%s %s", op, s.dir)
	}
	return nil
}

// checkWrite returns the error a writing call must fail with, or nil.
// The caller holds mu.
func (s *Store) checkWrite(op string) error {
	if s.closed {
		return errf(ErrClosed, "%s %s", op, s.dir)
	}
	if s.readOnly {
		return errf(ErrReadOnly, "%s %s", op, s.dir)
	}
	if b := s.broken.Load(); b != nil {
		return fmt.Errorf("zrecord: %s %s: an earlier write failed midway, reopen the store: %w", op, s.dir, b.err)
	}
	return nil
}

// breakHandle makes the handle refuse writes after err left the files in
// a state that only a reopen (with its recovery) settles.
func (s *Store) breakHandle(err error) {
	s.broken.CompareAndSwap(nil, &brokenState{err: err})
}

// Sync makes everything appended, deleted or compacted so far durable: it
// fsyncs the chunk files written since the last Sync, then the record-table
// segments, then the directory (if files were created or removed), then
// meta.zr. Deletes not yet in the table are written into it first (see
// Durability in the package documentation).
func (s *Store) Sync() (err error) {
	defer recoverTo(&err, "sync")
	s.mu.RLock()
	defer s.mu.RUnlock()
	if err := s.checkWrite("sync"); err != nil {
		return err
	}
	s.appendMu.Lock()
	defer s.appendMu.Unlock()
	return s.syncAll()
}

// syncAll implements Sync: pending Deletes go into the table, then
// everything is synced. The caller holds appendMu or mu exclusively.
func (s *Store) syncAll() error {
	if err := s.settleDeletes(); err != nil {
		return err
	}
	return s.syncLocked()
}

// syncLocked implements Sync; the caller holds appendMu or mu exclusively.
func (s *Store) syncLocked() error {
	if err := s.syncChunks(); err != nil {
		return err
	}
	if err := s.syncSegments(); err != nil {
		return err
	}
	if s.dirDirty {
		if err := s.syncDirNow(); err != nil {
			return err
		}
	}
	if s.metaDirty {
		if err := s.meta.Sync(); err != nil {
			return wrapf(err, "sync %s", s.path(metaName))
		}
		s.metaDirty = false
	}
	// The compacted store is durable: the old copies can go.
	return s.runCleanup()
}

// syncChunks fsyncs the chunk files written since their last sync.
func (s *Store) syncChunks() error {
	for _, c := range *s.chunks.Load() {
		if c.dirty {
			if err := c.f.Sync(); err != nil {
				return wrapf(err, "sync %s", s.path(chunkName(c.id)))
			}
			c.dirty = false
		}
	}
	return nil
}

// syncSegments fsyncs the table segments written since their last sync.
func (s *Store) syncSegments() error {
	for _, g := range *s.segs.Load() {
		if g.dirty {
			if err := g.f.Sync(); err != nil {
				return wrapf(err, "sync %s", s.path(s.lay.segName(g.id)))
			}
			g.dirty = false
		}
	}
	return nil
}

// syncDirNow fsyncs the store's directory, making the files created or
// removed so far durable. It is the one place a handle syncs its directory.
func (s *Store) syncDirNow() error {
	if err := syncDir(s.fsys, s.dir); err != nil {
		return wrapf(err, "sync %s", s.dir)
	}
	s.dirDirty = false
	return nil
}

// Close syncs a writable store (see Sync), releases its mappings, files and
// lock, and waits for running calls first. Closing twice is a no-op; every
// other method of a closed handle returns ErrClosed.
func (s *Store) Close() (err error) {
	defer recoverTo(&err, "close")
	return s.close(true)
}

// CloseUnsynced closes the handle as Close does, except that it does not
// sync first. Nothing that was appended is lost to another process or a
// later handle (the bytes are in the operating system's cache), but a
// power cut before the system writes them back may lose what followed the
// last Sync. Deletes the table has not taken yet stay in their log, which
// the next writable Open applies, and a compaction's old copies stay until
// the next Sync. It suits a writer that can redo its work, such as a
// conversion from a source that is kept, and saves the final fsync of
// everything written.
func (s *Store) CloseUnsynced() (err error) {
	defer recoverTo(&err, "close")
	return s.close(false)
}

func (s *Store) close(sync bool) (err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	if sync && !s.readOnly {
		err = s.syncAll()
	}
	if rerr := s.release(); err == nil {
		err = rerr
	}
	return err
}

// release unmaps and closes everything the handle holds.
func (s *Store) release() error {
	s.resident.Store(nil) // the caller's map may be freed once the store is closed
	var first error
	keep := func(err error) {
		if err != nil && first == nil {
			first = err
		}
	}
	if p := s.chunks.Load(); p != nil {
		for _, c := range *p {
			keep(c.unmap())
			keep(c.f.Close())
		}
	}
	if p := s.segs.Load(); p != nil {
		for _, g := range *p {
			keep(g.unmap())
			keep(g.f.Close())
		}
	}
	empty := []*chunk{}
	s.chunks.Store(&empty)
	noSegs := []*segment{}
	s.segs.Store(&noSegs)
	if s.enc != nil {
		keep(s.enc.Close())
	}
	if s.dec != nil {
		s.dec.Close()
	}
	if s.pend != nil {
		keep(s.pend.f.Close())
		s.pend = nil
	}
	if s.meta != nil {
		keep(s.meta.Close())
		s.meta = nil
	}
	return first
}

// recoverTo converts a panic in an API call into an error. Use as
// defer recoverTo(&err, op): recover only works when it is the deferred call
// itself. Calls that read mappings also guard memory faults (guardFaults).
func recoverTo(errp *error, op string) {
	if r := recover(); r != nil {
		*errp = panicError(op, r)
	}
}
