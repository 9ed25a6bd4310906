#include "textflag.h"

// func prefetchLines(p *byte, n int)
//
// Issues PREFETCHT0 for every 64-byte line of p[0:n]. A prefetch never
// faults, whatever the address.
TEXT ·prefetchLines(SB), NOSPLIT, $0-16
	MOVQ p+0(FP), AX
	MOVQ n+8(FP), CX
	TESTQ CX, CX
	JLE  done
loop:
	PREFETCHT0 (AX)
	ADDQ $64, AX
	SUBQ $64, CX
	JG   loop
done:
	RET
