package main

import (
	"fmt"
	"sync"

	"github.com/loaderx/loaderx/zrecord"
)

// handles maps the opaque handles given to C to open stores. Handles count
// up from 1 and are never reused, so a stale handle is recognisably closed.
var handles = struct {
	sync.RWMutex
	stores map[int64]*zrecord.Store
	sets   map[int64]*zrecord.Set // sharded datasets: read-only, owning (or opening) their stores
	last   int64
}{stores: make(map[int64]*zrecord.Store), sets: make(map[int64]*zrecord.Set)}

// reader is what the read exports need of a handle: a store, or a set of
// stores read as one (zrecord.Set).
type reader interface {
	Len() int64
	Codec() zrecord.Codec
	SetVerify(on bool)
	Stats() (zrecord.Stats, error)
	Gather(indices []int64, dst []byte, stride int) error
	GatherSlot(indices []int64, dst []byte, stride int) error
	GatherPacked(indices []int64, dst []byte, offsets []int64) error
	GatherRagged(indices []int64, sizes []int64, dst []byte) (int64, error)
	Sizes(indices []int64, sizes []int64) error
}

// lookupReader returns the store or set behind h.
func lookupReader(h int64) (reader, error) {
	handles.RLock()
	s, ok := handles.stores[h]
	t, isSet := handles.sets[h]
	last := handles.last
	handles.RUnlock()
	switch {
	case ok:
		return s, nil
	case isSet:
		return t, nil
	}
	return nil, badHandle(h, last)
}

// registerSet makes a set of the stores behind hs and gives it a handle of
// its own; the store handles are retired, the set now owning their stores.
// On error every store handle stays as it was.
func registerSet(hs []int64) (int64, error) {
	handles.Lock()
	defer handles.Unlock()
	stores := make([]*zrecord.Store, len(hs))
	for k, h := range hs {
		s, ok := handles.stores[h]
		if !ok {
			if _, isSet := handles.sets[h]; isSet {
				return 0, invalidf("handle %d (store %d of the set) is a sharded dataset, not a store", h, k)
			}
			return 0, fmt.Errorf("store %d of the set: %w", k, badHandle(h, handles.last))
		}
		stores[k] = s
	}
	t, err := zrecord.NewSet(stores)
	if err != nil {
		return 0, err
	}
	for _, h := range hs {
		delete(handles.stores, h)
	}
	handles.last++
	handles.sets[handles.last] = t
	return handles.last, nil
}

// registerOpenSet gives the set t, which owns its stores, a handle.
func registerOpenSet(t *zrecord.Set) int64 {
	handles.Lock()
	defer handles.Unlock()
	handles.last++
	handles.sets[handles.last] = t
	return handles.last
}

// releaseSet removes h from the set table and returns its set, or nil if h
// is not a set.
func releaseSet(h int64) *zrecord.Set {
	handles.Lock()
	defer handles.Unlock()
	t, ok := handles.sets[h]
	if ok {
		delete(handles.sets, h)
	}
	return t
}

// register adds s to the table and returns its new handle.
func register(s *zrecord.Store) int64 {
	handles.Lock()
	defer handles.Unlock()
	handles.last++
	handles.stores[handles.last] = s
	return handles.last
}

// lookup returns the store behind h.
func lookup(h int64) (*zrecord.Store, error) {
	handles.RLock()
	s, ok := handles.stores[h]
	_, isSet := handles.sets[h]
	last := handles.last
	handles.RUnlock()
	if ok {
		return s, nil
	}
	if isSet {
		return nil, invalidf("handle %d is a sharded dataset, which is read-only: this call needs a store", h)
	}
	return nil, badHandle(h, last)
}

// release removes h from the table and returns its store, or nil if h was
// already closed.
func release(h int64) (*zrecord.Store, error) {
	handles.Lock()
	defer handles.Unlock()
	s, ok := handles.stores[h]
	if ok {
		delete(handles.stores, h)
		return s, nil
	}
	if h > 0 && h <= handles.last {
		return nil, nil
	}
	return nil, badHandle(h, handles.last)
}

// badHandle is the error for a handle not in the table.
func badHandle(h, last int64) error {
	if h > 0 && h <= last {
		return &statusError{status: statusClosed, msg: fmt.Sprintf("store handle %d is closed", h)}
	}
	return invalidf("%d is not a store handle", h)
}
