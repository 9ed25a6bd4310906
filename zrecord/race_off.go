//go:build !race

package zrecord

// raceBuild says the race detector is on: copies that it must see go
// through the runtime's copy, which reports them, rather than assembly.
const raceBuild = false
