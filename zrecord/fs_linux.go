package zrecord

import "golang.org/x/sys/unix"

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
