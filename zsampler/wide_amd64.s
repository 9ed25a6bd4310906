//go:build amd64

#include "textflag.h"

// ROUND(v, k, m, mask, dst): dst ^= mum(v ^ k, m) & mask in each 64-bit
// lane, where mum(a, m) = p ^ p>>32 with p = (a mod 2^32)·m. Y12 and Y15
// are scratch.
#define ROUND(v, k, m, mask, dst) \
	VPXOR    k, v, Y15;     \
	VPMULUDQ m, Y15, Y15;   \
	VPSRLQ   $32, Y15, Y12; \
	VPXOR    Y12, Y15, Y15; \
	VPAND    mask, Y15, Y15; \
	VPXOR    Y15, dst, dst

// func permWideAVX2(dst []int64, x0 uint64, k *[maxRounds]uint64, m *[4]uint64, wb, ma, mb uint64)
TEXT ·permWideAVX2(SB), NOSPLIT, $0-72
	MOVQ dst_base+0(FP), DI
	MOVQ dst_len+8(FP), CX
	MOVQ x0+24(FP), AX
	MOVQ k+32(FP), SI
	MOVQ m+40(FP), DX
	SHRQ $2, CX
	JZ   done

	VPBROADCASTQ 0(SI), Y0
	VPBROADCASTQ 8(SI), Y1
	VPBROADCASTQ 16(SI), Y2
	VPBROADCASTQ 24(SI), Y3
	VPBROADCASTQ 0(DX), Y4
	VPBROADCASTQ 8(DX), Y5
	VPBROADCASTQ 16(DX), Y6
	VPBROADCASTQ 24(DX), Y7
	VPBROADCASTQ ma+56(FP), Y8
	VPBROADCASTQ mb+64(FP), Y9
	MOVQ         wb+48(FP), X10
	MOVQ         AX, X11
	VPBROADCASTQ X11, Y11
	VPADDQ       lanes<>(SB), Y11, Y11

loop:
	VPSRLQ X10, Y11, Y13 // l = x >> wb
	VPAND  Y9, Y11, Y14  // r = x & mb
	ROUND(Y14, Y0, Y4, Y8, Y13)
	ROUND(Y13, Y1, Y5, Y9, Y14)
	ROUND(Y14, Y2, Y6, Y8, Y13)
	ROUND(Y13, Y3, Y7, Y9, Y14)
	VPSLLQ  X10, Y13, Y13
	VPOR    Y14, Y13, Y13
	VMOVDQU Y13, (DI)
	ADDQ    $32, DI
	VPADDQ  four<>(SB), Y11, Y11
	DECQ    CX
	JNZ     loop
	VZEROUPPER

done:
	RET

DATA lanes<>+0(SB)/8, $0
DATA lanes<>+8(SB)/8, $1
DATA lanes<>+16(SB)/8, $2
DATA lanes<>+24(SB)/8, $3
GLOBL lanes<>(SB), RODATA|NOPTR, $32

DATA four<>+0(SB)/8, $4
DATA four<>+8(SB)/8, $4
DATA four<>+16(SB)/8, $4
DATA four<>+24(SB)/8, $4
GLOBL four<>(SB), RODATA|NOPTR, $32
