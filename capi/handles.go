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
	last   int64
}{stores: make(map[int64]*zrecord.Store)}

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
	last := handles.last
	handles.RUnlock()
	if ok {
		return s, nil
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
