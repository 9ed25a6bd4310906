package zrecord

import (
	"os"
	"runtime/debug"
	"sync/atomic"
	"unsafe"
)

// All memory-mapping work of the package lives in this file and in its
// per-OS halves, mmap_unix.go (mapSpan, unmapSpan) and mmap_windows.go.
//
// Chunk files and table segments are mapped read-only and shared, at a span
// derived from their size: the next power of two at or above the larger of
// the size and minSpan, capped at the file's addressable range (4 GiB for a
// chunk, the layout's segBytes for a segment). A handle thus reserves
// address space in proportion to the store rather than 7 GiB per open
// chunk and segment. Mapping past the end of a file is legal; the pages
// become readable as soon as a positional write extends the file, because
// the mapping and the write go through the same page cache. Touching a page
// past the end of the file raises SIGBUS; readers never do so for committed
// records, and every reading goroutine runs with debug.SetPanicOnFault so
// that a file truncated under it (by another process) yields an error
// instead of killing the process.
//
// A writer that is about to put bytes past the current span calls cover
// before writing them, and so before it publishes them (an append's atomic
// store of the length, a compaction's or an upgrade's exclusive section).
// cover maps the file again at a larger span and publishes the new slice
// with atomic stores (its base, then its length; see mapping.bytes).
// Readers load it after the length of the store they read, so every committed byte they may touch lies inside the slice
// they get. A reader may still hold an older, shorter slice, so a replaced
// mapping is retired, not unmapped: it stays mapped until the handle
// releases its files (Close, or the exclusive sections of Compact and
// Upgrade that drop a file). Spans double, so the retired mappings of a
// file add up to less than its current span.
//
// A read-only handle never sees a file grow (it reads the records that
// existed when it was opened), so it maps each file at exactly the size it
// reads instead (mapExact): a chunk up to its end, a table segment up to
// the entries below the length. A Set that keeps thousands of stores open
// then reserves address space in proportion to their bytes, not 64 MiB or
// more per file, which a process limited in address space (RLIMIT_AS)
// would run out of. Once everything is mapped, such a handle closes its
// files (WithReleaseFiles): on unix a mapping stays valid after its
// descriptor is closed.

// pageSize is the system's memory page size.
var pageSize = os.Getpagesize()

// minSpan is the smallest span a file is mapped at.
const minSpan = 64 << 20

// spanFor is the span a file that must show n bytes is mapped at: the next
// power of two at or above max(n, minSpan), capped at full.
func spanFor(n, full int64) int64 {
	span := int64(minSpan)
	for span < n && span < full {
		span <<= 1
	}
	return min(span, full)
}

// mapping is the read-only view of one chunk or table segment file. Its
// current slice, held as a base and a length (so that a reader reaches the
// bytes with no load between), is read by any goroutine without a lock;
// the other fields belong to writers (appendMu, or mu held exclusively).
type mapping struct {
	cur     atomic.Pointer[byte] // the current mapping's first byte; nil when unmapped
	curLen  atomic.Int64         // its length
	full    int64                // the file's addressable range: the largest span
	retired [][]byte             // earlier, shorter mappings readers may still hold
	// random: the file is read at random (a table segment), so its
	// mappings are advised so (see adviseRandom).
	random bool
}

// bytes returns the current mapping, or nil when the file is not mapped
// (the caller then reads with ReadAt). Committed bytes of the file lie
// within it. A writer that maps the file again stores the new base before
// the new length, and the length is loaded first here: a reader that gets
// the new length gets the new base, and one that gets the old length may
// pair it with either base, since every mapping of the file starts at its
// first byte and a new one is longer.
func (m *mapping) bytes() []byte {
	n := m.curLen.Load()
	if p := m.cur.Load(); p != nil {
		return unsafe.Slice(p, int(n))
	}
	return nil
}

// publish makes b the current mapping (see bytes for the order).
func (m *mapping) publish(b []byte) {
	if m.random {
		adviseRandom(b)
	}
	m.cur.Store(unsafe.SliceData(b))
	m.curLen.Store(int64(len(b)))
}

// mapFile maps f, whose addressable range is full bytes, at the span for
// size bytes. A file without a descriptor stays unmapped.
func (m *mapping) mapFile(f File, size, full int64) error {
	m.full = full
	b, err := mapSpan(f, int(spanFor(size, full)))
	if err != nil {
		return err
	}
	if b != nil {
		m.publish(b)
	}
	return nil
}

// mapExact maps n bytes of f (at least one, at most full): the span of a
// read-only handle, which reads only what the file held when it was
// opened and never needs a larger mapping. A file without a descriptor
// stays unmapped.
func (m *mapping) mapExact(f File, n, full int64) error {
	m.full = full
	b, err := mapSpan(f, int(min(max(n, 1), full)))
	if err != nil {
		return err
	}
	if b != nil {
		m.publish(b)
	}
	return nil
}

// cover makes the mapping of f reach at least n bytes (capped at the
// file's range), mapping f again at a larger span if needed; the old
// mapping is retired, not unmapped. An unmapped file stays unmapped. The
// caller is a writer and calls cover before publishing bytes below n.
func (m *mapping) cover(f File, n int64) error {
	cur := m.bytes()
	if cur == nil || int64(len(cur)) >= min(n, m.full) {
		return nil
	}
	b, err := mapSpan(f, int(spanFor(n, m.full)))
	if err != nil {
		return err
	}
	if b == nil {
		return nil
	}
	m.retired = append(m.retired, cur)
	m.publish(b)
	return nil
}

// unmap releases the current mapping and every retired one. No reader may
// be using them: the caller holds mu exclusively or is closing the handle.
func (m *mapping) unmap() error {
	var first error
	if cur := m.bytes(); cur != nil {
		m.cur.Store(nil)
		m.curLen.Store(0)
		first = unmapSpan(cur)
	}
	for _, b := range m.retired {
		if err := unmapSpan(b); err != nil && first == nil {
			first = err
		}
	}
	m.retired = nil
	return first
}

// willNeed asks the kernel to read bytes [off, off+n) of the mapping in
// ahead of a pass over them (the table walks of Stats): a table segment's
// mapping is advised random, which turns the kernel's read-ahead off for
// it.
func (m *mapping) willNeed(off, n int64) {
	if b := m.pages(off, n); b != nil {
		adviseWillNeed(b)
	}
}

// advise advises bytes [off, off+n) of the mapping sequential, or random
// again; whether there was a range to advise.
func (m *mapping) advise(off, n int64, sequential bool) bool {
	b := m.pages(off, n)
	if b == nil {
		return false
	}
	if sequential {
		adviseSequential(b)
	} else {
		adviseRandom(b)
	}
	return true
}

// cached reports whether the page that holds byte off of the mapping is in
// the page cache (false where that cannot be told).
func (m *mapping) cached(off int64) bool {
	b := m.pages(off, 1)
	return b != nil && pageCached(b[:min(len(b), pageSize)])
}

// pages is the part of the mapping that holds bytes [off, off+n), from the
// page that holds off (madvise wants a page-aligned start; the mapping's
// is); nil when the mapping holds none of them.
func (m *mapping) pages(off, n int64) []byte {
	b := m.bytes()
	if off >= int64(len(b)) || n <= 0 || off < 0 {
		return nil
	}
	start := off &^ (int64(pageSize) - 1)
	return b[start:min(int64(len(b)), off+n)]
}

// span returns the length of the current mapping (0 when unmapped).
func (m *mapping) span() int64 { return int64(len(m.bytes())) }

// guardFaults makes memory faults in the calling goroutine panic (to be
// recovered) instead of crashing, and returns the previous setting for
// debug.SetPanicOnFault to restore.
func guardFaults() bool { return debug.SetPanicOnFault(true) }

// restoreFaults undoes guardFaults.
func restoreFaults(old bool) { debug.SetPanicOnFault(old) }

// sameStart reports whether two non-empty slices begin at the same address
// (true for empty slices): it tells whether a decoder wrote in place.
func sameStart(a, b []byte) bool {
	return len(a) == 0 || len(b) == 0 || unsafe.SliceData(a) == unsafe.SliceData(b)
}
