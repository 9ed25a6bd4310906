package zrecord

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// Open opens the store in dir. A writable Open takes the store's lock
// (ErrLocked if another writable handle holds it), finishes or discards an
// interrupted Delete or Compact, and cuts off what an interrupted Append left
// past the frontier. WithReadOnly opens without any of that. Either way
// Open reads the header (and dictionary) and maps the files, but does not
// read the record table of a checksummed store (versions 4 and 5): its cost
// does not grow with the record count, and each table entry is checked
// against its checksum when a call first uses it. A damaged store yields an
// error naming the file at fault, at Open or at the read that meets the
// damage, never a panic or wrong bytes.
func Open(dir string, opts ...Option) (s *Store, err error) {
	defer recoverTo(&err, "open "+dir)
	defer func() {
		if err != nil {
			err = withLimit(err, dir)
		}
	}()
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
	s.noteIdentity()
	if s.readOnly && o.releaseFiles {
		s.releaseFiles()
	}
	return s, nil
}

func (s *Store) loadFiles() (err error) {
	metaPath := s.path(metaName)
	fi, err := s.meta.Stat()
	if err != nil {
		return wrapf(err, "stat %s", metaPath)
	}
	size := fi.Size()
	s.ident.dev, s.ident.ino, s.ident.hasFile = fileIdentity(fi)
	s.ident.mtime = fi.ModTime().UnixNano()
	hb := make([]byte, min(size, headerSize))
	if err := readFull(s.meta, hb, 0); err != nil {
		return wrapf(err, "read %s", metaPath)
	}
	h, err := decodeHeader(hb, metaPath)
	if err != nil {
		return err
	}
	s.codec = h.codec
	s.lay, _ = layoutOf(h.version)
	s.verifyRaw.Store(s.opts.verifyRaw)
	s.tail = position{h.tailChunk, h.tailOffset}
	if s.codec == ZstdDict {
		if err := s.loadDict(); err != nil {
			return err
		}
		s.dictSum = dataSum(s.dict)
		if s.lay.checksummed() && s.dictSum != h.dictSum {
			return errf(ErrCorrupt, "%s: dictionary checksum %#08x, %s says %#08x", s.path(dictName), s.dictSum, metaPath, h.dictSum)
		}
	}
	s.elem = h.elem
	if s.codec.zstdFrames() {
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
		if (*s.chunks.Load())[s.tail.chunk].size < int64(s.tail.off) {
			return s.shortTailError()
		}
		// A replayed move may have extended a chunk file.
		for _, c := range *s.chunks.Load() {
			if err := c.cover(c.f, c.size); err != nil {
				return wrapf(err, "map %s", s.path(chunkName(c.id)))
			}
			c.end.Store(min(c.size, chunkSpan))
		}
		if s.lay.version == versionV3 {
			// No recovery cuts the original's preallocated tail chunk
			// back, so bound it by the frontier, as a read-only Open does.
			(*s.chunks.Load())[s.tail.chunk].end.Store(int64(s.tail.off))
		}
	}
	// A checksummed store is not walked: each table entry carries its own
	// checksum and is checked by every call that uses it, and the header's
	// frontier, sealed by the header checksum, is exact, so Open costs the
	// same at any record count. The older formats have no checksums: a
	// torn version-1 header may hold a frontier below its last record, so
	// their whole table is validated here, before anything is cut off, so
	// that damage is reported rather than compounded.
	var tailEnd int64
	if !s.lay.checksummed() {
		if tailEnd, err = s.validate(); err != nil {
			return err
		}
	}
	if !s.readOnly && s.lay.version != versionV3 {
		// A version-3 store is the original's: its files are left as
		// they are (preallocated, sparse) until Upgrade rewrites it.
		return s.recoverFrontier(tailEnd)
	}
	return nil
}

// sumTotals makes s.live and s.logical the sums over the live records'
// entries, walking the table (and checking every entry) the first time it
// is called on a handle. The caller holds mu shared and appendMu, which
// keep the table and the length still.
func (s *Store) sumTotals() error {
	if s.totalsKnown {
		return nil
	}
	if _, err := s.validate(); err != nil {
		return err
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
		c.random = true
		list = append(list, c)
		s.chunks.Store(&list)
		if c.size, err = fileSize(f); err != nil {
			return wrapf(err, "stat %s", p)
		}
		if s.readOnly {
			// Never grows for this handle: mapped at what it reads.
			err = c.mapExact(f, c.size, chunkSpan)
		} else {
			err = c.mapFile(f, c.size, chunkSpan)
		}
		if err != nil {
			return wrapf(err, "map %s", p)
		}
		c.end.Store(min(c.size, chunkSpan))
		if id == s.tail.chunk {
			// A writable Open checks this after recovery: an interrupted
			// compaction may have moved the frontier to a chunk whose new
			// bytes a power failure lost, and undoing it moves it back.
			if c.size < int64(s.tail.off) && s.readOnly {
				return s.shortTailError()
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

// shortTailError reports a tail chunk shorter than the frontier.
func (s *Store) shortTailError() error {
	c := (*s.chunks.Load())[s.tail.chunk]
	return errf(ErrCorrupt, "%s: %d bytes, shorter than the tail offset %d", s.path(chunkName(c.id)), c.size, s.tail.off)
}

// openSegments opens and maps the table segments that length entries need.
func (s *Store) openSegments(length int64) error {
	var list []*segment
	s.segs.Store(&list)
	l := s.lay
	nseg := l.segCount(length)
	for id := int64(0); id < nseg; id++ {
		need := l.segBytes()
		if id == nseg-1 {
			need = ((length-1)&l.segMask() + 1) * l.entSize
		}
		g, size, err := s.openSegmentFor(l, uint32(id), false, need)
		if err != nil {
			return err
		}
		list = append(list, g)
		s.segs.Store(&list)
		if size < need {
			return errf(ErrCorrupt, "%s: %d bytes, length %d needs %d", s.path(l.segName(g.id)), size, length, need)
		}
	}
	return nil
}

// openSegment opens (or, with create, creates) and maps one segment file
// of the store's layout.
func (s *Store) openSegment(id uint32, create bool) (*segment, error) {
	return s.openSegmentOf(s.lay, id, create)
}

func (s *Store) openSegmentOf(l layout, id uint32, create bool) (*segment, error) {
	g, _, err := s.openSegmentFor(l, id, create, l.segBytes())
	return g, err
}

// openSegmentFor is openSegmentOf that also returns the file's size. A
// read-only handle maps need bytes of it (those of the entries below its
// length), or the whole file if it is shorter, which Open then reports;
// a writable one maps the span for the file's size.
func (s *Store) openSegmentFor(l layout, id uint32, create bool, need int64) (*segment, int64, error) {
	p := s.path(l.segName(id))
	flag := s.fileFlag()
	if create {
		flag |= os.O_CREATE
	}
	f, err := s.fsys.OpenFile(p, flag, 0o644)
	if err != nil {
		if isNotExist(err) {
			return nil, 0, fmt.Errorf("zrecord: %s: record table segment missing: %w: %w", p, ErrCorrupt, err)
		}
		return nil, 0, wrapf(err, "open %s", p)
	}
	g := &segment{id: id, f: f}
	g.random = true
	size, err := fileSize(f)
	if err != nil {
		f.Close()
		return nil, 0, wrapf(err, "stat %s", p)
	}
	if s.readOnly {
		err = g.mapExact(f, min(need, size), l.segBytes())
	} else {
		err = g.mapFile(f, size, l.segBytes())
	}
	if err != nil {
		f.Close()
		return nil, 0, wrapf(err, "map %s", p)
	}
	return g, size, nil
}

// validate checks every live table entry (its checksum, in a checksummed
// format, and its place against the chunks) and sums the byte totals. It
// returns where the last record in the tail chunk ends. Open calls it for
// the formats without checksums only; Stats (sumTotals), for the others.
func (s *Store) validate() (int64, error) {
	n := s.length.Load()
	var tailEnd int64
	segs := *s.segs.Load()
	chunks := *s.chunks.Load()
	l := s.lay
	var live, logical int64
	var buf []byte
	ov := s.overlay.Load()
	const block = 1 << 16
	for i := int64(0); i < n; {
		g := segs[i>>l.shift]
		// Entries of this segment from i on, in one block.
		lo := i & l.segMask()
		cnt := min(n-i, l.segEntries()-lo, block)
		var b []byte
		if d := g.bytes(); d != nil {
			g.willNeed(lo*l.entSize, 2*block*l.entSize) // this block and the next, which is read in while this one is checked
			b = d[lo*l.entSize : (lo+cnt)*l.entSize]
		} else {
			if buf == nil {
				buf = make([]byte, block*l.entSize)
			}
			b = buf[:cnt*l.entSize]
			if err := readFull(g.f, b, lo*l.entSize); err != nil {
				return 0, wrapf(err, "read %s", s.path(l.segName(g.id)))
			}
		}
		for k := int64(0); k < cnt; k++ {
			e, bad := l.getEntryAt(b[k*l.entSize:(k+1)*l.entSize], i+k)
			if ov != nil {
				// A read-only handle over a writer's pending deletes.
				if pe, ok := ov.recs[i+k]; ok {
					e, bad = pe, nil
				}
			}
			if bad != nil {
				return 0, s.entryError(i+k, bad)
			}
			if err := s.checkEntry(&e, chunks); err != nil {
				return 0, fmt.Errorf("zrecord: %s: entry %d: %v: %w", s.path(l.segName(g.id)), i+k, err, ErrCorrupt)
			}
			live += int64(e.phys)
			logical += int64(e.logic)
			if e.chunk == s.tail.chunk {
				tailEnd = max(tailEnd, int64(e.end()))
			}
		}
		i += cnt
	}
	s.live, s.logical, s.totalsKnown = live, logical, true
	return tailEnd, nil
}

var (
	errEntryChunk  = errors.New("chunk id past the tail chunk")
	errEntryEnd    = errors.New("record extends past the end of its chunk")
	errEntrySize   = errors.New("stored size larger than logical size or the record limit")
	errEntryCodec  = errors.New("encoded record in a raw store")
	errEntryNarrow = errors.New("stored size of a narrowed record fits no width for its logical size")
)

// checkEntry reports why e cannot be a committed record, or nil.
func (s *Store) checkEntry(e *entry, chunks []*chunk) error {
	if int64(e.chunk) >= int64(len(chunks)) {
		return errEntryChunk
	}
	if e.end() > uint64(chunks[e.chunk].end.Load()) {
		return errEntryEnd
	}
	if e.logic > MaxRecordSize {
		return errEntrySize
	}
	if e.phys != e.logic {
		if s.codec == Narrow {
			if !narrowedSizeOK(e.phys, e.logic, s.elem.Size) {
				return errEntryNarrow
			}
		} else if s.dec == nil {
			return errEntryCodec
		}
	}
	if e.phys > e.logic && s.lay.version != versionV3 {
		// Only the original format keeps frames larger than the record.
		return errEntrySize
	}
	return nil
}

// isFrame reports whether the record at e is stored as a zstd frame.
func (s *Store) isFrame(e entry) bool {
	return s.dec != nil && (e.phys != e.logic || s.lay.version == versionV3)
}

// isNarrowed reports whether the record at e is stored narrowed.
func (s *Store) isNarrowed(e entry) bool {
	return s.codec == Narrow && e.phys != e.logic
}
