package main

/*
#include <stdint.h>
*/
import "C"

import (
	"unsafe"

	"github.com/loaderx/loaderx/zrecord"
)

// This file holds the exports that let a caller train a zstd dictionary once
// and create any number of stores that share it.

// lx_dict_train trains a zstd dictionary for the tier called dict_tier on
// the n_samples packed samples (samples_len bytes at samples, delimited by
// n_samples+1 offsets), capped at dict_size bytes when dict_size is
// positive, exactly as lx_store_create does for a dictionary store. It
// copies the dictionary into the out_len bytes at out and writes its length
// to *written; if out is too small, it fails with LX_INVALID and writes the
// length it needs to *written.
//
//export lx_dict_train
func lx_dict_train(dictTier *C.char, dictSize C.int64_t,
	samples unsafe.Pointer, samplesLen C.int64_t, sampleOffsets *C.int64_t, nSamples C.int64_t,
	out unsafe.Pointer, outLen C.int64_t, written *C.int64_t, errBuf *C.char, errLen C.int64_t) C.int {
	return call("lx_dict_train", errBuf, errLen, func() error {
		tierName, err := goString(dictTier, "dict_tier")
		if err != nil {
			return err
		}
		if written == nil {
			return nullArg("written")
		}
		if dictSize < 0 {
			return invalidf("dict_size %d is negative", dictSize)
		}
		tier, err := zrecord.ParseDictTier(tierName)
		if err != nil {
			return err
		}
		recs, err := packed(samples, samplesLen, sampleOffsets, nSamples, "samples")
		if err != nil {
			return err
		}
		dict, err := zrecord.TrainDict(recs, tier, int(dictSize))
		if err != nil {
			return err
		}
		*written = C.int64_t(len(dict))
		if int64(outLen) < int64(len(dict)) {
			return invalidf("out holds %d bytes: the dictionary needs %d", outLen, len(dict))
		}
		dst, err := byteView(out, outLen, "out")
		if err != nil {
			return err
		}
		copy(dst, dict)
		return nil
	})
}

// lx_store_create_dict creates a zstd_dict store in the directory path that
// compresses its records against the ready dictionary in the dict_len bytes
// at dict (as lx_dict_train returns it), at the level of the tier called
// dict_tier, and writes its handle to *handle. A dictionary that zstd does
// not accept fails with LX_INVALID and creates nothing. kind, dtype, shape,
// ndim and flags mean what they mean for lx_store_create.
//
//export lx_store_create_dict
func lx_store_create_dict(path *C.char, dictTier *C.char, dict unsafe.Pointer, dictLen C.int64_t,
	kind *C.char, dtype *C.char, shape *C.int64_t, ndim C.int64_t, flags C.int64_t,
	handle *C.int64_t, errBuf *C.char, errLen C.int64_t) C.int {
	return call("lx_store_create_dict", errBuf, errLen, func() error {
		dir, err := goString(path, "path")
		if err != nil {
			return err
		}
		tierName, err := goString(dictTier, "dict_tier")
		if err != nil {
			return err
		}
		if handle == nil {
			return nullArg("handle")
		}
		if flags&^createReplace != 0 {
			return invalidf("flags %#x: unknown bits", int64(flags))
		}
		tier, err := zrecord.ParseDictTier(tierName)
		if err != nil {
			return err
		}
		view, err := byteView(dict, dictLen, "dict")
		if err != nil {
			return err
		}
		if len(view) == 0 {
			return invalidf("dict is empty")
		}
		// The store keeps the dictionary after the call returns: copy it out
		// of the caller's memory.
		d := append([]byte(nil), view...)
		opts := []zrecord.Option{zrecord.WithCodec(zrecord.ZstdDict), zrecord.WithDictTier(tier), zrecord.WithDict(d)}
		more, err := schemaOptions(dir, kind, dtype, shape, ndim, flags)
		if err != nil {
			return err
		}
		opts = append(opts, more...)
		s, err := zrecord.Create(dir, opts...)
		if err != nil {
			return err
		}
		*handle = C.int64_t(register(s))
		return nil
	})
}
