package zrecord

import (
	"testing"
	"unsafe"
)

// An openStore fills its 512-byte size class exactly, and its view's first
// chunk starts a cache line (the layout openStorePad is for).
func TestOpenStoreSize(t *testing.T) {
	if got := unsafe.Sizeof(openStore{}); got != 512 {
		t.Fatalf("openStore is %d bytes, want 512", got)
	}
	if off := unsafe.Offsetof(openStore{}.view) + unsafe.Offsetof(storeView{}.chunkBuf); off != 64 {
		t.Fatalf("the first chunk's copy is at byte %d of its entry, want 64", off)
	}
}
