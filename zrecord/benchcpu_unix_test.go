//go:build unix

package zrecord_test

import (
	"syscall"
	"testing"
	"time"
)

// processCPU returns the user and system time the process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportCPU adds the metric cpu-ns/op: the process's CPU time per
// iteration since start. On a machine shared with other work it is a
// steadier figure than ns/op, which counts the time the benchmark waited
// for a core.
func reportCPU(b *testing.B, start time.Duration) {
	b.ReportMetric(float64(processCPU()-start)/float64(b.N), "cpu-ns/op")
}
