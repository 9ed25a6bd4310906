package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/loaderx/loaderx/zrecord"
	"github.com/loaderx/loaderx/zsampler"
)

func TestStatusOf(t *testing.T) {
	wrap := func(sentinel error) error { return fmt.Errorf("zrecord: something at index 7: %w", sentinel) }
	_, notExist := os.Open(filepath.Join(t.TempDir(), "missing"))
	cases := []struct {
		err  error
		want int
	}{
		{wrap(zrecord.ErrInvalidArgument), 1},
		{wrap(zrecord.ErrDuplicateIndex), 1},
		{wrap(zrecord.ErrSizeMismatch), 1},
		{wrap(zrecord.ErrBufferTooSmall), 1},
		{wrap(zrecord.ErrRecordTooLarge), 1},
		{wrap(zrecord.ErrReadOnly), 1},
		{wrap(zsampler.ErrInvalid), 1},
		{wrap(errSchemaInvalid), 1},
		{invalidf("x"), 1},
		{wrap(zrecord.ErrIndexOutOfRange), 2},
		{notExist, 3},
		{fmt.Errorf("open: %w: %w", zrecord.ErrNotStore, notExist), 3},
		{wrap(zrecord.ErrNotStore), 4},
		{fmt.Errorf("chunk missing: %w: %w", zrecord.ErrCorrupt, notExist), 4},
		{fmt.Errorf("dict.zr: %w: %w", zrecord.ErrMissingDict, notExist), 4},
		{wrap(zrecord.ErrVersion), 4},
		{wrap(zrecord.ErrCorrupt), 4},
		{wrap(zrecord.ErrMissingDict), 4},
		{wrap(zrecord.ErrDecode), 4},
		{wrap(errSchemaCorrupt), 4},
		{wrap(zrecord.ErrClosed), 5},
		{badHandle(3, 5), 5},
		{badHandle(6, 5), 1},
		{badHandle(0, 5), 1},
		{&fs.PathError{Op: "write", Path: "/x", Err: errors.New("disk full")}, 6},
		{errors.New("unknown"), 6},
		{wrap(zrecord.ErrLocked), 7},
		{wrap(zrecord.ErrExists), 9},
		{&fs.PathError{Op: "mkdir", Path: "/x", Err: fs.ErrExist}, 9},
	}
	for _, c := range cases {
		if got := int(statusOf(c.err)); got != c.want {
			t.Errorf("statusOf(%q) = %d, want %d", c.err, got, c.want)
		}
	}
}

func TestErrnoOf(t *testing.T) {
	_, notExist := os.Open(filepath.Join(t.TempDir(), "missing"))
	cases := []struct {
		err  error
		want int64
	}{
		{notExist, int64(syscall.ENOENT)},
		{fmt.Errorf("write 0.chunk: %w", &fs.PathError{Op: "write", Path: "/x", Err: syscall.ENOSPC}), int64(syscall.ENOSPC)},
		{wrap7(zrecord.ErrCorrupt), 0},
		{errors.New("plain"), 0},
	}
	for _, c := range cases {
		if got := errnoOf(c.err); got != c.want {
			t.Errorf("errnoOf(%q) = %d, want %d", c.err, got, c.want)
		}
	}
}

func wrap7(sentinel error) error { return fmt.Errorf("zrecord: something at index 7: %w", sentinel) }

func TestWriteMessage(t *testing.T) {
	cases := []struct {
		size int
		msg  string
		want string
	}{
		{16, "short", "short"},
		{6, "exactly", "exact"},
		{1, "anything", ""},
		{5, "ab€cd", "ab"}, // € is 3 bytes: it does not fit whole in 4
		{6, "ab€cd", "ab€"},
	}
	for _, c := range cases {
		buf := make([]byte, c.size+1)
		buf[c.size] = 0xAA // guard byte past the buffer
		writeMessage(buf[:c.size], c.msg)
		end := 0
		for end < c.size && buf[end] != 0 {
			end++
		}
		if end == c.size {
			t.Errorf("%q in %d bytes: no NUL", c.msg, c.size)
			continue
		}
		if got := string(buf[:end]); got != c.want {
			t.Errorf("%q in %d bytes = %q, want %q", c.msg, c.size, got, c.want)
		}
		if buf[c.size] != 0xAA {
			t.Errorf("%q in %d bytes: wrote past the buffer", c.msg, c.size)
		}
	}
	writeMessage(nil, "no buffer") // must not panic
}

func TestHandles(t *testing.T) {
	s, err := zrecord.Create(filepath.Join(t.TempDir(), "s"))
	if err != nil {
		t.Fatal(err)
	}
	a := register(s)
	b := register(s)
	if a <= 0 || b != a+1 {
		t.Fatalf("handles %d then %d", a, b)
	}
	if got, err := lookup(a); got != s || err != nil {
		t.Fatalf("lookup(%d) = %v, %v", a, got, err)
	}
	if got, err := release(b); got != s || err != nil {
		t.Fatalf("release(%d) = %v, %v", b, got, err)
	}
	if got, err := release(b); got != nil || err != nil {
		t.Fatalf("second release(%d) = %v, %v: closing twice must be a no-op", b, got, err)
	}
	if _, err := lookup(b); int(statusOf(err)) != 5 {
		t.Fatalf("lookup of a released handle: %v", err)
	}
	if _, err := lookup(b + 1); int(statusOf(err)) != 1 {
		t.Fatalf("lookup of a handle never issued: %v", err)
	}
	if _, err := release(-1); int(statusOf(err)) != 1 {
		t.Fatalf("release(-1): %v", err)
	}
	if got, _ := release(a); got != s {
		t.Fatal("release(a) lost the store")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}
