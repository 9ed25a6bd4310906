package main

/*
#include <stdint.h>
*/
import "C"

import (
	"runtime/debug"
	"unsafe"

	"github.com/loaderx/loaderx/zrecord"
	"github.com/loaderx/loaderx/zsampler"
)

// lx_sampler_mode writes the number of the sampler mode called name (enum
// lx_sampler_mode) to *mode.
//
//export lx_sampler_mode
func lx_sampler_mode(name *C.char, mode *C.int64_t, errBuf *C.char, errLen C.int64_t) C.int {
	return call("lx_sampler_mode", errBuf, errLen, func() error {
		s, err := goString(name, "name")
		if err != nil {
			return err
		}
		if mode == nil {
			return nullArg("mode")
		}
		m, err := zsampler.ParseMode(s)
		if err != nil {
			return err
		}
		*mode = C.int64_t(m)
		return nil
	})
}

// lx_sample writes the batch indices of one step into out. spec points to
// LX_SPEC_LEN values, each at its position in enum lx_sample_spec: mode (a
// number from lx_sampler_mode), n (the size of the index space), batch,
// seed (the bits of a uint64_t), step, rank, world (the shard of this
// process) and out_len (how many values out holds, exactly batch).
//
// The arguments travel in one array because a cffi ABI-mode call pays per
// argument (about 50-70 ns each, measured), and sampling is a per-step hot
// path whose native work is comparable. For the same reason the export
// spells out the prologue that call wraps for the others.
//
//export lx_sample
func lx_sample(spec *C.int64_t, out *C.int64_t, errBuf *C.char, errLen C.int64_t) (status C.int) {
	defer guard("lx_sample", &status, errBuf, errLen)
	defer debug.SetPanicOnFault(faultsPanic())
	if spec == nil {
		return fail(errBuf, errLen, nullArg("spec"))
	}
	p := unsafe.Slice((*int64)(unsafe.Pointer(spec)), SampleSpecLen)
	mode, n, batch, seed := p[specMode], p[specN], p[specBatch], uint64(p[specSeed])
	step, rank, world, outLen := p[specStep], p[specRank], p[specWorld], p[specOutLen]
	if mode < 0 || mode > 255 {
		return fail(errBuf, errLen, invalidf("mode %d is not a sampler mode", mode))
	}
	if batch < 0 || outLen != batch {
		return fail(errBuf, errLen, invalidf("out has shape (%d,), the batch needs (%d,)", outLen, batch))
	}
	dst, err := int64s(out, C.int64_t(batch), "out")
	if err != nil {
		return fail(errBuf, errLen, err)
	}
	if err := zsampler.Fill(zsampler.Mode(mode), n, batch, seed, step, rank, world, dst); err != nil {
		return fail(errBuf, errLen, err)
	}
	return statusOK
}

// lx_set_threads sets how many threads a store operation may use; what 0
// means is zrecord.SetThreads's choice.
//
//export lx_set_threads
func lx_set_threads(n C.int64_t, errBuf *C.char, errLen C.int64_t) C.int {
	return call("lx_set_threads", errBuf, errLen, func() error {
		if n < 0 || n > 1<<20 {
			return invalidf("threads %d: want 0 to %d", n, 1<<20)
		}
		zrecord.SetThreads(int(n))
		return nil
	})
}

// lx_get_threads writes how many threads a store operation may use to *n.
//
//export lx_get_threads
func lx_get_threads(n *C.int64_t, errBuf *C.char, errLen C.int64_t) C.int {
	return call("lx_get_threads", errBuf, errLen, func() error {
		return setOut(n, "n", int64(zrecord.Threads()))
	})
}
