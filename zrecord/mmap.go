package zrecord

import (
	"runtime/debug"
	"unsafe"

	"golang.org/x/sys/unix"
)

// All memory-mapping work of the package lives in this file.
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

// mapSpan maps span bytes of f read-only and shared. It returns a nil slice
// and no error when f has no descriptor (the caller then reads with ReadAt).
func mapSpan(f File, span int) ([]byte, error) {
	fd := f.Fd()
	if fd == NoFd {
		return nil, nil
	}
	b, err := unix.Mmap(int(fd), 0, span, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, err
	}
	return b, nil
}

// unmapSpan releases a mapping made by mapSpan. nil is a no-op.
func unmapSpan(b []byte) error {
	if b == nil {
		return nil
	}
	return unix.Munmap(b)
}

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
