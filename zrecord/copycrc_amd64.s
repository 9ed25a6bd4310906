#include "textflag.h"

// The copy-and-checksum paths of copyCRC (see copycrc.go for the folding
// constants and the meaning of a lane). Every block is loaded into
// registers once, stored to dst from them, and folded from them, so src
// is read once. The incoming state is XORed into the first block in its
// register only: dst gets the original bytes. When the blocks are folded
// down to one 128-bit remainder X, standing for the last 16 bytes done,
// the register after them is CRC32Q(CRC32Q(0, X.lo), X.hi); the tail of
// fewer than 16 bytes (and every input too short to fold) is copied and
// checksummed 8 bytes, then 1 byte, at a time with the CRC32 instruction.

// func cpuid(leaf, sub uint32) (eax, ebx, ecx, edx uint32)
TEXT ·cpuid(SB), NOSPLIT, $0-24
	MOVL leaf+0(FP), AX
	MOVL sub+4(FP), CX
	CPUID
	MOVL AX, eax+8(FP)
	MOVL BX, ebx+12(FP)
	MOVL CX, ecx+16(FP)
	MOVL DX, edx+20(FP)
	RET

// FOLDY folds the two lanes of accumulator A forward onto the block B
// with the constant pair K broadcast to both lanes, using T: A = A.lo*K.lo
// ^ A.hi*K.hi ^ B, per 128-bit lane.
#define FOLDY(A, B, K, T) \
	VPCLMULQDQ $0x00, K, A, T; \
	VPCLMULQDQ $0x11, K, A, A; \
	VPXOR      B, T, T; \
	VPXOR      T, A, A

// BLOCK128Y loads the 128 bytes at SI into Y4-Y7, stores them at DI with
// the store instruction ST, and folds Y0-Y3 onto them by 128 bytes (Y8).
#define BLOCK128Y(ST) \
	VMOVDQU 0(SI), Y4; \
	VMOVDQU 32(SI), Y5; \
	VMOVDQU 64(SI), Y6; \
	VMOVDQU 96(SI), Y7; \
	ST      Y4, 0(DI); \
	ST      Y5, 32(DI); \
	ST      Y6, 64(DI); \
	ST      Y7, 96(DI); \
	FOLDY(Y0, Y4, Y8, Y9); \
	FOLDY(Y1, Y5, Y8, Y10); \
	FOLDY(Y2, Y6, Y8, Y11); \
	FOLDY(Y3, Y7, Y8, Y12); \
	ADDQ    $128, SI; \
	ADDQ    $128, DI; \
	SUBQ    $128, CX

// PREFETCHAHEAD asks for the two lines 2 KiB past SI while that is before
// R9 (2 KiB before the end): the loop's loads then find their lines on the
// way, where the out-of-order window alone reaches about 1 KiB ahead.
#define PREFETCHAHEAD(skip) \
	CMPQ       SI, R9; \
	JAE        skip; \
	PREFETCHT0 2048(SI); \
	PREFETCHT0 2112(SI); \
skip:

// func copyCRCFoldAVX2(dst, src *byte, n int, state uint32, k *[8]uint64, stream bool) uint32
//
// With stream, the 128-byte blocks of the main loop are written with
// non-temporal stores (VMOVNTDQ), which do not read the destination's
// lines into the cache before overwriting them; dst is first brought to a
// 32-byte boundary a byte at a time.
TEXT ·copyCRCFoldAVX2(SB), NOSPLIT, $0-52
	MOVQ    dst+0(FP), DI
	MOVQ    src+8(FP), SI
	MOVQ    n+16(FP), CX
	MOVL    state+24(FP), DX
	MOVQ    k+32(FP), R8
	MOVBLZX stream+40(FP), R10
	CMPQ    CX, $256
	JB      avxTail8
	TESTQ   R10, R10
	JZ      avxStart

avxHead:
	TESTQ   $31, DI
	JZ      avxStart
	MOVBLZX 0(SI), AX
	MOVB    AX, 0(DI)
	CRC32B  AX, DX
	INCQ    SI
	INCQ    DI
	DECQ    CX
	JMP     avxHead

avxStart:
	LEAQ -2048(SI)(CX*1), R9
	// The lines of the first 2 KiB (or of the whole input, when shorter)
	// are asked for here, so that they arrive together instead of one miss
	// at a time. Not past the input's end: those lines belong to other
	// records, and on 256-byte ones asking for them cost a third of the
	// gather's time.
	MOVQ CX, R11
	CMPQ R11, $2048
	JBE  avxHeadFetch
	MOVQ $2048, R11
avxHeadFetch:
	LEAQ (SI)(R11*1), R11
	LEAQ 128(SI), R12
avxHeadFetchLoop:
	CMPQ R12, R11
	JAE  avxHeadFetched
	PREFETCHT0 (R12)
	ADDQ $64, R12
	JMP  avxHeadFetchLoop
avxHeadFetched:

	VMOVDQU 0(SI), Y0
	VMOVDQU 32(SI), Y1
	VMOVDQU 64(SI), Y2
	VMOVDQU 96(SI), Y3
	VMOVDQU Y0, 0(DI)
	VMOVDQU Y1, 32(DI)
	VMOVDQU Y2, 64(DI)
	VMOVDQU Y3, 96(DI)
	VMOVQ   DX, X4 // zeroes the rest of Y4
	VPXOR   Y4, Y0, Y0
	ADDQ    $128, SI
	ADDQ    $128, DI
	SUBQ    $128, CX
	VBROADCASTI128 0(R8), Y8 // D = 128
	TESTQ   R10, R10
	JNZ     avxLoopStream

avxLoop128:
	CMPQ CX, $128
	JB   avxFold4
	PREFETCHAHEAD(avxLoop128Fetched)
	BLOCK128Y(VMOVDQU)
	JMP  avxLoop128

avxLoopStream:
	CMPQ CX, $128
	JB   avxStreamDone
	PREFETCHAHEAD(avxLoopStreamFetched)
	BLOCK128Y(VMOVNTDQ)
	JMP  avxLoopStream

avxStreamDone:
	SFENCE // the streamed stores are ordered before the ones that follow

avxFold4:
	// Four accumulators 32 bytes apart into the last one.
	VBROADCASTI128 32(R8), Y8 // D = 32
	FOLDY(Y0, Y1, Y8, Y9)
	FOLDY(Y0, Y2, Y8, Y9)
	FOLDY(Y0, Y3, Y8, Y9)

avxLoop32:
	CMPQ CX, $32
	JB   avxFold2
	VMOVDQU 0(SI), Y4
	VMOVDQU Y4, 0(DI)
	FOLDY(Y0, Y4, Y8, Y9)
	ADDQ $32, SI
	ADDQ $32, DI
	SUBQ $32, CX
	JMP  avxLoop32

avxFold2:
	// The low lane 16 bytes forward onto the high one.
	VMOVDQU      48(R8), X8 // D = 16
	VEXTRACTI128 $1, Y0, X4
	VPCLMULQDQ   $0x00, X8, X0, X9
	VPCLMULQDQ   $0x11, X8, X0, X0
	VPXOR        X9, X0, X0
	VPXOR        X4, X0, X0
	CMPQ CX, $16
	JB   avxReduce
	VMOVDQU    0(SI), X4
	VMOVDQU    X4, 0(DI)
	VPCLMULQDQ $0x00, X8, X0, X9
	VPCLMULQDQ $0x11, X8, X0, X0
	VPXOR      X9, X0, X0
	VPXOR      X4, X0, X0
	ADDQ $16, SI
	ADDQ $16, DI
	SUBQ $16, CX

avxReduce:
	VMOVQ    X0, AX
	VPEXTRQ  $1, X0, BX
	VZEROUPPER
	XORL     DX, DX
	CRC32Q   AX, DX
	CRC32Q   BX, DX

avxTail8:
	CMPQ   CX, $8
	JB     avxTail1
	MOVQ   0(SI), AX
	MOVQ   AX, 0(DI)
	CRC32Q AX, DX
	ADDQ   $8, SI
	ADDQ   $8, DI
	SUBQ   $8, CX
	JMP    avxTail8

avxTail1:
	TESTQ  CX, CX
	JZ     avxDone
	MOVBLZX 0(SI), AX
	MOVB   AX, 0(DI)
	CRC32B AX, DX
	INCQ   SI
	INCQ   DI
	DECQ   CX
	JMP    avxTail1

avxDone:
	MOVL DX, ret+48(FP)
	RET

// FOLDX folds accumulator A (one lane) forward onto the block B with the
// constant pair K, using T.
#define FOLDX(A, B, K, T) \
	MOVO      A, T; \
	PCLMULQDQ $0x00, K, T; \
	PCLMULQDQ $0x11, K, A; \
	PXOR      T, A; \
	PXOR      B, A

// BLOCK64X loads the 64 bytes at SI into X4-X7, stores them at DI with
// the store instruction ST, and folds X0-X3 onto them by 64 bytes (X8).
#define BLOCK64X(ST) \
	MOVOU 0(SI), X4; \
	MOVOU 16(SI), X5; \
	MOVOU 32(SI), X6; \
	MOVOU 48(SI), X7; \
	ST    X4, 0(DI); \
	ST    X5, 16(DI); \
	ST    X6, 32(DI); \
	ST    X7, 48(DI); \
	FOLDX(X0, X4, X8, X9); \
	FOLDX(X1, X5, X8, X10); \
	FOLDX(X2, X6, X8, X11); \
	FOLDX(X3, X7, X8, X12); \
	ADDQ $64, SI; \
	ADDQ $64, DI; \
	SUBQ $64, CX

// func copyCRCFoldSSE42(dst, src *byte, n int, state uint32, k *[8]uint64, stream bool) uint32
//
// With stream, the 64-byte blocks of the main loop are written with
// non-temporal stores (MOVNTDQ), as in copyCRCFoldAVX2; dst is first
// brought to a 16-byte boundary a byte at a time.
TEXT ·copyCRCFoldSSE42(SB), NOSPLIT, $0-52
	MOVQ    dst+0(FP), DI
	MOVQ    src+8(FP), SI
	MOVQ    n+16(FP), CX
	MOVL    state+24(FP), DX
	MOVQ    k+32(FP), R8
	MOVBLZX stream+40(FP), R10
	CMPQ    CX, $128
	JB      sseTail8
	CMPQ    CX, $256
	JAE     sseHead
	XORL    R10, R10 // too short to be worth aligning: cached stores

sseHead:
	TESTQ R10, R10
	JZ    sseStart
	TESTQ $15, DI
	JZ    sseStart
	MOVBLZX 0(SI), AX
	MOVB    AX, 0(DI)
	CRC32B  AX, DX
	INCQ    SI
	INCQ    DI
	DECQ    CX
	JMP     sseHead

sseStart:

	MOVOU 0(SI), X0
	MOVOU 16(SI), X1
	MOVOU 32(SI), X2
	MOVOU 48(SI), X3
	MOVOU X0, 0(DI)
	MOVOU X1, 16(DI)
	MOVOU X2, 32(DI)
	MOVOU X3, 48(DI)
	MOVQ  DX, X4 // zeroes the high qword
	PXOR  X4, X0
	ADDQ  $64, SI
	ADDQ  $64, DI
	SUBQ  $64, CX
	MOVOU 16(R8), X8 // D = 64
	TESTQ R10, R10
	JNZ   sseLoopStream

sseLoop64:
	CMPQ CX, $64
	JB   sseFold4
	BLOCK64X(MOVOU)
	JMP  sseLoop64

sseLoopStream:
	CMPQ CX, $64
	JB   sseStreamDone
	BLOCK64X(MOVNTO)
	JMP  sseLoopStream

sseStreamDone:
	SFENCE // the streamed stores are ordered before the ones that follow

sseFold4:
	MOVOU 48(R8), X8 // D = 16
	FOLDX(X0, X1, X8, X9)
	FOLDX(X0, X2, X8, X9)
	FOLDX(X0, X3, X8, X9)

sseLoop16:
	CMPQ CX, $16
	JB   sseReduce
	MOVOU 0(SI), X4
	MOVOU X4, 0(DI)
	FOLDX(X0, X4, X8, X9)
	ADDQ $16, SI
	ADDQ $16, DI
	SUBQ $16, CX
	JMP  sseLoop16

sseReduce:
	MOVQ   X0, AX
	PEXTRQ $1, X0, BX
	XORL   DX, DX
	CRC32Q AX, DX
	CRC32Q BX, DX

sseTail8:
	CMPQ   CX, $8
	JB     sseTail1
	MOVQ   0(SI), AX
	MOVQ   AX, 0(DI)
	CRC32Q AX, DX
	ADDQ   $8, SI
	ADDQ   $8, DI
	SUBQ   $8, CX
	JMP    sseTail8

sseTail1:
	TESTQ  CX, CX
	JZ     sseDone
	MOVBLZX 0(SI), AX
	MOVB   AX, 0(DI)
	CRC32B AX, DX
	INCQ   SI
	INCQ   DI
	DECQ   CX
	JMP    sseTail1

sseDone:
	MOVL DX, ret+48(FP)
	RET
