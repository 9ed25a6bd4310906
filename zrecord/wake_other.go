//go:build !linux

package zrecord

// sleepForJob waits for a job offered to the queue and returns it: parked
// on the queue itself, where a futex is not at hand (see wake_linux.go).
func sleepForJob() *job { return <-jobs }

// wakeHelpers does nothing here: the job's offer wakes a parked helper.
func wakeHelpers(n int) {}
