//go:build !amd64

package zrecord

import "unsafe"

// canPrefetch says the prefetch functions issue prefetches on this
// architecture: not here, where gathers touch records with loads instead
// (touchRecords).
const canPrefetch = false

// prefetchRecord does nothing here.
func prefetchRecord(p *byte, n int) {}

// prefetchEntriesAt does nothing here.
func prefetchEntriesAt(seg *byte, entries int, indices *int64, n int) {}

// prefetchEntriesFrom does nothing here.
func prefetchEntriesFrom(tables *unsafe.Pointer, indices *int64, n int) {}

// copyRecord copies a raw record: copy(to, from).
func copyRecord(to, from []byte, stream bool) { copy(to, from) }
