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

// COPYQ copies the qword at -8(S)(DI*1) to -8(D)(DI*1) and adds it to
// the checksum register C, through AX.
#define COPYQ(S, D, C) \
	MOVQ   -8(S)(DI*1), AX; \
	MOVQ   AX, -8(D)(DI*1); \
	CRC32Q AX, C

// COPYB is COPYQ for the byte at (S)(DI*1).
#define COPYB(S, D, C) \
	MOVBLZX (S)(DI*1), AX; \
	MOVB    AX, (D)(DI*1); \
	CRC32B  AX, C

// func copyCRCStridedX4(dst *byte, srcs *uintptr, sums *uint32, groups int, stride int)
//
// Copies stride bytes from each of the 4*groups addresses srcs[0:4*groups]
// to dst, record k at dst + k*stride, and writes the CRC-32C of record k
// to sums[k]. Four records at a time: each has its own checksum register
// and CRC32 chain, so the four chains run side by side and the CRC32
// instruction's throughput (8 bytes a cycle) is what bounds the loop, not
// its latency; no record pays the fold-down and reduction that a folding
// path pays per input. In the loop, R8-R11 point at the ends of the four
// sources, R12-R15 at the ends of their places in dst, BX, CX, DX and SI
// hold the four checksum registers, AX carries the bytes (its low byte
// for CRC32B), and DI counts up to 0 from -stride; the frame keeps dst,
// srcs, sums and groups as they advance.
TEXT ·copyCRCStridedX4(SB), NOSPLIT, $32-40
	MOVQ dst+0(FP), SI
	MOVQ SI, d-8(SP)
	MOVQ srcs+8(FP), SI
	MOVQ SI, s-16(SP)
	MOVQ sums+16(FP), SI
	MOVQ SI, c-24(SP)
	MOVQ groups+24(FP), DI
	MOVQ DI, left-32(SP)
	TESTQ DI, DI
	JLE  x4Done

x4Group:
	MOVQ s-16(SP), AX
	MOVQ stride+32(FP), DI
	MOVQ 0(AX), R8
	MOVQ 8(AX), R9
	MOVQ 16(AX), R10
	MOVQ 24(AX), R11
	ADDQ DI, R8
	ADDQ DI, R9
	ADDQ DI, R10
	ADDQ DI, R11
	MOVQ d-8(SP), R12
	ADDQ DI, R12
	LEAQ (R12)(DI*1), R13
	LEAQ (R13)(DI*1), R14
	LEAQ (R14)(DI*1), R15
	MOVL $0xffffffff, BX
	MOVL BX, CX
	MOVL BX, DX
	MOVL BX, SI
	NEGQ DI
	ADDQ $8, DI
	JG   x4Bytes

x4Quads:
	COPYQ(R8, R12, BX)
	COPYQ(R9, R13, CX)
	COPYQ(R10, R14, DX)
	COPYQ(R11, R15, SI)
	ADDQ $8, DI
	JLE  x4Quads

x4Bytes:
	SUBQ $8, DI
	JZ   x4Sums

x4Byte:
	COPYB(R8, R12, BX)
	COPYB(R9, R13, CX)
	COPYB(R10, R14, DX)
	COPYB(R11, R15, SI)
	INCQ DI
	JNZ  x4Byte

x4Sums:
	MOVQ c-24(SP), AX
	NOTL BX
	NOTL CX
	NOTL DX
	NOTL SI
	MOVL BX, 0(AX)
	MOVL CX, 4(AX)
	MOVL DX, 8(AX)
	MOVL SI, 12(AX)
	ADDQ $16, AX
	MOVQ AX, c-24(SP)
	ADDQ $32, s-16(SP)
	MOVQ R15, d-8(SP)
	DECQ left-32(SP)
	JNZ  x4Group

x4Done:
	RET
