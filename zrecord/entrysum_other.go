//go:build !amd64

package zrecord

import (
	"hash/crc32"
	"unsafe"
)

// entrySumFast returns entrySum(idx, b).
func entrySumFast(idx int64, b []byte) uint32 { return entrySum(idx, b) }

// loadEntries checks the checksums of the 24-byte table entries at
// indices of the segment seg, which holds all of them (entry i at byte
// 24*i), and decodes each good one into locs[k]. It returns the position
// in indices of the first entry that does not match, or len(indices).
func loadEntries(seg []byte, indices []int64, locs []entry) int {
	return loadEntriesGo(seg, indices, locs)
}

// loadEntriesFrom is loadEntries for the entries of several tables: entry
// k of the batch is entry indices[k] of the table that starts at
// tables[k], which holds it (the caller checked).
func loadEntriesFrom(tables []unsafe.Pointer, indices []int64, locs []entry) int {
	return loadEntriesFromGo(tables, indices, locs)
}

// putEntries writes the table entries ents of records first, first+1, ...
// into dst in the current layout, as putEntry writes one.
func putEntries(dst []byte, first int64, ents []entry) { putEntriesGo(dst, first, ents) }

// shortSum is dataSum of a record of at most shortSumMax bytes.
func shortSum(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }
