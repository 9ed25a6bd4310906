package zrecord_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/loaderx/loaderx/zrecord"
)

const addressLimitEnv = "ZRECORD_ADDRESS_LIMIT_HELPER"

// Two handles fit in a 4 GiB address space: each reserves what its store
// needs, not 7 GiB. The handles are opened by the test binary re-executed
// with RLIMIT_AS lowered, so the limit does not bind this process.
func TestTwoHandlesUnderAddressLimit(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector's runtime reserves far more than the limit")
	}
	var dirs []string
	for k := range 2 {
		dir := filepath.Join(t.TempDir(), fmt.Sprint("s", k))
		s, err := zrecord.Create(dir)
		if err != nil {
			t.Fatal(err)
		}
		recs := make([][]byte, 100)
		for i := range recs {
			recs[i] = spanRecord(int64(i), 4096)
		}
		if _, err := s.Append(recs); err != nil {
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		dirs = append(dirs, dir)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestAddressLimitHelper$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), addressLimitEnv+"="+strings.Join(dirs, string(os.PathListSeparator)))
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "two handles open under the limit") {
		t.Fatalf("helper: %v\n%s", err, out)
	}
}

// TestAddressLimitHelper runs only as TestTwoHandlesUnderAddressLimit's
// subprocess: it lowers RLIMIT_AS to 4 GiB, opens the stores named in the
// environment, gathers from and appends to both.
func TestAddressLimitHelper(t *testing.T) {
	spec := os.Getenv(addressLimitEnv)
	if spec == "" {
		t.Skip("run by TestTwoHandlesUnderAddressLimit")
	}
	const limit = 4 << 30
	if err := syscall.Setrlimit(syscall.RLIMIT_AS, &syscall.Rlimit{Cur: limit, Max: limit}); err != nil {
		t.Fatal(err)
	}
	var stores []*zrecord.Store
	for _, dir := range strings.Split(spec, string(os.PathListSeparator)) {
		s, err := zrecord.Open(dir)
		if err != nil {
			t.Fatalf("open %s under a %d-byte address limit: %v", dir, limit, err)
		}
		defer s.Close()
		stores = append(stores, s)
	}
	dst := make([]byte, 4096*3)
	for _, s := range stores {
		if _, err := s.Append([][]byte{spanRecord(s.Len(), 4096)}); err != nil {
			t.Fatal(err)
		}
		idx := []int64{0, 50, s.Len() - 1}
		if err := s.Gather(idx, dst, 4096); err != nil {
			t.Fatal(err)
		}
		for k, i := range idx {
			if err := checkSpanRecord(i, dst[4096*k:4096*(k+1)]); err != nil {
				t.Fatal(err)
			}
		}
	}
	t.Log("two handles open under the limit")
}
