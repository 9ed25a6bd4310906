#include "textflag.h"

// func prefetchLines(p *byte, n int)
//
// Issues PREFETCHT0 for every 64-byte line of p[0:n]. A prefetch never
// faults, whatever the address.
TEXT ·prefetchLines(SB), NOSPLIT, $0-16
	MOVQ  p+0(FP), AX
	MOVQ  n+8(FP), CX
	TESTQ CX, CX
	JLE   done
loop:
	PREFETCHT0 (AX)
	ADDQ  $64, AX
	SUBQ  $64, CX
	JG    loop
done:
	RET

// func prefetchRecord(p *byte, n int)
//
// prefetchLines with PREFETCHT1: the lines go to the L2 cache.
TEXT ·prefetchRecord(SB), NOSPLIT, $0-16
	MOVQ  p+0(FP), AX
	MOVQ  n+8(FP), CX
	TESTQ CX, CX
	JLE   recordDone
recordLoop:
	PREFETCHT1 (AX)
	ADDQ  $64, AX
	SUBQ  $64, CX
	JG    recordLoop
recordDone:
	RET

// func repMovsb(dst, src *byte, n int)
//
// Copies n bytes from src to dst, which do not overlap, with REP MOVSB.
TEXT ·repMovsb(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	REP; MOVSB
	RET
