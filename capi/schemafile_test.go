package main

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

func TestRoundTrip(t *testing.T) {
	dir := t.TempDir()
	for _, s := range []schema{
		{Kind: kindDense, DType: "<f4", Shape: []int64{3, 32, 32}},
		{Kind: kindRagged, DType: "<i4", Shape: []int64{}},
		{Kind: kindDense, DType: "|u1", Shape: nil},
		{Kind: kindDense, DType: "<M8[ns]", Shape: []int64{0}},
		{Kind: kindDense, DType: "|S10", Shape: []int64{2}},
	} {
		if err := writeSchema(dir, s); err != nil {
			t.Fatalf("writeSchema(%+v): %v", s, err)
		}
		got, err := readSchema(dir)
		if err != nil {
			t.Fatalf("Read: %v", err)
		}
		want := s
		if want.Shape == nil {
			want.Shape = []int64{}
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("Read = %+v, want %+v", got, want)
		}
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("directory holds %d entries, want only %s", len(entries), schemaFileName)
	}
}

func TestWriteInvalid(t *testing.T) {
	dir := t.TempDir()
	for _, s := range []schema{
		{Kind: "sparse", DType: "<f4"},
		{Kind: kindDense, DType: "float32"},
		{Kind: kindDense, DType: "|O"},
		{Kind: kindDense, DType: ""},
		{Kind: kindDense, DType: "<f4", Shape: []int64{2, -1}},
		{Kind: kindDense, DType: "<f4", Shape: make([]int64, maxDims+1)},
	} {
		err := writeSchema(dir, s)
		if !errors.Is(err, errSchemaInvalid) {
			t.Errorf("writeSchema(%+v) = %v, want errSchemaInvalid", s, err)
		} else if !strings.Contains(err.Error(), schemaFileName) {
			t.Errorf("error %q does not name the file", err)
		}
	}
	if _, err := os.Stat(schemaPath(dir)); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("an invalid schema left a file behind: %v", err)
	}
}

func TestReadMissing(t *testing.T) {
	dir := t.TempDir()
	_, err := readSchema(dir)
	if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), schemaFileName) {
		t.Fatalf("Read of a missing file = %v", err)
	}
	if err := writeSchema(filepath.Join(dir, "nope"), schema{Kind: kindDense, DType: "<f4"}); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Write into a missing directory = %v", err)
	}
}

func TestReadCorrupt(t *testing.T) {
	enc := func(v any) []byte {
		b, err := msgpack.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	cases := map[string][]byte{
		"garbage":     []byte("not msgpack at all"),
		"empty":       {},
		"no version":  enc(map[string]any{"kind": "dense", "dtype": "<f4", "shape": []int64{}}),
		"new version": enc(map[string]any{"version": 2, "kind": "dense", "dtype": "<f4", "shape": []int64{}}),
		"no kind":     enc(map[string]any{"version": 1, "dtype": "<f4", "shape": []int64{}}),
		"no dtype":    enc(map[string]any{"version": 1, "kind": "dense", "shape": []int64{}}),
		"no shape":    enc(map[string]any{"version": 1, "kind": "dense", "dtype": "<f4"}),
		"bad kind":    enc(map[string]any{"version": 1, "kind": "x", "dtype": "<f4", "shape": []int64{}}),
		"bad shape":   enc(map[string]any{"version": 1, "kind": "dense", "dtype": "<f4", "shape": []int64{-3}}),
		"shape type":  enc(map[string]any{"version": 1, "kind": "dense", "dtype": "<f4", "shape": "3"}),
	}
	for name, data := range cases {
		dir := t.TempDir()
		if err := os.WriteFile(schemaPath(dir), data, 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := readSchema(dir)
		if !errors.Is(err, errSchemaCorrupt) {
			t.Errorf("%s: Read = %v, want errSchemaCorrupt", name, err)
		} else if !strings.Contains(err.Error(), schemaPath(dir)) {
			t.Errorf("%s: error %q does not name the file", name, err)
		}
	}
}

func TestUnknownFieldsIgnored(t *testing.T) {
	dir := t.TempDir()
	data, err := msgpack.Marshal(map[string]any{"version": 1, "kind": "ragged", "dtype": "<i8", "shape": []int64{4}, "extra": "x"})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(schemaPath(dir), data, 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := readSchema(dir)
	if err != nil || s.Kind != kindRagged || s.DType != "<i8" || !reflect.DeepEqual(s.Shape, []int64{4}) {
		t.Fatalf("Read = %+v, %v", s, err)
	}
}

func TestReadOriginalSchema(t *testing.T) {
	enc := func(m map[string]any) []byte {
		b, err := msgpack.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	base := func(kind string) map[string]any {
		return map[string]any{"format": "loaderx-zrecord", "version": 1, "kind": kind, "dtype": "<f4", "codec": "zstd", "note": "kept"}
	}
	dense := base("dense")
	dense["item_shape"] = []int64{3, 4}
	ragged := base("ragged")
	ragged["shapes"] = [][]int64{{2, 5}, {0, 5}, {7, 5}}
	empty := base("ragged")
	empty["shapes"] = [][]int64{}
	for _, c := range []struct {
		in   map[string]any
		want schema
	}{
		{dense, schema{Kind: kindDense, DType: "<f4", Shape: []int64{3, 4}}},
		{ragged, schema{Kind: kindRagged, DType: "<f4", Shape: []int64{5}}},
		{empty, schema{Kind: kindRagged, DType: "<f4", Shape: []int64{}}},
	} {
		got, err := decodeSchema(enc(c.in))
		if err != nil || !reflect.DeepEqual(got, c.want) {
			t.Errorf("decodeSchema(%v) = %+v, %v; want %+v", c.in, got, err, c.want)
		}
	}
	mixed := base("ragged")
	mixed["shapes"] = [][]int64{{2, 5}, {3}}
	wrongFormat := base("dense")
	wrongFormat["format"] = "other"
	noShape := base("dense")
	for _, m := range []map[string]any{mixed, wrongFormat, noShape} {
		if _, err := decodeSchema(enc(m)); !errors.Is(err, errSchemaCorrupt) {
			t.Errorf("decodeSchema(%v): err %v, want errSchemaCorrupt", m, err)
		}
	}
}

func TestCodecChoiceRoundTrip(t *testing.T) {
	dir := t.TempDir()
	plain := schema{Kind: kindDense, DType: "<f4", Shape: []int64{4}}
	if err := writeSchema(dir, plain); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(schemaPath(dir))
	if err != nil {
		t.Fatal(err)
	}
	var keys map[string]any
	if err := msgpack.Unmarshal(raw, &keys); err != nil {
		t.Fatal(err)
	}
	if _, ok := keys["codec_choice"]; ok {
		t.Fatalf("a schema without a choice has a codec_choice key: %v", keys)
	}
	got, err := readSchema(dir)
	if err != nil || got.CodecChoice != nil {
		t.Fatalf("readSchema = %+v, %v; want no codec choice", got, err)
	}
	with := plain
	with.CodecChoice = map[string]any{"codec": "zstd", "candidates": map[string]any{"zstd": map[string]any{"ratio": 2.5}}}
	if err := writeSchema(dir, with); err != nil {
		t.Fatal(err)
	}
	got, err = readSchema(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got.CodecChoice["codec"] != "zstd" {
		t.Fatalf("codec_choice = %v", got.CodecChoice)
	}
	cands, ok := got.CodecChoice["candidates"].(map[string]any)
	if !ok || cands["zstd"].(map[string]any)["ratio"] != 2.5 {
		t.Fatalf("codec_choice candidates = %#v", got.CodecChoice["candidates"])
	}
	if got.Kind != plain.Kind || got.DType != plain.DType || !reflect.DeepEqual(got.Shape, plain.Shape) {
		t.Fatalf("schema fields changed: %+v", got)
	}
}

// TestSchemaBitFlips flips every bit of encoded schemas, one at a time: each
// damaged file must be refused as corrupt or read back as the same schema
// (a flip in codec_choice, which the checksum leaves out, or in a key
// readers skip). Without the checksum, "<i4" read as ">i4" and a shape of
// 3 read as 7 pass.
func TestSchemaBitFlips(t *testing.T) {
	for _, s := range []schema{
		{Kind: kindDense, DType: "<i4", Shape: []int64{3, 32}},
		{Kind: kindRagged, DType: "<f2", Shape: []int64{}},
		{Kind: kindDense, DType: "|u1", Shape: []int64{64, 64, 3}, CodecChoice: map[string]any{"codec": "raw"}},
	} {
		data, err := encodeSchema(s)
		if err != nil {
			t.Fatal(err)
		}
		want := schema{Kind: s.Kind, DType: s.DType, Shape: s.Shape}
		refused := 0
		for i := range data {
			for bit := range 8 {
				bad := append([]byte(nil), data...)
				bad[i] ^= 1 << bit
				got, err := decodeSchema(bad)
				if err != nil {
					if !errors.Is(err, errSchemaCorrupt) {
						t.Fatalf("%+v: byte %d bit %d: %v does not wrap errSchemaCorrupt", s, i, bit, err)
					}
					refused++
					continue
				}
				got.CodecChoice = nil
				if !reflect.DeepEqual(got, want) {
					t.Fatalf("%+v: byte %d bit %d flipped reads silently as %+v", s, i, bit, got)
				}
			}
		}
		if refused == 0 {
			t.Fatalf("%+v: no flip was refused", s)
		}
	}
}

func TestSchemaWithoutChecksumStillReads(t *testing.T) {
	data, err := msgpack.Marshal(map[string]any{"version": 1, "kind": "dense", "dtype": "<i4", "shape": []int64{2}})
	if err != nil {
		t.Fatal(err)
	}
	s, err := decodeSchema(data)
	if err != nil || s.DType != "<i4" {
		t.Fatalf("decode = %+v, %v", s, err)
	}
	data, err = msgpack.Marshal(map[string]any{"version": 1, "kind": "dense", "dtype": "<i4", "shape": []int64{2}, "crc32c": uint32(1)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := decodeSchema(data); !errors.Is(err, errSchemaCorrupt) || !strings.Contains(err.Error(), "checksum") {
		t.Fatalf("a wrong crc32c: %v", err)
	}
}
