package main

/*
#include <stdint.h>
*/
import "C"

import (
	"bytes"
	"encoding/json"
	"unsafe"

	"github.com/loaderx/loaderx/zrecord"
)

// This file holds what the converter's automatic codec choice needs from
// the library: a codec measured on a sample of records in memory, and the
// record of the choice kept in the store's schema file.

// maxChoiceJSON bounds the JSON document lx_schema_set_codec_choice accepts.
const maxChoiceJSON = 16 << 10

// lx_codec_probe compresses the n_samples packed samples (samples_len bytes
// at samples, delimited by n_samples+1 offsets) as a store of the codec
// called codec would store them (for "zstd_dict" against the dict_len-byte
// dictionary at dict, at the level of the tier called dict_tier; for
// narrow as elements of the type after the colon, see lx_store_create), then
// times reading them all back on the calling thread, the way a gather does,
// and writes LX_PROBE_LEN values to out (which holds out_len), each at its
// position in enum lx_probe (zrecord.ProbeCodec). Nothing is written to
// disk.
//
//export lx_codec_probe
func lx_codec_probe(codec *C.char, dictTier *C.char, dict unsafe.Pointer, dictLen C.int64_t,
	samples unsafe.Pointer, samplesLen C.int64_t, sampleOffsets *C.int64_t, nSamples C.int64_t,
	out *C.int64_t, outLen C.int64_t, errBuf *C.char, errLen C.int64_t) C.int {
	return call("lx_codec_probe", errBuf, errLen, func() error {
		codecName, err := goString(codec, "codec")
		if err != nil {
			return err
		}
		tierName, err := goString(dictTier, "dict_tier")
		if err != nil {
			return err
		}
		c, el, err := codecSpec(codecName)
		if err != nil {
			return err
		}
		tier, err := zrecord.ParseDictTier(tierName)
		if err != nil {
			return err
		}
		dst, err := outValues(out, outLen, ProbeLen, "a probe writes")
		if err != nil {
			return err
		}
		d, err := byteView(dict, dictLen, "dict")
		if err != nil {
			return err
		}
		recs, err := packed(samples, samplesLen, sampleOffsets, nSamples, "samples")
		if err != nil {
			return err
		}
		var p zrecord.Probe
		if c == zrecord.Narrow {
			p, err = zrecord.ProbeNarrow(el, recs)
		} else {
			p, err = zrecord.ProbeCodec(c, tier, d, recs)
		}
		if err != nil {
			return err
		}
		dst[probeRecords] = p.Records
		dst[probeLogicalBytes] = p.LogicalBytes
		dst[probeStoredBytes] = p.StoredBytes
		dst[probeCompressed] = p.Compressed
		dst[probeDecodeNanos] = p.DecodeNanos
		dst[probePasses] = p.Passes
		return nil
	})
}

// lx_schema_set_codec_choice stores the JSON object in the doc_len bytes at
// doc as the "codec_choice" entry of dir/schema.msgpack, which must exist,
// replacing the file atomically. The object (at most 16 KiB of JSON) says
// how the store's codec was chosen; nothing reads it to decode records.
//
//export lx_schema_set_codec_choice
func lx_schema_set_codec_choice(dir *C.char, doc unsafe.Pointer, docLen C.int64_t, errBuf *C.char, errLen C.int64_t) C.int {
	return call("lx_schema_set_codec_choice", errBuf, errLen, func() error {
		d, err := goString(dir, "dir")
		if err != nil {
			return err
		}
		if docLen > maxChoiceJSON {
			return invalidf("codec choice of %d bytes: at most %d allowed", docLen, maxChoiceJSON)
		}
		data, err := byteView(doc, docLen, "doc")
		if err != nil {
			return err
		}
		var choice map[string]any
		if err := json.Unmarshal(data, &choice); err != nil || choice == nil {
			return invalidf("codec choice %.80q is not a JSON object", data)
		}
		s, err := readSchema(d)
		if err != nil {
			return err
		}
		s.CodecChoice = choice
		return writeSchema(d, s)
	})
}

// lx_schema_codec_choice reads the "codec_choice" entry of
// dir/schema.msgpack as a JSON object into the out_len bytes at out and
// writes its length to *written; a schema without one writes 0. If out is
// too small, it fails with LX_INVALID and writes the length it needs to
// *written.
//
//export lx_schema_codec_choice
func lx_schema_codec_choice(dir *C.char, out unsafe.Pointer, outLen C.int64_t, written *C.int64_t,
	errBuf *C.char, errLen C.int64_t) C.int {
	return call("lx_schema_codec_choice", errBuf, errLen, func() error {
		d, err := goString(dir, "dir")
		if err != nil {
			return err
		}
		if written == nil {
			return nullArg("written")
		}
		s, err := readSchema(d)
		if err != nil {
			return err
		}
		*written = 0
		if s.CodecChoice == nil {
			return nil
		}
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(s.CodecChoice); err != nil {
			return invalidf("schema %s: codec_choice cannot be written as JSON: %v", schemaPath(d), err)
		}
		doc := bytes.TrimSpace(buf.Bytes())
		*written = C.int64_t(len(doc))
		if int64(outLen) < int64(len(doc)) {
			return invalidf("out holds %d bytes: the codec choice needs %d", outLen, len(doc))
		}
		view, err := byteView(out, outLen, "out")
		if err != nil {
			return err
		}
		copy(view, doc)
		return nil
	})
}
