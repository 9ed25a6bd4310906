#include "textflag.h"

// PREFETCHALL issues the prefetch instruction INSTR for every 64-byte line
// of p[0:n], the arguments of the function it is the body of; a prefetch
// never faults, whatever the address.
#define PREFETCHALL(INSTR, loop, done) \
	MOVQ  p+0(FP), AX; \
	MOVQ  n+8(FP), CX; \
	TESTQ CX, CX; \
	JLE   done; \
loop: \
	INSTR (AX); \
	ADDQ  $64, AX; \
	SUBQ  $64, CX; \
	JG    loop; \
done: \
	RET

// func prefetchRecord(p *byte, n int)
//
// PREFETCHT0 (the lines go to the L1 cache) for n up to l1RecordMax,
// PREFETCHT1 (to the L2 cache) above it.
TEXT ·prefetchRecord(SB), NOSPLIT, $0-16
	CMPQ n+8(FP), $4096 // l1RecordMax
	JGT  recordL2
	PREFETCHALL(PREFETCHT0, recordL1Loop, recordL1Done)
recordL2:
	PREFETCHALL(PREFETCHT1, recordL2Loop, recordL2Done)

// func repMovsb(dst, src *byte, n int)
//
// Copies n bytes from src to dst, which do not overlap, with REP MOVSB.
TEXT ·repMovsb(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	REP; MOVSB
	RET

// func prefetchEntriesAt(seg *byte, entries int, indices *int64, n int)
//
// PREFETCHT0 of the 24-byte table entry of each of indices[0:n] that is
// below entries (compared unsigned, so negative ones are skipped), entry i
// at seg + 24*i: a whole batch's entry misses asked for in one loop. Both
// the entry's first and its last byte are asked for: one entry in four
// (i mod 8 is 2 or 5) crosses a 64-byte line, and the miss on its second
// line, left to loadEntries, stalled that loop; the second prefetch of an
// entry within one line finds the line already asked for.
TEXT ·prefetchEntriesAt(SB), NOSPLIT, $0-32
	MOVQ seg+0(FP), SI
	MOVQ entries+8(FP), R12
	MOVQ indices+16(FP), R8
	MOVQ n+24(FP), CX
	TESTQ CX, CX
	JLE  entriesDone
entriesLoop:
	MOVQ (R8), AX
	CMPQ AX, R12
	JAE  entriesNext
	LEAQ (AX)(AX*2), BX
	PREFETCHT0 (SI)(BX*8)
	PREFETCHT0 23(SI)(BX*8)
entriesNext:
	ADDQ $8, R8
	DECQ CX
	JNZ  entriesLoop
entriesDone:
	RET

// func prefetchEntriesFrom(tables *unsafe.Pointer, indices *int64, n int)
//
// prefetchEntriesAt (both lines of an entry that crosses one) for entries
// of several tables: entry k of the batch is entry indices[k] of the table
// that starts at tables[k], each index checked against its table by the
// caller.
TEXT ·prefetchEntriesFrom(SB), NOSPLIT, $0-24
	MOVQ tables+0(FP), SI
	MOVQ indices+8(FP), R8
	MOVQ n+16(FP), CX
	TESTQ CX, CX
	JLE  fromDone
fromLoop:
	MOVQ (R8), AX
	MOVQ (SI), BX
	LEAQ (AX)(AX*2), DX
	PREFETCHT0 (BX)(DX*8)
	PREFETCHT0 23(BX)(DX*8)
	ADDQ $8, R8
	ADDQ $8, SI
	DECQ CX
	JNZ  fromLoop
fromDone:
	RET

