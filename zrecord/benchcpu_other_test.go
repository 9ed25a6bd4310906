//go:build !unix

package zrecord_test

import (
	"testing"
	"time"
)

func processCPU() time.Duration { return 0 }

// reportCPU reports nothing where the process's CPU time is not read.
func reportCPU(*testing.B, time.Duration) {}
