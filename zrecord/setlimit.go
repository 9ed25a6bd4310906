package zrecord

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// The limits a lazy Set keeps under, and the errors that name them when a
// store opens past one anyway.

// defaultMapLimit is Linux's default vm.max_map_count, assumed where the
// limit cannot be read.
const defaultMapLimit = 65530

// DefaultMaxOpen is how many stores the lazy sets of a process made without
// WithMaxOpen keep open together, at most: a fifth of the process's limit
// of memory mappings (vm.max_map_count, read from /proc/sys/vm on Linux;
// Linux's default of 65,530 where it cannot be read), and so 13,106 at that
// default, but at least 64 and at most 2^20. A read-only store of one chunk
// file and one table segment holds two mappings and no file descriptor
// (WithReleaseFiles), so such stores hold at most two fifths of the limit,
// which leaves the rest to the process (its libraries, heap and other files:
// a Python process with NumPy and PyTorch holds a few thousand), and a
// dataset of 10,000 such shards stays open whole. A store of more chunk
// files holds one mapping more for each.
func DefaultMaxOpen() int { return defaultMaxOpen() }

var defaultMaxOpen = sync.OnceValue(func() int {
	return min(max(mapLimit()/5, 64), 1<<20)
})

// mapLimit is the process's limit of memory mappings.
func mapLimit() int {
	b, err := os.ReadFile("/proc/sys/vm/max_map_count")
	if err != nil {
		return defaultMapLimit
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || n <= 0 {
		return defaultMapLimit
	}
	return n
}

// mappings counts the process's memory mappings (the lines of
// /proc/self/maps), or -1 where they cannot be counted.
func mappings() int {
	b, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		return -1
	}
	return strings.Count(string(b), "\n")
}

// limitError adds to err, the failure to open the store in dir, the limit
// it ran into and how to stay under it, when it ran out of file
// descriptors (EMFILE, ENFILE) or of mappings or address space (ENOMEM,
// from mmap). The cause stays in the chain (errors.Is, the errno).
func (t *Set) limitError(err error, dir string) error {
	setting := fmt.Sprintf("lower the stores the set keeps open (WithMaxOpen, %d now; loaderx's max_open_shards=), or ", t.cache.max)
	var lim *openLimitError
	if errors.As(err, &lim) {
		err = lim.cause
	}
	return limitErrorWith(err, "set: open "+dir, setting)
}

// openLimitError is the error of an Open that ran out of file descriptors
// or mappings; its message names the limit and the setting that raises it.
type openLimitError struct {
	msg   string
	cause error
}

func (e *openLimitError) Error() string { return e.msg }
func (e *openLimitError) Unwrap() error { return e.cause }

// withLimit is err, the failure of an Open of dir, as an openLimitError
// when it ran out of a limit, else err.
func withLimit(err error, dir string) error {
	lim := limitErrorWith(err, "open "+dir, "")
	if lim == err {
		return err
	}
	return &openLimitError{msg: lim.Error(), cause: err}
}

// limitErrorWith names the limit err ran into in what (a verb and a path),
// with advice to give first (setting: "" or a clause ending in "or "); err
// itself when it ran into none.
func limitErrorWith(err error, what, setting string) error {
	switch {
	case errors.Is(err, syscall.EMFILE):
		return fmt.Errorf("zrecord: %s: the process is out of file descriptors (its limit RLIMIT_NOFILE, `ulimit -n`, is %s): "+
			"an open read-only store holds none, but one holds three while it opens, and a writable store or one whose files "+
			"cannot be mapped keeps them: close other files, %sraise the limit (ulimit -n): %w", what, fdLimit(), setting, err)
	case errors.Is(err, syscall.ENFILE):
		return fmt.Errorf("zrecord: %s: the system is out of file descriptors (fs.file-max): %sraise the limit: %w", what, setting, err)
	case errors.Is(err, syscall.ENOMEM):
		return fmt.Errorf("zrecord: %s: out of memory mappings or address space: the process holds %d mappings against its limit "+
			"vm.max_map_count of %d, or reached its address-space limit (RLIMIT_AS); an open store holds one mapping per chunk file and "+
			"table segment: %sraise vm.max_map_count (sysctl vm.max_map_count): %w", what, mappings(), mapLimit(), setting, err)
	}
	return err
}
