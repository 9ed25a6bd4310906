package main

import (
	"os"
	"runtime"

	"github.com/loaderx/loaderx/zrecord"
)

// The Go runtime runs Go code on at most GOMAXPROCS threads at once (its
// Ps), one per CPU by default. A C thread that calls an export needs a P
// for the call, and the native step pipeline starts one worker per CPU:
// while they gather, every P is busy and the caller's call waits for one
// to come free, which a worker in a long gather gives up only when it
// next blocks (measured: the consumer of 1 MiB batches on two cores
// waited 250-460 µs a step for steps made in 150 µs). So the library runs
// one P more than the CPUs, kept for the calling thread; the extra P does
// not widen a single call's fan-out (zrecord.SetDefaultThreads keeps that
// at the CPUs). A GOMAXPROCS set in the environment is left as it is.
func init() {
	if os.Getenv("GOMAXPROCS") != "" {
		return
	}
	n := runtime.GOMAXPROCS(0)
	zrecord.SetDefaultThreads(n)
	runtime.GOMAXPROCS(n + 1)
}
