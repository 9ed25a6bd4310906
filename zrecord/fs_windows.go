package zrecord

import (
	"errors"
	"os"

	"golang.org/x/sys/windows"
)

// dirSyncSupported: Windows has no call that flushes a directory's entries
// (NTFS journals its metadata, and FlushFileBuffers on a directory handle
// is refused), so syncDir does nothing there.
const dirSyncSupported = false

// dirSyncRefused is never reached on Windows (dirSyncSupported is false).
func dirSyncRefused(error) bool { return false }

// interrupted is false on Windows: its calls are not interrupted by signals.
func interrupted(error) bool { return false }

// lockRangeOff is where the writer lock's single byte lies: Windows byte
// range locks are mandatory, so the lock covers a byte far past any real
// file content (as bbolt does), and readers of the header are not blocked.
const lockRangeOff = ^uint32(0)

// lockFD takes an exclusive, non-blocking LockFileEx on the handle fd. It
// reports false when another handle holds the lock. The lock goes with the
// handle: closing it releases the lock.
func lockFD(fd uintptr) (bool, error) {
	ol := windows.Overlapped{Offset: lockRangeOff, OffsetHigh: lockRangeOff}
	err := windows.LockFileEx(windows.Handle(fd), windows.LOCKFILE_EXCLUSIVE_LOCK|windows.LOCKFILE_FAIL_IMMEDIATELY, 0, 1, 0, &ol)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, windows.ERROR_LOCK_VIOLATION), errors.Is(err, windows.ERROR_IO_PENDING):
		return false, nil
	default:
		return false, err
	}
}

// stagedCreate is false on Windows: a directory holding an open file cannot
// be renamed there, and a rename does not replace an empty directory, so
// Create builds the store in its final directory, header last, and the
// next Create clears what a killed one left (staging.go).
const stagedCreate = false

// removeOpenFile: Windows refuses to remove an open file, so a cleanup
// closes (and so unlocks) a meta.zr before removing it.
const removeOpenFile = false

// fileIdentity is not needed where Create does not stage (stagedCreate).
func fileIdentity(os.FileInfo) (dev, ino uint64, ok bool) { return 0, 0, false }

// renamePath is os.Rename (MoveFileEx), which replaces files only.
func renamePath(oldname, newname string) error { return os.Rename(oldname, newname) }

// mountRefused is never reached on Windows (stagedCreate is false).
func mountRefused(error) bool { return false }
