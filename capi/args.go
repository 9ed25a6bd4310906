package main

/*
#include <stdint.h>
*/
import "C"

import (
	"fmt"
	"strings"
	"unsafe"

	"github.com/loaderx/loaderx/zrecord"
)

// goString copies a required C string argument.
func goString(p *C.char, name string) (string, error) {
	if p == nil {
		return "", nullArg(name)
	}
	return C.GoString(p), nil
}

// int64s views n int64_t values at p as a Go slice.
func int64s(p *C.int64_t, n C.int64_t, name string) ([]int64, error) {
	if err := checkView(p == nil, n, name); err != nil || n == 0 {
		return nil, err
	}
	return unsafe.Slice((*int64)(unsafe.Pointer(p)), int(n)), nil
}

// outValues is int64s for an out array that must hold at least need
// values; why says what needs them, for the error.
func outValues(out *C.int64_t, outLen C.int64_t, need C.int64_t, why string) ([]int64, error) {
	if outLen < need {
		return nil, invalidf("out holds %d values: %s %d", outLen, why, need)
	}
	return int64s(out, outLen, "out")
}

// byteView views n bytes at p as a Go slice.
func byteView(p unsafe.Pointer, n C.int64_t, name string) ([]byte, error) {
	if err := checkView(p == nil, n, name); err != nil || n == 0 {
		return nil, err
	}
	return unsafe.Slice((*byte)(p), int(n)), nil
}

// checkView rejects a negative length, and a NULL pointer with a positive
// one; a zero length is a valid empty view whatever the pointer.
func checkView(isNil bool, n C.int64_t, name string) error {
	switch {
	case n < 0:
		return invalidf("%s: negative length %d", name, n)
	case n > 0 && isNil:
		return invalidf("%s is NULL with length %d", name, n)
	}
	return nil
}

// setOut writes v to the out-parameter p called name.
func setOut(p *C.int64_t, name string, v int64) error {
	if p == nil {
		return nullArg(name)
	}
	*p = C.int64_t(v)
	return nil
}

// storeOf returns the store behind the handle h.
func storeOf(h C.int64_t) (*zrecord.Store, error) { return lookup(int64(h)) }

// packed views a packed batch of n byte strings: data holds dataLen bytes and
// offsets n+1 nondecreasing positions in it. Each view's capacity ends where
// the record does, so nothing can append into the neighbouring record.
func packed(data unsafe.Pointer, dataLen C.int64_t, offsets *C.int64_t, n C.int64_t, name string) ([][]byte, error) {
	if n < 0 {
		return nil, invalidf("%s: negative count %d", name, n)
	}
	offs, err := int64s(offsets, n+1, name+" offsets")
	if err != nil {
		return nil, err
	}
	buf, err := byteView(data, dataLen, name+" data")
	if err != nil {
		return nil, err
	}
	prev := offs[0]
	if prev < 0 || prev > int64(dataLen) {
		return nil, invalidf("%s offsets[0] = %d: outside the %d-byte data buffer", name, prev, dataLen)
	}
	recs := make([][]byte, n)
	for i := range recs {
		end := offs[i+1]
		if end < prev || end > int64(dataLen) {
			return nil, invalidf("%s offsets[%d] = %d: offsets must be nondecreasing and within the %d-byte data buffer (offsets[%d] = %d)",
				name, i+1, end, dataLen, i, prev)
		}
		// The capacity runs to the end of the buffer, so that the store
		// can tell records that lie back to back and write them as one
		// piece (the store never writes into a record).
		recs[i] = buf[prev:end]
		prev = end
	}
	return recs, nil
}

// codecSpec parses the codec argument of lx_store_create and lx_codec_probe:
// a codec name, and for narrow an optional element type after a colon
// ("narrow:int64"); zrecord.DefaultElement when it is left out.
func codecSpec(spec string) (zrecord.Codec, zrecord.Element, error) {
	name, elem, hasElem := strings.Cut(spec, ":")
	c, err := zrecord.ParseCodec(name)
	if err != nil {
		return 0, zrecord.Element{}, err
	}
	if c != zrecord.Narrow {
		if hasElem {
			return 0, zrecord.Element{}, invalidf("codec %q: only narrow takes an element type", spec)
		}
		return c, zrecord.Element{}, nil
	}
	if !hasElem {
		return c, zrecord.DefaultElement, nil
	}
	el, err := zrecord.ParseElement(elem)
	if err != nil {
		return 0, zrecord.Element{}, fmt.Errorf("codec %q: %w", spec, err)
	}
	return c, el, nil
}
