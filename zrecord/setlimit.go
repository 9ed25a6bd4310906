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
	setting := fmt.Sprintf("the stores the set keeps open (WithMaxOpen, %d now; loaderx's max_open_shards=)", t.cache.max)
	switch {
	case errors.Is(err, syscall.EMFILE):
		return fmt.Errorf("zrecord: set: open %s: the process is out of file descriptors (its limit RLIMIT_NOFILE, `ulimit -n`, is %s): "+
			"an open read-only store holds none, but one holds three while it opens, and a store whose files cannot be mapped keeps them: "+
			"close other files, lower %s, or raise the limit: %w", dir, fdLimit(), setting, err)
	case errors.Is(err, syscall.ENFILE):
		return fmt.Errorf("zrecord: set: open %s: the system is out of file descriptors (fs.file-max): lower %s, or raise the limit: %w", dir, setting, err)
	case errors.Is(err, syscall.ENOMEM):
		return fmt.Errorf("zrecord: set: open %s: out of memory mappings or address space: the process holds %d mappings against its limit "+
			"vm.max_map_count of %d, or reached its address-space limit (RLIMIT_AS); an open store holds one mapping per chunk file and "+
			"table segment: lower %s, or raise vm.max_map_count: %w", dir, mappings(), mapLimit(), setting, err)
	}
	return err
}
