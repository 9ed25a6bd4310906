package faultfs

import (
	"errors"
	"os"
)

// The lookups a file layer may offer besides zrecord.FS's methods, which
// zrecord.Create uses to look beside a path without reading its whole
// parent directory. FS passes them to the wrapped FS, or reports
// errors.ErrUnsupported where that has none, so that Create takes the way
// it takes on any file layer without them. Like Stat and ReadDir they are
// not counted, and fail with ErrCrashed after a crash.

type lstater interface {
	Lstat(name string) (os.FileInfo, error)
}

type dirPeeker interface {
	ReadDirN(name string, n int) ([]os.DirEntry, error)
}

// Lstat stats name without following a final symbolic link.
func (f *FS) Lstat(name string) (os.FileInfo, error) {
	if err := f.alive(); err != nil {
		return nil, pathErr("lstat", name, err)
	}
	l, ok := f.base.(lstater)
	if !ok {
		return nil, pathErr("lstat", name, errors.ErrUnsupported)
	}
	return l.Lstat(name)
}

// ReadDirN reads at most n entries of the directory name, fewer only when
// it has no more.
func (f *FS) ReadDirN(name string, n int) ([]os.DirEntry, error) {
	if err := f.alive(); err != nil {
		return nil, pathErr("readdir", name, err)
	}
	p, ok := f.base.(dirPeeker)
	if !ok {
		return nil, pathErr("readdir", name, errors.ErrUnsupported)
	}
	return p.ReadDirN(name, n)
}
