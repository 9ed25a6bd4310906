package main

// The exports a reader of a store whose files live elsewhere (the
// object-storage cache of loaderx's store layer) needs besides the gathers:
// where a batch's stored bytes are, checks of record and table bytes
// fetched from elsewhere, and the residency maps that keep every read
// inside the pages the reader holds.

/*
#include <stdint.h>
*/
import "C"

import (
	"unsafe"

	"github.com/loaderx/loaderx/zrecord"
)

// uint32s views n uint32_t values at p as a Go slice.
func uint32s(p *C.uint32_t, n C.int64_t, name string) ([]uint32, error) {
	if err := checkView(p == nil, n, name); err != nil || n == 0 {
		return nil, err
	}
	return unsafe.Slice((*uint32)(unsafe.Pointer(p)), int(n)), nil
}

// nonNil is s, or an empty slice for a nil one.
func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// lx_store_spans writes, for each of the n records named by indices, where
// its stored bytes lie: store[k] is the position of the store that holds it
// in a set (0 for a store handle), chunk[k] its chunk file's id, off[k] and
// length[k] the byte range in that file. Each out array holds n values.
//
//export lx_store_spans
func lx_store_spans(h C.int64_t, indices *C.int64_t, n C.int64_t, store, chunk, off, length *C.uint32_t,
	errBuf *C.char, errLen C.int64_t) C.int {
	return call("lx_store_spans", errBuf, errLen, func() error {
		idx, err := int64s(indices, n, "indices")
		if err != nil {
			return err
		}
		outs := make([][]uint32, 4)
		for k, p := range []*C.uint32_t{store, chunk, off, length} {
			if outs[k], err = uint32s(p, n, [...]string{"store", "chunk", "off", "length"}[k]); err != nil {
				return err
			}
		}
		handles.RLock()
		s, isStore := handles.stores[int64(h)]
		t, isSet := handles.sets[int64(h)]
		last := handles.last
		handles.RUnlock()
		switch {
		case isStore:
			if err := s.Spans(idx, outs[1], outs[2], outs[3]); err != nil {
				return err
			}
			clear(outs[0])
			return nil
		case isSet:
			return t.Spans(idx, outs[0], outs[1], outs[2], outs[3])
		}
		return badHandle(int64(h), last)
	})
}

// atStore runs one of a store's calls on the store at position store of
// handle h: the store of a store handle (store must be 0) with onStore, or
// that store of a set with onSet (which pins it while the call runs).
func atStore(h C.int64_t, store C.uint32_t, onStore func(*zrecord.Store) error, onSet func(*zrecord.Set, int) error) error {
	handles.RLock()
	s, isStore := handles.stores[int64(h)]
	t, isSet := handles.sets[int64(h)]
	last := handles.last
	handles.RUnlock()
	switch {
	case isStore:
		if store != 0 {
			return invalidf("store %d of a store handle: only 0 is", store)
		}
		return onStore(s)
	case isSet:
		if int(store) >= t.NumStores() {
			return invalidf("store %d of a set of %d stores", store, t.NumStores())
		}
		return onSet(t, int(store))
	}
	return badHandle(int64(h), last)
}

// lx_store_check_bytes checks the records named by the n indices against
// their table checksums, reading their stored bytes from buf, which holds
// bytes [base, base+buf_len) of chunk file chunk. For a set handle, store
// picks the store (its position in the set) and the indices are that
// store's own; for a store handle, store must be 0.
//
//export lx_store_check_bytes
func lx_store_check_bytes(h C.int64_t, store C.uint32_t, indices *C.int64_t, n C.int64_t, chunk C.uint32_t,
	base C.int64_t, buf unsafe.Pointer, bufLen C.int64_t, errBuf *C.char, errLen C.int64_t) C.int {
	return call("lx_store_check_bytes", errBuf, errLen, func() error {
		idx, err := int64s(indices, n, "indices")
		if err != nil {
			return err
		}
		b, err := byteView(buf, bufLen, "buf")
		if err != nil {
			return err
		}
		return atStore(h, store,
			func(s *zrecord.Store) error { return s.CheckBytes(idx, uint32(chunk), int64(base), b) },
			func(t *zrecord.Set, k int) error { return t.CheckBytes(k, idx, uint32(chunk), int64(base), b) })
	})
}

// lx_store_set_residency gives the store at position store of handle h (0
// for a store handle) a residency map (zrecord.Residency): held_len bytes
// at held, one per page, nonzero where the page may be read; chunk_base_len
// chunk bases at chunk_base (page p of chunk file c is held[chunk_base[c] +
// p], the files cut into pages of chunk_page bytes); and table_base_len
// segment bases at table_base (page p of table segment s is
// held[table_base[s] + p], pages of table_page bytes), or table_base NULL
// (and table_base_len 0) for a table whose files are whole. Every later
// call that reads the store's table entries, through any handle, fails
// with LX_NOT_RESIDENT before it reads an entry whose table page is not
// held, a gather before it reads a record any of whose chunk pages is not
// held, and lx_store_stats and lx_store_verify unless every page they read
// is held; and every record the store reads is checked against its
// checksum, raw ones too, whatever lx_store_set_verify says. A set of
// lx_set_open_shards keeps the map for the position and gives it to the
// store whenever it opens it. The memory stays the caller's and must stay
// valid until the map is removed, by a call with held and chunk_base NULL
// (and lengths 0), or the store is closed.
//
//export lx_store_set_residency
func lx_store_set_residency(h C.int64_t, store C.uint32_t, held unsafe.Pointer, heldLen C.int64_t,
	chunkBase *C.int64_t, chunkBaseLen C.int64_t, chunkPage C.int64_t, tableBase *C.int64_t, tableBaseLen C.int64_t,
	tablePage C.int64_t, errBuf *C.char, errLen C.int64_t) C.int {
	return call("lx_store_set_residency", errBuf, errLen, func() error {
		hb, err := byteView(held, heldLen, "held")
		if err != nil {
			return err
		}
		cb, err := int64s(chunkBase, chunkBaseLen, "chunk_base")
		if err != nil {
			return err
		}
		tb, err := int64s(tableBase, tableBaseLen, "table_base")
		if err != nil {
			return err
		}
		var m *zrecord.Residency
		switch {
		case held == nil && chunkBase == nil:
			if tableBase != nil {
				return invalidf("a residency map removed (held and chunk_base NULL) takes no table_base")
			}
		case held == nil || chunkBase == nil:
			return invalidf("a residency map needs both held and chunk_base")
		default:
			// A pointer with length 0 is an empty array, not a missing one.
			m = &zrecord.Residency{Held: nonNil(hb), ChunkBase: nonNil(cb), ChunkPage: int64(chunkPage),
				TablePage: int64(tablePage)}
			if tableBase != nil {
				m.TableBase = nonNil(tb)
			}
		}
		return atStore(h, store,
			func(s *zrecord.Store) error { return s.SetResidency(m) },
			func(t *zrecord.Set, k int) error { return t.SetResidency(k, m) })
	})
}

// lx_set_require_residency makes every store of the set handle h refuse
// its calls with LX_NOT_RESIDENT until lx_store_set_residency gives its
// position a map (zrecord.Set.RequireResidency): a lazily opened store is
// refused before it is opened, so its files need not be there yet. It
// cannot be undone; a store handle is LX_INVALID.
//
//export lx_set_require_residency
func lx_set_require_residency(h C.int64_t, errBuf *C.char, errLen C.int64_t) C.int {
	return call("lx_set_require_residency", errBuf, errLen, func() error {
		handles.RLock()
		_, isStore := handles.stores[int64(h)]
		t, isSet := handles.sets[int64(h)]
		last := handles.last
		handles.RUnlock()
		switch {
		case isSet:
			t.RequireResidency()
			return nil
		case isStore:
			return invalidf("lx_set_require_residency: handle %d is a store, not a set", int64(h))
		}
		return badHandle(int64(h), last)
	})
}

// lx_store_check_table checks table bytes fetched from elsewhere: buf holds
// bytes [base, base+buf_len) of table segment seg of the store at position
// store of handle h (0 for a store handle), and every entry wholly inside
// that range and below the store's length is checked against its own
// checksum and the chunk files (zrecord.Store.CheckTable). A failing entry
// is LX_CORRUPT naming the segment file and the record.
//
//export lx_store_check_table
func lx_store_check_table(h C.int64_t, store C.uint32_t, seg C.uint32_t, base C.int64_t, buf unsafe.Pointer,
	bufLen C.int64_t, errBuf *C.char, errLen C.int64_t) C.int {
	return call("lx_store_check_table", errBuf, errLen, func() error {
		b, err := byteView(buf, bufLen, "buf")
		if err != nil {
			return err
		}
		return atStore(h, store,
			func(s *zrecord.Store) error { return s.CheckTable(uint32(seg), int64(base), b) },
			func(t *zrecord.Set, k int) error { return t.CheckTable(k, uint32(seg), int64(base), b) })
	})
}
