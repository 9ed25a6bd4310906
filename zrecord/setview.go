package zrecord

import (
	"sync/atomic"
	"unsafe"
)

// storeView is what the reads of a lazy set need of one of its open
// stores, copied into the store's cache entry when it opens: a read-only
// store's files, length and table never change, so the copy stays true
// for as long as the store is open. A call that touches thousands of
// stores then finds each one's table, chunks and flags in the entry it
// pins, in a few adjacent cache lines, instead of through the store's own
// structures (the handle, its lists, each file's mapping: a chain of
// dependent cache misses per store, and no way for the CPU to overlap one
// store's with the next's). The fields up to st fill the rest of the
// entry's first cache line (openStorePad), the copy of the first chunk the
// next lines.
type storeView struct {
	// fast: the view locates records (locate): a checksummed store (version
	// 4 or 5) of one table segment, mapped, with every chunk mapped and no
	// pending deletes. Otherwise calls take the store's own locate.
	fast        bool
	encodes     bool // the store's mayEncode
	v3          bool // a version-3 store
	hasDec      bool
	checksummed bool
	codec       Codec
	elemSize    uint8 // a narrow store's element size
	nchunks     uint8 // the chunks copied into chunkBuf; 0: more than fit, listed in chunks
	length      int64
	seg         *byte // the table segment's mapping, length*24 bytes, when fast
	// end0 is chunk 0's end (every store has a chunk 0), so that checking
	// the entries of a store of one chunk reads nothing past this line.
	end0 int64
	// resident mirrors the store's residency map, and verify its raw
	// verification (checkRaws): the set changes both through its own
	// SetResidency and SetVerify, on the store and here.
	resident atomic.Pointer[residency]
	verify   atomic.Bool
	st       *Store
	// chunkBuf holds copies of the store's chunks (the same mappings and
	// bounds) for a store of up to two; chunks holds them otherwise.
	chunkBuf [2]chunk
	chunks   []*chunk
}

// fill makes v the view of st, which has just opened read-only (the
// caller holds the cache's mu, before any call can use the entry).
func (v *storeView) fill(st *Store) {
	chunks := *st.chunks.Load()
	var buf []chunk
	if len(chunks) <= len(v.chunkBuf) {
		buf = v.chunkBuf[:len(chunks)]
		v.nchunks = uint8(len(chunks))
	} else {
		buf = make([]chunk, len(chunks))
		v.chunks = make([]*chunk, len(chunks))
	}
	mapped := true
	for i, c := range chunks {
		d := &buf[i]
		d.id, d.f, d.size = c.id, c.f, c.size
		d.mapping.full = c.mapping.full
		if b := c.bytes(); b != nil {
			d.mapping.publish(b)
		} else {
			mapped = false
		}
		d.end.Store(c.end.Load())
		if v.chunks != nil {
			v.chunks[i] = d
		}
	}
	if len(chunks) > 0 {
		v.end0 = chunks[0].end.Load()
	}
	segs := *st.segs.Load()
	v.st = st
	v.length = st.length.Load()
	v.encodes, v.v3, v.codec = st.mayEncode(), st.lay.version == versionV3, st.codec
	v.hasDec, v.elemSize = st.dec != nil, uint8(st.elem.Size)
	v.checksummed = st.lay.checksummed()
	v.verify.Store(st.verifyRaw.Load())
	v.resident.Store(st.resident.Load())
	v.fast = st.readOnly && mapped && v.checksummed && st.lay.entSize == 24 && st.overlay.Load() == nil && len(segs) <= 1
	if v.fast && len(segs) == 1 {
		b := segs[0].bytes()
		v.fast = b != nil && int64(len(b)) >= v.length*24
		if v.fast {
			v.seg = unsafe.SliceData(b)
		}
	}
	if v.fast && v.seg == nil && v.length > 0 {
		v.fast = false
	}
}

// table is the view's table: the entries below length.
func (v *storeView) table() []byte {
	if v.seg == nil {
		return nil
	}
	return unsafe.Slice(v.seg, int(v.length*24))
}

// appendChunks appends the view's chunks to list (for the copy loops).
func (v *storeView) appendChunks(list []*chunk) []*chunk {
	switch v.nchunks { // in the first line, where chunks is not
	case 0:
		return append(list, v.chunks...)
	case 1:
		return append(list, &v.chunkBuf[0])
	}
	return append(list, &v.chunkBuf[0], &v.chunkBuf[1])
}

// checkRaws is the store's checkRaws.
func (v *storeView) checkRaws() bool {
	return v.checksummed && (v.verify.Load() || v.resident.Load() != nil)
}

// touch loads one byte of the table entry of each of indices that lies
// below the length, so that the CPU fetches the entries of many stores at
// once before any is decoded, and returns their sum (for the caller to
// keep, so that the loads stay).
func (v *storeView) touch(indices []int64) byte {
	var t byte
	if !v.fast || v.seg == nil {
		return 0
	}
	for _, i := range indices {
		if uint64(i) < uint64(v.length) {
			t += *(*byte)(unsafe.Add(unsafe.Pointer(v.seg), i*24))
		}
	}
	return t
}

// locate is Store.locate through the view: it fills locs with the checked
// entries of indices, each read only once the residency map, if any, holds
// its table page (and, when gather is set, checked against the map's chunk
// pages, as a gather's locate checks them), and reports true, or reports
// false, having found an index, an entry or a residency the store's own
// locate must report (or a store the view does not serve).
func (v *storeView) locate(indices []int64, locs []entry, gather bool) bool {
	if !v.fast {
		return false
	}
	for _, i := range indices {
		if uint64(i) >= uint64(v.length) {
			return false
		}
	}
	r := v.resident.Load()
	if r != nil && (r.none || r.tbase != nil) {
		for _, i := range indices {
			if !r.entryHeld(&layoutV4, i) { // the view's table is one segment of 24-byte entries
				return false
			}
		}
	}
	if loadEntries(v.table(), indices, locs) < len(indices) {
		return false
	}
	for k := range indices {
		if !v.entryOK(&locs[k]) {
			return false
		}
	}
	if r != nil && gather {
		for k := range locs[:len(indices)] {
			if !r.recordHeld(&locs[k]) {
				return false
			}
		}
	}
	return true
}

// entryOK is Store.checkEntry's test, for a store the view serves (never of
// version 3).
func (v *storeView) entryOK(e *entry) bool {
	end := v.end0
	if e.chunk != 0 {
		switch {
		case v.nchunks == 0 && int64(e.chunk) < int64(len(v.chunks)):
			end = v.chunks[e.chunk].end.Load()
		case e.chunk < uint32(v.nchunks):
			end = v.chunkBuf[e.chunk].end.Load()
		default:
			return false
		}
	}
	if e.end() > uint64(end) || e.logic > MaxRecordSize {
		return false
	}
	if e.phys != e.logic {
		if v.codec == Narrow {
			return narrowedSizeOK(e.phys, e.logic, int(v.elemSize))
		}
		return v.hasDec && e.phys < e.logic
	}
	return true
}
