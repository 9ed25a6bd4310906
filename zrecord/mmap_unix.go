//go:build unix

package zrecord

import "golang.org/x/sys/unix"

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

// adviseRandom tells the kernel that b, a table segment's or chunk's
// mapping, is read at random: a read of one entry or small record then
// faults in the page it needs rather than the read-ahead window around it
// (128 KiB by default). A random batch reads one entry and one record per
// index, so a batch that is not cached reads a page or two per record, not
// windows, and maps in no more. The advice is best effort.
func adviseRandom(b []byte) {
	if len(b) > 0 {
		_ = unix.Madvise(b, unix.MADV_RANDOM)
	}
}

// adviseSequential tells the kernel that b is about to be read through,
// best effort: read-ahead for the copy of a long run (see adviseRuns).
func adviseSequential(b []byte) {
	if len(b) > 0 {
		_ = unix.Madvise(b, unix.MADV_SEQUENTIAL)
	}
}

// adviseWillNeed asks the kernel to read b in ahead, best effort.
func adviseWillNeed(b []byte) {
	if len(b) > 0 {
		_ = unix.Madvise(b, unix.MADV_WILLNEED)
	}
}
