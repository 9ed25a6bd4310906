package zrecord

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// writeVecAt writes bufs at off in one pwritev; osFile is a vectorWriter on
// Linux.
func (f osFile) writeVecAt(bufs [][]byte, off int64) (int, error) {
	return unix.Pwritev(int(f.File.Fd()), bufs, off)
}

// preallocate reserves the blocks of [off, off+n) without changing the
// file's size (fallocate with FALLOC_FL_KEEP_SIZE); osFile is a
// preallocator on Linux.
func (f osFile) preallocate(off, n int64) error {
	return unix.Fallocate(int(f.File.Fd()), unix.FALLOC_FL_KEEP_SIZE, off, n)
}

// exchangePaths swaps a and b in one renameat2(RENAME_EXCHANGE). A kernel
// older than 3.15 (ENOSYS) or a file system without the flag (EINVAL, as
// on some network and FUSE file systems) is reported as
// errors.ErrUnsupported, for the caller to fall back to two renames.
func exchangePaths(a, b string) error {
	err := unix.Renameat2(unix.AT_FDCWD, a, unix.AT_FDCWD, b, unix.RENAME_EXCHANGE)
	if err == nil {
		return nil
	}
	if errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EINVAL) || errors.Is(err, errors.ErrUnsupported) {
		return &os.LinkError{Op: "exchange", Old: a, New: b, Err: fmt.Errorf("%w: %w", errors.ErrUnsupported, err)}
	}
	return &os.LinkError{Op: "exchange", Old: a, New: b, Err: err}
}
