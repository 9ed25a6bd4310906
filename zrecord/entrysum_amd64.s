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
