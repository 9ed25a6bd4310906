package main

// The preamble below is the one definition of every number that crosses the
// C ABI. cgo copies it into the header it emits (libloaderx.h), from which
// python/build_native.py extracts it with the prototypes, so the binding
// reads these values from the library instead of repeating them.

/*
#include <stdint.h>

#ifndef LX_ABI_CONSTANTS
#define LX_ABI_CONSTANTS

// The version of the exported interface: it changes whenever an export is
// added, removed or changes its signature or meaning.
#define LX_ABI_VERSION 9

// The largest number of dimensions an item shape may have (NumPy's limit).
#define LX_MAX_DIMS 64

// The largest record a store holds, in bytes (zrecord.MaxRecordSize).
#define LX_MAX_RECORD_SIZE 2147483648

// Every export ends with the caller's error buffer, a char pointer err and
// its size err_len in bytes, laid out as struct lx_error: on failure the
// export writes the operating-system error number behind the failure
// (errno: ENOSPC, EACCES ...; 0 when the failure has none) to errnum and
// its NUL-terminated message, cut to fit, to message. LX_ERROR_HEAD is
// the offset of message. On success the buffer is left alone.
struct lx_error {
	int64_t errnum;
	char message[];
};
#define LX_ERROR_HEAD 8

// The status every export returns.
enum lx_status {
	LX_OK = 0,
	LX_INVALID = 1,
	LX_OUT_OF_RANGE = 2,
	LX_NOT_FOUND = 3,
	LX_CORRUPT = 4,
	LX_CLOSED = 5,
	LX_IO = 6,
	LX_BUSY = 7,
	LX_INTERNAL = 8,
	LX_EXISTS = 9,
	LX_CANCELED = 10,
	LX_NOT_RESIDENT = 11
};

// A store's codec, as lx_store_codec and lx_store_stats report it: the tag
// written in meta.zr. The lower-cased name after LX_CODEC_ is the codec's
// name. lx_store_create and lx_codec_probe take the name, and for narrow
// optionally its element type after a colon ("narrow:uint16"; int32 when
// left out).
enum lx_codec {
	LX_CODEC_RAW = 0,
	LX_CODEC_ZSTD = 1,
	LX_CODEC_ZSTD_DICT = 2,
	LX_CODEC_NARROW = 3
};

// Sampler modes, as lx_sample reads them; the lower-cased name after
// LX_MODE_ is the mode's name.
enum lx_sampler_mode {
	LX_MODE_SEQUENTIAL = 0,
	LX_MODE_IID = 1,
	LX_MODE_CYCLIC = 2
};

// The values lx_store_stats writes, by position; LX_STATS_LEN counts them.
enum lx_stat {
	LX_STAT_LENGTH = 0,
	LX_STAT_LIVE_BYTES = 1,
	LX_STAT_CHUNK_BYTES = 2,
	LX_STAT_LOGICAL_BYTES = 3,
	LX_STAT_CODEC = 4,
	LX_STAT_DICT_BYTES = 5,
	LX_STAT_CHUNKS = 6,
	LX_STAT_VERSION = 7,
	LX_STAT_CHECKSUMMED = 8,
	LX_STAT_VERIFIED = 9,
	LX_STATS_LEN = 10
};

// The int64_t values of lx_sample's spec, by position; LX_SPEC_LEN counts
// them. The seed holds the bits of a uint64_t.
enum lx_sample_spec {
	LX_SPEC_MODE = 0,
	LX_SPEC_N = 1,
	LX_SPEC_BATCH = 2,
	LX_SPEC_SEED = 3,
	LX_SPEC_STEP = 4,
	LX_SPEC_RANK = 5,
	LX_SPEC_WORLD = 6,
	LX_SPEC_OUT_LEN = 7,
	LX_SPEC_LEN = 8
};

// The values lx_codec_probe writes, by position; LX_PROBE_LEN counts them.
enum lx_probe {
	LX_PROBE_RECORDS = 0,
	LX_PROBE_LOGICAL_BYTES = 1,
	LX_PROBE_STORED_BYTES = 2,
	LX_PROBE_COMPRESSED = 3,
	LX_PROBE_DECODE_NANOS = 4,
	LX_PROBE_PASSES = 5,
	LX_PROBE_LEN = 6
};

// The int64_t values of lx_pipe_new's config, by position;
// LX_PIPE_CONFIG_LEN counts them. LX_PIPE_DRAW is LX_PIPE_DRAW_SAMPLER (the
// sampler of mode, n, batch, seed, rank, world, as lx_sample draws) or
// LX_PIPE_DRAW_EPOCH (one pass over n records in the order lx_pipe_new's
// order array gives, or in order without one). END is the first step not
// made, or -1 for an endless pipeline. LX_PIPE_DRAW_NONE draws nothing: a
// pipeline whose every stream is LX_PIPE_PACKED (each plans its own records).
enum lx_pipe_config {
	LX_PIPE_DRAW = 0,
	LX_PIPE_MODE = 1,
	LX_PIPE_N = 2,
	LX_PIPE_BATCH = 3,
	LX_PIPE_SEED = 4,
	LX_PIPE_RANK = 5,
	LX_PIPE_WORLD = 6,
	LX_PIPE_WORKERS = 7,
	LX_PIPE_PREFETCH = 8,
	LX_PIPE_START = 9,
	LX_PIPE_END = 10,
	LX_PIPE_CONFIG_LEN = 11
};

enum lx_pipe_draw {
	LX_PIPE_DRAW_SAMPLER = 0,
	LX_PIPE_DRAW_EPOCH = 1,
	LX_PIPE_DRAW_NONE = 2
};

// A stream of lx_pipe_new: LX_PIPE_STREAM_LEN int64_t values, the store
// handle, the kind and (dense) the record size in bytes or (packed) the
// bytes of one token; a packed stream (concat packing, package steppack)
// also its rows and row length in tokens, its rank and world, whether its
// cu_seqlens are int64 (1) or int32 (0), and the token its plan starts at
// (lx_pipe_plan appends to the plan), SOURCES: 1 when the handle is a
// set whose stores are a mixture's sources, each segment then naming the
// store of its record (0: every segment is of source 0), and STEP: the
// sampler step whose records start at that token.
enum lx_pipe_stream {
	LX_PIPE_STREAM_HANDLE = 0,
	LX_PIPE_STREAM_KIND = 1,
	LX_PIPE_STREAM_STRIDE = 2,
	LX_PIPE_STREAM_ROWS = 3,
	LX_PIPE_STREAM_LENGTH = 4,
	LX_PIPE_STREAM_RANK = 5,
	LX_PIPE_STREAM_WORLD = 6,
	LX_PIPE_STREAM_WIDE = 7,
	LX_PIPE_STREAM_BASE = 8,
	LX_PIPE_STREAM_SOURCES = 9,
	LX_PIPE_STREAM_STEP = 10,
	LX_PIPE_STREAM_LEN = 11
};

// The kinds of stream, and the buffers each has in a slot: a dense or a
// ragged stream its data and its sizes (NULL for a dense one); a packed
// stream its data and sizes, then LX_PIPE_PACKED_AUX more in the order of
// enum lx_pipe_aux.
enum lx_pipe_kind {
	LX_PIPE_DENSE = 0,
	LX_PIPE_RAGGED = 1,
	LX_PIPE_PACKED = 2
};

// A packed stream's buffers after its data and sizes (the arrays of a
// packed batch; T = rows * length tokens, S segments): the step's records
// (int64), segment ids and positions (int32, T each), cu_seqlens (S + 1),
// segment counts (int32, rows), each segment's record (int64), start in
// it (int64) and source (int32), and META (int64, LX_PIPE_META_LEN): the
// step's records, the tokens of the first before the step, and its
// segments. A count past the room of its buffers is written, the arrays
// it counts are not: the caller makes such a step itself.
enum lx_pipe_aux {
	LX_PIPE_AUX_IDX = 0,
	LX_PIPE_AUX_SEG = 1,
	LX_PIPE_AUX_POS = 2,
	LX_PIPE_AUX_CU = 3,
	LX_PIPE_AUX_NSEG = 4,
	LX_PIPE_AUX_REC = 5,
	LX_PIPE_AUX_AT = 6,
	LX_PIPE_AUX_SRC = 7,
	LX_PIPE_AUX_META = 8,
	LX_PIPE_PACKED_AUX = 9
};

// The values of a packed stream's META buffer.
enum lx_pipe_meta {
	LX_PIPE_META_RECORDS = 0,
	LX_PIPE_META_SKIP = 1,
	LX_PIPE_META_SEGMENTS = 2,
	LX_PIPE_META_LEN = 3
};

// The int64_t values of lx_pipe_next's io array, by position: TIMEOUT (in,
// microseconds) and NRELEASE (in, the slots given back, listed after the
// needed values) are read; KIND (an enum lx_pipe_got), STEP, SLOT, ROWS
// and STREAM (the failing stream of a step error, -1 for its draw) and
// STATUS (the status returned, which a caller interrupted as the call
// returned may have missed) are written, then from LX_PIPE_IO_HEAD on one value per stream, the bytes a
// ragged or packed stream needed. The released slots follow those.
enum lx_pipe_io {
	LX_PIPE_IO_TIMEOUT = 0,
	LX_PIPE_IO_NRELEASE = 1,
	LX_PIPE_IO_KIND = 2,
	LX_PIPE_IO_STEP = 3,
	LX_PIPE_IO_SLOT = 4,
	LX_PIPE_IO_ROWS = 5,
	LX_PIPE_IO_STREAM = 6,
	LX_PIPE_IO_STATUS = 7,
	LX_PIPE_IO_HEAD = 8
};

// What lx_pipe_next handed out (LX_PIPE_IO_KIND).
enum lx_pipe_got {
	LX_PIPE_GOT_BATCH = 0,
	LX_PIPE_GOT_PENDING = 1,
	LX_PIPE_GOT_END = 2,
	LX_PIPE_GOT_STARVED = 3,
	LX_PIPE_GOT_FAILED = 4,
	LX_PIPE_GOT_UNPLANNED = 5
};

// Flags of lx_store_create.
enum lx_create_flag {
	LX_CREATE_REPLACE = 1
};

#endif
*/
import "C"

import (
	"unsafe"

	"github.com/loaderx/loaderx/zrecord"
	"github.com/loaderx/loaderx/zsampler"
)

// ABIVersion is the version of the exported interface (LX_ABI_VERSION). It
// changes whenever an export is added, removed or changes its signature or
// meaning, so the binding can refuse a library it was not written for.
const ABIVersion = C.LX_ABI_VERSION

// Numbers of the ABI, from the preamble.
const (
	// StatsLen is the number of values lx_store_stats writes.
	StatsLen = C.LX_STATS_LEN
	// ProbeLen is the number of values lx_codec_probe writes.
	ProbeLen = C.LX_PROBE_LEN
	// SampleSpecLen is the number of int64_t values lx_sample reads from spec.
	SampleSpecLen = C.LX_SPEC_LEN
	// maxDims bounds the dimensions of a schema's item shape.
	maxDims = C.LX_MAX_DIMS
	// errorHead is the offset of the message in struct lx_error.
	errorHead = C.LX_ERROR_HEAD
)

// Status codes returned by every export (enum lx_status); see the package
// documentation.
const (
	statusOK          C.int = C.LX_OK
	statusInvalid     C.int = C.LX_INVALID
	statusOutOfRange  C.int = C.LX_OUT_OF_RANGE
	statusNotFound    C.int = C.LX_NOT_FOUND
	statusCorrupt     C.int = C.LX_CORRUPT
	statusClosed      C.int = C.LX_CLOSED
	statusIO          C.int = C.LX_IO
	statusBusy        C.int = C.LX_BUSY
	statusInternal    C.int = C.LX_INTERNAL
	statusExists      C.int = C.LX_EXISTS
	statusCanceled    C.int = C.LX_CANCELED
	statusNotResident C.int = C.LX_NOT_RESIDENT
)

// The step pipeline's arrays and values (enum lx_pipe_config, lx_pipe_draw,
// lx_pipe_stream, lx_pipe_kind, lx_pipe_io, lx_pipe_got).
const (
	pipeDraw         = C.LX_PIPE_DRAW
	pipeMode         = C.LX_PIPE_MODE
	pipeN            = C.LX_PIPE_N
	pipeBatch        = C.LX_PIPE_BATCH
	pipeSeed         = C.LX_PIPE_SEED
	pipeRank         = C.LX_PIPE_RANK
	pipeWorld        = C.LX_PIPE_WORLD
	pipeWorkers      = C.LX_PIPE_WORKERS
	pipePrefetch     = C.LX_PIPE_PREFETCH
	pipeStart        = C.LX_PIPE_START
	pipeEnd          = C.LX_PIPE_END
	pipeConfigLen    = C.LX_PIPE_CONFIG_LEN
	pipeDrawSampler  = C.LX_PIPE_DRAW_SAMPLER
	pipeDrawEpoch    = C.LX_PIPE_DRAW_EPOCH
	pipeDrawNone     = C.LX_PIPE_DRAW_NONE
	pipeStreamHandle = C.LX_PIPE_STREAM_HANDLE
	pipeStreamKind   = C.LX_PIPE_STREAM_KIND
	pipeStreamStride = C.LX_PIPE_STREAM_STRIDE
	pipeStreamRows   = C.LX_PIPE_STREAM_ROWS
	pipeStreamLength = C.LX_PIPE_STREAM_LENGTH
	pipeStreamRank   = C.LX_PIPE_STREAM_RANK
	pipeStreamWorld  = C.LX_PIPE_STREAM_WORLD
	pipeStreamWide   = C.LX_PIPE_STREAM_WIDE
	pipeStreamBase   = C.LX_PIPE_STREAM_BASE
	pipeStreamSrcs   = C.LX_PIPE_STREAM_SOURCES
	pipeStreamStep   = C.LX_PIPE_STREAM_STEP
	pipeStreamLen    = C.LX_PIPE_STREAM_LEN
	pipeDense        = C.LX_PIPE_DENSE
	pipeRagged       = C.LX_PIPE_RAGGED
	pipePacked       = C.LX_PIPE_PACKED
	pipePackedAux    = C.LX_PIPE_PACKED_AUX
	pipeIOTimeout    = C.LX_PIPE_IO_TIMEOUT
	pipeIONRelease   = C.LX_PIPE_IO_NRELEASE
	pipeIOKind       = C.LX_PIPE_IO_KIND
	pipeIOStep       = C.LX_PIPE_IO_STEP
	pipeIOSlot       = C.LX_PIPE_IO_SLOT
	pipeIORows       = C.LX_PIPE_IO_ROWS
	pipeIOStream     = C.LX_PIPE_IO_STREAM
	pipeIOStatus     = C.LX_PIPE_IO_STATUS
	pipeIOHead       = C.LX_PIPE_IO_HEAD
	pipeGotBatch     = C.LX_PIPE_GOT_BATCH
	pipeGotPending   = C.LX_PIPE_GOT_PENDING
	pipeGotEnd       = C.LX_PIPE_GOT_END
	pipeGotStarved   = C.LX_PIPE_GOT_STARVED
	pipeGotFailed    = C.LX_PIPE_GOT_FAILED
	pipeGotUnplanned = C.LX_PIPE_GOT_UNPLANNED
	maxRecordSize    = C.LX_MAX_RECORD_SIZE
)

// A packed stream's buffers (enum lx_pipe_aux, then LX_PIPE_PACKED_AUX)
// and meta values (enum lx_pipe_meta, then LX_PIPE_META_LEN), as
// package steppack numbers them (a test checks).
var (
	pipeAuxEnum = [...]int{C.LX_PIPE_AUX_IDX, C.LX_PIPE_AUX_SEG, C.LX_PIPE_AUX_POS, C.LX_PIPE_AUX_CU,
		C.LX_PIPE_AUX_NSEG, C.LX_PIPE_AUX_REC, C.LX_PIPE_AUX_AT, C.LX_PIPE_AUX_SRC, C.LX_PIPE_AUX_META,
		C.LX_PIPE_PACKED_AUX}
	pipeMetaEnum = [...]int{C.LX_PIPE_META_RECORDS, C.LX_PIPE_META_SKIP, C.LX_PIPE_META_SEGMENTS, C.LX_PIPE_META_LEN}
)

// createReplace is lx_store_create's flag LX_CREATE_REPLACE.
const createReplace = C.LX_CREATE_REPLACE

// Positions of the values lx_store_stats writes (enum lx_stat).
const (
	statLength       = C.LX_STAT_LENGTH
	statLiveBytes    = C.LX_STAT_LIVE_BYTES
	statChunkBytes   = C.LX_STAT_CHUNK_BYTES
	statLogicalBytes = C.LX_STAT_LOGICAL_BYTES
	statCodec        = C.LX_STAT_CODEC
	statDictBytes    = C.LX_STAT_DICT_BYTES
	statChunks       = C.LX_STAT_CHUNKS
	statVersion      = C.LX_STAT_VERSION
	statChecksummed  = C.LX_STAT_CHECKSUMMED
	statVerified     = C.LX_STAT_VERIFIED
)

// Positions of the values lx_codec_probe writes (enum lx_probe).
const (
	probeRecords      = C.LX_PROBE_RECORDS
	probeLogicalBytes = C.LX_PROBE_LOGICAL_BYTES
	probeStoredBytes  = C.LX_PROBE_STORED_BYTES
	probeCompressed   = C.LX_PROBE_COMPRESSED
	probeDecodeNanos  = C.LX_PROBE_DECODE_NANOS
	probePasses       = C.LX_PROBE_PASSES
)

// Positions of the values in lx_sample's spec (enum lx_sample_spec).
const (
	specMode   = C.LX_SPEC_MODE
	specN      = C.LX_SPEC_N
	specBatch  = C.LX_SPEC_BATCH
	specSeed   = C.LX_SPEC_SEED
	specStep   = C.LX_SPEC_STEP
	specRank   = C.LX_SPEC_RANK
	specWorld  = C.LX_SPEC_WORLD
	specOutLen = C.LX_SPEC_OUT_LEN
)

// The packages behind the exports define the same numbers for their own
// use; these declarations fail to compile if one of them drifts from the
// ABI (an array length may not be negative).
var (
	_ [C.LX_CODEC_RAW - int(zrecord.Raw)]struct{}
	_ [int(zrecord.Raw) - C.LX_CODEC_RAW]struct{}
	_ [C.LX_CODEC_ZSTD - int(zrecord.Zstd)]struct{}
	_ [int(zrecord.Zstd) - C.LX_CODEC_ZSTD]struct{}
	_ [C.LX_CODEC_ZSTD_DICT - int(zrecord.ZstdDict)]struct{}
	_ [int(zrecord.ZstdDict) - C.LX_CODEC_ZSTD_DICT]struct{}
	_ [C.LX_CODEC_NARROW - int(zrecord.Narrow)]struct{}
	_ [int(zrecord.Narrow) - C.LX_CODEC_NARROW]struct{}
	_ [C.LX_MODE_SEQUENTIAL - int(zsampler.Sequential)]struct{}
	_ [int(zsampler.Sequential) - C.LX_MODE_SEQUENTIAL]struct{}
	_ [C.LX_MODE_IID - int(zsampler.IID)]struct{}
	_ [int(zsampler.IID) - C.LX_MODE_IID]struct{}
	_ [C.LX_MODE_CYCLIC - int(zsampler.Cyclic)]struct{}
	_ [int(zsampler.Cyclic) - C.LX_MODE_CYCLIC]struct{}
	_ [C.LX_MAX_RECORD_SIZE - zrecord.MaxRecordSize]struct{}
	_ [zrecord.MaxRecordSize - C.LX_MAX_RECORD_SIZE]struct{}
	_ [C.LX_ERROR_HEAD - unsafe.Sizeof(C.struct_lx_error{})]struct{}
	_ [unsafe.Sizeof(C.struct_lx_error{}) - C.LX_ERROR_HEAD]struct{}
)

func main() {}

// lx_abi_version writes ABIVersion to *version.
//
//export lx_abi_version
func lx_abi_version(version *C.int64_t, errBuf *C.char, errLen C.int64_t) C.int {
	return call("lx_abi_version", errBuf, errLen, func() error {
		return setOut(version, "version", ABIVersion)
	})
}
