package main

/*
#include <stdint.h>
*/
import "C"

import (
	"runtime/debug"
	"unsafe"

	"github.com/loaderx/loaderx/zrecord"
)

// StatsLen is the number of values lx_store_stats writes.
const StatsLen = 7

// lx_store_create creates a store in the directory path, which must not
// already hold one, and writes its handle to *handle. codec and dict_tier
// are names that zrecord.ParseCodec and zrecord.ParseDictTier accept. For a
// dictionary codec, the n_samples packed samples (samples_len bytes at
// samples, delimited by n_samples+1 offsets) train the dictionary, whose
// size is capped at dict_size bytes when dict_size is positive; other
// codecs ignore the samples.
//
//export lx_store_create
func lx_store_create(path *C.char, codec *C.char, dictTier *C.char, dictSize C.int64_t,
	samples unsafe.Pointer, samplesLen C.int64_t, sampleOffsets *C.int64_t, nSamples C.int64_t,
	handle *C.int64_t, errBuf *C.char, errLen C.int64_t) (status C.int) {
	defer guard("lx_store_create", &status, errBuf, errLen)
	defer debug.SetPanicOnFault(faultsPanic())
	dir, err := goString(path, "path")
	if err != nil {
		return fail(errBuf, errLen, err)
	}
	codecName, err := goString(codec, "codec")
	if err != nil {
		return fail(errBuf, errLen, err)
	}
	tierName, err := goString(dictTier, "dict_tier")
	if err != nil {
		return fail(errBuf, errLen, err)
	}
	if handle == nil {
		return fail(errBuf, errLen, nullArg("handle"))
	}
	if dictSize < 0 {
		return fail(errBuf, errLen, invalidf("dict_size %d is negative", dictSize))
	}
	c, err := zrecord.ParseCodec(codecName)
	if err != nil {
		return fail(errBuf, errLen, err)
	}
	tier, err := zrecord.ParseDictTier(tierName)
	if err != nil {
		return fail(errBuf, errLen, err)
	}
	opts := []zrecord.Option{zrecord.WithCodec(c), zrecord.WithDictTier(tier)}
	if c == zrecord.ZstdDict {
		recs, err := packed(samples, samplesLen, sampleOffsets, nSamples, "samples")
		if err != nil {
			return fail(errBuf, errLen, err)
		}
		dict, err := zrecord.TrainDict(recs, tier, int(dictSize))
		if err != nil {
			return fail(errBuf, errLen, err)
		}
		opts = append(opts, zrecord.WithDict(dict))
	}
	s, err := zrecord.Create(dir, opts...)
	if err != nil {
		return fail(errBuf, errLen, err)
	}
	*handle = C.int64_t(register(s))
	return statusOK
}

// lx_store_open opens the store in the directory path, read-only when
// readonly is nonzero, and writes its handle to *handle.
//
//export lx_store_open
func lx_store_open(path *C.char, readonly C.int, handle *C.int64_t, errBuf *C.char, errLen C.int64_t) (status C.int) {
	defer guard("lx_store_open", &status, errBuf, errLen)
	defer debug.SetPanicOnFault(faultsPanic())
	dir, err := goString(path, "path")
	if err != nil {
		return fail(errBuf, errLen, err)
	}
	if handle == nil {
		return fail(errBuf, errLen, nullArg("handle"))
	}
	var opts []zrecord.Option
	if readonly != 0 {
		opts = append(opts, zrecord.WithReadOnly())
	}
	s, err := zrecord.Open(dir, opts...)
	if err != nil {
		return fail(errBuf, errLen, err)
	}
	*handle = C.int64_t(register(s))
	return statusOK
}

// lx_store_close closes the store behind h and retires the handle. Closing
// a handle that is already closed does nothing.
//
//export lx_store_close
func lx_store_close(h C.int64_t, errBuf *C.char, errLen C.int64_t) (status C.int) {
	defer guard("lx_store_close", &status, errBuf, errLen)
	defer debug.SetPanicOnFault(faultsPanic())
	s, err := release(int64(h))
	if err != nil {
		return fail(errBuf, errLen, err)
	}
	if s == nil {
		return statusOK
	}
	if err := s.Close(); err != nil {
		return fail(errBuf, errLen, err)
	}
	return statusOK
}

// lx_store_len writes the number of records to *length.
//
//export lx_store_len
func lx_store_len(h C.int64_t, length *C.int64_t, errBuf *C.char, errLen C.int64_t) (status C.int) {
	defer guard("lx_store_len", &status, errBuf, errLen)
	defer debug.SetPanicOnFault(faultsPanic())
	if length == nil {
		return fail(errBuf, errLen, nullArg("length"))
	}
	s, err := lookup(int64(h))
	if err != nil {
		return fail(errBuf, errLen, err)
	}
	*length = C.int64_t(s.Len())
	return statusOK
}

// lx_store_codec writes the store's codec tag (0 raw, 1 zstd, 2 zstd with a
// dictionary) to *codec.
//
//export lx_store_codec
func lx_store_codec(h C.int64_t, codec *C.int64_t, errBuf *C.char, errLen C.int64_t) (status C.int) {
	defer guard("lx_store_codec", &status, errBuf, errLen)
	defer debug.SetPanicOnFault(faultsPanic())
	if codec == nil {
		return fail(errBuf, errLen, nullArg("codec"))
	}
	s, err := lookup(int64(h))
	if err != nil {
		return fail(errBuf, errLen, err)
	}
	*codec = C.int64_t(s.Codec())
	return statusOK
}

// lx_store_append appends n records, packed in the data_len bytes at data
// and delimited by the n+1 offsets, and writes the index of the first one to
// *first.
//
//export lx_store_append
func lx_store_append(h C.int64_t, data unsafe.Pointer, dataLen C.int64_t, offsets *C.int64_t, n C.int64_t,
	first *C.int64_t, errBuf *C.char, errLen C.int64_t) (status C.int) {
	defer guard("lx_store_append", &status, errBuf, errLen)
	defer debug.SetPanicOnFault(faultsPanic())
	if first == nil {
		return fail(errBuf, errLen, nullArg("first"))
	}
	s, err := lookup(int64(h))
	if err != nil {
		return fail(errBuf, errLen, err)
	}
	recs, err := packed(data, dataLen, offsets, n, "records")
	if err != nil {
		return fail(errBuf, errLen, err)
	}
	idx, err := s.Append(recs)
	if err != nil {
		return fail(errBuf, errLen, err)
	}
	*first = C.int64_t(idx)
	return statusOK
}

// lx_store_gather copies the n records named by indices into dst, record i
// at byte i*stride; every record must be exactly stride bytes long.
//
//export lx_store_gather
func lx_store_gather(h C.int64_t, indices *C.int64_t, n C.int64_t, dst unsafe.Pointer, dstLen C.int64_t, stride C.int64_t,
	errBuf *C.char, errLen C.int64_t) (status C.int) {
	defer guard("lx_store_gather", &status, errBuf, errLen)
	defer debug.SetPanicOnFault(faultsPanic())
	s, err := lookup(int64(h))
	if err != nil {
		return fail(errBuf, errLen, err)
	}
	idx, err := int64s(indices, n, "indices")
	if err != nil {
		return fail(errBuf, errLen, err)
	}
	if stride < 0 {
		return fail(errBuf, errLen, invalidf("stride %d is negative", stride))
	}
	if stride > 0 && n > dstLen/stride {
		return fail(errBuf, errLen, invalidf("dst holds %d bytes: %d records of %d bytes do not fit", dstLen, n, stride))
	}
	buf, err := byteView(dst, dstLen, "dst")
	if err != nil {
		return fail(errBuf, errLen, err)
	}
	if err := s.Gather(idx, buf, int(stride)); err != nil {
		return fail(errBuf, errLen, err)
	}
	return statusOK
}

// lx_store_sizes writes the size in bytes of each of the n records named by
// indices to sizes, which holds n values.
//
//export lx_store_sizes
func lx_store_sizes(h C.int64_t, indices *C.int64_t, n C.int64_t, sizes *C.int64_t, errBuf *C.char, errLen C.int64_t) (status C.int) {
	defer guard("lx_store_sizes", &status, errBuf, errLen)
	defer debug.SetPanicOnFault(faultsPanic())
	s, err := lookup(int64(h))
	if err != nil {
		return fail(errBuf, errLen, err)
	}
	idx, err := int64s(indices, n, "indices")
	if err != nil {
		return fail(errBuf, errLen, err)
	}
	out, err := int64s(sizes, n, "sizes")
	if err != nil {
		return fail(errBuf, errLen, err)
	}
	if err := s.Sizes(idx, out); err != nil {
		return fail(errBuf, errLen, err)
	}
	return statusOK
}

// lx_store_gather_packed copies the n records named by indices into dst,
// record i at dst[offsets[i]:offsets[i+1]]; offsets holds n+1 values and
// each span must be exactly the record's size (see lx_store_sizes).
//
//export lx_store_gather_packed
func lx_store_gather_packed(h C.int64_t, indices *C.int64_t, n C.int64_t, dst unsafe.Pointer, dstLen C.int64_t, offsets *C.int64_t,
	errBuf *C.char, errLen C.int64_t) (status C.int) {
	defer guard("lx_store_gather_packed", &status, errBuf, errLen)
	defer debug.SetPanicOnFault(faultsPanic())
	s, err := lookup(int64(h))
	if err != nil {
		return fail(errBuf, errLen, err)
	}
	idx, err := int64s(indices, n, "indices")
	if err != nil {
		return fail(errBuf, errLen, err)
	}
	offs, err := int64s(offsets, n+1, "offsets")
	if err != nil {
		return fail(errBuf, errLen, err)
	}
	buf, err := byteView(dst, dstLen, "dst")
	if err != nil {
		return fail(errBuf, errLen, err)
	}
	if err := s.GatherPacked(idx, buf, offs); err != nil {
		return fail(errBuf, errLen, err)
	}
	return statusOK
}

// lx_store_delete deletes the n distinct records named by indices. The tail
// record moves into each hole, so indices at or above the smallest deleted
// one may change.
//
//export lx_store_delete
func lx_store_delete(h C.int64_t, indices *C.int64_t, n C.int64_t, errBuf *C.char, errLen C.int64_t) (status C.int) {
	defer guard("lx_store_delete", &status, errBuf, errLen)
	defer debug.SetPanicOnFault(faultsPanic())
	s, err := lookup(int64(h))
	if err != nil {
		return fail(errBuf, errLen, err)
	}
	idx, err := int64s(indices, n, "indices")
	if err != nil {
		return fail(errBuf, errLen, err)
	}
	if err := s.Delete(idx); err != nil {
		return fail(errBuf, errLen, err)
	}
	return statusOK
}

// lx_store_compact reclaims the space of deleted records.
//
//export lx_store_compact
func lx_store_compact(h C.int64_t, errBuf *C.char, errLen C.int64_t) (status C.int) {
	defer guard("lx_store_compact", &status, errBuf, errLen)
	defer debug.SetPanicOnFault(faultsPanic())
	s, err := lookup(int64(h))
	if err != nil {
		return fail(errBuf, errLen, err)
	}
	if err := s.Compact(); err != nil {
		return fail(errBuf, errLen, err)
	}
	return statusOK
}

// lx_store_stats writes StatsLen values to out (which holds out_len): length,
// live_bytes, chunk_bytes, logical_bytes, codec, dict_bytes, chunks.
//
//export lx_store_stats
func lx_store_stats(h C.int64_t, out *C.int64_t, outLen C.int64_t, errBuf *C.char, errLen C.int64_t) (status C.int) {
	defer guard("lx_store_stats", &status, errBuf, errLen)
	defer debug.SetPanicOnFault(faultsPanic())
	s, err := lookup(int64(h))
	if err != nil {
		return fail(errBuf, errLen, err)
	}
	if outLen < StatsLen {
		return fail(errBuf, errLen, invalidf("out holds %d values: stats need %d", outLen, StatsLen))
	}
	dst, err := int64s(out, outLen, "out")
	if err != nil {
		return fail(errBuf, errLen, err)
	}
	st, err := s.Stats()
	if err != nil {
		return fail(errBuf, errLen, err)
	}
	copy(dst, []int64{st.Length, st.LiveBytes, st.ChunkBytes, st.LogicalBytes, int64(st.Codec), st.DictBytes, st.Chunks})
	return statusOK
}

// lx_store_sync makes every record appended so far durable.
//
//export lx_store_sync
func lx_store_sync(h C.int64_t, errBuf *C.char, errLen C.int64_t) (status C.int) {
	defer guard("lx_store_sync", &status, errBuf, errLen)
	defer debug.SetPanicOnFault(faultsPanic())
	s, err := lookup(int64(h))
	if err != nil {
		return fail(errBuf, errLen, err)
	}
	if err := s.Sync(); err != nil {
		return fail(errBuf, errLen, err)
	}
	return statusOK
}

// lx_codec_code writes the on-disk tag of the codec called name to *code.
//
//export lx_codec_code
func lx_codec_code(name *C.char, code *C.int64_t, errBuf *C.char, errLen C.int64_t) (status C.int) {
	defer guard("lx_codec_code", &status, errBuf, errLen)
	defer debug.SetPanicOnFault(faultsPanic())
	return byName(name, "name", code, "code", func(s string) (int64, error) {
		c, err := zrecord.ParseCodec(s)
		return int64(c), err
	}, errBuf, errLen)
}

// lx_dict_sample_budget writes the number of sample bytes the dictionary
// tier called tier trains on to *budget.
//
//export lx_dict_sample_budget
func lx_dict_sample_budget(tier *C.char, budget *C.int64_t, errBuf *C.char, errLen C.int64_t) (status C.int) {
	defer guard("lx_dict_sample_budget", &status, errBuf, errLen)
	defer debug.SetPanicOnFault(faultsPanic())
	return byName(tier, "tier", budget, "budget", func(s string) (int64, error) {
		t, err := zrecord.ParseDictTier(s)
		return int64(t.SampleBudget()), err
	}, errBuf, errLen)
}
