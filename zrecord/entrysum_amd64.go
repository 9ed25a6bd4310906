package zrecord

import (
	"hash/crc32"
	"unsafe"

	"golang.org/x/sys/cpu"
)

// hasCRC32C says the CPU has the SSE4.2 CRC32 instruction.
var hasCRC32C = cpu.X86.HasSSE42

// entrySumSSE42 is entrySum(int64(idx), b[:]) on a CPU with SSE4.2.
//
//go:noescape
func entrySumSSE42(idx uint64, b *[20]byte) uint32

// entrySumFast returns entrySum(idx, b): a table entry is checked on every
// gather, and for its 28 bytes hash/crc32's dispatch costs several times the
// CRC instructions themselves (about 40 ns against 5 ns a record).
func entrySumFast(idx int64, b []byte) uint32 {
	if hasCRC32C {
		return entrySumSSE42(uint64(idx), (*[20]byte)(b[:20]))
	}
	return entrySum(idx, b)
}

// loadEntriesSSE42 is loadEntries on a CPU with SSE4.2, for n indices.
//
//go:noescape
func loadEntriesSSE42(seg *byte, entries int, indices *int64, n int, locs *entry) int

// loadEntries checks the checksums of the 24-byte table entries at
// indices of the segment seg (entry i at byte 24*i), and decodes each good
// one into locs[k] (len(locs) >= len(indices)). It returns the position in
// indices of the first entry that does not match or lies past seg, or
// len(indices). The caller has range-checked the indices, but they may sit
// in memory another thread can write, so each is checked again as it is
// read. One call does a whole batch, where entrySumFast, a call per entry,
// makes its caller keep its state in memory around every entry.
func loadEntries(seg []byte, indices []int64, locs []entry) int {
	if !hasCRC32C || len(indices) == 0 {
		return loadEntriesGo(seg, indices, locs)
	}
	_ = locs[len(indices)-1]
	// In slices of loadEntriesSlice indices: the runtime cannot stop a
	// goroutine inside assembly, so one call over millions of entries
	// would hold up every garbage collection of the process.
	for lo := 0; lo < len(indices); lo += loadEntriesSlice {
		hi := min(len(indices), lo+loadEntriesSlice)
		n := loadEntriesSSE42(unsafe.SliceData(seg), len(seg)/24, &indices[lo], hi-lo, &locs[lo])
		if n < hi-lo {
			return lo + n
		}
	}
	return len(indices)
}

// loadEntriesSlice is how many entries one assembly call checks.
const loadEntriesSlice = 4096

// putEntriesSSE42 is putEntries on a CPU with SSE4.2, for n entries.
//
//go:noescape
func putEntriesSSE42(dst *byte, first uint64, ents *entry, n int)

// putEntries writes the table entries ents of records first, first+1, ...
// into dst (24 bytes each, len(dst) >= 24*len(ents)) in the current
// layout, as putEntry writes one: an append of many small records writes
// as many table bytes as record bytes, and a call per entry costs more than
// its checksum.
func putEntries(dst []byte, first int64, ents []entry) {
	if !hasCRC32C || len(ents) == 0 {
		putEntriesGo(dst, first, ents)
		return
	}
	_ = dst[24*len(ents)-1]
	// In slices, as loadEntries: the runtime cannot stop a goroutine
	// inside assembly.
	for lo := 0; lo < len(ents); lo += loadEntriesSlice {
		hi := min(len(ents), lo+loadEntriesSlice)
		putEntriesSSE42(&dst[24*lo], uint64(first)+uint64(lo), &ents[lo], hi-lo)
	}
}

// shortSumSSE42 is shortSum on a CPU with SSE4.2, for n bytes at p.
//
//go:noescape
func shortSumSSE42(p *byte, n int) uint32

// shortSum is dataSum of a record of at most shortSumMax bytes.
func shortSum(b []byte) uint32 {
	if !hasCRC32C || len(b) == 0 {
		return crc32.Checksum(b, castagnoli)
	}
	return shortSumSSE42(&b[0], len(b))
}

// loadEntriesFromSSE42 is loadEntriesFrom on a CPU with SSE4.2, for n
// indices.
//
//go:noescape
func loadEntriesFromSSE42(tables *unsafe.Pointer, indices *int64, n int, locs *entry) int

// loadEntriesFrom is loadEntries for the entries of several tables: entry
// k of the batch is entry indices[k] of the table that starts at
// tables[k], which holds it (the caller checked). It returns the position
// of the first entry that does not match its checksum, or len(indices).
func loadEntriesFrom(tables []unsafe.Pointer, indices []int64, locs []entry) int {
	if !hasCRC32C || len(indices) == 0 {
		return loadEntriesFromGo(tables, indices, locs)
	}
	_, _ = locs[len(indices)-1], tables[len(indices)-1]
	for lo := 0; lo < len(indices); lo += loadEntriesSlice {
		hi := min(len(indices), lo+loadEntriesSlice)
		if n := loadEntriesFromSSE42(&tables[lo], &indices[lo], hi-lo, &locs[lo]); n < hi-lo {
			return lo + n
		}
	}
	return len(indices)
}
