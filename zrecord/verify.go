package zrecord

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"

	"github.com/klauspost/compress/zstd"
)

// maxReportFaults bounds the faults a Report lists; more are only counted.
const maxReportFaults = 1000

// Fault is one piece of damage Verify found.
type Fault struct {
	// File is the path of the file at fault.
	File string `json:"file"`
	// Index is the record the fault concerns, or -1 for a fault of the
	// header, the dictionary or a whole file.
	Index int64 `json:"index"`
	// What says what failed.
	What string `json:"what"`
}

func (f Fault) String() string {
	if f.Index >= 0 {
		return fmt.Sprintf("record %d in %s: %s", f.Index, f.File, f.What)
	}
	return f.File + ": " + f.What
}

// Report is the outcome of a full scan of a store (Verify).
type Report struct {
	// Dir is the store's directory.
	Dir string `json:"dir"`
	// Version is the format version in meta.zr, 0 if it could not be read.
	Version int `json:"version"`
	// Codec is the codec's name, empty if the header could not be read.
	Codec string `json:"codec"`
	// Checksummed reports whether the format carries checksums (version 4
	// or 5).
	// Without them, damage to raw records cannot be seen, and damage to
	// compressed ones only if it breaks their decoding.
	Checksummed bool `json:"checksummed"`
	// Records is the number of records meta.zr claims.
	Records int64 `json:"records"`
	// Checked is how many records had their table entry and their stored
	// bytes examined.
	Checked int64 `json:"checked"`
	// Faults lists what is damaged, at most the first 1000 faults.
	Faults []Fault `json:"faults"`
	// MoreFaults counts the faults found past those listed.
	MoreFaults int64 `json:"more_faults"`
	// Pending lists the journals of Deletes or a Compact not yet settled
	// by a sync: a writer still open, or one that was interrupted, whose
	// next writable Open settles them. Until then the table may show the
	// operations half done. Verify on a writable handle syncs first, so it
	// lists none.
	Pending []string `json:"pending"`
}

// OK reports whether the scan found no fault.
func (r *Report) OK() bool { return len(r.Faults) == 0 && r.MoreFaults == 0 }

// Verify reads the whole store: the header, the dictionary, every table
// entry and the stored bytes of every record, checking each checksum (in
// a version-4 store), each entry's place against the chunk files, and that
// every compressed record decodes to its logical size. It does not stop at
// the first fault: the Report lists them all (see Report.Faults). The
// error is for a failure to read the files (I/O), not for damage. It runs
// beside Gathers but holds back Appends, Deletes and Compacts while it
// scans. A store with a residency map (SetResidency) refuses it with
// ErrNotResident unless every page of its files is held.
func (s *Store) Verify() (r Report, err error) {
	defer recoverTo(&err, "verify")
	s.mu.RLock()
	defer s.mu.RUnlock()
	if err := s.checkRead("verify"); err != nil {
		return Report{}, err
	}
	if err := s.wholeResident("verify", true); err != nil {
		return Report{}, err
	}
	s.appendMu.Lock()
	defer s.appendMu.Unlock()
	if !s.readOnly && s.broken.Load() == nil {
		// The scan reads the files: pending Deletes go into them first,
		// and a compaction's old copies go.
		if err := s.syncAll(); err != nil {
			return Report{}, err
		}
	}
	return verifyDir(s.fsys, s.dir)
}

// VerifyDir is Verify for a store that need not open: it scans the files in
// dir read-only, without taking the store's lock, so it also reports on a
// store that Open rejects. Only WithFS among the options applies. dir must
// exist (else an error matching ErrNotStore).
func VerifyDir(dir string, opts ...Option) (r Report, err error) {
	defer recoverTo(&err, "verify "+dir)
	o := buildOptions(opts)
	fi, err := o.fs.Stat(dir)
	if err != nil {
		if isNotExist(err) {
			return Report{}, fmt.Errorf("zrecord: verify %s: %w: %w", dir, ErrNotStore, err)
		}
		return Report{}, wrapf(err, "verify %s", dir)
	}
	if !fi.IsDir() {
		return Report{}, errf(ErrNotStore, "verify %s: not a directory", dir)
	}
	return verifyDir(o.fs, dir)
}

// verifier holds the state of one scan.
type verifier struct {
	fsys   FS
	dir    string
	r      *Report
	files  map[string]File
	sizes  map[string]int64
	dec    *zstd.Decoder
	lay    layout
	h      header
	frames bool // the codec compresses
	buf    []byte
	out    []byte
}

func verifyDir(fsys FS, dir string) (Report, error) {
	r := Report{Dir: dir, Faults: []Fault{}, Pending: []string{}}
	v := &verifier{fsys: fsys, dir: dir, r: &r, files: map[string]File{}, sizes: map[string]int64{}}
	defer v.close()
	err := v.run()
	return r, err
}

func (v *verifier) close() {
	for _, f := range v.files {
		f.Close()
	}
	if v.dec != nil {
		v.dec.Close()
	}
}

func (v *verifier) path(name string) string { return filepath.Join(v.dir, name) }

func (v *verifier) fault(name string, idx int64, format string, args ...any) {
	if len(v.r.Faults) >= maxReportFaults {
		v.r.MoreFaults++
		return
	}
	v.r.Faults = append(v.r.Faults, Fault{File: v.path(name), Index: idx, What: fmt.Sprintf(format, args...)})
}

// open opens a file of the store once; ok is false (and a fault recorded)
// when it is missing.
func (v *verifier) open(name string) (f File, size int64, ok bool, err error) {
	if f, ok := v.files[name]; ok {
		return f, v.sizes[name], f != nil, nil
	}
	f, err = v.fsys.OpenFile(v.path(name), os.O_RDONLY, 0)
	if err != nil {
		if isNotExist(err) {
			v.files[name] = nil
			v.fault(name, -1, "missing")
			return nil, 0, false, nil
		}
		return nil, 0, false, wrapf(err, "open %s", v.path(name))
	}
	if size, err = fileSize(f); err != nil {
		f.Close()
		return nil, 0, false, wrapf(err, "stat %s", v.path(name))
	}
	v.files[name], v.sizes[name] = f, size
	return f, size, true, nil
}

func (v *verifier) run() error {
	for _, name := range []string{deleteJournal, compactJrnl} {
		if _, err := v.fsys.Stat(v.path(name)); err == nil {
			v.r.Pending = append(v.r.Pending, v.path(name))
		}
	}
	ok, err := v.header()
	if err != nil || !ok {
		return err
	}
	if err := v.dictionary(); err != nil {
		return err
	}
	return v.records()
}

// header reads meta.zr; ok is false when nothing past it can be checked.
func (v *verifier) header() (bool, error) {
	f, size, ok, err := v.open(metaName)
	if err != nil || !ok {
		return false, err
	}
	b := make([]byte, min(size, headerSize))
	if err := readFull(f, b, 0); err != nil {
		return false, wrapf(err, "read %s", v.path(metaName))
	}
	if len(b) < len(magic) || [4]byte(b[0:4]) != magic {
		v.fault(metaName, -1, "bad magic: not a store header")
		return false, nil
	}
	if len(b) < headerSize {
		v.fault(metaName, -1, "header is %d bytes, want %d", len(b), headerSize)
		return false, nil
	}
	lay, known := layoutOf(b[4])
	if !known {
		v.fault(metaName, -1, "%s", versionText(b[4]))
		return false, nil
	}
	v.lay = lay
	v.r.Version = int(lay.version)
	v.r.Checksummed = lay.checksummed()
	h := headerFields(b)
	reserved := 22
	if lay.checksummed() {
		if stored, sum := binary.LittleEndian.Uint32(b[22:26]), headerSum(b); stored != sum {
			v.fault(metaName, -1, "header checksum %#08x, its bytes give %#08x", stored, sum)
		}
		h.dictSum = binary.LittleEndian.Uint32(b[26:30])
		reserved = 30
	}
	if lay.version == versionNarrow {
		reserved = headerSize
		el, ok := elementOfHeader(b[30], b[31])
		if !ok {
			v.fault(metaName, -1, "element type bytes %#x %#x (want size 1, 2, 4 or 8 and signedness 0 or 1)", b[30], b[31])
			return false, nil
		}
		h.elem = el
	}
	for i := reserved; i < headerSize; i++ {
		if b[i] != 0 {
			v.fault(metaName, -1, "reserved byte %d is %#x", i, b[i])
		}
	}
	if !h.codec.valid() {
		v.fault(metaName, -1, "codec byte %d", b[5])
		return false, nil
	}
	if (h.codec == Narrow) != (lay.version == versionNarrow) {
		v.fault(metaName, -1, "codec %v in a format version %d header", h.codec, lay.version)
		return false, nil
	}
	v.r.Codec = h.codec.String()
	v.r.Records = int64(min(h.length, 1<<62))
	if h.length > 1<<40 {
		v.fault(metaName, -1, "length %d", h.length)
		return false, nil
	}
	v.h = h
	v.frames = h.codec != Raw
	return true, nil
}

// dictionary checks dict.zr and sets up the decoder.
func (v *verifier) dictionary() error {
	var dict []byte
	if v.h.codec == ZstdDict {
		f, size, ok, err := v.open(dictName)
		if err != nil {
			return err
		}
		if !ok {
			return nil // compressed records cannot be decoded
		}
		if size == 0 || size > 64<<20 {
			v.fault(dictName, -1, "dictionary of %d bytes", size)
			return nil
		}
		dict = make([]byte, size)
		if err := readFull(f, dict, 0); err != nil {
			return wrapf(err, "read %s", v.path(dictName))
		}
		if v.lay.checksummed() {
			if sum := dataSum(dict); sum != v.h.dictSum {
				v.fault(dictName, -1, "dictionary checksum %#08x, %s says %#08x", sum, metaName, v.h.dictSum)
			}
		}
		if err := checkDict(dict); err != nil {
			v.fault(dictName, -1, "%v", err)
			return nil
		}
	}
	if v.h.codec.zstdFrames() {
		dec, err := newDecoder(v.h.codec, dict)
		if err != nil {
			v.fault(dictName, -1, "%v", err)
			return nil
		}
		v.dec = dec
	}
	return nil
}

// records checks every table entry and the bytes it points at.
func (v *verifier) records() error {
	// Chunk files 0..tail_chunk must exist; the tail one must reach the
	// frontier.
	chunkSize := map[uint32]int64{}
	for id := uint32(0); ; id++ {
		_, size, ok, err := v.open(chunkName(id))
		if err != nil {
			return err
		}
		if !ok {
			break
		}
		chunkSize[id] = size
		if id == v.h.tailChunk {
			if size < int64(v.h.tailOffset) {
				v.fault(chunkName(id), -1, "%d bytes, shorter than the tail offset %d", size, v.h.tailOffset)
			}
			break
		}
	}
	l := v.lay
	n := int64(v.h.length)
	var blk []byte
	for seg := int64(0); seg < l.segCount(n); seg++ {
		name := l.segName(uint32(seg))
		f, size, ok, err := v.open(name)
		if err != nil {
			return err
		}
		lo := seg << l.shift
		hi := min(n, lo+l.segEntries())
		if !ok {
			continue
		}
		if have := lo + size/l.entSize; have < hi {
			v.fault(name, -1, "%d bytes hold entries up to %d, the header counts %d records", size, have, n)
			hi = have
		}
		const block = 1 << 14
		for i := lo; i < hi; i += block {
			cnt := min(hi-i, block)
			blk = growBytes(blk, int(cnt*l.entSize))
			if err := readFull(f, blk, l.segOff(i)); err != nil {
				return wrapf(err, "read %s", v.path(name))
			}
			for k := int64(0); k < cnt; k++ {
				if err := v.record(i+k, blk[k*l.entSize:(k+1)*l.entSize], name, chunkSize); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

func growBytes(b []byte, n int) []byte {
	if cap(b) < n {
		return make([]byte, n)
	}
	return b[:n]
}

// record checks table entry i (its bytes b, in segment file seg) and the
// record's stored bytes.
func (v *verifier) record(i int64, b []byte, seg string, chunkSize map[uint32]int64) error {
	e, bad := v.lay.getEntryAt(b, i)
	if bad != nil {
		v.fault(seg, i, "table entry checksum %#08x, its bytes give %#08x", bad.stored, bad.computed)
		return nil
	}
	size, ok := chunkSize[e.chunk]
	switch {
	case e.chunk > v.h.tailChunk || !ok:
		v.fault(seg, i, "entry names chunk %d, past the tail chunk %d or missing", e.chunk, v.h.tailChunk)
		return nil
	case e.end() > uint64(size):
		v.fault(seg, i, "entry ends at byte %d of %s, which has %d bytes", e.end(), chunkName(e.chunk), size)
		return nil
	case e.chunk == v.h.tailChunk && e.end() > uint64(v.h.tailOffset):
		v.fault(seg, i, "entry ends at byte %d of %s, past the frontier %d", e.end(), chunkName(e.chunk), v.h.tailOffset)
		return nil
	case e.logic > MaxRecordSize:
		v.fault(seg, i, "logical size %d above the record limit", e.logic)
		return nil
	case e.phys != e.logic && !v.frames:
		v.fault(seg, i, "compressed entry (%d stored bytes for %d) in a raw store", e.phys, e.logic)
		return nil
	case e.phys > e.logic && v.lay.version != versionV3:
		v.fault(seg, i, "%d stored bytes for a record of %d", e.phys, e.logic)
		return nil
	}
	v.r.Checked++
	name := chunkName(e.chunk)
	f := v.files[name]
	v.buf = growBytes(v.buf, int(e.phys))
	if err := readFull(f, v.buf, int64(e.off)); err != nil {
		return wrapf(err, "read record %d from %s", i, v.path(name))
	}
	if v.lay.checksummed() {
		if sum := dataSum(v.buf); sum != e.sum {
			v.fault(name, i, "stored bytes checksum %#08x, table says %#08x", sum, e.sum)
			return nil
		}
	}
	frame := v.frames && (e.phys != e.logic || v.lay.version == versionV3)
	if frame && v.h.codec == Narrow {
		v.out = growBytes(v.out, int(e.logic))
		if err := widenRecord(v.out, v.buf, v.h.elem.Size); err != nil {
			v.fault(name, i, "%v", err)
		}
		return nil
	}
	if frame && v.dec != nil {
		v.out = growBytes(v.out, int(e.logic))
		got, err := v.dec.DecodeAll(v.buf, v.out[:0:e.logic])
		if err != nil {
			v.fault(name, i, "zstd frame does not decode: %v", err)
		} else if len(got) != int(e.logic) {
			v.fault(name, i, "zstd frame decodes to %d bytes, table says %d", len(got), e.logic)
		}
	}
	return nil
}
