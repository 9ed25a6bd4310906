//go:build unix

package zrecord

import (
	"errors"

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
