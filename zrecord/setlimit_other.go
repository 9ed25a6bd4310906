//go:build !unix

package zrecord

// fdLimit describes the process's limit of open files, which this system
// does not set per process.
func fdLimit() string { return "not set by this system" }
