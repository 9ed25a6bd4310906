package zrecord

import (
	"errors"
	"fmt"
	"io/fs"
)

// Sentinel errors. Every error the package returns wraps one of these (or an
// error from the file layer) with %w and names the file, index or value at
// fault, so callers test them with errors.Is.
var (
	// ErrNotStore: the directory or meta.zr is not a zrecord store (missing,
	// wrong magic). A missing directory also matches fs.ErrNotExist.
	ErrNotStore = errors.New("not a zrecord store")
	// ErrVersion: meta.zr carries a format version this package cannot read.
	ErrVersion = errors.New("unsupported format version")
	// ErrCorrupt: a file of the store is inconsistent (short table, entry
	// outside its chunk, bad codec byte, a mapped file truncated under a
	// reader, ...).
	ErrCorrupt = errors.New("corrupt store")
	// ErrExists: Create was given a path that is a non-empty directory or a
	// file, or, WithReplace, a directory that does not hold only a store.
	ErrExists = errors.New("already exists")
	// ErrClosed: the handle has been closed.
	ErrClosed = errors.New("store closed")
	// ErrReadOnly: a write on a handle opened WithReadOnly.
	ErrReadOnly = errors.New("store opened read-only")
	// ErrLocked: another writable handle (in this or another process) holds the store.
	ErrLocked = errors.New("store locked by another writer")
	// ErrIndexOutOfRange: an index is negative or not below Len.
	ErrIndexOutOfRange = errors.New("index out of range")
	// ErrDuplicateIndex: Delete was given the same index twice.
	ErrDuplicateIndex = errors.New("duplicate index")
	// ErrSizeMismatch: a record's logical size differs from the slot the caller gave it.
	ErrSizeMismatch = errors.New("record size mismatch")
	// ErrBufferTooSmall: a destination buffer cannot hold what the call must write.
	ErrBufferTooSmall = errors.New("buffer too small")
	// ErrRecordTooLarge: a record is larger than MaxRecordSize.
	ErrRecordTooLarge = errors.New("record too large")
	// ErrMissingDict: a dictionary store without its dictionary.
	ErrMissingDict = errors.New("missing dictionary")
	// ErrDecode: a compressed record did not decode to its logical size.
	ErrDecode = errors.New("decode failed")
	// ErrInvalidArgument: an argument or option is not acceptable.
	ErrInvalidArgument = errors.New("invalid argument")
	// ErrNotResident: a call needs a table entry or a record whose page
	// the store's residency map (SetResidency) does not mark as held, or a
	// store of a set that requires maps that has none yet.
	ErrNotResident = errors.New("record not resident")
)

// errf builds "zrecord: <formatted>: <sentinel>" so that errors.Is finds the
// sentinel and the message names what is at fault.
func errf(sentinel error, format string, args ...any) error {
	return fmt.Errorf("zrecord: %s: %w", fmt.Sprintf(format, args...), sentinel)
}

// wrapf wraps an error from the file layer, keeping it inspectable with
// errors.Is (fs.ErrNotExist and friends).
func wrapf(err error, format string, args ...any) error {
	return fmt.Errorf("zrecord: %s: %w", fmt.Sprintf(format, args...), err)
}

// faultError reports whether a recovered panic value is a memory fault
// (SIGBUS/SIGSEGV turned into a panic by debug.SetPanicOnFault).
func faultError(r any) bool {
	_, ok := r.(interface{ Addr() uintptr })
	return ok
}

// panicError converts a recovered panic value into an error.
func panicError(op string, r any) error {
	if faultError(r) {
		return fmt.Errorf("zrecord: %s: memory fault reading a mapped file (truncated or changed under the reader?): %v: %w", op, r, ErrCorrupt)
	}
	if e, ok := r.(error); ok {
		return fmt.Errorf("zrecord: %s: internal error: %w", op, e)
	}
	return fmt.Errorf("zrecord: %s: internal error: %v", op, r)
}

// isNotExist reports whether err says a file is missing.
func isNotExist(err error) bool { return errors.Is(err, fs.ErrNotExist) }
