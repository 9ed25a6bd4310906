package steppack

import (
	"fmt"
	"unsafe"
)

// The unsafe work of the package: a slot's byte buffers viewed as the
// typed arrays they are (the caller's NumPy arrays, aligned to their item).

func int64s(b []byte, what string) ([]int64, error) {
	return typed[int64](b, what)
}

func int32s(b []byte, what string) ([]int32, error) {
	return typed[int32](b, what)
}

func typed[T int32 | int64](b []byte, what string) ([]T, error) {
	var zero T
	size := int(unsafe.Sizeof(zero))
	if len(b) == 0 {
		return nil, nil
	}
	if uintptr(unsafe.Pointer(&b[0]))%uintptr(size) != 0 {
		return nil, fmt.Errorf("%w: %s: buffer at %p is not aligned to %d bytes", ErrInvalid, what, &b[0], size)
	}
	return unsafe.Slice((*T)(unsafe.Pointer(&b[0])), len(b)/size), nil
}
