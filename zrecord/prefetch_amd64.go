package zrecord

// canPrefetch says prefetchLines issues prefetches on this architecture.
const canPrefetch = true

// prefetchLines asks the CPU to load the n bytes at p into its caches.
// It never faults, whatever p is.
//
//go:noescape
func prefetchLines(p *byte, n int)
