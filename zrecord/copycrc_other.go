//go:build !amd64

package zrecord

// copyCRCPaths lists the paths of copyCRC this CPU runs, fastest first:
// here only "generic", which copies and checksums a cache-sized block at a
// time (hash/crc32 uses the CPU's CRC instruction where there is one).
func copyCRCPaths() []crcPath { return []crcPath{genericCRCPath} }
