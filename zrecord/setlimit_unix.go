//go:build unix

package zrecord

import (
	"fmt"
	"syscall"
)

// fdLimit describes the process's limit of open files: "1024 (hard limit
// 4096)".
func fdLimit() string {
	var r syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil {
		return "unknown"
	}
	return fmt.Sprintf("%d (hard limit %d)", r.Cur, r.Max)
}
