//go:build unix

package zrecord

import (
	"errors"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// dirSyncSupported: a directory's entries are made durable with fsync on
// the directory.
const dirSyncSupported = true

// dirSyncRefused reports whether err is a file system declining fsync on a
// directory, which the store does not count as a failure.
func dirSyncRefused(err error) bool {
	return errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOTSUP)
}

// interrupted reports whether a system call was interrupted by a signal and
// is to be retried.
func interrupted(err error) bool { return err == unix.EINTR }

// lockFD takes an exclusive, non-blocking flock on fd. It reports false when
// another open file description holds the lock. The lock goes with the
// descriptor: closing it releases the lock.
func lockFD(fd uintptr) (bool, error) {
	for {
		err := unix.Flock(int(fd), unix.LOCK_EX|unix.LOCK_NB)
		switch err {
		case nil:
			return true, nil
		case unix.EINTR:
			continue
		case unix.EWOULDBLOCK:
			return false, nil
		default:
			return false, err
		}
	}
}

// stagedCreate: Create builds a store in a sibling directory and renames it
// into place (staging.go). On Unix a directory renames with files in it
// open, and a rename onto an empty directory replaces it.
const stagedCreate = true

// removeOpenFile: a file may be removed while it is open (and locked), so
// a cleanup removes a meta.zr before giving up its lock.
const removeOpenFile = true

// fileIdentity returns the device and inode numbers of fi, where fi came
// from the operating system (ok false otherwise).
func fileIdentity(fi os.FileInfo) (dev, ino uint64, ok bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, 0, false
	}
	return uint64(st.Dev), uint64(st.Ino), true
}

// renamePath is rename(2), which, unlike os.Rename, lets a directory
// replace an empty directory.
func renamePath(oldname, newname string) error {
	for {
		err := unix.Rename(oldname, newname)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return &os.LinkError{Op: "rename", Old: oldname, New: newname, Err: err}
		}
		return nil
	}
}

// mountRefused reports whether a rename failed because a path is a mount
// point (EBUSY) or the two paths are on different mounts (EXDEV).
func mountRefused(err error) bool {
	return errors.Is(err, unix.EBUSY) || errors.Is(err, unix.EXDEV)
}
