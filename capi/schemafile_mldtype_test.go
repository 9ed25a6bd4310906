package main

import (
	"errors"
	"testing"
)

// The ml_dtypes element types are recorded by name; the names round-trip,
// and near misses are still refused.
func TestMLDTypeNames(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"bfloat16", "float8_e4m3fn", "float8_e5m2", "float8_e4m3b11fnuz", "float8_e8m0fnu", "float4_e2m1fn", "int4", "uint2"} {
		s := schema{Kind: kindDense, DType: name, Shape: []int64{4}}
		if err := writeSchema(dir, s); err != nil {
			t.Fatalf("writeSchema(%q): %v", name, err)
		}
		got, err := readSchema(dir)
		if err != nil || got.DType != name {
			t.Fatalf("readSchema after %q = %+v, %v", name, got, err)
		}
	}
	for _, name := range []string{"bfloat32", "float8", "float8_e4m3fn ", "int8", "Bfloat16", "float16_e5m10", "<V2bfloat16"} {
		if err := writeSchema(dir, schema{Kind: kindDense, DType: name}); !errors.Is(err, errSchemaInvalid) {
			t.Errorf("writeSchema(%q) = %v, want errSchemaInvalid", name, err)
		}
	}
}
