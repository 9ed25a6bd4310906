//go:build unix

package zrecord_test

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// seekData returns the offset of the first data byte at or after off.
func seekData(f *os.File, off int64) (int64, error) {
	return unix.Seek(int(f.Fd()), off, unix.SEEK_DATA)
}

// seekHole returns the offset of the first hole at or after off.
func seekHole(f *os.File, off int64) (int64, error) {
	return unix.Seek(int(f.Fd()), off, unix.SEEK_HOLE)
}

// onlyHoleLeft reports whether a seekData error means no data follows.
func onlyHoleLeft(err error) bool { return errors.Is(err, unix.ENXIO) }
