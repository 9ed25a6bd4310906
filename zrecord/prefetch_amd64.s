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

// func prefetchLines(p *byte, n int)
//
// PREFETCHT0: the lines go to the L1 cache.
TEXT ·prefetchLines(SB), NOSPLIT, $0-16
	PREFETCHALL(PREFETCHT0, linesLoop, linesDone)

// func prefetchRecord(p *byte, n int)
//
// PREFETCHT1: the lines go to the L2 cache.
TEXT ·prefetchRecord(SB), NOSPLIT, $0-16
	PREFETCHALL(PREFETCHT1, recordLoop, recordDone)

// func repMovsb(dst, src *byte, n int)
//
// Copies n bytes from src to dst, which do not overlap, with REP MOVSB.
TEXT ·repMovsb(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	REP; MOVSB
	RET
