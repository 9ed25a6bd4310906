//go:build !amd64

package zrecord

// canPrefetch says prefetchLines issues prefetches on this architecture.
const canPrefetch = false

// prefetchLines does nothing here: gathers touch records with loads
// instead (touchRecords).
func prefetchLines(p *byte, n int) {}

// prefetchRecord does nothing here, as prefetchLines.
func prefetchRecord(p *byte, n int) {}

// prefetchEntriesAt does nothing here, as prefetchLines.
func prefetchEntriesAt(seg *byte, entries int, indices *int64, n int) {}

// copyRecord copies a raw record: copy(to, from).
func copyRecord(to, from []byte) { copy(to, from) }
