package zrecord

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

// TestPrefetchRecordThreshold checks that the assembly of prefetchRecord
// compares n with l1RecordMax, whose value it repeats as a literal.
func TestPrefetchRecordThreshold(t *testing.T) {
	src, err := os.ReadFile("prefetch_amd64.s")
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("CMPQ n+8(FP), $%d // l1RecordMax", l1RecordMax)
	if !strings.Contains(string(src), want) {
		t.Fatalf("prefetch_amd64.s has no %q: prefetchRecord and l1RecordMax disagree", want)
	}
}

// TestPrefetchNeverFaults runs every prefetch over addresses no mapping
// holds, and over both sides of l1RecordMax: a prefetch must not fault.
func TestPrefetchNeverFaults(t *testing.T) {
	bad := (*byte)(nil)
	for _, n := range []int{0, 1, 64, l1RecordMax, l1RecordMax + 1, prefetchBytes} {
		prefetchRecord(bad, n)
	}
	seg := make([]byte, 24*8)
	idx := []int64{0, 7, 8, -1, 1 << 40}
	prefetchEntriesAt(&seg[0], 8, &idx[0], len(idx))
}
