#include "textflag.h"

// func entrySumSSE42(idx uint64, b *[20]byte) uint32
//
// The CRC-32C of idx (8 bytes, little endian) followed by b, computed with
// the SSE4.2 CRC32 instruction: what entrySum computes through hash/crc32,
// without its table dispatch for a 28-byte input.
TEXT ·entrySumSSE42(SB), NOSPLIT, $0-20
	MOVQ  idx+0(FP), AX
	MOVQ  b+8(FP), SI
	MOVL  $0xffffffff, DX
	CRC32Q AX, DX
	CRC32Q 0(SI), DX
	CRC32Q 8(SI), DX
	CRC32L 16(SI), DX
	NOTL  DX
	MOVL  DX, ret+16(FP)
	RET

// LOADENTRY checks the 24-byte table entry at BX, of index AX, against
// the CRC-32C of the index and the entry's first 20 bytes (its last 4),
// and copies those 20 bytes to DI and moves DI past them, or jumps to
// fail; it uses X0, R10 and DX.
#define LOADENTRY(fail) \
	MOVOU  0(BX), X0; \
	MOVL   16(BX), R10; \
	MOVL   $0xffffffff, DX; \
	CRC32Q AX, DX; \
	CRC32Q 0(BX), DX; \
	CRC32Q 8(BX), DX; \
	CRC32L R10, DX; \
	NOTL   DX; \
	CMPL   DX, 20(BX); \
	JNE    fail; \
	MOVOU  X0, 0(DI); \
	MOVL   R10, 16(DI); \
	ADDQ   $20, DI

// func loadEntriesSSE42(seg *byte, entries int, indices *int64, n int, locs *entry) int
//
// Checks the 24-byte table entries indices[0:n] of a segment of entries
// entries that starts at seg (entry i at seg + 24*i), each against the
// CRC-32C of its index and its first 20 bytes (its last 4), and copies the
// first 20 bytes of each good one to locs[k] (an entry: the same five
// little-endian uint32 fields in the same order). It returns the position
// of the first entry that does not match or whose index is not below
// entries (compared unsigned, so negative ones too), or n. The loads of
// successive entries do not wait for one another, so their cache misses
// overlap.
TEXT ·loadEntriesSSE42(SB), NOSPLIT, $0-48
	MOVQ seg+0(FP), SI
	MOVQ entries+8(FP), R12
	MOVQ indices+16(FP), R8
	MOVQ n+24(FP), R9
	MOVQ locs+32(FP), DI
	XORQ R11, R11
loop:
	CMPQ R11, R9
	JGE  done
	MOVQ (R8)(R11*8), AX
	CMPQ AX, R12
	JAE  done
	LEAQ (AX)(AX*2), BX
	LEAQ (SI)(BX*8), BX
	LOADENTRY(done)
	INCQ R11
	JMP  loop
done:
	MOVQ R11, ret+40(FP)
	RET

// func putEntriesSSE42(dst *byte, first uint64, ents *entry, n int)
//
// Writes the 24-byte table entries of records first .. first+n-1 to dst:
// for each, the five little-endian uint32 fields of ents[k] (an entry has
// them in that order) and then the CRC-32C of the index (8 bytes) followed
// by those 20 bytes, as putEntry writes one. The checksums of successive
// entries do not depend on one another, so they overlap in the pipeline.
TEXT ·putEntriesSSE42(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ first+8(FP), AX
	MOVQ ents+16(FP), SI
	MOVQ n+24(FP), CX
	TESTQ CX, CX
	JLE  pdone
ploop:
	MOVQ 0(SI), R8
	MOVQ 8(SI), R9
	MOVL 16(SI), R10
	MOVL $0xffffffff, DX
	CRC32Q AX, DX
	CRC32Q R8, DX
	CRC32Q R9, DX
	CRC32L R10, DX
	NOTL DX
	MOVQ R8, 0(DI)
	MOVQ R9, 8(DI)
	MOVL R10, 16(DI)
	MOVL DX, 20(DI)
	ADDQ $20, SI
	ADDQ $24, DI
	INCQ AX
	DECQ CX
	JNZ  ploop
pdone:
	RET

// func shortSumSSE42(p *byte, n int) uint32
//
// The CRC-32C of the n bytes at p, eight at a time and then one at a time:
// for the few bytes of a small record, the CRC instructions without
// hash/crc32's dispatch, which costs more than they do.
TEXT ·shortSumSSE42(SB), NOSPLIT, $0-20
	MOVQ p+0(FP), SI
	MOVQ n+8(FP), CX
	MOVL $0xffffffff, DX
sq8:
	CMPQ CX, $8
	JB   sb1
	CRC32Q 0(SI), DX
	ADDQ $8, SI
	SUBQ $8, CX
	JMP  sq8
sb1:
	TESTQ CX, CX
	JZ   sdone
	CRC32B 0(SI), DX
	INCQ SI
	DECQ CX
	JMP  sb1
sdone:
	NOTL DX
	MOVL DX, ret+16(FP)
	RET

// func loadEntriesFromSSE42(tables *unsafe.Pointer, indices *int64, n int, locs *entry) int
//
// loadEntriesSSE42 for entries of several tables: entry k of the batch is
// entry indices[k] of the table that starts at tables[k]. The caller has
// checked each index against its table. It returns the position of the
// first entry that does not match, or n.
TEXT ·loadEntriesFromSSE42(SB), NOSPLIT, $0-40
	MOVQ tables+0(FP), SI
	MOVQ indices+8(FP), R8
	MOVQ n+16(FP), R9
	MOVQ locs+24(FP), DI
	XORQ R11, R11
fromLoop:
	CMPQ R11, R9
	JGE  fromDone
	MOVQ (R8)(R11*8), AX
	MOVQ (SI)(R11*8), BX
	LEAQ (AX)(AX*2), CX
	LEAQ (BX)(CX*8), BX
	LOADENTRY(fromDone)
	INCQ R11
	JMP  fromLoop
fromDone:
	MOVQ R11, ret+32(FP)
	RET
