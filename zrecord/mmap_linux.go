package zrecord

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// pageCached reports whether the first page of b (page-aligned) is in the
// page cache, by mincore(2); false when that fails.
func pageCached(b []byte) bool {
	if len(b) == 0 {
		return false
	}
	var vec [1]byte
	_, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(unsafe.SliceData(b))), 1, uintptr(unsafe.Pointer(&vec[0])))
	return errno == 0 && vec[0]&1 != 0
}
