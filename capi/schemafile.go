package main

import (
	"bytes"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/loaderx/loaderx/zrecord"
	"github.com/vmihailenco/msgpack/v5"
)

// This file reads and writes schema.msgpack, the one piece of
// loaderx-level metadata kept beside a record store.
//
// A record store holds bytes; the schema says how the Python layer turns
// them into arrays: the kind of the dataset ("dense" or "ragged"), the NumPy
// dtype string of one element (numpy.dtype.str, such as "<f4" or "|u1") and
// the item shape (the shape of one record for a dense dataset, of one row
// for a ragged one). The file is a MessagePack map with the keys "version",
// "kind", "dtype" and "shape", "crc32c" (see schemaSum) and optionally
// "codec_choice" (a map saying how the converter picked the codec, see
// lx_schema_set_codec_choice); readers ignore keys they do not know, so a
// later format can add fields without breaking older readers of the same
// version.
//
// The schema decides how every record's bytes are read (a flipped bit can
// turn "<i4" into ">i4"), so it carries a checksum of its own: "crc32c" is
// the CRC-32C of the fields that decide the reading, in a fixed text form
// (schemaSum), so that it does not depend on how the map is encoded. A file
// whose fields do not match it is errSchemaCorrupt. Files written before the
// key existed have none and are read as before; older readers ignore it.
// codec_choice is a record of how the codec was picked and nothing reads
// records by it, so the checksum leaves it out.
//
// The schema files of the original loaderx 1.5.2 (a "format" key, the shape
// as "item_shape" or as per-record "shapes") are read too; see
// decodeOriginalSchema.
//
// Every error names the file it concerns. Arguments that do not describe a
// valid schema wrap errSchemaInvalid; a file that cannot be decoded, lacks
// a field, holds an invalid value or was written by a newer format wraps
// errSchemaCorrupt; a missing file wraps fs.ErrNotExist.

// schemaFileName is the name of the schema file inside a store directory.
const schemaFileName = "schema.msgpack"

// schemaTempPattern names the temporary files writeSchema renames over the
// schema file (os.CreateTemp and path.Match syntax).
const schemaTempPattern = "." + schemaFileName + ".*.tmp"

// schemaVersion is the format version writeSchema writes and the newest
// readSchema reads.
const schemaVersion = 1

// The dataset kinds a schema may record.
const (
	// kindDense is a dataset whose records all have the item shape.
	kindDense = "dense"
	// kindRagged is a dataset whose records are a variable number of rows,
	// each of the item shape.
	kindRagged = "ragged"
)

// maxSchemaFileSize bounds what readSchema will load; a real schema is a few dozen bytes.
const maxSchemaFileSize = 1 << 16

var (
	// errSchemaInvalid is wrapped by errors about a schema given to
	// encodeSchema or writeSchema.
	errSchemaInvalid = errors.New("invalid schema")
	// errSchemaCorrupt is wrapped by errors about a schema file that
	// readSchema cannot accept.
	errSchemaCorrupt = errors.New("corrupt schema")
)

// dtypePattern accepts the strings numpy.dtype.str produces for fixed-size
// element types: a byte-order character, a kind character, the item size in
// bytes and, for datetimes and timedeltas, a unit in brackets. Object dtypes
// ("|O") have no size and are rejected. It also accepts the names of the
// ml_dtypes element types ("bfloat16", "float8_e4m3fn", "int4", ...), whose
// numpy.dtype.str is an anonymous void ("<V2") that would not say which type
// the bytes hold.
var dtypePattern = regexp.MustCompile(`^(?:[<>|=][A-Za-z?][0-9]{1,9}(\[[0-9]*[A-Za-z]{1,3}\])?` +
	`|bfloat16|float[468]_e[0-9]m[0-9][a-z0-9]{0,8}|u?int[24])$`)

// schema is the content of a schema file.
type schema struct {
	// Kind is kindDense or kindRagged.
	Kind string
	// DType is the NumPy dtype string of one element, such as "<f4".
	DType string
	// Shape is the item shape; every dimension is at least zero. An empty
	// shape is a scalar item.
	Shape []int64
	// CodecChoice, when not nil, records how the converter chose the
	// store's codec (the "codec_choice" key: the choice, the reason and the
	// figures measured on a sample). It is informational: nothing reads it
	// to decode records, and schemas without it are complete.
	CodecChoice map[string]any
}

// schemaPath returns the schema file's path inside dir.
func schemaPath(dir string) string { return filepath.Join(dir, schemaFileName) }

// validate reports whether s describes a valid schema. The error wraps
// errSchemaInvalid and names the field at fault.
func (s schema) validate() error {
	if err := s.check(); err != nil {
		return fmt.Errorf("%w: %s", errSchemaInvalid, err)
	}
	return nil
}

// check returns a bare description of what is wrong with s, or nil.
func (s schema) check() error {
	if s.Kind != kindDense && s.Kind != kindRagged {
		return fmt.Errorf("kind %q: want %q or %q", s.Kind, kindDense, kindRagged)
	}
	if !dtypePattern.MatchString(s.DType) {
		return fmt.Errorf("dtype %q: want a fixed-size NumPy dtype string such as \"<f4\" or \"|u1\"", s.DType)
	}
	if len(s.Shape) > maxDims {
		return fmt.Errorf("shape has %d dimensions: at most %d allowed", len(s.Shape), maxDims)
	}
	for i, d := range s.Shape {
		if d < 0 {
			return fmt.Errorf("shape %v: dimension %d is negative", s.Shape, i)
		}
	}
	return nil
}

// schemaFile is the encoded form. Pointer fields tell a missing key from a zero
// value when decoding.
type schemaFile struct {
	Version *int64   `msgpack:"version"`
	Kind    *string  `msgpack:"kind"`
	DType   *string  `msgpack:"dtype"`
	Shape   *[]int64 `msgpack:"shape"`
	// Sum is schemaSum of the other fields; older files do not have it.
	Sum *uint32 `msgpack:"crc32c,omitempty"`
	// CodecChoice is schema.CodecChoice; older files do not have it.
	CodecChoice map[string]any `msgpack:"codec_choice,omitempty"`
	// The fields of the original loaderx 1.5.2's schema (see
	// decodeOriginalSchema); encodeSchema never writes them.
	Format    *string    `msgpack:"format,omitempty"`
	ItemShape *[]int64   `msgpack:"item_shape,omitempty"`
	Shapes    *[][]int64 `msgpack:"shapes,omitempty"`
}

// originalFormat is the "format" value of the schema files the original
// loaderx 1.5.2 writes.
const originalFormat = "loaderx-zrecord"

// encodeSchema returns the schema file content for s, or an error wrapping
// errSchemaInvalid.
func encodeSchema(s schema) ([]byte, error) {
	if err := s.validate(); err != nil {
		return nil, err
	}
	version := int64(schemaVersion)
	shape := s.Shape
	if shape == nil {
		shape = []int64{}
	}
	var buf bytes.Buffer
	enc := msgpack.NewEncoder(&buf)
	enc.UseCompactInts(true)
	sum := schemaSum(version, s.Kind, s.DType, shape)
	f := schemaFile{Version: &version, Kind: &s.Kind, DType: &s.DType, Shape: &shape, Sum: &sum, CodecChoice: s.CodecChoice}
	if err := enc.Encode(f); err != nil {
		return nil, fmt.Errorf("%w: encode: %v", errSchemaInvalid, err)
	}
	return buf.Bytes(), nil
}

// decodeSchema parses schema file content. Errors wrap errSchemaCorrupt and
// do not name a file; readSchema adds the path.
func decodeSchema(data []byte) (schema, error) {
	var f schemaFile
	dec := msgpack.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&f); err != nil {
		return schema{}, fmt.Errorf("%w: not a MessagePack map of the schema fields: %v", errSchemaCorrupt, err)
	}
	if f.Format != nil {
		return decodeOriginalSchema(f)
	}
	switch {
	case f.Version == nil:
		return schema{}, fmt.Errorf("%w: no \"version\" field", errSchemaCorrupt)
	case *f.Version < 1 || *f.Version > schemaVersion:
		return schema{}, fmt.Errorf("%w: format version %d is not supported (this build reads 1 to %d)", errSchemaCorrupt, *f.Version, schemaVersion)
	case f.Kind == nil:
		return schema{}, fmt.Errorf("%w: no \"kind\" field", errSchemaCorrupt)
	case f.DType == nil:
		return schema{}, fmt.Errorf("%w: no \"dtype\" field", errSchemaCorrupt)
	case f.Shape == nil:
		return schema{}, fmt.Errorf("%w: no \"shape\" field", errSchemaCorrupt)
	}
	s := schema{Kind: *f.Kind, DType: *f.DType, Shape: *f.Shape, CodecChoice: f.CodecChoice}
	if s.Shape == nil {
		s.Shape = []int64{}
	}
	if f.Sum != nil {
		if got := schemaSum(*f.Version, s.Kind, s.DType, s.Shape); got != *f.Sum {
			return schema{}, fmt.Errorf("%w: the fields (version %d, kind %q, dtype %q, shape %v) have checksum %#08x, the file says %#08x",
				errSchemaCorrupt, *f.Version, s.Kind, s.DType, s.Shape, got, *f.Sum)
		}
	}
	if err := s.check(); err != nil {
		return schema{}, fmt.Errorf("%w: %v", errSchemaCorrupt, err)
	}
	return s, nil
}

// schemaSum is the CRC-32C of the fields that decide how records are read,
// as the text "version kind dtype dim dim ...", each field followed by a zero
// byte.
func schemaSum(version int64, kind, dtype string, shape []int64) uint32 {
	b := make([]byte, 0, 64)
	b = strconv.AppendInt(b, version, 10)
	b = append(b, 0)
	b = append(b, kind...)
	b = append(b, 0)
	b = append(b, dtype...)
	b = append(b, 0)
	for _, d := range shape {
		b = strconv.AppendInt(b, d, 10)
		b = append(b, 0)
	}
	return crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli))
}

// decodeOriginalSchema reads the schema file of the original loaderx 1.5.2:
// "format" is "loaderx-zrecord", "version" 1, "kind", "dtype" (numpy.dtype.str)
// and "codec" as here, and the shape as "item_shape" (dense) or as
// "shapes", the whole shape of every record (ragged). A ragged store here
// has one item shape, every record's shape past its first axis, so a
// ragged schema whose records disagree on it cannot be read as one. The
// store's codec comes from its header, so "codec" is not needed.
func decodeOriginalSchema(f schemaFile) (schema, error) {
	switch {
	case *f.Format != originalFormat:
		return schema{}, fmt.Errorf("%w: \"format\" is %q, not %q", errSchemaCorrupt, *f.Format, originalFormat)
	case f.Version == nil:
		return schema{}, fmt.Errorf("%w: no \"version\" field", errSchemaCorrupt)
	case *f.Version != 1:
		return schema{}, fmt.Errorf("%w: %s schema version %d is not supported (this build reads 1)", errSchemaCorrupt, originalFormat, *f.Version)
	case f.Kind == nil:
		return schema{}, fmt.Errorf("%w: no \"kind\" field", errSchemaCorrupt)
	case f.DType == nil:
		return schema{}, fmt.Errorf("%w: no \"dtype\" field", errSchemaCorrupt)
	}
	s := schema{Kind: *f.Kind, DType: *f.DType, Shape: []int64{}}
	switch s.Kind {
	case kindDense:
		if f.ItemShape == nil {
			return schema{}, fmt.Errorf("%w: no \"item_shape\" field", errSchemaCorrupt)
		}
		if *f.ItemShape != nil {
			s.Shape = *f.ItemShape
		}
	case kindRagged:
		if f.Shapes == nil {
			return schema{}, fmt.Errorf("%w: no \"shapes\" field", errSchemaCorrupt)
		}
		for i, shape := range *f.Shapes {
			if len(shape) == 0 {
				return schema{}, fmt.Errorf("%w: record %d has an empty shape", errSchemaCorrupt, i)
			}
			if i == 0 {
				s.Shape = append(s.Shape, shape[1:]...)
			} else if !slices.Equal(shape[1:], s.Shape) {
				return schema{}, fmt.Errorf("%w: record %d has shape %v, record 0 has %v: a ragged store read here needs every record to share its shape past the first axis", errSchemaCorrupt, i, shape, append([]int64{(*f.Shapes)[0][0]}, s.Shape...))
			}
		}
	}
	if err := s.check(); err != nil {
		return schema{}, fmt.Errorf("%w: %v", errSchemaCorrupt, err)
	}
	return s, nil
}

// writeSchema validates s and stores it as dir/schema.msgpack, replacing any
// previous schema atomically: the content goes to a temporary file in dir,
// is synced, and is renamed over the old one, and then dir is synced. dir
// must exist.
func writeSchema(dir string, s schema) error {
	path := schemaPath(dir)
	data, err := encodeSchema(s)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	tmp, err := createSchemaTemp(dir)
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
	// The rename is durable only once the directory is: without this, a
	// power cut could bring back the previous schema after a later update.
	if err := zrecord.SyncDir(zrecord.OSFS, dir); err != nil {
		return fmt.Errorf("write %s: sync %s: %w", path, dir, err)
	}
	return nil
}

// createSchemaTemp creates a new temporary file in dir whose name matches
// schemaTempPattern. Unlike os.CreateTemp (0600) it gets the mode of the
// store's other files, 0644 less the umask, so a schema replaced through it
// stays readable by whoever can read the records.
func createSchemaTemp(dir string) (*os.File, error) {
	prefix, suffix, _ := strings.Cut(schemaTempPattern, "*")
	for range 100 {
		name := filepath.Join(dir, prefix+strconv.FormatUint(rand.Uint64(), 36)+suffix)
		f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
		if !errors.Is(err, fs.ErrExist) {
			return f, err
		}
	}
	return nil, fmt.Errorf("create a temporary file in %s: %w", dir, fs.ErrExist)
}

// readSchema loads and validates dir/schema.msgpack.
func readSchema(dir string) (schema, error) {
	path := schemaPath(dir)
	f, err := os.Open(path)
	if err != nil {
		return schema{}, fmt.Errorf("read schema: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxSchemaFileSize+1))
	if err != nil {
		return schema{}, fmt.Errorf("read schema %s: %w", path, err)
	}
	if len(data) > maxSchemaFileSize {
		return schema{}, fmt.Errorf("schema %s: %w: larger than %d bytes", path, errSchemaCorrupt, maxSchemaFileSize)
	}
	s, err := decodeSchema(data)
	if err != nil {
		return schema{}, fmt.Errorf("schema %s: %w", path, err)
	}
	return s, nil
}
