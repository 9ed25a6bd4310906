package zrecord_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/loaderx/loaderx/zrecord"
)

// openFds counts this process's open file descriptors.
func openFds(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// A read-only handle holds no descriptor once open (its files are mapped)
// and reads every record; WithReleaseFiles(false) keeps meta.zr, the chunk
// and the segment open, and a writable handle keeps its files whatever the
// option says.
func TestReadOnlyHandlesReleaseTheirFiles(t *testing.T) {
	const stores, n, size = 40, 30, 700
	var dirs []string
	var recs [][][]byte
	for k := range stores {
		codec := []zrecord.Codec{zrecord.Raw, zrecord.Zstd}[k%2]
		dir := filepath.Join(t.TempDir(), fmt.Sprint("s", k))
		s, err := zrecord.Create(dir, zrecord.WithCodec(codec))
		if err != nil {
			t.Fatal(err)
		}
		var rs [][]byte
		for i := range n {
			rs = append(rs, ztRecord(k*n+i, size))
		}
		if _, err := s.Append(rs); err != nil {
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		dirs, recs = append(dirs, dir), append(recs, rs)
	}
	for _, tc := range []struct {
		name     string
		opts     []zrecord.Option
		perStore int
	}{
		{"read-only", []zrecord.Option{zrecord.WithReadOnly()}, 0},
		{"read-only keeping files", []zrecord.Option{zrecord.WithReadOnly(), zrecord.WithReleaseFiles(false)}, 3},
		{"writable", []zrecord.Option{zrecord.WithReleaseFiles(true)}, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := openFds(t)
			var open []*zrecord.Store
			defer func() {
				for _, s := range open {
					s.Close()
				}
			}()
			for _, dir := range dirs {
				s, err := zrecord.Open(dir, tc.opts...)
				if err != nil {
					t.Fatal(err)
				}
				open = append(open, s)
			}
			if got := openFds(t) - before; got != tc.perStore*stores {
				t.Fatalf("%d stores hold %d descriptors, want %d", stores, got, tc.perStore*stores)
			}
			dst := make([]byte, n*size)
			idx := make([]int64, n)
			for i := range idx {
				idx[i] = int64(n - 1 - i)
			}
			for k, s := range open {
				if err := s.Gather(idx, dst, size); err != nil {
					t.Fatal(err)
				}
				for j, i := range idx {
					if !bytes.Equal(dst[j*size:(j+1)*size], recs[k][i]) {
						t.Fatalf("store %d record %d differs", k, i)
					}
				}
				// Every read path of a handle without its files.
				if st, err := s.Stats(); err != nil || st.Length != n {
					t.Fatalf("Stats = %+v, %v", st, err)
				}
				sizes := make([]int64, n)
				if need, err := s.GatherRagged(idx, sizes, dst); err != nil || need != n*size {
					t.Fatalf("GatherRagged = %d, %v", need, err)
				}
				c, o, l := make([]uint32, n), make([]uint32, n), make([]uint32, n)
				if err := s.Spans(idx, c, o, l); err != nil {
					t.Fatal(err)
				}
				if r, err := s.Verify(); err != nil || !r.OK() || r.Checked != n {
					t.Fatalf("Verify = %+v, %v", r, err)
				}
			}
			for _, s := range open {
				if err := s.Close(); err != nil {
					t.Fatal(err)
				}
			}
			open = nil
			if got := openFds(t); got != before {
				t.Fatalf("after Close: %d descriptors, %d before", got, before)
			}
		})
	}
}
