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
