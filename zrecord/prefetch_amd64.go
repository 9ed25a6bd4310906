package zrecord

import (
	"unsafe"

	"golang.org/x/sys/cpu"
)

// canPrefetch says the prefetch functions issue prefetches on this
// architecture.
const canPrefetch = true

// prefetchRecord asks the CPU to load the n bytes at p, the lines of a
// record copied a little later (see prefetchAhead), into its L1 cache
// (PREFETCHT0) when n is at most l1RecordMax, whose value the assembly
// repeats, and into its L2 cache (PREFETCHT1) otherwise. It never faults,
// whatever p is.
//
//go:noescape
func prefetchRecord(p *byte, n int)

// prefetchEntriesAt asks the CPU to load the 24-byte table entries at
// indices[0:n] of a segment of entries entries that starts at seg (entry i
// at byte 24*i), skipping the indices not below entries. It never faults.
//
//go:noescape
func prefetchEntriesAt(seg *byte, entries int, indices *int64, n int)

// prefetchEntriesFrom is prefetchEntriesAt for the entries of several
// tables: entry k of the batch is entry indices[k] of the table that
// starts at tables[k], which holds it (the caller checked).
//
//go:noescape
func prefetchEntriesFrom(tables *unsafe.Pointer, indices *int64, n int)

// repMovsb copies n bytes from src to dst (not overlapping) with REP MOVSB.
//
//go:noescape
func repMovsb(dst, src *byte, n int)

// useRepMovsb says the CPU has fast REP MOVSB (ERMS) and the race
// detector, which does not see copies made in assembly, is off.
var useRepMovsb = cpu.X86.HasERMS && !raceBuild

// Records of repMovsbMin to repMovsbMax bytes are copied with REP MOVSB
// where the CPU makes it fast and both ends are aligned to a cache line:
// there, on 2 KiB records, it is about 5-7 % faster than the runtime's
// copy, which moves records of up to 2 KiB through 16-byte registers, and
// on 12 KiB ones no slower. Into a destination 16 bytes off a line it was
// about 15 % slower, so other copies of that size, and smaller ones (REP
// MOVSB's start-up), keep the runtime's copy. Larger ones are copied with
// REP MOVSB wherever they lie: on random 64 KiB and 1 MiB records from 128
// MiB, seven alternated rounds, it moved 1.07-1.13x the bytes a second of
// the runtime's copy at 64 KiB and 1.3-1.45x at 1 MiB, on one goroutine or
// two, into a destination aligned to a line or 16 bytes off one.
const (
	repMovsbMin = 1 << 10
	repMovsbMax = 16 << 10
)

// copyRecord copies a raw record: copy(to, from). With stream (a call of
// streamMin bytes or more) it is the runtime's copy, which writes pieces of
// 1 MiB or more with non-temporal stores: on random 1 MiB records in
// batches of 64 MiB, two goroutines of REP MOVSB took 1.15x the time of
// one goroutine of the runtime's copy, where at 16 MiB they took 0.6x.
func copyRecord(to, from []byte, stream bool) {
	n := min(len(to), len(from))
	if useRepMovsb && n >= repMovsbMin && !stream {
		// REP MOVSB is fast between addresses aligned to a cache line,
		// and, up to repMovsbMax, slower than the runtime's copy
		// otherwise (a NumPy buffer of a few hundred KiB starts 16 bytes
		// into a page).
		dst, src := unsafe.SliceData(to), unsafe.SliceData(from)
		if n > repMovsbMax || (uintptr(unsafe.Pointer(dst))|uintptr(unsafe.Pointer(src)))&63 == 0 {
			repMovsb(dst, src, n)
			return
		}
	}
	copy(to, from)
}
