package zrecord

import (
	"errors"
	"io"
	"os"
)

// FS is the file layer every file operation of a store goes through. OSFS is
// the real file system; tests substitute layers that inject faults.
//
// Rename is rename(2): a directory renamed onto an empty directory replaces
// it (on Unix; os.Rename refuses that), which is how Create publishes a
// store at a path that is an empty directory.
//
// Record bytes and table entries are read through read-only shared mappings
// of File.Fd. A File whose Fd returns NoFd is read with ReadAt instead, and
// a writable store on such a file system takes no lock.
type FS interface {
	OpenFile(name string, flag int, perm os.FileMode) (File, error)
	Remove(name string) error
	Rename(oldname, newname string) error
	Stat(name string) (os.FileInfo, error)
	MkdirAll(path string, perm os.FileMode) error
	ReadDir(name string) ([]os.DirEntry, error)
}

// File is an open file of an FS. The store uses positional I/O only, so the
// file offset is never relied on.
type File interface {
	ReadAt(p []byte, off int64) (int, error)
	WriteAt(p []byte, off int64) (int, error)
	Truncate(size int64) error
	Sync() error
	Close() error
	Stat() (os.FileInfo, error)
	Fd() uintptr
}

// exchanger is implemented by file systems that can swap two existing paths
// in one step, so that each name refers to the other's file or directory
// (renameat2 with RENAME_EXCHANGE on Linux). Exchange returns an error
// matching errors.ErrUnsupported where the system or the file system at
// those paths cannot; Create then swaps with two renames (staging.go).
type exchanger interface {
	Exchange(a, b string) error
}

// lstater is implemented by file systems that can stat a path without
// following a final symbolic link (os.Lstat), and dirPeeker by those that
// can read the first n entries of a directory (in the directory's order,
// fewer only when it has no more) without reading the rest. Create uses
// both to look beside the path it makes at a cost that does not grow with
// the parent directory (staging.go); a file layer without them, or whose
// methods fail with errors.ErrUnsupported, has Create read the whole
// parent directory instead.
type lstater interface {
	Lstat(name string) (os.FileInfo, error)
}

type dirPeeker interface {
	ReadDirN(name string, n int) ([]os.DirEntry, error)
}

// lstat is fsys's Lstat, or an error matching errors.ErrUnsupported.
func lstat(fsys FS, name string) (os.FileInfo, error) {
	if l, ok := fsys.(lstater); ok {
		return l.Lstat(name)
	}
	return nil, &os.PathError{Op: "lstat", Path: name, Err: errors.ErrUnsupported}
}

// readDirN is fsys's ReadDirN, or an error matching errors.ErrUnsupported.
func readDirN(fsys FS, name string, n int) ([]os.DirEntry, error) {
	if p, ok := fsys.(dirPeeker); ok {
		return p.ReadDirN(name, n)
	}
	return nil, &os.PathError{Op: "readdir", Path: name, Err: errors.ErrUnsupported}
}

// NoFd is what File.Fd returns for a file that has no descriptor to map or lock.
const NoFd = ^uintptr(0)

// OSFS is the operating system's file system.
var OSFS FS = osFS{}

type osFS struct{}

func (osFS) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	f, err := os.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return osFile{f}, nil
}
func (osFS) Remove(name string) error                     { return os.Remove(name) }
func (osFS) Rename(oldname, newname string) error         { return renamePath(oldname, newname) }
func (osFS) Exchange(a, b string) error                   { return exchangePaths(a, b) }
func (osFS) Stat(name string) (os.FileInfo, error)        { return os.Stat(name) }
func (osFS) MkdirAll(path string, perm os.FileMode) error { return os.MkdirAll(path, perm) }
func (osFS) ReadDir(name string) ([]os.DirEntry, error)   { return os.ReadDir(name) }
func (osFS) Lstat(name string) (os.FileInfo, error)       { return os.Lstat(name) }

// ReadDirN reads at most n entries of the directory name, unsorted: a
// getdents call or two however large the directory is.
func (osFS) ReadDirN(name string, n int) ([]os.DirEntry, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	ents, err := f.ReadDir(n)
	if err == io.EOF {
		err = nil
	}
	return ents, err
}

// osFile is an *os.File. Where the operating system has a positional
// vectored write (pwritev on Linux, fs_linux.go), osFile also implements
// vectorWriter; elsewhere its buffers are written one WriteAt at a time.
// The per-OS parts of the file layer (locking, directory sync, the
// vectored write, the mappings of mmap_*.go) live in fs_*.go and mmap_*.go;
// the on-disk format is the same on every OS.
type osFile struct{ *os.File }

// iovMax bounds the buffers handed to one vectored write.
const iovMax = 1024

// vectorWriter is implemented by files that can write several buffers at one
// offset in one call. Other files are written buffer by buffer with WriteAt.
type vectorWriter interface {
	writeVecAt(bufs [][]byte, off int64) (int, error)
}

// preallocator is implemented by files whose blocks can be reserved ahead
// of the writes that fill them (fallocate on Linux, fs_linux.go).
type preallocator interface {
	preallocate(off, n int64) error
}

// preallocate reserves the blocks of [off, off+n) of f, if f can, before
// they are written, without changing its size. It is only a hint, so
// failures (a file system without fallocate, say) are ignored: the writes
// that follow allocate what it did not. On ext4 it spares those writes the
// delayed allocation that each page-cache folio of a write into unreserved
// blocks goes through: 625 MiB written in 512 KiB parts took about 25 %
// less CPU time with the range reserved first (NumPy's tofile, and so
// np.save, reserves its file the same way).
func preallocate(f File, off, n int64) {
	if p, ok := f.(preallocator); ok && n > 0 {
		_ = p.preallocate(off, n)
	}
}

// readFull reads exactly len(p) bytes at off.
func readFull(f File, p []byte, off int64) error {
	for len(p) > 0 {
		n, err := f.ReadAt(p, off)
		p, off = p[n:], off+int64(n)
		if len(p) == 0 {
			return nil
		}
		if err != nil {
			if err == io.EOF {
				return io.ErrUnexpectedEOF
			}
			return err
		}
		if n == 0 {
			return io.ErrUnexpectedEOF
		}
	}
	return nil
}

// writeFull writes all of p at off.
func writeFull(f File, p []byte, off int64) error {
	for len(p) > 0 {
		n, err := f.WriteAt(p, off)
		if err != nil {
			return err
		}
		if n <= 0 {
			return io.ErrShortWrite
		}
		p, off = p[n:], off+int64(n)
	}
	return nil
}

// writeVec writes the concatenation of bufs at off. It may modify bufs.
func writeVec(f File, bufs [][]byte, off int64) error {
	vw, ok := f.(vectorWriter)
	if !ok {
		for _, b := range bufs {
			if err := writeFull(f, b, off); err != nil {
				return err
			}
			off += int64(len(b))
		}
		return nil
	}
	for len(bufs) > 0 {
		batch := bufs[:min(len(bufs), iovMax)]
		n, err := vw.writeVecAt(batch, off)
		if interrupted(err) {
			continue
		}
		if err != nil {
			return err
		}
		if n <= 0 {
			return io.ErrShortWrite
		}
		off += int64(n)
		// Skip what was written; a partially written buffer is resumed.
		for n > 0 && len(bufs) > 0 {
			if n >= len(bufs[0]) {
				n -= len(bufs[0])
				bufs = bufs[1:]
				continue
			}
			bufs[0] = bufs[0][n:]
			n = 0
		}
		for len(bufs) > 0 && len(bufs[0]) == 0 {
			bufs = bufs[1:]
		}
	}
	return nil
}

// writeSyncClose writes b at the start of f (the file at path p), fsyncs f
// and closes it; f is closed whatever fails.
func writeSyncClose(f File, p string, b []byte) error {
	if err := writeFull(f, b, 0); err != nil {
		f.Close()
		return wrapf(err, "write %s", p)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return wrapf(err, "sync %s", p)
	}
	if err := f.Close(); err != nil {
		return wrapf(err, "close %s", p)
	}
	return nil
}

// fileSize returns the size of an open file.
func fileSize(f File) (int64, error) {
	fi, err := f.Stat()
	if err != nil {
		return 0, err
	}
	return fi.Size(), nil
}

// SyncDir makes the entries of dir (a file just renamed into it, say) durable
// through fsys, as the store does after its own renames and removals: nil
// where the operating system has no way to sync a directory, or the file
// system refuses to.
func SyncDir(fsys FS, dir string) error { return syncDir(fsys, dir) }

// syncDir makes the directory's entries (created and removed files) durable,
// where the operating system has a way to (dirSyncSupported).
func syncDir(fsys FS, dir string) error {
	if !dirSyncSupported {
		return nil
	}
	d, err := fsys.OpenFile(dir, os.O_RDONLY, 0)
	if err != nil {
		return err
	}
	err = d.Sync()
	// Some file systems refuse fsync on a directory; that is not a failure
	// of the store.
	if dirSyncRefused(err) {
		err = nil
	}
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// lockFile takes an exclusive, non-blocking lock on f (lockFD, per OS). It
// reports false when another open file holds the lock. A file without a
// descriptor (NoFd) is not locked.
func lockFile(f File) (bool, error) {
	fd := f.Fd()
	if fd == NoFd {
		return true, nil
	}
	return lockFD(fd)
}
