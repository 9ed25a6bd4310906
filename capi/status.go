package main

/*
#include <stdint.h>
*/
import "C"

import (
	"errors"
	"fmt"
	"io/fs"
	"runtime/debug"
	"syscall"
	"unicode/utf8"
	"unsafe"

	"github.com/loaderx/loaderx/steppack"
	"github.com/loaderx/loaderx/steppipe"
	"github.com/loaderx/loaderx/zrecord"
	"github.com/loaderx/loaderx/zsampler"
)

// statusError is an error raised by the ABI layer itself (an argument check
// or a handle lookup) that carries its status.
type statusError struct {
	status C.int
	msg    string
}

func (e *statusError) Error() string { return e.msg }

// invalidf returns an LX_INVALID error.
func invalidf(format string, args ...any) error {
	return &statusError{status: statusInvalid, msg: fmt.Sprintf(format, args...)}
}

// nullArg reports a NULL pointer where one is required.
func nullArg(name string) error { return invalidf("%s is NULL", name) }

// statusTable maps package sentinels to statuses. The order matters where
// one error wraps several sentinels: the first match wins.
var statusTable = []struct {
	target error
	status C.int
}{
	{zrecord.ErrClosed, statusClosed},
	{zrecord.ErrNotResident, statusNotResident},
	{zrecord.ErrLocked, statusBusy},
	{zrecord.ErrExists, statusExists},
	{fs.ErrExist, statusExists},
	{zrecord.ErrIndexOutOfRange, statusOutOfRange},
	// A file missing from an existing store (a chunk, a table segment, the
	// dictionary) is damage, and the store wraps both sentinels: it must
	// not read as a missing path. A missing directory or meta.zr wraps
	// ErrNotStore, which stays "not found".
	{zrecord.ErrCorrupt, statusCorrupt},
	{zrecord.ErrMissingDict, statusCorrupt},
	{fs.ErrNotExist, statusNotFound},
	{zrecord.ErrNotStore, statusCorrupt},
	{zrecord.ErrVersion, statusCorrupt},
	{zrecord.ErrDecode, statusCorrupt},
	{errSchemaCorrupt, statusCorrupt},
	{zrecord.ErrInvalidArgument, statusInvalid},
	{zrecord.ErrDuplicateIndex, statusInvalid},
	{zrecord.ErrSizeMismatch, statusInvalid},
	{zrecord.ErrBufferTooSmall, statusInvalid},
	{zrecord.ErrRecordTooLarge, statusInvalid},
	{zrecord.ErrReadOnly, statusInvalid},
	{zsampler.ErrInvalid, statusInvalid},
	{steppipe.ErrInvalid, statusInvalid},
	{steppipe.ErrClosed, statusClosed},
	{steppack.ErrChanged, statusCorrupt},
	{steppack.ErrInvalid, statusInvalid},
	{steppack.ErrUnplanned, statusInvalid},
	{errSchemaInvalid, statusInvalid},
}

// statusOf maps an error to its status. An error that matches no sentinel
// comes from the operating system (or is one the table does not know) and is
// reported as LX_IO.
func statusOf(err error) C.int {
	var se *statusError
	if errors.As(err, &se) {
		return se.status
	}
	for _, e := range statusTable {
		if errors.Is(err, e.target) {
			return e.status
		}
	}
	return statusIO
}

// errnoOf returns the operating-system error number behind err, or 0 when
// the failure did not come from a system call.
func errnoOf(err error) int64 {
	var en syscall.Errno
	if errors.As(err, &en) {
		return int64(en)
	}
	return 0
}

// fail writes err's error number and message into the caller's buffer and
// returns its status.
func fail(errBuf *C.char, errLen C.int64_t, err error) C.int {
	return reportErrno(errBuf, errLen, statusOf(err), errnoOf(err), err.Error())
}

// report writes msg, with no error number, into the caller's buffer and
// returns status.
func report(errBuf *C.char, errLen C.int64_t, status C.int, msg string) C.int {
	return reportErrno(errBuf, errLen, status, 0, msg)
}

// reportErrno fills the caller's error buffer (struct lx_error, errLen
// bytes): errnum, then msg, NUL-terminated and truncated on a UTF-8
// character boundary, and returns status. A buffer too short for the
// error number is left alone.
func reportErrno(errBuf *C.char, errLen C.int64_t, status C.int, errnum int64, msg string) C.int {
	if errBuf == nil || errLen < errorHead {
		return status
	}
	e := (*C.struct_lx_error)(unsafe.Pointer(errBuf))
	e.errnum = C.int64_t(errnum)
	buf := unsafe.Slice((*byte)(unsafe.Pointer(errBuf)), int(errLen))
	writeMessage(buf[errorHead:], msg)
	return status
}

// writeMessage copies as much of msg as fits in buf, leaving room for the
// terminating NUL and never cutting a UTF-8 sequence in two.
func writeMessage(buf []byte, msg string) {
	if len(buf) == 0 {
		return
	}
	n := len(msg)
	if n > len(buf)-1 {
		n = len(buf) - 1
		for n > 0 && !utf8.RuneStart(msg[n]) {
			n--
		}
	}
	copy(buf, msg[:n])
	buf[n] = 0
}

// call runs body as the export name and returns its status: LX_OK, the
// status of the error body returns (its message written to the caller's
// buffer), or LX_INTERNAL for a panic. A memory fault on this goroutine is a
// panic for the duration (a bad pointer from C becomes an error, not a
// crash). Every export is one call whose body converts the arguments and
// calls into the packages, except the hot paths (gather, sample), which
// inline the same prologue to avoid a closure per call.
func call(name string, errBuf *C.char, errLen C.int64_t, body func() error) (status C.int) {
	defer guard(name, &status, errBuf, errLen)
	defer debug.SetPanicOnFault(faultsPanic())
	if err := body(); err != nil {
		return fail(errBuf, errLen, err)
	}
	return statusOK
}

// guard recovers a panic in the export name and reports it as LX_INTERNAL.
// call and every hand-written export defer it first thing.
func guard(name string, status *C.int, errBuf *C.char, errLen C.int64_t) {
	if r := recover(); r != nil {
		*status = report(errBuf, errLen, statusInternal, fmt.Sprintf("internal error: %s: %v", name, r))
	}
}

// faultsPanic makes a memory fault on the calling goroutine a recoverable
// panic rather than a crash, and returns the previous setting for the caller
// to restore: defer debug.SetPanicOnFault(faultsPanic()).
func faultsPanic() bool { return debug.SetPanicOnFault(true) }
