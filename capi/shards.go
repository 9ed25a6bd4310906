package main

// A sharded dataset opened lazily: lx_set_open_shards makes a zrecord lazy
// set (zrecord.OpenSet) of the shards a manifest names, and the opener here
// checks each shard against the manifest whenever the set opens it: its
// schema (kind, dtype, item shape) and its length. Its errors name the
// dataset and the shard as loaderx's store layer names them
// (loaderx/store/shards.py), with values written as Python writes them.

/*
#include <stdint.h>
*/
import "C"

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"unicode"
	"unsafe"

	"github.com/loaderx/loaderx/zrecord"
)

// lx_set_open_shards opens the sharded dataset at root (or its stream
// stream, "" for a dataset of one store per shard) as one read-only set,
// and writes its handle to *handle. names holds the n shard names, in
// order, separated by NUL bytes (names_len bytes in all, no NUL after the
// last), lengths their n lengths, and kind, dtype, shape and ndim the
// schema every shard must have (as lx_schema_write takes it). Shard k's
// store is root/names[k]/stream. No shard is opened here: each opens when a
// read needs it, is checked then against its schema and length (LX_CORRUPT
// naming the shard: missing, not a store, another schema or length, or
// replaced since the set first opened it), and at most max_open shards stay
// open (zrecord.WithMaxOpen; 0 for the process-wide default,
// zrecord.DefaultMaxOpen). The read exports take the handle as they take
// lx_set_open's, and lx_store_close closes it.
//
//export lx_set_open_shards
func lx_set_open_shards(root *C.char, stream *C.char, names unsafe.Pointer, namesLen C.int64_t, n C.int64_t,
	lengths *C.int64_t, kind *C.char, dtype *C.char, shape *C.int64_t, ndim C.int64_t, maxOpen C.int64_t,
	handle *C.int64_t, errBuf *C.char, errLen C.int64_t) C.int {
	return call("lx_set_open_shards", errBuf, errLen, func() error {
		if handle == nil {
			return nullArg("handle")
		}
		r, err := goString(root, "root")
		if err != nil {
			return err
		}
		sub, err := goString(stream, "stream")
		if err != nil {
			return err
		}
		if n <= 0 {
			return invalidf("a sharded dataset needs at least one shard, not %d", n)
		}
		if maxOpen < 0 {
			return invalidf("max_open %d is negative", maxOpen)
		}
		buf, err := byteView(names, namesLen, "names")
		if err != nil {
			return err
		}
		lens, err := int64s(lengths, n, "lengths")
		if err != nil {
			return err
		}
		want, err := schemaArg(kind, dtype, shape, ndim)
		if err != nil {
			return err
		}
		if err := want.validate(); err != nil {
			return err
		}
		list := strings.Split(string(buf), "\x00")
		if int64(len(list)) != int64(n) {
			return invalidf("names holds %d NUL-separated names, n is %d", len(list), n)
		}
		o := &shardOpener{root: r, stream: sub, names: list, want: want, lengths: append([]int64(nil), lens...)}
		shards := make([]zrecord.Shard, len(list))
		for k, name := range list {
			if name == "" || name == "." || name == ".." || strings.ContainsRune(name, filepath.Separator) {
				return invalidf("shard %d: %s is not a plain directory name", k, pyRepr(name))
			}
			shards[k] = zrecord.Shard{Dir: filepath.Join(r, name, sub), Len: lens[k]}
		}
		var opts []zrecord.SetOption
		if maxOpen > 0 {
			opts = append(opts, zrecord.WithMaxOpen(int(min(maxOpen, 1<<30))))
		}
		t, err := zrecord.OpenSet(shards, o.open, opts...)
		if err != nil {
			return err
		}
		*handle = C.int64_t(registerOpenSet(t))
		return nil
	})
}

// shardOpener opens and checks the stores of a sharded dataset's set.
type shardOpener struct {
	root, stream string
	names        []string
	want         schema
	lengths      []int64
}

// open is the set's zrecord.Opener: it opens shard k's store read-only
// after checking that the shard is there and has the schema every shard
// must have, and checks its length against the manifest's (the set checks
// the length too, and that a store opened again is the one it first
// opened). Running out of descriptors keeps its cause, for the set to name
// the limit.
func (o *shardOpener) open(k int, dir string) (*zrecord.Store, error) {
	where := fmt.Sprintf("sharded dataset %s: shard %s", pyRepr(o.root), pyRepr(o.names[k]))
	label := ""
	if o.stream != "" {
		label = "stream " + pyRepr(o.stream) + " "
	}
	fi, err := os.Stat(dir)
	if err != nil && resourceErr(err) {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	if err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("%s is missing (%s); if a commit replaced the dataset's shards since it was opened, open it again: %w",
			where, pyRepr(dir), zrecord.ErrCorrupt)
	}
	got, err := readSchema(dir)
	if err != nil {
		if resourceErr(err) {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
		return nil, fmt.Errorf("%s has no readable schema: %v: %w", where, err, zrecord.ErrCorrupt)
	}
	for _, f := range []struct{ field, want, got string }{
		{"kind", pyRepr(o.want.Kind), pyRepr(got.Kind)},
		{"dtype", pyRepr(o.want.DType), pyRepr(got.DType)},
		{"item_shape", pyTuple(o.want.Shape), pyTuple(got.Shape)},
	} {
		if f.want != f.got {
			return nil, fmt.Errorf("%s %shas %s %s, the others %s: %w", where, label, f.field, f.got, f.want, zrecord.ErrCorrupt)
		}
	}
	st, err := zrecord.Open(dir, zrecord.WithReadOnly())
	if err != nil {
		if errors.Is(err, zrecord.ErrNotStore) && !resourceErr(err) {
			return nil, fmt.Errorf("%s is not a store: %v: %w", where, err, zrecord.ErrCorrupt)
		}
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	if st.Len() != o.lengths[k] {
		st.Close()
		return nil, fmt.Errorf("%s holds %d records, the manifest says %d: %w", where, st.Len(), o.lengths[k], zrecord.ErrCorrupt)
	}
	return st, nil
}

// resourceErr reports whether err is the process or the system running out
// of descriptors or memory, which says nothing about the shard.
func resourceErr(err error) bool {
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) || errors.Is(err, syscall.ENOMEM)
}

// pyRepr writes s as Python's repr writes a str.
func pyRepr(s string) string {
	plain := true
	for _, r := range s {
		if r == '\\' || !unicode.IsPrint(r) {
			plain = false
			break
		}
	}
	switch {
	case plain && !strings.ContainsRune(s, '\''):
		return "'" + s + "'"
	case plain && !strings.ContainsRune(s, '"'):
		return `"` + s + `"`
	}
	return strconv.Quote(s)
}

// pyTuple writes a shape as Python writes a tuple of ints: (), (3,), (2, 3).
func pyTuple(dims []int64) string {
	parts := make([]string, len(dims))
	for i, d := range dims {
		parts[i] = strconv.FormatInt(d, 10)
	}
	if len(parts) == 1 {
		return "(" + parts[0] + ",)"
	}
	return "(" + strings.Join(parts, ", ") + ")"
}
