// Command capi is the C ABI of loaderx: a thin layer of exported functions,
// built with -buildmode=c-shared into libloaderx.so, that the Python binding
// (loaderx/store/_native.py) loads with cffi in ABI mode. It holds no logic of its
// own: it checks arguments, turns C pointers into Go slices and Go errors into
// status codes, and calls the zrecord and zsampler packages. The one thing it
// implements itself is the schema file kept beside a store (schemafile.go),
// since it is the only user of it.
//
// # Conventions
//
// Every export is named lx_* and returns a C int status (below). Its last two
// parameters are always (char *err, int64_t errlen): a caller-owned buffer
// into which a failing call writes a NUL-terminated UTF-8 message, truncated
// to errlen-1 bytes on a character boundary. A successful call leaves the
// buffer alone. There is no global "last error", so calls are thread-safe
// as long as each thread passes its own buffer; err may be NULL (or errlen
// zero) when the caller does not want the message.
//
// Results are written through out-pointers; the status is the only return
// value. A store is named by an opaque int64_t handle (positive, never
// reused within a process) that indexes a mutex-guarded table: no Go pointer
// ever reaches C. Closing a handle is idempotent; any other use of a closed
// handle fails with LX_CLOSED, and a value that was never a handle with
// LX_INVALID.
//
// Memory is owned by the caller. Buffers are passed as a pointer and a
// length (in bytes for data, in elements for int64_t arrays); Go views them
// in place for the duration of the call and keeps no reference after it
// returns. A pointer may be NULL only with a zero length. A batch of
// variable-length byte strings (records to append, dictionary-training
// samples, a packed gather destination) is one data buffer plus n+1
// nondecreasing int64_t offsets: record i is data[offsets[i]:offsets[i+1]].
// C strings are NUL-terminated UTF-8 and are copied on entry. A result of
// unbounded size (the report of lx_store_verify and lx_verify_dir) is
// written as NUL-terminated JSON into a caller buffer, with the size it
// needs through an out-pointer: when it does not fit, nothing else is
// written and the caller calls again with a larger buffer.
//
// Every export recovers a Go panic and reports it as LX_INTERNAL, so a bug
// never unwinds into C (which would abort the host process). Every export
// also turns a memory fault on its goroutine into a panic for the duration
// of the call (runtime/debug.SetPanicOnFault), so a bad pointer becomes an
// error rather than a crash. Goroutines that an operation starts are the
// called package's to guard (zrecord does). One function, call, does all of
// that and maps the error; each export is a call whose body converts the
// arguments and calls into the packages. The hot paths (lx_store_gather,
// lx_store_gather_packed, lx_sample) spell the same prologue out, to spare
// the closure per call.
//
// # Numbers
//
// Every number that crosses the ABI is defined once, in the cgo preamble of
// main.go, which cgo copies into the header it emits: LX_ABI_VERSION, the
// status codes (enum lx_status), the codec tags (enum lx_codec), the sampler
// modes (enum lx_sampler_mode), the positions of the values lx_store_stats
// writes (enum lx_stat, LX_STATS_LEN of them) and of lx_sample's spec (enum
// lx_sample_spec, LX_SPEC_LEN of them), the flags of lx_store_create (enum
// lx_create_flag), LX_MAX_DIMS and LX_MAX_RECORD_SIZE. The codec tags, modes
// and record limit are also constants of zrecord and zsampler; main.go fails
// to compile if they drift apart.
//
// The library runs the Go runtime, which does not survive fork(): a forked
// child must not call any export. The Python binding enforces this.
//
// # Status codes
//
// (enum lx_status)
//
//	0  LX_OK            success
//	1  LX_INVALID       invalid argument: a bad value, name, length or
//	                    pointer; a read-only store written to; a buffer too
//	                    small; a record of the wrong size
//	2  LX_OUT_OF_RANGE  an index outside [0, len)
//	3  LX_NOT_FOUND     a path that does not exist
//	4  LX_CORRUPT       a store or schema file that cannot be read as one:
//	                    bad magic, unsupported version, damaged data, a
//	                    missing dictionary
//	5  LX_CLOSED        a handle (or store) that was closed
//	6  LX_IO            an operating-system I/O error
//	7  LX_BUSY          the store is locked by another writer
//	8  LX_INTERNAL      a recovered panic: a bug in loaderx
//	9  LX_EXISTS        creating a store where one already exists
//	10 LX_CANCELED      the caller asked the call to stop (lx_store_create's
//	                    cancel flag) and nothing was created
//	11 LX_NOT_RESIDENT  a call needs a table entry or a record outside the
//	                    pages its store's residency map holds, or a store
//	                    given no map yet (lx_store_set_residency,
//	                    lx_set_require_residency); nothing was written
//
// The last two parameters of every export, err and errlen, are the
// caller's error buffer, laid out as struct lx_error: the operating-system
// error number behind a failure (0 if none), then the NUL-terminated
// message at offset LX_ERROR_HEAD.
//
// # Exports
//
// Stores:
//
//	lx_store_create(path, codec, dict_tier, dict_size, samples, samples_len,
//	                sample_offsets, n_samples, kind, dtype, shape, ndim,
//	                flags, cancel, *handle, err, errlen)
//	lx_store_open(path, readonly, *handle, err, errlen)
//	lx_store_close(h, err, errlen)
//	lx_store_len(h, *len, err, errlen)
//	lx_store_codec(h, *codec, err, errlen)
//	lx_store_append(h, data, data_len, offsets, n, *first, err, errlen)
//	lx_store_gather(h, indices, n, dst, dst_len, stride, err, errlen)
//	lx_store_sizes(h, indices, n, sizes, err, errlen)
//	lx_store_gather_packed(h, indices, n, dst, dst_len, offsets, err, errlen)
//	lx_store_gather_ragged(h, indices, n, sizes, dst, dst_len, *needed, err, errlen)
//	lx_store_delete(h, indices, n, err, errlen)
//	lx_store_compact(h, err, errlen)
//	lx_store_stats(h, out, out_len, err, errlen)
//	lx_store_sync(h, err, errlen)
//
// Sharded datasets, read-only (zrecord.Set): a set of open stores, or one
// that opens the shards a manifest names as reads need them, each checked
// then against the schema and length given (shards.go), at most max_open at
// once; the read exports above take either handle, with global indices, and
// lx_store_close closes it:
//
//	lx_set_open(stores, n, *handle, err, errlen)
//	lx_set_open_shards(root, stream, names, names_len, n, lengths, kind,
//	                   dtype, shape, ndim, max_open, *handle, err, errlen)
//
// Where a batch's stored bytes lie, and the checks and residency maps of a
// store whose files live elsewhere (span.go); store is a store's position in
// a set, 0 for a store handle:
//
//	lx_store_spans(h, indices, n, store, chunk, off, length, err, errlen)
//	lx_store_check_bytes(h, store, indices, n, chunk, base, buf, buf_len,
//	                     err, errlen)
//	lx_store_check_table(h, store, seg, base, buf, buf_len, err, errlen)
//	lx_store_set_residency(h, store, held, held_len, chunk_base,
//	                       chunk_base_len, chunk_page, table_base,
//	                       table_base_len, table_page, err, errlen)
//	lx_set_require_residency(h, err, errlen)
//
// A residency map (zrecord.Residency) numbers the pages of every chunk file
// and table segment of a store, fixed byte ranges of chunk_page and
// table_page bytes, into one array of held bytes: a call refuses with
// LX_NOT_RESIDENT before it reads a table entry whose page is not held, a
// gather before it reads a record any of whose pages is not held, and a
// store with a map checks every record it reads against its checksum. A set
// that requires maps (lx_set_require_residency) refuses a store without one
// before it opens it, so a reader gives each shard its map at the shard's
// first read.
//
// Dictionary tiers (zrecord.ParseDictTier):
//
//	lx_dict_sample_budget(tier, *bytes, err, errlen)
//
// A codec measured in memory on sample records (zrecord.ProbeCodec; the
// converters' codec "auto"), LX_PROBE_LEN values in the order of enum
// lx_probe:
//
//	lx_codec_probe(codec, dict_tier, dict, dict_len, samples, samples_len,
//	               sample_offsets, n_samples, out, out_len, err, errlen)
//
// Sampling (zsampler.Fill) and native threads (zrecord.SetThreads):
//
//	lx_sampler_mode(name, *mode, err, errlen)
//	lx_sample(spec, out, err, errlen)
//	lx_set_threads(n, err, errlen)
//	lx_get_threads(*n, err, errlen)
//
// Schema files (schemafile.go; lx_store_create also writes one):
//
//	lx_schema_write(dir, kind, dtype, shape, ndim, err, errlen)
//	lx_schema_read(dir, kind, kind_len, dtype, dtype_len, shape, shape_cap,
//	               *ndim, err, errlen)
//	lx_schema_set_codec_choice(dir, doc, doc_len, err, errlen)
//	lx_schema_codec_choice(dir, out, out_len, *written, err, errlen)
//
// ABI version (LX_ABI_VERSION):
//
//	lx_abi_version(*version, err, errlen)
//
// lx_sample takes its scalar arguments in one array, spec, of LX_SPEC_LEN
// int64_t values: mode, n, batch, seed (the bits of a uint64_t), step, rank,
// world, out_len (enum lx_sample_spec). A cffi ABI-mode call costs about 50-70 ns per argument on
// top of ~200 ns per call (measured here), and sampling is a per-step hot
// path whose own work is a few hundred nanoseconds, so it takes 4 arguments
// instead of 11.
//
// lx_store_stats writes LX_STATS_LEN values, in the order of enum lx_stat:
// length, live_bytes, chunk_bytes, logical_bytes, codec, dict_bytes, chunks.
// A codec is its on-disk tag (enum lx_codec): 0 raw, 1 zstd, 2 zstd with a
// dictionary.
//
// The header that go build emits (libloaderx.h) is the single source of the
// cffi declarations: python/build_native.py extracts the lx_* prototypes and
// the LX_* constants from it, and tests/test_cdef.py checks that the
// binding agrees with it.
package main
