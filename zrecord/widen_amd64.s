#include "textflag.h"

// NOFENCE is the empty FENCE argument of WIDEN.
#define NOFENCE

// WIDEN defines a kernel: func name(dst, src *byte, n int, base uint64).
// n is a multiple of the values one 32-byte output vector holds (per).
// BCAST broadcasts base over Y0, ZX zero-extends inb input bytes into a
// 32-byte vector, and ADD adds the lanes of the element size. The main loop
// does four vectors at a time, the second loop the rest one by one. Loads
// are unaligned: records are packed back to back in a chunk. ST stores a
// vector: VMOVDQU, or VMOVNTDQ for the streaming kernels (dst then on a
// 32-byte boundary), which FENCE (SFENCE) orders before later stores.
#define WIDEN(name, BCAST, ZX, ADD, inb, per, ST, FENCE) \
TEXT name(SB), NOSPLIT, $0-32 \
	MOVQ dst+0(FP), DI \
	MOVQ src+8(FP), SI \
	MOVQ n+16(FP), CX \
	BCAST base+24(FP), Y0 \
	SHRQ $(per), CX \
four: \
	CMPQ CX, $4 \
	JB   one \
	ZX   (SI), Y1 \
	ZX   (inb)(SI), Y2 \
	ZX   (2*inb)(SI), Y3 \
	ZX   (3*inb)(SI), Y4 \
	ADD  Y0, Y1, Y1 \
	ADD  Y0, Y2, Y2 \
	ADD  Y0, Y3, Y3 \
	ADD  Y0, Y4, Y4 \
	ST   Y1, (DI) \
	ST   Y2, 32(DI) \
	ST   Y3, 64(DI) \
	ST   Y4, 96(DI) \
	ADDQ $(4*inb), SI \
	ADDQ $128, DI \
	SUBQ $4, CX \
	JMP  four \
one: \
	TESTQ CX, CX \
	JZ   done \
	ZX   (SI), Y1 \
	ADD  Y0, Y1, Y1 \
	ST   Y1, (DI) \
	ADDQ $(inb), SI \
	ADDQ $32, DI \
	DECQ CX \
	JMP  one \
done: \
	FENCE \
	VZEROUPPER \
	RET

// per is given as the shift that divides n by the values per vector.
WIDEN(·widen8to16AVX2, VPBROADCASTW, VPMOVZXBW, VPADDW, 16, 4, VMOVDQU, NOFENCE)
WIDEN(·widen8to32AVX2, VPBROADCASTD, VPMOVZXBD, VPADDD, 8, 3, VMOVDQU, NOFENCE)
WIDEN(·widen8to64AVX2, VPBROADCASTQ, VPMOVZXBQ, VPADDQ, 4, 2, VMOVDQU, NOFENCE)
WIDEN(·widen16to32AVX2, VPBROADCASTD, VPMOVZXWD, VPADDD, 16, 3, VMOVDQU, NOFENCE)
WIDEN(·widen16to64AVX2, VPBROADCASTQ, VPMOVZXWQ, VPADDQ, 8, 2, VMOVDQU, NOFENCE)
WIDEN(·widen32to64AVX2, VPBROADCASTQ, VPMOVZXDQ, VPADDQ, 16, 2, VMOVDQU, NOFENCE)

// The streaming kernels, for a destination past the caches (a data
// loader's slot, see slotStreamMin).
WIDEN(·widen8to16AVX2Stream, VPBROADCASTW, VPMOVZXBW, VPADDW, 16, 4, VMOVNTDQ, SFENCE)
WIDEN(·widen8to32AVX2Stream, VPBROADCASTD, VPMOVZXBD, VPADDD, 8, 3, VMOVNTDQ, SFENCE)
WIDEN(·widen8to64AVX2Stream, VPBROADCASTQ, VPMOVZXBQ, VPADDQ, 4, 2, VMOVNTDQ, SFENCE)
WIDEN(·widen16to32AVX2Stream, VPBROADCASTD, VPMOVZXWD, VPADDD, 16, 3, VMOVNTDQ, SFENCE)
WIDEN(·widen16to64AVX2Stream, VPBROADCASTQ, VPMOVZXWQ, VPADDQ, 8, 2, VMOVNTDQ, SFENCE)
WIDEN(·widen32to64AVX2Stream, VPBROADCASTQ, VPMOVZXDQ, VPADDQ, 16, 2, VMOVNTDQ, SFENCE)
