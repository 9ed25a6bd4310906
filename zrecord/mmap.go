package zrecord

import (
	"runtime/debug"
	"unsafe"
)

// All memory-mapping work of the package lives in this file and in its
// per-OS halves, mmap_unix.go (mapSpan, unmapSpan) and mmap_windows.go.
//
// Chunk files and .loc segments are mapped once, read-only and shared, over
// their whole addressable range (4 GiB each) rather than their current size.
// Mapping past the end of a file is legal; the pages become readable as soon
// as a positional write extends the file, because the mapping and the write
// go through the same page cache. So a mapping never has to be replaced while
// the store grows, and readers can keep using the slice they loaded without
// locks. Touching a page past the end of the file raises SIGBUS; readers
// never do so for committed records, and every reading goroutine runs with
// debug.SetPanicOnFault so that a file truncated under it (by another
// process) yields an error instead of killing the process.

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
