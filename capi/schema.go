package main

/*
#include <stdint.h>
*/
import "C"

import (
	"fmt"
	"unsafe"

	"github.com/loaderx/loaderx/zrecord"
)

// schemaArg converts the schema arguments of lx_schema_write and
// lx_store_create.
func schemaArg(kind, dtype *C.char, shape *C.int64_t, ndim C.int64_t) (schema, error) {
	k, err := goString(kind, "kind")
	if err != nil {
		return schema{}, err
	}
	t, err := goString(dtype, "dtype")
	if err != nil {
		return schema{}, err
	}
	if ndim > maxDims {
		return schema{}, invalidf("shape has %d dimensions: at most %d allowed", ndim, maxDims)
	}
	dims, err := int64s(shape, ndim, "shape")
	if err != nil {
		return schema{}, err
	}
	return schema{Kind: k, DType: t, Shape: append([]int64{}, dims...)}, nil
}

// lx_schema_write writes dir/schema.msgpack: the dataset kind ("dense" or
// "ragged"), the NumPy dtype string and the ndim-dimensional item shape
// (ndim at most LX_MAX_DIMS). An existing schema is replaced atomically.
// lx_store_create writes the schema of a new store itself.
//
//export lx_schema_write
func lx_schema_write(dir *C.char, kind *C.char, dtype *C.char, shape *C.int64_t, ndim C.int64_t,
	errBuf *C.char, errLen C.int64_t) C.int {
	return call("lx_schema_write", errBuf, errLen, func() error {
		d, err := goString(dir, "dir")
		if err != nil {
			return err
		}
		s, err := schemaArg(kind, dtype, shape, ndim)
		if err != nil {
			return err
		}
		return writeSchema(d, s)
	})
}

// lx_schema_read reads dir/schema.msgpack: it writes the kind and the dtype
// string NUL-terminated into the kind_len and dtype_len bytes at kind and
// dtype, the item shape into the shape_cap values at shape, and the number
// of dimensions to *ndim. LX_MAX_DIMS values always suffice for shape.
//
//export lx_schema_read
func lx_schema_read(dir *C.char, kind *C.char, kindLen C.int64_t, dtype *C.char, dtypeLen C.int64_t,
	shape *C.int64_t, shapeCap C.int64_t, ndim *C.int64_t, errBuf *C.char, errLen C.int64_t) C.int {
	return call("lx_schema_read", errBuf, errLen, func() error {
		d, err := goString(dir, "dir")
		if err != nil {
			return err
		}
		kindBuf, err := byteView(unsafe.Pointer(kind), kindLen, "kind")
		if err != nil {
			return err
		}
		dtypeBuf, err := byteView(unsafe.Pointer(dtype), dtypeLen, "dtype")
		if err != nil {
			return err
		}
		dims, err := int64s(shape, shapeCap, "shape")
		if err != nil {
			return err
		}
		if ndim == nil {
			return nullArg("ndim")
		}
		s, err := readSchema(d)
		if err != nil {
			return err
		}
		if len(s.Kind) >= len(kindBuf) {
			return invalidf("kind buffer of %d bytes is too small for %q", kindLen, s.Kind)
		}
		if len(s.DType) >= len(dtypeBuf) {
			return invalidf("dtype buffer of %d bytes is too small for %q", dtypeLen, s.DType)
		}
		if len(s.Shape) > len(dims) {
			return invalidf("shape buffer of %d values is too small for %d dimensions", shapeCap, len(s.Shape))
		}
		kindBuf[copy(kindBuf, s.Kind)] = 0
		dtypeBuf[copy(dtypeBuf, s.DType)] = 0
		copy(dims, s.Shape)
		*ndim = C.int64_t(len(s.Shape))
		return nil
	})
}

// schemaOptions returns the zrecord options a create export adds for its
// schema arguments: the schema file, written before the header publishes
// the store (when kind is not NULL), and the replacement of a previous
// store (with createReplace in flags).
func schemaOptions(dir string, kind, dtype *C.char, shape *C.int64_t, ndim, flags C.int64_t) ([]zrecord.Option, error) {
	var opts []zrecord.Option
	if kind != nil {
		s, err := schemaArg(kind, dtype, shape, ndim)
		if err != nil {
			return nil, err
		}
		data, err := encodeSchema(s)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", schemaPath(dir), err)
		}
		opts = append(opts, zrecord.WithFile(schemaFileName, data))
	}
	if flags&createReplace != 0 {
		opts = append(opts, zrecord.WithReplace(schemaFileName, schemaTempPattern))
	}
	return opts, nil
}
