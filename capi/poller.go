package main

import "os"

// The Go runtime makes its network poller (an epoll descriptor and an
// eventfd on Linux) the first time the library opens a file, and if the
// process has no descriptor left at that moment it cannot make it and
// aborts the whole process: a fatal error, not a panic that an export could
// recover. Opening a file while the library loads makes the poller then,
// when descriptors are almost always to be had, so that running out of
// them later is an ordinary error (EMFILE) from the call that needed one.
func init() {
	if f, err := os.Open(os.DevNull); err == nil {
		_ = f.Close()
	}
}
