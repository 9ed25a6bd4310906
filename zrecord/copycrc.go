package zrecord

import (
	"hash/crc32"
	"math/bits"
)

// copyCRC copies src into dst (len(dst) >= len(src); dst and src do not
// overlap) and returns crc32.Update(crc, castagnoli, src): the checksum of
// the copied bytes, continued from crc, which is what dataSum returns for
// a whole record when crc is 0.
//
// It exists so that checking a raw record on its way out costs one pass
// over its bytes instead of two: a copy followed by a checksum of the copy
// reads every byte twice, and on the gather benchmarks that second read
// cost a third of the throughput. Each path loads a block of src into
// registers, stores those registers to dst and feeds the same registers to
// the checksum, so src is read once and dst written once.
//
// The path is chosen once, by CPU feature, in copyCRCPaths (one file per
// architecture); tests and benchmarks switch copyCRCImpl to force each.
// Inputs are handed to a path in pieces of at most copyCRCPiece bytes.
func copyCRC(dst, src []byte, crc uint32) uint32 {
	return copyCRCPieces(copyCRCImpl.fn, dst, src, crc)
}

// copyCRCStream is copyCRC for a destination that is not read again soon,
// a batch larger than the caches (see streamMin): where the path can, it
// writes dst with non-temporal stores, which skip reading each line of dst
// into the cache before overwriting it. That read is a third of the memory
// traffic of a copy whose destination is not cached; the runtime's copy
// avoids it too, for large copies (REP MOVS, non-temporal stores).
func copyCRCStream(dst, src []byte, crc uint32) uint32 {
	return copyCRCPieces(copyCRCImpl.stream, dst, src, crc)
}

func copyCRCPieces(fn func(dst, src []byte, crc uint32) uint32, dst, src []byte, crc uint32) uint32 {
	dst = dst[:len(src)]
	for len(src) > copyCRCPiece {
		crc = fn(dst[:copyCRCPiece], src[:copyCRCPiece], crc)
		dst, src = dst[copyCRCPiece:], src[copyCRCPiece:]
	}
	return fn(dst, src, crc)
}

// streamMin is the batch size from which a gather's raw copies write with
// streaming stores (copyCRCStream, copyRecord): that of the L3 cache of a
// current server core complex (32 MiB), past which the batch would leave
// the caches before its reader gets to it anyway. On random 1 MiB records
// into a reused buffer, two goroutines, checked: streamed copies took
// 1.17x the time of cached ones in batches of 16 MiB, 0.87x at 32 MiB and
// 0.77x at 64 MiB (nine alternated rounds each). The threshold had been 8
// MiB a goroutine, from the L2 cache.
const streamMin = 32 << 20

// streamSlotMin is streamMin for a data loader's slots (GatherSlot):
// several batches are in flight, each in a buffer of its own and read
// later by another core, so they outgrow the caches together long before
// one batch would. Where that starts is a matter of the CPU more than of
// its cache sizes, so each copyCRC path carries its own (slotStreamMin),
// measured on a CPU that takes it:
//
//   - avx2-vpclmul, 8 MiB: on an AMD EPYC (Zen 5), two cores and a 32 MiB
//     L3 cache, the default loader (three alternated runs each): over 64
//     KiB records in batches of 4 MiB, 0.93-1.00x np.take streamed and
//     1.04-1.23x cached; over 1 MiB records in batches of 16 MiB,
//     1.09-1.18x streamed and 0.84-0.90x cached.
//   - sse42, 2 MiB: on an AMD EPYC (Zen 1), two cores with 1 MiB of L2
//     cache each and an 8 MiB L3 cache, the default loader against
//     np.take in the same process, three alternated runs of each
//     threshold: over 2 KiB records in batches of 512 KiB, 0.80-0.81x
//     streamed and 1.04-1.24x cached; over 4 KiB ones in batches of 1
//     MiB, 0.71-0.78x and 0.79-0.99x; over token rows widened into
//     batches of 2 MiB, 0.92-1.05x and 0.71-0.78x. A consumer that keeps
//     up gives each slot back before the next step, and the workers reuse
//     the slot given back last, so only a slot or two a worker is ever
//     written: BenchmarkGatherSlots shows the same turn between 1 and 2
//     MiB with a slot or two a goroutine, where rings of 12 slots gain
//     from streaming from 512 KiB (1.2x there).
//
// streamSlotMin is the path's figure (a variable, for the benchmarks).
var streamSlotMin = copyCRCImpl.slotStreamMin

// copyCRCPiece bounds the bytes one call into a path handles: the runtime
// cannot stop a goroutine inside assembly, so a record of hundreds of MiB
// copied in one call would hold up every garbage collection of the process
// for as long. The seam costs a fold-down and a reduction per MiB.
const copyCRCPiece = 1 << 20

// crcPath is one implementation of copyCRC (fn) and copyCRCStream
// (stream, the same function where the path has no streaming stores),
// with the name the tests and benchmarks use for it, the least batch a
// gather into a slot streams on the CPUs that take it (streamSlotMin),
// and the largest record copySrcs checks four at a time with
// copyCRCStrided rather than one at a time with fn (stridedMax).
type crcPath struct {
	name          string
	fn            func(dst, src []byte, crc uint32) uint32
	stream        func(dst, src []byte, crc uint32) uint32
	slotStreamMin int64
	stridedMax    int
}

// copyCRCImpl is the path copyCRC takes: the first of copyCRCPaths(),
// the fastest this CPU runs (the generic one in a race build, whose
// detector sees only copies made by Go code).
var copyCRCImpl = defaultCopyCRCPath()

func defaultCopyCRCPath() crcPath {
	if raceBuild {
		return genericCRCPath
	}
	return copyCRCPaths()[0]
}

// genericCRCPath is the portable path, in every build.
var genericCRCPath = crcPath{"generic", copyCRCGeneric, copyCRCGeneric, streamMin / 4, copyCRCStridedMax}

// copyCRCBlock is how much the generic path copies before it checksums
// what it copied: small enough that the block is still in the L1 cache
// (32-48 KiB on current cores) when hash/crc32 reads it back, so the
// second pass costs cache reads instead of memory reads.
const copyCRCBlock = 8 << 10

// copyCRCGeneric is copyCRC for any CPU: it copies a block at a time and
// checksums each block, from dst, right after copying it.
func copyCRCGeneric(dst, src []byte, crc uint32) uint32 {
	dst = dst[:len(src)]
	for len(src) > 0 {
		n := min(len(src), copyCRCBlock)
		copy(dst[:n], src[:n])
		crc = crc32.Update(crc, castagnoli, dst[:n])
		dst, src = dst[n:], src[n:]
	}
	return crc
}

// The folding paths keep a running remainder in 128-bit lanes and move a
// lane forward over the message with two carry-less multiplications by
// powers of x modulo the CRC-32C polynomial. crcFold holds those powers,
// computed at init from the polynomial, as the assembly reads them: one
// 16-byte pair per folding distance D bytes, {x^(8D+63) mod P, x^(8D-1)
// mod P}, each bit-reversed into a 64-bit slot (the coefficient of x^d at
// bit 63-d), the first for a lane's low qword and the second for its high
// one. The -1 in each exponent makes up for the product of two reflected
// 64-bit values reading, as a reflected 128-bit value, as x times their
// polynomial product.
//
// The pairs, in order: D = 128 (four 32-byte accumulators apart), 64
// (four 16-byte ones), 32 and 16.
var crcFold = [8]uint64{
	crcFoldK(8*128 + 63), crcFoldK(8*128 - 1),
	crcFoldK(8*64 + 63), crcFoldK(8*64 - 1),
	crcFoldK(8*32 + 63), crcFoldK(8*32 - 1),
	crcFoldK(8*16 + 63), crcFoldK(8*16 - 1),
}

// castagnoliPoly is the CRC-32C polynomial without its x^32 term, in normal
// bit order (the coefficient of x^d at bit d).
const castagnoliPoly = 0x1EDC6F41

// xPowMod returns x^e modulo the CRC-32C polynomial, in normal bit order.
func xPowMod(e int) uint32 {
	v := uint32(1)
	for range e {
		carry := v >> 31
		v <<= 1
		if carry != 0 {
			v ^= castagnoliPoly
		}
	}
	return v
}

// crcFoldK returns x^e modulo the polynomial in the 64-bit reflected slot
// the folding multiplies by.
func crcFoldK(e int) uint64 { return bits.Reverse64(uint64(xPowMod(e))) }
