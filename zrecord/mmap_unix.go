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

// adviseRandom tells the kernel that b, a table segment's mapping, is read
// at random: a read of one entry then faults in the page it needs rather
// than the read-ahead window around it (128 KiB by default). A random batch
// reads one entry per record, so a cold first batch reads a page per
// record, not a window, and maps in no more. The advice is best effort.
func adviseRandom(b []byte) {
	if len(b) > 0 {
		_ = unix.Madvise(b, unix.MADV_RANDOM)
	}
}

// adviseWillNeed asks the kernel to read b in ahead, best effort.
func adviseWillNeed(b []byte) {
	if len(b) > 0 {
		_ = unix.Madvise(b, unix.MADV_WILLNEED)
	}
}
