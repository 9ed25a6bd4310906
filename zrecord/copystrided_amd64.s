#include "textflag.h"

// func copyStridedAVX2(dst *byte, srcs *uintptr, n int, stride int)
//
// Copies stride bytes from each of the n addresses srcs[0:n] to dst, one
// after another: record k lands at dst + k*stride. 128 bytes at a time
// through four YMM registers, then 32, 8 and 1.
TEXT ·copyStridedAVX2(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ srcs+8(FP), R8
	MOVQ n+16(FP), R9
	MOVQ stride+24(FP), R10
	TESTQ R9, R9
	JLE  done
next:
	MOVQ (R8), SI
	MOVQ R10, CX
blocks128:
	CMPQ CX, $128
	JB   blocks32
	VMOVDQU 0(SI), Y0
	VMOVDQU 32(SI), Y1
	VMOVDQU 64(SI), Y2
	VMOVDQU 96(SI), Y3
	VMOVDQU Y0, 0(DI)
	VMOVDQU Y1, 32(DI)
	VMOVDQU Y2, 64(DI)
	VMOVDQU Y3, 96(DI)
	ADDQ $128, SI
	ADDQ $128, DI
	SUBQ $128, CX
	JMP  blocks128
blocks32:
	CMPQ CX, $32
	JB   blocks8
	VMOVDQU 0(SI), Y0
	VMOVDQU Y0, 0(DI)
	ADDQ $32, SI
	ADDQ $32, DI
	SUBQ $32, CX
	JMP  blocks32
blocks8:
	CMPQ CX, $8
	JB   bytes1
	MOVQ 0(SI), AX
	MOVQ AX, 0(DI)
	ADDQ $8, SI
	ADDQ $8, DI
	SUBQ $8, CX
	JMP  blocks8
bytes1:
	TESTQ CX, CX
	JZ   record
	MOVB 0(SI), AX
	MOVB AX, 0(DI)
	INCQ SI
	INCQ DI
	DECQ CX
	JMP  bytes1
record:
	ADDQ $8, R8
	DECQ R9
	JNZ  next
	VZEROUPPER
done:
	RET
