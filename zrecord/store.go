package zrecord

import (
	"errors"
	"fmt"
	"io"
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
	dec      *zstd.Decoder // nil for Raw stores

	encOnce sync.Once
	enc     *zstd.Encoder
	encErr  error

	// mu is held shared by Gather, Sizes, Append, Stats and Sync, and
	// exclusively by Delete, Compact and Close.
	mu     sync.RWMutex
	closed bool // guarded by mu

	// appendMu serialises the part of Append that places records and
	// commits them. The fields below it are guarded by appendMu or by mu
	// held exclusively (which excludes every appendMu holder).
	appendMu  sync.Mutex
	meta      File
	tail      position
	live      int64 // sum of phys lengths of live records
	logical   int64 // sum of logic lengths of live records
	dirDirty  bool  // files were created or removed since the last Sync
	metaDirty bool

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
	// overlay, set only together with broken, holds the records whose
	// table entries (or bytes) on disk may be torn by the failed write:
	// readers take them from here, so the handle keeps showing a
	// consistent state. It is never changed once set.
	overlay atomic.Pointer[overlay]
}

type brokenState struct{ err error }

// overlay maps indices to the entry (and, where the stored bytes in the
// chunk may be damaged, a copy of those bytes) readers must use.
type overlay struct {
	recs map[int64]pinned
}

type pinned struct {
	e    entry
	data []byte // the record's stored bytes, or nil to read them from e's place
}

// position is a place in the chunk files: the write frontier, or where a
// record goes during compaction.
type position struct {
	chunk uint32
	off   uint32
}

func (p position) less(q position) bool {
	return p.chunk < q.chunk || (p.chunk == q.chunk && p.off < q.off)
}

// chunk is an open {id}.chunk file.
type chunk struct {
	id   uint32
	f    File
	data []byte // read-only mapping of chunkSpan bytes; nil when f cannot be mapped
	// end bounds what readers may touch: every committed record of the
	// chunk lies in [0, end).
	end atomic.Int64
	// size is how far the file is known to extend (writer side).
	size  int64
	dirty bool
}

// segment is an open {id}.loc record-table file.
type segment struct {
	id    uint32
	f     File
	data  []byte // read-only mapping of segBytes; nil when f cannot be mapped
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

// Create makes a new store in dir, which must not exist or be an empty
// directory (else ErrExists). Options: WithCodec, WithDict (required for
// ZstdDict), WithDictTier, WithChunkCapacity, WithFS. The returned handle is
// writable and holds the store's lock.
func Create(dir string, opts ...Option) (s *Store, err error) {
	defer recoverTo(&err, "create "+dir)
	o := buildOptions(opts)
	if err := o.validateCommon(); err != nil {
		return nil, err
	}
	if o.readOnly {
		return nil, errf(ErrInvalidArgument, "create %s: WithReadOnly is for Open", dir)
	}
	if !o.codec.valid() {
		return nil, errf(ErrInvalidArgument, "create %s: %v", dir, o.codec)
	}
	if o.codec == ZstdDict {
		if len(o.dict) == 0 {
			return nil, errf(ErrMissingDict, "create %s: codec zstd_dict needs WithDict", dir)
		}
		if err := checkDict(o.dict); err != nil {
			return nil, fmt.Errorf("zrecord: create %s: %w", dir, err)
		}
	} else if len(o.dict) > 0 {
		return nil, errf(ErrInvalidArgument, "create %s: WithDict given for codec %v", dir, o.codec)
	}
	fsys := o.fs
	madeDir := false
	if fi, err := fsys.Stat(dir); err == nil {
		if !fi.IsDir() {
			return nil, errf(ErrExists, "create %s: not a directory", dir)
		}
		ents, err := fsys.ReadDir(dir)
		if err != nil {
			return nil, wrapf(err, "create %s", dir)
		}
		if len(ents) > 0 {
			return nil, errf(ErrExists, "create %s: directory not empty", dir)
		}
	} else if isNotExist(err) {
		if err := fsys.MkdirAll(dir, 0o755); err != nil {
			return nil, wrapf(err, "create %s", dir)
		}
		madeDir = true
	} else {
		return nil, wrapf(err, "create %s", dir)
	}

	// A failed Create removes what it made (a directory only if it made it).
	var created []string
	if madeDir {
		created = append(created, dir)
	}
	var meta File
	defer func() {
		if err != nil {
			if meta != nil {
				meta.Close()
			}
			for i := len(created) - 1; i >= 0; i-- {
				fsys.Remove(created[i])
			}
		}
	}()
	metaPath := filepath.Join(dir, metaName)
	meta, err = fsys.OpenFile(metaPath, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		meta = nil
		if errors.Is(err, os.ErrExist) {
			return nil, errf(ErrExists, "create %s", metaPath)
		}
		return nil, wrapf(err, "create %s", metaPath)
	}
	created = append(created, metaPath)
	if ok, err := lockFile(meta); err != nil {
		return nil, wrapf(err, "lock %s", metaPath)
	} else if !ok {
		return nil, errf(ErrLocked, "create %s", dir)
	}
	newFile := func(name string, content []byte) error {
		p := filepath.Join(dir, name)
		f, err := fsys.OpenFile(p, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
		if err != nil {
			return wrapf(err, "create %s", p)
		}
		created = append(created, p)
		if len(content) > 0 {
			if err := writeFull(f, content, 0); err != nil {
				f.Close()
				return wrapf(err, "write %s", p)
			}
		}
		if err := f.Sync(); err != nil {
			f.Close()
			return wrapf(err, "sync %s", p)
		}
		return f.Close()
	}
	if o.codec == ZstdDict {
		if err := newFile(dictName, o.dict); err != nil {
			return nil, err
		}
	}
	if err := newFile(chunkName(0), nil); err != nil {
		return nil, err
	}
	if err := newFile(segName(0), nil); err != nil {
		return nil, err
	}
	// The header goes last: a directory whose meta.zr lacks the magic is
	// not a store, so a Create cut short never looks like one.
	h := header{codec: o.codec}
	hb := h.encode()
	if err := writeFull(meta, hb[:], 0); err != nil {
		return nil, wrapf(err, "write %s", metaPath)
	}
	if err := meta.Sync(); err != nil {
		return nil, wrapf(err, "sync %s", metaPath)
	}
	if err := syncDir(fsys, dir); err != nil {
		return nil, wrapf(err, "sync %s", dir)
	}
	return load(dir, o, meta)
}

// Open opens the store in dir. A writable Open takes the store's lock
// (ErrLocked if another writable handle holds it), finishes or discards an
// interrupted Delete or Compact, and cuts off what an interrupted Append left
// past the frontier. WithReadOnly opens without any of that. Either way the
// whole record table is validated; a damaged store yields an error naming
// the file at fault, never a panic.
func Open(dir string, opts ...Option) (s *Store, err error) {
	defer recoverTo(&err, "open "+dir)
	o := buildOptions(opts)
	if err := o.validateCommon(); err != nil {
		return nil, err
	}
	fsys := o.fs
	fi, err := fsys.Stat(dir)
	if err != nil {
		if isNotExist(err) {
			return nil, fmt.Errorf("zrecord: open %s: %w: %w", dir, ErrNotStore, err)
		}
		return nil, wrapf(err, "open %s", dir)
	}
	if !fi.IsDir() {
		return nil, errf(ErrNotStore, "open %s: not a directory", dir)
	}
	metaPath := filepath.Join(dir, metaName)
	flag := os.O_RDWR
	if o.readOnly {
		flag = os.O_RDONLY
	}
	meta, err := fsys.OpenFile(metaPath, flag, 0)
	if err != nil {
		if isNotExist(err) {
			return nil, fmt.Errorf("zrecord: open %s: %w: %w", metaPath, ErrNotStore, err)
		}
		return nil, wrapf(err, "open %s", metaPath)
	}
	if !o.readOnly {
		ok, err := lockFile(meta)
		if err != nil {
			meta.Close()
			return nil, wrapf(err, "lock %s", metaPath)
		}
		if !ok {
			meta.Close()
			return nil, errf(ErrLocked, "open %s", dir)
		}
	}
	s, err = load(dir, o, meta)
	if err != nil {
		meta.Close()
		return nil, err
	}
	return s, nil
}

// load builds a handle on an opened (and, if writable, locked) meta.zr.
func load(dir string, o options, meta File) (st *Store, err error) {
	old := guardFaults()
	defer restoreFaults(old)
	s := &Store{dir: dir, fsys: o.fs, opts: o, readOnly: o.readOnly, meta: meta}
	defer func() {
		if r := recover(); r != nil {
			err = panicError("open "+dir, r)
		}
		if err != nil {
			s.meta = nil // the caller closes it
			s.release()
			st = nil
		}
	}()
	if err := s.loadFiles(); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *Store) loadFiles() (err error) {
	metaPath := s.path(metaName)
	size, err := fileSize(s.meta)
	if err != nil {
		return wrapf(err, "stat %s", metaPath)
	}
	hb := make([]byte, min(size, headerSize))
	if err := readFull(s.meta, hb, 0); err != nil {
		return wrapf(err, "read %s", metaPath)
	}
	h, err := decodeHeader(hb, metaPath)
	if err != nil {
		return err
	}
	s.codec = h.codec
	s.tail = position{h.tailChunk, h.tailOffset}
	if s.codec == ZstdDict {
		if err := s.loadDict(); err != nil {
			return err
		}
	}
	if s.codec != Raw {
		if s.dec, err = newDecoder(s.codec, s.dict); err != nil {
			return err
		}
	}
	if err := s.openChunks(); err != nil {
		return err
	}
	length := int64(h.length)
	if err := s.openSegments(length); err != nil {
		return err
	}
	s.length.Store(length)
	if s.readOnly {
		if err := s.checkNoPendingJournal(); err != nil {
			return err
		}
	} else {
		if err := s.replayCompactJournal(); err != nil {
			return err
		}
		if err := s.replayDeleteJournal(); err != nil {
			return err
		}
		// A replayed move may have extended a chunk file.
		for _, c := range *s.chunks.Load() {
			c.end.Store(min(c.size, chunkSpan))
		}
	}
	// Validate before cutting anything off, so that damage is reported
	// rather than compounded.
	tailEnd, err := s.validate()
	if err != nil {
		return err
	}
	if !s.readOnly {
		return s.recoverFrontier(tailEnd)
	}
	return nil
}

func (s *Store) loadDict() error {
	p := s.path(dictName)
	f, err := s.fsys.OpenFile(p, os.O_RDONLY, 0)
	if err != nil {
		if isNotExist(err) {
			return fmt.Errorf("zrecord: %s: %w: %w", p, ErrMissingDict, err)
		}
		return wrapf(err, "open %s", p)
	}
	defer f.Close()
	n, err := fileSize(f)
	if err != nil {
		return wrapf(err, "stat %s", p)
	}
	if n == 0 || n > 64<<20 {
		return errf(ErrCorrupt, "%s: dictionary of %d bytes", p, n)
	}
	d := make([]byte, n)
	if err := readFull(f, d, 0); err != nil {
		return wrapf(err, "read %s", p)
	}
	if err := checkDict(d); err != nil {
		return fmt.Errorf("zrecord: %s: %v: %w", p, err, ErrCorrupt)
	}
	s.dict = d
	return nil
}

func (s *Store) fileFlag() int {
	if s.readOnly {
		return os.O_RDONLY
	}
	return os.O_RDWR
}

// openChunks opens and maps chunks 0..tail.chunk and sets their bounds.
func (s *Store) openChunks() error {
	var list []*chunk
	s.chunks.Store(&list)
	for id := uint32(0); ; id++ {
		p := s.path(chunkName(id))
		f, err := s.fsys.OpenFile(p, s.fileFlag(), 0)
		if err != nil {
			if isNotExist(err) {
				return fmt.Errorf("zrecord: %s: chunk missing (tail chunk %d): %w: %w", p, s.tail.chunk, ErrCorrupt, err)
			}
			return wrapf(err, "open %s", p)
		}
		c := &chunk{id: id, f: f}
		list = append(list, c)
		s.chunks.Store(&list)
		if c.size, err = fileSize(f); err != nil {
			return wrapf(err, "stat %s", p)
		}
		if c.data, err = mapSpan(f, chunkSpan); err != nil {
			return wrapf(err, "map %s", p)
		}
		c.end.Store(min(c.size, chunkSpan))
		if id == s.tail.chunk {
			if c.size < int64(s.tail.off) {
				return errf(ErrCorrupt, "%s: %d bytes, shorter than the tail offset %d", p, c.size, s.tail.off)
			}
			if s.readOnly {
				c.end.Store(int64(s.tail.off))
			}
			// A writable Open validates the tail chunk against its size
			// and settles the frontier afterwards (recoverFrontier).
			return nil
		}
	}
}

// openSegments opens and maps the .loc segments that length entries need.
func (s *Store) openSegments(length int64) error {
	var list []*segment
	s.segs.Store(&list)
	nseg := (length + segEntries - 1) >> segShift
	for id := int64(0); id < nseg; id++ {
		g, err := s.openSegment(uint32(id), false)
		if err != nil {
			return err
		}
		list = append(list, g)
		s.segs.Store(&list)
		need := int64(segBytes)
		if id == nseg-1 {
			need = ((length-1)&segMask + 1) * entrySize
		}
		size, err := fileSize(g.f)
		if err != nil {
			return wrapf(err, "stat %s", s.path(segName(g.id)))
		}
		if size < need {
			return errf(ErrCorrupt, "%s: %d bytes, length %d needs %d", s.path(segName(g.id)), size, length, need)
		}
	}
	return nil
}

// openSegment opens (or, with create, creates) and maps one segment file.
func (s *Store) openSegment(id uint32, create bool) (*segment, error) {
	p := s.path(segName(id))
	flag := s.fileFlag()
	if create {
		flag |= os.O_CREATE
	}
	f, err := s.fsys.OpenFile(p, flag, 0o644)
	if err != nil {
		if isNotExist(err) {
			return nil, fmt.Errorf("zrecord: %s: record table segment missing: %w: %w", p, ErrCorrupt, err)
		}
		return nil, wrapf(err, "open %s", p)
	}
	g := &segment{id: id, f: f}
	if g.data, err = mapSpan(f, segBytes); err != nil {
		f.Close()
		return nil, wrapf(err, "map %s", p)
	}
	return g, nil
}

// recoverFrontier finishes a writable Open: it settles the write frontier
// and cuts off whatever an interrupted Append or Compact left past it (the
// end of the tail chunk and chunk files past the tail chunk). tailEnd is
// where the last live record of the tail chunk ends; a frontier below it
// (a header torn in the middle of its tail offset) is raised to it.
func (s *Store) recoverFrontier(tailEnd int64) error {
	chunks := *s.chunks.Load()
	tc := chunks[s.tail.chunk]
	if tailEnd > int64(s.tail.off) {
		s.tail.off = uint32(tailEnd)
		if err := s.writeHeader(s.tail, s.length.Load()); err != nil {
			return err
		}
	}
	if tc.size > int64(s.tail.off) {
		if err := tc.f.Truncate(int64(s.tail.off)); err != nil {
			return wrapf(err, "truncate %s", s.path(chunkName(tc.id)))
		}
		tc.size = int64(s.tail.off)
		tc.dirty = true
	}
	tc.end.Store(int64(s.tail.off))
	ents, err := s.fsys.ReadDir(s.dir)
	if err != nil {
		return wrapf(err, "read directory %s", s.dir)
	}
	for _, e := range ents {
		if id, ok := parseID(e.Name(), chunkSuffix); ok && id > s.tail.chunk {
			if err := s.removeFile(e.Name()); err != nil {
				return err
			}
		}
	}
	return nil
}

// validate checks every live table entry against the chunks and sums the
// byte totals. It returns where the last record in the tail chunk ends.
func (s *Store) validate() (int64, error) {
	n := s.length.Load()
	var tailEnd int64
	segs := *s.segs.Load()
	chunks := *s.chunks.Load()
	var live, logical int64
	var buf []byte
	for i := int64(0); i < n; {
		g := segs[i>>segShift]
		// Entries of this segment from i on, in one block.
		lo := i & segMask
		cnt := min(n-i, segEntries-lo, 1<<16)
		var b []byte
		if g.data != nil {
			b = g.data[lo*entrySize : (lo+cnt)*entrySize]
		} else {
			if buf == nil {
				buf = make([]byte, (1<<16)*entrySize)
			}
			b = buf[:cnt*entrySize]
			if err := readFull(g.f, b, lo*entrySize); err != nil {
				return 0, wrapf(err, "read %s", s.path(segName(g.id)))
			}
		}
		for k := int64(0); k < cnt; k++ {
			e := getEntry(b[k*entrySize:])
			if err := s.checkEntry(e, chunks); err != nil {
				return 0, fmt.Errorf("zrecord: %s: entry %d: %v: %w", s.path(segName(g.id)), i+k, err, ErrCorrupt)
			}
			live += int64(e.phys)
			logical += int64(e.logic)
			if e.chunk == s.tail.chunk {
				tailEnd = max(tailEnd, int64(e.end()))
			}
		}
		i += cnt
	}
	s.live, s.logical = live, logical
	return tailEnd, nil
}

var (
	errEntryChunk = errors.New("chunk id past the tail chunk")
	errEntryEnd   = errors.New("record extends past the end of its chunk")
	errEntrySize  = errors.New("stored size larger than logical size or the record limit")
	errEntryCodec = errors.New("compressed record in a raw store")
)

// checkEntry reports why e cannot be a committed record, or nil.
func (s *Store) checkEntry(e entry, chunks []*chunk) error {
	if int64(e.chunk) >= int64(len(chunks)) {
		return errEntryChunk
	}
	if e.end() > uint64(chunks[e.chunk].end.Load()) {
		return errEntryEnd
	}
	if e.phys > e.logic || e.logic > MaxRecordSize {
		return errEntrySize
	}
	if e.phys != e.logic && s.dec == nil {
		return errEntryCodec
	}
	return nil
}

// readEntry returns table entry i (i below the table's extent).
func readEntry(segs []*segment, i int64) (entry, error) {
	g := segs[i>>segShift]
	off := (i & segMask) * entrySize
	if g.data != nil {
		return getEntry(g.data[off : off+entrySize]), nil
	}
	var b [entrySize]byte
	if err := readFull(g.f, b[:], off); err != nil {
		return entry{}, err
	}
	return getEntry(b[:]), nil
}

// writeEntry stores table entry i.
func (s *Store) writeEntry(i int64, e entry) error {
	segs := *s.segs.Load()
	g := segs[i>>segShift]
	var b [entrySize]byte
	e.put(b[:])
	if err := writeFull(g.f, b[:], (i&segMask)*entrySize); err != nil {
		return wrapf(err, "write %s", s.path(segName(g.id)))
	}
	g.dirty = true
	return nil
}

// writeHeader stores a frontier and a length in meta.zr.
func (s *Store) writeHeader(tail position, length int64) error {
	h := header{codec: s.codec, tailChunk: tail.chunk, tailOffset: tail.off, length: uint64(length)}
	b := h.encode()
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

// readWhole reads a small file of the store. It reports ok=false when the
// file does not exist.
func (s *Store) readWhole(name string) (b []byte, ok bool, err error) {
	p := s.path(name)
	f, err := s.fsys.OpenFile(p, os.O_RDONLY, 0)
	if err != nil {
		if isNotExist(err) {
			return nil, false, nil
		}
		return nil, false, wrapf(err, "open %s", p)
	}
	defer f.Close()
	n, err := fileSize(f)
	if err != nil {
		return nil, false, wrapf(err, "stat %s", p)
	}
	if n > MaxRecordSize+4096 {
		return nil, true, nil // not a journal this package wrote
	}
	b = make([]byte, n)
	if err := readFull(f, b, 0); err != nil && err != io.ErrUnexpectedEOF {
		return nil, false, wrapf(err, "read %s", p)
	}
	return b, true, nil
}

// writeDurable replaces the content of a small file of the store and makes
// it durable, directory entry included.
func (s *Store) writeDurable(name string, b []byte) error {
	p := s.path(name)
	f, err := s.fsys.OpenFile(p, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return wrapf(err, "create %s", p)
	}
	s.dirDirty = true
	if err := writeFull(f, b, 0); err != nil {
		f.Close()
		return wrapf(err, "write %s", p)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return wrapf(err, "sync %s", p)
	}
	if err := f.Close(); err != nil {
		return wrapf(err, "close %s", p)
	}
	return s.syncDirNow()
}

// syncDirNow fsyncs the store's directory.
func (s *Store) syncDirNow() error {
	if err := syncDir(s.fsys, s.dir); err != nil {
		return wrapf(err, "sync %s", s.dir)
	}
	s.dirDirty = false
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

// pin publishes records readers must take from memory from now on. The
// caller holds mu exclusively and breaks the handle.
func (s *Store) pin(recs map[int64]pinned) {
	if old := s.overlay.Load(); old != nil {
		for i, p := range old.recs {
			if _, ok := recs[i]; !ok {
				recs[i] = p
			}
		}
	}
	s.overlay.Store(&overlay{recs: recs})
}

// Sync makes everything appended, deleted or compacted so far durable: it
// fsyncs the chunk files written since the last Sync, then the record-table
// segments, then the directory (if files were created or removed), then
// meta.zr.
func (s *Store) Sync() (err error) {
	defer recoverTo(&err, "sync")
	s.mu.RLock()
	defer s.mu.RUnlock()
	if err := s.checkWrite("sync"); err != nil {
		return err
	}
	s.appendMu.Lock()
	defer s.appendMu.Unlock()
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
		if err := syncDir(s.fsys, s.dir); err != nil {
			return wrapf(err, "sync %s", s.dir)
		}
		s.dirDirty = false
	}
	if s.metaDirty {
		if err := s.meta.Sync(); err != nil {
			return wrapf(err, "sync %s", s.path(metaName))
		}
		s.metaDirty = false
	}
	return nil
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
				return wrapf(err, "sync %s", s.path(segName(g.id)))
			}
			g.dirty = false
		}
	}
	return nil
}

// Close syncs a writable store (see Sync), releases its mappings, files and
// lock, and waits for running calls first. Closing twice is a no-op; every
// other method of a closed handle returns ErrClosed.
func (s *Store) Close() (err error) {
	defer recoverTo(&err, "close")
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	if !s.readOnly {
		err = s.syncLocked()
	}
	if rerr := s.release(); err == nil {
		err = rerr
	}
	return err
}

// release unmaps and closes everything the handle holds.
func (s *Store) release() error {
	var first error
	keep := func(err error) {
		if err != nil && first == nil {
			first = err
		}
	}
	if p := s.chunks.Load(); p != nil {
		for _, c := range *p {
			keep(unmapSpan(c.data))
			keep(c.f.Close())
		}
	}
	if p := s.segs.Load(); p != nil {
		for _, g := range *p {
			keep(unmapSpan(g.data))
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
