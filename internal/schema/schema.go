// Package schema reads and writes schema.msgpack, the one piece of
// loaderx-level metadata kept beside a record store.
//
// A record store holds bytes; the schema says how the Python layer turns
// them into arrays: the kind of the dataset ("dense" or "ragged"), the NumPy
// dtype string of one element (numpy.dtype.str, such as "<f4" or "|u1") and
// the item shape (the shape of one record for a dense dataset, of one row
// for a ragged one). The file is a MessagePack map with the keys "version",
// "kind", "dtype" and "shape"; readers ignore keys they do not know, so a
// later format can add fields without breaking older readers of the same
// version.
//
// Every error names the file it concerns. Arguments that do not describe a
// valid schema wrap [ErrInvalid]; a file that cannot be decoded, lacks a
// field, holds an invalid value or was written by a newer format wraps
// [ErrCorrupt]; a missing file wraps [fs.ErrNotExist].
package schema

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"

	"github.com/vmihailenco/msgpack/v5"
)

// FileName is the name of the schema file inside a store directory.
const FileName = "schema.msgpack"

// Version is the format version this package writes and the newest it reads.
const Version = 1

// The dataset kinds a schema may record.
const (
	// KindDense is a dataset whose records all have the item shape.
	KindDense = "dense"
	// KindRagged is a dataset whose records are a variable number of rows,
	// each of the item shape.
	KindRagged = "ragged"
)

// MaxDims is the largest number of dimensions an item shape may have. It is
// NumPy's own limit.
const MaxDims = 64

// maxFileSize bounds what Read will load; a real schema is a few dozen bytes.
const maxFileSize = 1 << 16

var (
	// ErrInvalid is wrapped by errors about a schema given to Write.
	ErrInvalid = errors.New("invalid schema")
	// ErrCorrupt is wrapped by errors about a schema file that Read cannot
	// accept.
	ErrCorrupt = errors.New("corrupt schema")
)

// dtypePattern accepts the strings numpy.dtype.str produces for fixed-size
// element types: a byte-order character, a kind character, the item size in
// bytes and, for datetimes and timedeltas, a unit in brackets. Object dtypes
// ("|O") have no size and are rejected.
var dtypePattern = regexp.MustCompile(`^[<>|=][A-Za-z?][0-9]{1,9}(\[[0-9]*[A-Za-z]{1,3}\])?$`)

// Schema is the content of a schema file.
type Schema struct {
	// Kind is KindDense or KindRagged.
	Kind string
	// DType is the NumPy dtype string of one element, such as "<f4".
	DType string
	// Shape is the item shape; every dimension is at least zero. An empty
	// shape is a scalar item.
	Shape []int64
}

// Path returns the schema file's path inside dir.
func Path(dir string) string { return filepath.Join(dir, FileName) }

// Validate reports whether s describes a valid schema. The error wraps
// ErrInvalid and names the field at fault.
func (s Schema) Validate() error {
	if err := s.check(); err != nil {
		return fmt.Errorf("%w: %s", ErrInvalid, err)
	}
	return nil
}

// check returns a bare description of what is wrong with s, or nil.
func (s Schema) check() error {
	if s.Kind != KindDense && s.Kind != KindRagged {
		return fmt.Errorf("kind %q: want %q or %q", s.Kind, KindDense, KindRagged)
	}
	if !dtypePattern.MatchString(s.DType) {
		return fmt.Errorf("dtype %q: want a fixed-size NumPy dtype string such as \"<f4\" or \"|u1\"", s.DType)
	}
	if len(s.Shape) > MaxDims {
		return fmt.Errorf("shape has %d dimensions: at most %d allowed", len(s.Shape), MaxDims)
	}
	for i, d := range s.Shape {
		if d < 0 {
			return fmt.Errorf("shape %v: dimension %d is negative", s.Shape, i)
		}
	}
	return nil
}

// file is the encoded form. Pointer fields tell a missing key from a zero
// value when decoding.
type file struct {
	Version *int64   `msgpack:"version"`
	Kind    *string  `msgpack:"kind"`
	DType   *string  `msgpack:"dtype"`
	Shape   *[]int64 `msgpack:"shape"`
}

// Encode returns the schema file content for s, or an error wrapping
// ErrInvalid.
func Encode(s Schema) ([]byte, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	version := int64(Version)
	shape := s.Shape
	if shape == nil {
		shape = []int64{}
	}
	var buf bytes.Buffer
	enc := msgpack.NewEncoder(&buf)
	enc.UseCompactInts(true)
	if err := enc.Encode(file{Version: &version, Kind: &s.Kind, DType: &s.DType, Shape: &shape}); err != nil {
		return nil, fmt.Errorf("%w: encode: %v", ErrInvalid, err)
	}
	return buf.Bytes(), nil
}

// Decode parses schema file content. Errors wrap ErrCorrupt and do not name
// a file; Read adds the path.
func Decode(data []byte) (Schema, error) {
	var f file
	dec := msgpack.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&f); err != nil {
		return Schema{}, fmt.Errorf("%w: not a MessagePack map of the schema fields: %v", ErrCorrupt, err)
	}
	switch {
	case f.Version == nil:
		return Schema{}, fmt.Errorf("%w: no \"version\" field", ErrCorrupt)
	case *f.Version < 1 || *f.Version > Version:
		return Schema{}, fmt.Errorf("%w: format version %d is not supported (this build reads 1 to %d)", ErrCorrupt, *f.Version, Version)
	case f.Kind == nil:
		return Schema{}, fmt.Errorf("%w: no \"kind\" field", ErrCorrupt)
	case f.DType == nil:
		return Schema{}, fmt.Errorf("%w: no \"dtype\" field", ErrCorrupt)
	case f.Shape == nil:
		return Schema{}, fmt.Errorf("%w: no \"shape\" field", ErrCorrupt)
	}
	s := Schema{Kind: *f.Kind, DType: *f.DType, Shape: *f.Shape}
	if s.Shape == nil {
		s.Shape = []int64{}
	}
	if err := s.check(); err != nil {
		return Schema{}, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	return s, nil
}

// Write validates s and stores it as dir/schema.msgpack, replacing any
// previous schema atomically: the content goes to a temporary file in dir,
// is synced, and is renamed over the old one. dir must exist.
func Write(dir string, s Schema) error {
	path := Path(dir)
	data, err := Encode(s)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	tmp, err := os.CreateTemp(dir, "."+FileName+".*.tmp")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	done := false
	defer func() {
		if !done {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if _, err := tmp.Write(data); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		os.Remove(tmp.Name())
		done = true
		return fmt.Errorf("write %s: %w", path, err)
	}
	done = true
	return nil
}

// Read loads and validates dir/schema.msgpack.
func Read(dir string) (Schema, error) {
	path := Path(dir)
	f, err := os.Open(path)
	if err != nil {
		return Schema{}, fmt.Errorf("read schema: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxFileSize+1))
	if err != nil {
		return Schema{}, fmt.Errorf("read schema %s: %w", path, err)
	}
	if len(data) > maxFileSize {
		return Schema{}, fmt.Errorf("schema %s: %w: larger than %d bytes", path, ErrCorrupt, maxFileSize)
	}
	s, err := Decode(data)
	if err != nil {
		return Schema{}, fmt.Errorf("schema %s: %w", path, err)
	}
	return s, nil
}
