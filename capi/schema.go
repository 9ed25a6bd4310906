package main

/*
#include <stdint.h>
*/
import "C"

import (
	"runtime/debug"
	"unsafe"

	"github.com/loaderx/loaderx/internal/schema"
)

// lx_schema_write writes dir/schema.msgpack: the dataset kind ("dense" or
// "ragged"), the NumPy dtype string and the ndim-dimensional item shape.
//
//export lx_schema_write
func lx_schema_write(dir *C.char, kind *C.char, dtype *C.char, shape *C.int64_t, ndim C.int64_t,
	errBuf *C.char, errLen C.int64_t) (status C.int) {
	defer guard("lx_schema_write", &status, errBuf, errLen)
	defer debug.SetPanicOnFault(faultsPanic())
	d, err := goString(dir, "dir")
	if err != nil {
		return fail(errBuf, errLen, err)
	}
	k, err := goString(kind, "kind")
	if err != nil {
		return fail(errBuf, errLen, err)
	}
	t, err := goString(dtype, "dtype")
	if err != nil {
		return fail(errBuf, errLen, err)
	}
	if ndim > schema.MaxDims {
		return fail(errBuf, errLen, invalidf("shape has %d dimensions: at most %d allowed", ndim, schema.MaxDims))
	}
	dims, err := int64s(shape, ndim, "shape")
	if err != nil {
		return fail(errBuf, errLen, err)
	}
	s := schema.Schema{Kind: k, DType: t, Shape: append([]int64{}, dims...)}
	if err := schema.Write(d, s); err != nil {
		return fail(errBuf, errLen, err)
	}
	return statusOK
}

// lx_schema_read reads dir/schema.msgpack: it writes the kind and the dtype
// string NUL-terminated into the kind_len and dtype_len bytes at kind and
// dtype, the item shape into the shape_cap values at shape, and the number
// of dimensions to *ndim. schema.MaxDims values always suffice for shape.
//
//export lx_schema_read
func lx_schema_read(dir *C.char, kind *C.char, kindLen C.int64_t, dtype *C.char, dtypeLen C.int64_t,
	shape *C.int64_t, shapeCap C.int64_t, ndim *C.int64_t, errBuf *C.char, errLen C.int64_t) (status C.int) {
	defer guard("lx_schema_read", &status, errBuf, errLen)
	defer debug.SetPanicOnFault(faultsPanic())
	d, err := goString(dir, "dir")
	if err != nil {
		return fail(errBuf, errLen, err)
	}
	kindBuf, err := byteView(unsafe.Pointer(kind), kindLen, "kind")
	if err != nil {
		return fail(errBuf, errLen, err)
	}
	dtypeBuf, err := byteView(unsafe.Pointer(dtype), dtypeLen, "dtype")
	if err != nil {
		return fail(errBuf, errLen, err)
	}
	dims, err := int64s(shape, shapeCap, "shape")
	if err != nil {
		return fail(errBuf, errLen, err)
	}
	if ndim == nil {
		return fail(errBuf, errLen, nullArg("ndim"))
	}
	s, err := schema.Read(d)
	if err != nil {
		return fail(errBuf, errLen, err)
	}
	if len(s.Kind) >= len(kindBuf) {
		return fail(errBuf, errLen, invalidf("kind buffer of %d bytes is too small for %q", kindLen, s.Kind))
	}
	if len(s.DType) >= len(dtypeBuf) {
		return fail(errBuf, errLen, invalidf("dtype buffer of %d bytes is too small for %q", dtypeLen, s.DType))
	}
	if len(s.Shape) > len(dims) {
		return fail(errBuf, errLen, invalidf("shape buffer of %d values is too small for %d dimensions", shapeCap, len(s.Shape)))
	}
	kindBuf[copy(kindBuf, s.Kind)] = 0
	dtypeBuf[copy(dtypeBuf, s.DType)] = 0
	copy(dims, s.Shape)
	*ndim = C.int64_t(len(s.Shape))
	return statusOK
}
