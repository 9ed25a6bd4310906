package zrecord_test

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/loaderx/loaderx/zrecord"
)

// mappedKiB returns the resident size, in KiB, of this process's mappings
// of the file at path: the pages of it the process has touched (or had
// mapped around a touch), read from /proc/self/smaps.
func mappedKiB(t *testing.T, path string) int64 {
	t.Helper()
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		t.Skipf("no /proc/self/smaps: %v", err)
	}
	defer f.Close()
	var total int64
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		fields := strings.Fields(line)
		if len(fields) >= 5 && strings.Contains(fields[0], "-") && !strings.HasSuffix(fields[0], ":") {
			in = len(fields) >= 6 && fields[len(fields)-1] == path
			continue
		}
		if in && len(fields) == 3 && fields[0] == "Rss:" {
			kb, err := strconv.ParseInt(fields[1], 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			total += kb
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return total
}

// dropCache asks the kernel to drop path's clean pages from the page cache.
func dropCache(t *testing.T, path string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		t.Fatal(err)
	}
}

// Opening a store reads none of its record table, whatever its size: the
// table's mapping holds no resident page after Open, a handful after a read
// of a few records, and the whole table only once Stats has summed it. This
// counts pages, not time, so it holds on a loaded machine.
func TestOpenTouchesNoTablePage(t *testing.T) {
	const n = 1 << 18 // a table of 6 MiB
	dir := filepath.Join(t.TempDir(), "s")
	s, err := zrecord.Create(dir)
	if err != nil {
		t.Fatal(err)
	}
	recs := make([][]byte, n)
	for i := range recs {
		recs[i] = binary.LittleEndian.AppendUint64(binary.LittleEndian.AppendUint64(nil, uint64(i)), ^uint64(i))
	}
	if _, err := s.Append(recs); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	tab, _ := filepath.Abs(filepath.Join(dir, "0.tab"))
	const tableKiB = n * 24 / 1024
	for _, ro := range []bool{true, false} {
		var opts []zrecord.Option
		if ro {
			opts = append(opts, zrecord.WithReadOnly())
		}
		// Out of the page cache, a fault maps in only the pages read for
		// it; a cached file's large folios would map in wholesale.
		dropCache(t, tab)
		s, err := zrecord.Open(dir, opts...)
		if err != nil {
			t.Fatal(err)
		}
		if got := mappedKiB(t, tab); got != 0 {
			t.Errorf("read-only %v: %d KiB of the table resident after Open, want 0", ro, got)
		}
		idx := []int64{7, n / 3, n / 2, n - 1}
		dst := make([]byte, 16*len(idx))
		if err := s.Gather(idx, dst, 16); err != nil {
			t.Fatal(err)
		}
		for k, i := range idx {
			if got := binary.LittleEndian.Uint64(dst[16*k:]); got != uint64(i) {
				t.Fatalf("record %d reads %d", i, got)
			}
		}
		// A fault reads ahead (128 KiB by default) and maps in what it
		// read; four reads stay far below the table.
		const perRead = 256
		if got := mappedKiB(t, tab); got > int64(len(idx))*perRead {
			t.Errorf("read-only %v: %d KiB of the table resident after reading %d records, want at most %d", ro, got, len(idx), len(idx)*perRead)
		}
		st, err := s.Stats()
		if err != nil {
			t.Fatal(err)
		}
		if st.LogicalBytes != 16*n || st.LiveBytes != 16*n || st.Length != n {
			t.Fatalf("Stats: %+v", st)
		}
		// The measure sees the table once something reads it all.
		if got := mappedKiB(t, tab); got < tableKiB*9/10 {
			t.Errorf("read-only %v: %d KiB resident after Stats, want about %d: the measure does not see table reads", ro, got, tableKiB)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// Stats sums the table once and then follows the writes: appends and
// deletes after the first Stats, and before it, give the same figures as a
// fresh handle's walk.
func TestStatsTotalsFollowWrites(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "s")
	s, err := zrecord.Create(dir, zrecord.WithCodec(zrecord.Zstd))
	if err != nil {
		t.Fatal(err)
	}
	rec := func(i, size int) []byte {
		b := make([]byte, size)
		for k := range b {
			b[k] = byte(i * (k / 97))
		}
		return b
	}
	var recs [][]byte
	for i := range 50 {
		recs = append(recs, rec(i, 100+37*i))
	}
	if _, err := s.Append(recs); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	fresh := func() zrecord.Stats {
		t.Helper()
		h, err := zrecord.Open(dir, zrecord.WithReadOnly())
		if err != nil {
			t.Fatal(err)
		}
		defer h.Close()
		st, err := h.Stats()
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	for _, statsFirst := range []bool{true, false} {
		s, err := zrecord.Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		if statsFirst {
			if _, err := s.Stats(); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := s.Append([][]byte{rec(99, 5000), rec(98, 10)}); err != nil {
			t.Fatal(err)
		}
		if err := s.Delete([]int64{3, 17}); err != nil {
			t.Fatal(err)
		}
		got, err := s.Stats()
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		want := fresh()
		if got.LiveBytes != want.LiveBytes || got.LogicalBytes != want.LogicalBytes || got.Length != want.Length {
			t.Fatalf("stats first %v: handle's totals %+v, a fresh walk's %+v", statsFirst, got, want)
		}
	}
}

// vmFlags returns the VmFlags lines of this process's mappings of the file
// at path, one per mapping (a range advised apart is its own mapping).
func vmFlags(t *testing.T, path string) [][]string {
	t.Helper()
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		t.Skipf("no /proc/self/smaps: %v", err)
	}
	defer f.Close()
	var out [][]string
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 5 && strings.Contains(fields[0], "-") && !strings.HasSuffix(fields[0], ":") {
			in = len(fields) >= 6 && fields[len(fields)-1] == path
			continue
		}
		if in && len(fields) > 0 && fields[0] == "VmFlags:" {
			out = append(out, fields[1:])
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// A chunk's mapping is advised random, so that a small record out of the
// page cache costs its page and not a read-ahead window; a gather of a long
// run advises that run sequential for its copy and gives it back to random
// after, whatever the outcome. The advice shows in /proc/self/smaps as the
// mapping's "rr" or "sr" flag.
func TestChunkAdviceIsRandomAfterLongRuns(t *testing.T) {
	const big = 1 << 20
	dir := filepath.Join(t.TempDir(), "s")
	s, err := zrecord.Create(dir, zrecord.WithCodec(zrecord.Raw))
	if err != nil {
		t.Fatal(err)
	}
	recs := make([][]byte, 8)
	for i := range recs {
		recs[i] = make([]byte, big)
		for j := range recs[i] {
			recs[i][j] = byte(i*31 + j)
		}
	}
	if _, err := s.Append(recs); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	chunk, _ := filepath.Abs(filepath.Join(dir, "0.chunk"))
	dropCache(t, chunk)
	s, err = zrecord.Open(dir, zrecord.WithReadOnly())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	check := func(when string) {
		t.Helper()
		flags := vmFlags(t, chunk)
		if len(flags) == 0 {
			t.Fatalf("%s: no mapping of %s", when, chunk)
		}
		for _, f := range flags {
			if !slices.Contains(f, "rr") || slices.Contains(f, "sr") {
				t.Fatalf("%s: a mapping of the chunk has flags %v, want rr and not sr", when, f)
			}
		}
	}
	check("after Open")
	dst := make([]byte, 3*big)
	if err := s.Gather([]int64{2, 3, 4}, dst, big); err != nil {
		t.Fatal(err)
	}
	for k, i := range []int{2, 3, 4} {
		if !bytes.Equal(dst[k*big:(k+1)*big], recs[i]) {
			t.Fatalf("record %d reads wrong", i)
		}
	}
	check("after a gather of a 3 MiB run")
	// A gather that fails its size check after the advice restores it too.
	if err := s.Gather([]int64{5, 6}, make([]byte, 2*(big-1)), big-1); err == nil {
		t.Fatal("a gather with the wrong stride succeeded")
	}
	check("after a failed gather")
}
