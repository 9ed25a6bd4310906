package zrecord

import "golang.org/x/sys/unix"

// writeVecAt writes bufs at off in one pwritev; osFile is a vectorWriter on
// Linux.
func (f osFile) writeVecAt(bufs [][]byte, off int64) (int, error) {
	return unix.Pwritev(int(f.File.Fd()), bufs, off)
}
