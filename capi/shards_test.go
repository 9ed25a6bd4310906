package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/loaderx/loaderx/zrecord"
)

func TestPythonReprs(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"shard-1f", "'shard-1f'"},
		{"it's", `"it's"`},
		{`a\b`, `"a\\b"`},
		{"tab\there", `"tab\there"`},
	} {
		if got := pyRepr(tc.in); got != tc.want {
			t.Errorf("pyRepr(%q) = %s, want %s", tc.in, got, tc.want)
		}
	}
	for _, tc := range []struct {
		in   []int64
		want string
	}{{nil, "()"}, {[]int64{3}, "(3,)"}, {[]int64{2, 3}, "(2, 3)"}} {
		if got := pyTuple(tc.in); got != tc.want {
			t.Errorf("pyTuple(%v) = %s, want %s", tc.in, got, tc.want)
		}
	}
}

// makeShard writes a store of n records of 12 bytes with the schema
// (dense, dtype, shape) at dir.
func makeShard(t *testing.T, dir, dtype string, shape []int64, n int) {
	t.Helper()
	data, err := encodeSchema(schema{Kind: kindDense, DType: dtype, Shape: shape})
	if err != nil {
		t.Fatal(err)
	}
	s, err := zrecord.Create(dir, zrecord.WithFile(schemaFileName, data))
	if err != nil {
		t.Fatal(err)
	}
	recs := make([][]byte, n)
	for i := range recs {
		recs[i] = make([]byte, 12)
	}
	if n > 0 {
		if _, err := s.Append(recs); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

// The opener checks each shard against the manifest's schema and length
// and names the dataset and the shard as loaderx's store layer does.
func TestShardOpenerChecksEachShard(t *testing.T) {
	root := t.TempDir()
	names := []string{"good", "gone", "wide", "short", "bare"}
	makeShard(t, filepath.Join(root, "good"), "<f4", []int64{3}, 4)
	makeShard(t, filepath.Join(root, "wide"), "<f4", []int64{2}, 4)
	makeShard(t, filepath.Join(root, "short"), "<f4", []int64{3}, 3)
	if err := os.MkdirAll(filepath.Join(root, "bare"), 0o755); err != nil {
		t.Fatal(err)
	}
	o := &shardOpener{root: root, names: names, want: schema{Kind: kindDense, DType: "<f4", Shape: []int64{3}},
		lengths: []int64{4, 4, 4, 4, 4}}
	st, err := o.open(0, filepath.Join(root, "good"))
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	prefix := "sharded dataset " + pyRepr(root) + ": shard "
	for k, want := range map[int]string{
		1: "'gone' is missing",
		2: "'wide' has item_shape (2,), the others (3,)",
		3: "'short' holds 3 records, the manifest says 4",
		4: "'bare' has no readable schema",
	} {
		_, err := o.open(k, filepath.Join(root, names[k]))
		if !errors.Is(err, zrecord.ErrCorrupt) || !strings.Contains(err.Error(), prefix+want) {
			t.Errorf("shard %d: %v, want ErrCorrupt with %q", k, err, prefix+want)
		}
		if statusOf(err) != statusCorrupt {
			t.Errorf("shard %d: status %d, want LX_CORRUPT", k, statusOf(err))
		}
	}
	if !resourceErr(&os.PathError{Op: "open", Path: "x", Err: syscall.EMFILE}) || resourceErr(os.ErrNotExist) {
		t.Error("resourceErr tells descriptors running out from other failures wrongly")
	}
}
