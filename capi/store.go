package main

// This file holds every export that takes a store handle: the whole store
// surface of the C ABI in one place, one short wrapper per zrecord
// operation, which is why it is longer than the other files of the package.

/*
#include <stdint.h>
*/
import "C"

import (
	"encoding/json"
	"fmt"
	"runtime/debug"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/loaderx/loaderx/zrecord"
)

// lx_store_create creates a store in the directory path and writes its
// handle to *handle. codec and dict_tier are names that zrecord.ParseCodec
// and zrecord.ParseDictTier accept; for narrow, codec may name the element
// type after a colon ("narrow:uint16", zrecord.ParseElement), int32 when it
// does not. For a dictionary codec, the n_samples
// packed samples (samples_len bytes at samples, delimited by n_samples+1
// offsets) train the dictionary, whose size is capped at dict_size bytes
// when dict_size is positive; other codecs ignore the samples.
//
// Unless kind is NULL, the store is created with its schema (see
// lx_schema_write for kind, dtype, shape and ndim): the schema file is
// written before the header that publishes the store, so the store never
// exists without it. flags is 0 or LX_CREATE_REPLACE. Without it, path must
// not exist or be an empty directory (else LX_EXISTS); with it, a previous
// store in path is replaced, but a directory holding anything besides a
// store's files and its schema fails with LX_EXISTS, and nothing is removed
// (zrecord.WithReplace).
//
// cancel is NULL or points to an int64_t flag the caller sets nonzero from
// another thread to stop the call: while the dictionary trains, the flag is
// polled every few milliseconds, and once it is set the call returns
// LX_CANCELED without creating anything (see trainDict).
//
//export lx_store_create
func lx_store_create(path *C.char, codec *C.char, dictTier *C.char, dictSize C.int64_t,
	samples unsafe.Pointer, samplesLen C.int64_t, sampleOffsets *C.int64_t, nSamples C.int64_t,
	kind *C.char, dtype *C.char, shape *C.int64_t, ndim C.int64_t, flags C.int64_t,
	cancel *C.int64_t, handle *C.int64_t, errBuf *C.char, errLen C.int64_t) C.int {
	return call("lx_store_create", errBuf, errLen, func() error {
		dir, err := goString(path, "path")
		if err != nil {
			return err
		}
		codecName, err := goString(codec, "codec")
		if err != nil {
			return err
		}
		tierName, err := goString(dictTier, "dict_tier")
		if err != nil {
			return err
		}
		if handle == nil {
			return nullArg("handle")
		}
		if dictSize < 0 {
			return invalidf("dict_size %d is negative", dictSize)
		}
		if flags&^createReplace != 0 {
			return invalidf("flags %#x: unknown bits", int64(flags))
		}
		c, el, err := codecSpec(codecName)
		if err != nil {
			return err
		}
		tier, err := zrecord.ParseDictTier(tierName)
		if err != nil {
			return err
		}
		opts := []zrecord.Option{zrecord.WithCodec(c), zrecord.WithDictTier(tier)}
		if c == zrecord.Narrow {
			opts = append(opts, zrecord.WithElement(el.Size, el.Signed))
		}
		more, err := schemaOptions(dir, kind, dtype, shape, ndim, flags)
		if err != nil {
			return err
		}
		opts = append(opts, more...)
		if canceled(cancel) {
			return errCanceled(dir)
		}
		if c == zrecord.ZstdDict {
			recs, err := packed(samples, samplesLen, sampleOffsets, nSamples, "samples")
			if err != nil {
				return err
			}
			dict, err := trainDict(cancel, recs, tier, int(dictSize))
			if err != nil {
				return err
			}
			opts = append(opts, zrecord.WithDict(dict))
		}
		if canceled(cancel) {
			return errCanceled(dir)
		}
		s, err := zrecord.Create(dir, opts...)
		if err != nil {
			return err
		}
		*handle = C.int64_t(register(s))
		return nil
	})
}

// cancelPoll is how often trainDict looks at the cancel flag.
const cancelPoll = 5 * time.Millisecond

// canceled reports whether the caller has set the flag at cancel.
func canceled(cancel *C.int64_t) bool {
	return cancel != nil && atomic.LoadInt64((*int64)(unsafe.Pointer(cancel))) != 0
}

// errCanceled is the LX_CANCELED error of lx_store_create.
func errCanceled(dir string) error {
	return &statusError{status: statusCanceled, msg: fmt.Sprintf("create %s: canceled; nothing was created", dir)}
}

// trainDict trains the dictionary (zrecord.TrainDict) while watching the
// caller's cancel flag. The builder is one uninterruptible call, so with a
// flag it runs on its own goroutine, on a private copy of the samples (they
// are the caller's memory, which must not be read after the export
// returns), and a set flag returns at once: the goroutine then finishes its
// training in the background and its dictionary is dropped. Nothing it does
// can create or touch a store, since only the caller creates one, after
// this returns a dictionary.
func trainDict(cancel *C.int64_t, recs [][]byte, tier zrecord.DictTier, size int) ([]byte, error) {
	if cancel == nil {
		return zrecord.TrainDict(recs, tier, size)
	}
	total := 0
	for _, r := range recs {
		total += len(r)
	}
	own := make([][]byte, len(recs))
	buf := make([]byte, 0, total)
	for k, r := range recs {
		buf = append(buf, r...)
		own[k] = buf[len(buf)-len(r):]
	}
	type trained struct {
		dict []byte
		err  error
	}
	done := make(chan trained, 1) // buffered: an abandoned trainer never blocks
	go func() {
		d, err := zrecord.TrainDict(own, tier, size)
		done <- trained{d, err}
	}()
	tick := time.NewTicker(cancelPoll)
	defer tick.Stop()
	for {
		select {
		case t := <-done:
			return t.dict, t.err
		case <-tick.C:
			if canceled(cancel) {
				return nil, &statusError{status: statusCanceled, msg: "dictionary training canceled; nothing was created"}
			}
		}
	}
}

// lx_store_open opens the store in the directory path, read-only when
// readonly is nonzero, and writes its handle to *handle.
//
//export lx_store_open
func lx_store_open(path *C.char, readonly C.int, handle *C.int64_t, errBuf *C.char, errLen C.int64_t) C.int {
	return call("lx_store_open", errBuf, errLen, func() error {
		dir, err := goString(path, "path")
		if err != nil {
			return err
		}
		if handle == nil {
			return nullArg("handle")
		}
		var opts []zrecord.Option
		if readonly != 0 {
			opts = append(opts, zrecord.WithReadOnly())
		}
		s, err := zrecord.Open(dir, opts...)
		if err != nil {
			return err
		}
		*handle = C.int64_t(register(s))
		return nil
	})
}

// lx_store_close closes the store behind h and retires the handle. Closing
// a handle that is already closed does nothing.
//
//export lx_store_close
func lx_store_close(h C.int64_t, errBuf *C.char, errLen C.int64_t) C.int {
	return closeWith("lx_store_close", h, errBuf, errLen, (*zrecord.Store).Close)
}

// closeWith retires handle h and closes its store with close; a handle
// that is already closed does nothing.
func closeWith(name string, h C.int64_t, errBuf *C.char, errLen C.int64_t, close func(*zrecord.Store) error) C.int {
	return call(name, errBuf, errLen, func() error {
		if t := releaseSet(int64(h)); t != nil {
			return t.Close() // read-only: nothing to sync
		}
		s, err := release(int64(h))
		if err != nil || s == nil {
			return err
		}
		return close(s)
	})
}

// lx_store_close_unsynced closes the store behind h without syncing it
// first (zrecord's CloseUnsynced) and retires the handle. Closing a handle
// that is already closed does nothing.
//
//export lx_store_close_unsynced
func lx_store_close_unsynced(h C.int64_t, errBuf *C.char, errLen C.int64_t) C.int {
	return closeWith("lx_store_close_unsynced", h, errBuf, errLen, (*zrecord.Store).CloseUnsynced)
}

// lx_set_open makes one read-only dataset of the n open stores behind
// handles, in order (zrecord.Set: the records of the first store, then
// those of the second, ...), and writes its handle to *handle. The read
// exports (len, codec, stats, set_verify, sizes and the gathers) take it
// like a store handle, with global indices; lx_store_close closes it and
// its stores. On success the store handles are retired: the set owns their
// stores. On failure they stay open and the caller still owns them.
//
//export lx_set_open
func lx_set_open(stores *C.int64_t, n C.int64_t, handle *C.int64_t, errBuf *C.char, errLen C.int64_t) C.int {
	return call("lx_set_open", errBuf, errLen, func() error {
		if handle == nil {
			return nullArg("handle")
		}
		hs, err := int64s(stores, n, "stores")
		if err != nil {
			return err
		}
		h, err := registerSet(hs)
		if err != nil {
			return err
		}
		*handle = C.int64_t(h)
		return nil
	})
}

// lx_store_len writes the number of records to *length.
//
//export lx_store_len
func lx_store_len(h C.int64_t, length *C.int64_t, errBuf *C.char, errLen C.int64_t) C.int {
	return call("lx_store_len", errBuf, errLen, func() error {
		if length == nil {
			return nullArg("length")
		}
		s, err := lookupReader(int64(h))
		if err != nil {
			return err
		}
		*length = C.int64_t(s.Len())
		return nil
	})
}

// lx_store_codec writes the store's codec tag (enum lx_codec) to *codec.
//
//export lx_store_codec
func lx_store_codec(h C.int64_t, codec *C.int64_t, errBuf *C.char, errLen C.int64_t) C.int {
	return call("lx_store_codec", errBuf, errLen, func() error {
		if codec == nil {
			return nullArg("codec")
		}
		s, err := lookupReader(int64(h))
		if err != nil {
			return err
		}
		*codec = C.int64_t(s.Codec())
		return nil
	})
}

// lx_store_append appends n records, packed in the data_len bytes at data
// and delimited by the n+1 offsets, and writes the index of the first one to
// *first.
//
//export lx_store_append
func lx_store_append(h C.int64_t, data unsafe.Pointer, dataLen C.int64_t, offsets *C.int64_t, n C.int64_t,
	first *C.int64_t, errBuf *C.char, errLen C.int64_t) C.int {
	return call("lx_store_append", errBuf, errLen, func() error {
		if first == nil {
			return nullArg("first")
		}
		s, err := storeOf(h)
		if err != nil {
			return err
		}
		recs, err := packed(data, dataLen, offsets, n, "records")
		if err != nil {
			return err
		}
		idx, err := s.Append(recs)
		if err != nil {
			return err
		}
		*first = C.int64_t(idx)
		return nil
	})
}

// lx_store_gather copies the n records named by indices into dst, record i
// at byte i*stride; every record must be exactly stride bytes long.
//
//export lx_store_gather
func lx_store_gather(h C.int64_t, indices *C.int64_t, n C.int64_t, dst unsafe.Pointer, dstLen C.int64_t, stride C.int64_t,
	errBuf *C.char, errLen C.int64_t) (status C.int) {
	defer guard("lx_store_gather", &status, errBuf, errLen)
	defer debug.SetPanicOnFault(faultsPanic())
	s, err := lookupReader(int64(h))
	if err != nil {
		return fail(errBuf, errLen, err)
	}
	idx, err := int64s(indices, n, "indices")
	if err != nil {
		return fail(errBuf, errLen, err)
	}
	if stride < 0 {
		return fail(errBuf, errLen, invalidf("stride %d is negative", stride))
	}
	if stride > 0 && n > dstLen/stride {
		return fail(errBuf, errLen, invalidf("dst holds %d bytes: %d records of %d bytes do not fit", dstLen, n, stride))
	}
	buf, err := byteView(dst, dstLen, "dst")
	if err != nil {
		return fail(errBuf, errLen, err)
	}
	if err := s.Gather(idx, buf, int(stride)); err != nil {
		return fail(errBuf, errLen, err)
	}
	return statusOK
}

// lx_store_sizes writes the size in bytes of each of the n records named by
// indices to sizes, which holds n values.
//
//export lx_store_sizes
func lx_store_sizes(h C.int64_t, indices *C.int64_t, n C.int64_t, sizes *C.int64_t, errBuf *C.char, errLen C.int64_t) C.int {
	return call("lx_store_sizes", errBuf, errLen, func() error {
		s, err := lookupReader(int64(h))
		if err != nil {
			return err
		}
		idx, err := int64s(indices, n, "indices")
		if err != nil {
			return err
		}
		out, err := int64s(sizes, n, "sizes")
		if err != nil {
			return err
		}
		return s.Sizes(idx, out)
	})
}

// lx_store_gather_packed copies the n records named by indices into dst,
// record i at dst[offsets[i]:offsets[i+1]]; offsets holds n+1 values and
// each span must be exactly the record's size (see lx_store_sizes).
//
//export lx_store_gather_packed
func lx_store_gather_packed(h C.int64_t, indices *C.int64_t, n C.int64_t, dst unsafe.Pointer, dstLen C.int64_t, offsets *C.int64_t,
	errBuf *C.char, errLen C.int64_t) (status C.int) {
	defer guard("lx_store_gather_packed", &status, errBuf, errLen)
	defer debug.SetPanicOnFault(faultsPanic())
	s, err := lookupReader(int64(h))
	if err != nil {
		return fail(errBuf, errLen, err)
	}
	idx, err := int64s(indices, n, "indices")
	if err != nil {
		return fail(errBuf, errLen, err)
	}
	offs, err := int64s(offsets, n+1, "offsets")
	if err != nil {
		return fail(errBuf, errLen, err)
	}
	buf, err := byteView(dst, dstLen, "dst")
	if err != nil {
		return fail(errBuf, errLen, err)
	}
	if err := s.GatherPacked(idx, buf, offs); err != nil {
		return fail(errBuf, errLen, err)
	}
	return statusOK
}

// lx_store_gather_ragged reads the n records named by indices, whatever
// their sizes, back to back into dst, from one consistent view of the store
// (zrecord.Store.GatherRagged): it writes each record's size to sizes (n
// values) and the sum of the sizes to *needed, and fills dst only when
// *needed <= dst_len. Otherwise dst is untouched and the call succeeds: the
// caller retries with a buffer of at least *needed bytes.
//
//export lx_store_gather_ragged
func lx_store_gather_ragged(h C.int64_t, indices *C.int64_t, n C.int64_t, sizes *C.int64_t, dst unsafe.Pointer, dstLen C.int64_t,
	needed *C.int64_t, errBuf *C.char, errLen C.int64_t) (status C.int) {
	defer guard("lx_store_gather_ragged", &status, errBuf, errLen)
	defer debug.SetPanicOnFault(faultsPanic())
	if needed == nil {
		return fail(errBuf, errLen, nullArg("needed"))
	}
	s, err := lookupReader(int64(h))
	if err != nil {
		return fail(errBuf, errLen, err)
	}
	idx, err := int64s(indices, n, "indices")
	if err != nil {
		return fail(errBuf, errLen, err)
	}
	sz, err := int64s(sizes, n, "sizes")
	if err != nil {
		return fail(errBuf, errLen, err)
	}
	buf, err := byteView(dst, dstLen, "dst")
	if err != nil {
		return fail(errBuf, errLen, err)
	}
	total, err := s.GatherRagged(idx, sz, buf)
	if err != nil {
		return fail(errBuf, errLen, err)
	}
	*needed = C.int64_t(total)
	return statusOK
}

// lx_store_delete deletes the n distinct records named by indices. The tail
// record moves into each hole, so indices at or above the smallest deleted
// one may change.
//
//export lx_store_delete
func lx_store_delete(h C.int64_t, indices *C.int64_t, n C.int64_t, errBuf *C.char, errLen C.int64_t) C.int {
	return call("lx_store_delete", errBuf, errLen, func() error {
		s, err := storeOf(h)
		if err != nil {
			return err
		}
		idx, err := int64s(indices, n, "indices")
		if err != nil {
			return err
		}
		return s.Delete(idx)
	})
}

// lx_store_compact reclaims the space of deleted records.
//
//export lx_store_compact
func lx_store_compact(h C.int64_t, errBuf *C.char, errLen C.int64_t) C.int {
	return call("lx_store_compact", errBuf, errLen, func() error {
		s, err := storeOf(h)
		if err != nil {
			return err
		}
		return s.Compact()
	})
}

// lx_store_stats writes LX_STATS_LEN values to out (which holds out_len),
// each at its position in enum lx_stat.
//
//export lx_store_stats
func lx_store_stats(h C.int64_t, out *C.int64_t, outLen C.int64_t, errBuf *C.char, errLen C.int64_t) C.int {
	return call("lx_store_stats", errBuf, errLen, func() error {
		s, err := lookupReader(int64(h))
		if err != nil {
			return err
		}
		dst, err := outValues(out, outLen, StatsLen, "stats need")
		if err != nil {
			return err
		}
		st, err := s.Stats()
		if err != nil {
			return err
		}
		dst[statLength] = st.Length
		dst[statLiveBytes] = st.LiveBytes
		dst[statChunkBytes] = st.ChunkBytes
		dst[statLogicalBytes] = st.LogicalBytes
		dst[statCodec] = int64(st.Codec)
		dst[statDictBytes] = st.DictBytes
		dst[statChunks] = st.Chunks
		dst[statVersion] = int64(st.Version)
		dst[statChecksummed] = boolInt(st.Checksummed)
		dst[statVerified] = boolInt(st.Verified)
		return nil
	})
}

func boolInt(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// lx_store_upgrade rewrites a store of an earlier format version (1, or 3
// as the original loaderx 1.5.2 wrote it) to the current one, crash-safely;
// a current store is left alone (zrecord.Store.Upgrade).
//
//export lx_store_upgrade
func lx_store_upgrade(h C.int64_t, errBuf *C.char, errLen C.int64_t) C.int {
	return call("lx_store_upgrade", errBuf, errLen, func() error {
		s, err := storeOf(h)
		if err != nil {
			return err
		}
		return s.Upgrade()
	})
}

// lx_store_set_verify turns the checking of raw records against their
// checksums on gather on (nonzero, the default) or off for the handle h.
// Compressed records are always checked (zrecord.Store.SetVerify).
//
//export lx_store_set_verify
func lx_store_set_verify(h C.int64_t, on C.int, errBuf *C.char, errLen C.int64_t) C.int {
	return call("lx_store_set_verify", errBuf, errLen, func() error {
		s, err := lookupReader(int64(h))
		if err != nil {
			return err
		}
		s.SetVerify(on != 0)
		return nil
	})
}

// lx_store_verify scans the whole store behind h (zrecord.Store.Verify) and
// writes its report as NUL-terminated JSON into the out_len bytes at out:
// an object with dir, version, codec, checksummed, records, checked,
// faults (a list of {file, index, what}; index -1 for a fault that is no
// record's), more_faults and pending. *needed receives the report's size
// with its NUL; when that exceeds out_len nothing else is written and the
// call succeeds, so the caller retries with a larger buffer. Damage is
// reported in the JSON, not as a status; a status other than LX_OK means
// the scan itself failed.
//
//export lx_store_verify
func lx_store_verify(h C.int64_t, out *C.char, outLen C.int64_t, needed *C.int64_t, errBuf *C.char, errLen C.int64_t) C.int {
	return call("lx_store_verify", errBuf, errLen, func() error {
		s, err := storeOf(h)
		if err != nil {
			return err
		}
		return reportOut(s.Verify, out, outLen, needed)
	})
}

// lx_verify_dir is lx_store_verify for the store in the directory path,
// which need not open: it reads the files read-only, without the store's
// lock (zrecord.VerifyDir).
//
//export lx_verify_dir
func lx_verify_dir(path *C.char, out *C.char, outLen C.int64_t, needed *C.int64_t, errBuf *C.char, errLen C.int64_t) C.int {
	return call("lx_verify_dir", errBuf, errLen, func() error {
		dir, err := goString(path, "path")
		if err != nil {
			return err
		}
		return reportOut(func() (zrecord.Report, error) { return zrecord.VerifyDir(dir) }, out, outLen, needed)
	})
}

// reportOut runs a scan and writes its report as JSON (see lx_store_verify).
func reportOut(scan func() (zrecord.Report, error), out *C.char, outLen C.int64_t, needed *C.int64_t) error {
	if needed == nil {
		return nullArg("needed")
	}
	buf, err := byteView(unsafe.Pointer(out), outLen, "out")
	if err != nil {
		return err
	}
	r, err := scan()
	if err != nil {
		return err
	}
	js, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("encode the report: %w", err)
	}
	*needed = C.int64_t(len(js) + 1)
	if len(js)+1 <= len(buf) {
		buf[copy(buf, js)] = 0
	}
	return nil
}

// lx_store_sync makes every record appended so far durable.
//
//export lx_store_sync
func lx_store_sync(h C.int64_t, errBuf *C.char, errLen C.int64_t) C.int {
	return call("lx_store_sync", errBuf, errLen, func() error {
		s, err := storeOf(h)
		if err != nil {
			return err
		}
		return s.Sync()
	})
}

// lx_dict_sample_budget writes the number of sample bytes the dictionary
// tier called tier trains on to *budget.
//
//export lx_dict_sample_budget
func lx_dict_sample_budget(tier *C.char, budget *C.int64_t, errBuf *C.char, errLen C.int64_t) C.int {
	return call("lx_dict_sample_budget", errBuf, errLen, func() error {
		name, err := goString(tier, "tier")
		if err != nil {
			return err
		}
		if budget == nil {
			return nullArg("budget")
		}
		t, err := zrecord.ParseDictTier(name)
		if err != nil {
			return err
		}
		*budget = C.int64_t(t.SampleBudget())
		return nil
	})
}
