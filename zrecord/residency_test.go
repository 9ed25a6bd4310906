package zrecord_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/loaderx/loaderx/zrecord"
)

// pagedMirror is a copy of a store whose table segment and chunk files
// start as zeros of their real size, as the sparse files of a cache that
// has fetched nothing yet hold them, with a residency map over their pages
// (chunk pages first, then table pages). bring copies the real bytes of a
// page in and marks it held.
type pagedMirror struct {
	t            *testing.T
	src, dir     string
	chunkPage    int64
	tablePage    int64
	chunkPages   int64 // pages of 0.chunk, which come first in held
	held         []byte
	residency    *zrecord.Residency
	chunk, table string // the two paged files' names
}

// newPagedMirror mirrors the closed single-chunk, single-segment store in
// src with the given page sizes.
func newPagedMirror(t *testing.T, src string, chunkPage, tablePage int64) *pagedMirror {
	t.Helper()
	m := &pagedMirror{t: t, src: src, dir: filepath.Join(t.TempDir(), "mirror"), chunkPage: chunkPage,
		tablePage: tablePage, chunk: "0.chunk", table: "0.tab"}
	if err := os.MkdirAll(m.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	names, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range names {
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if e.Name() == m.chunk || e.Name() == m.table {
			b = make([]byte, len(b))
		}
		if err := os.WriteFile(filepath.Join(m.dir, e.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	m.chunkPages = (m.size(m.chunk) + chunkPage - 1) / chunkPage
	tablePages := (m.size(m.table) + tablePage - 1) / tablePage
	m.held = make([]byte, m.chunkPages+tablePages)
	m.residency = &zrecord.Residency{Held: m.held, ChunkBase: []int64{0}, ChunkPage: chunkPage,
		TableBase: []int64{m.chunkPages}, TablePage: tablePage}
	return m
}

func (m *pagedMirror) size(name string) int64 {
	fi, err := os.Stat(filepath.Join(m.src, name))
	if err != nil {
		m.t.Fatal(err)
	}
	return fi.Size()
}

// bring copies page p of file name (m.chunk or m.table) in and holds it.
func (m *pagedMirror) bring(name string, p int64) {
	m.t.Helper()
	page, slot := m.chunkPage, p
	if name == m.table {
		page, slot = m.tablePage, m.chunkPages+p
	}
	src, err := os.ReadFile(filepath.Join(m.src, name))
	if err != nil {
		m.t.Fatal(err)
	}
	lo, hi := p*page, min((p+1)*page, int64(len(src)))
	f, err := os.OpenFile(filepath.Join(m.dir, name), os.O_WRONLY, 0)
	if err != nil {
		m.t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(src[lo:hi], lo); err != nil {
		m.t.Fatal(err)
	}
	m.held[slot] = 1
}

// bringAll brings every page of both files in.
func (m *pagedMirror) bringAll() {
	for p := int64(0); p*m.chunkPage < m.size(m.chunk); p++ {
		m.bring(m.chunk, p)
	}
	for p := int64(0); p*m.tablePage < m.size(m.table); p++ {
		m.bring(m.table, p)
	}
}

// ztPagedStore writes n raw records of size bytes into a closed store and
// returns its directory and the records.
func ztPagedStore(t *testing.T, n, size int, opts ...zrecord.Option) (string, [][]byte) {
	t.Helper()
	s, dir := ztCreate(t, zrecord.Raw, opts...)
	recs := make([][]byte, n)
	for i := range recs {
		recs[i] = ztRecord(i, size)
	}
	if _, err := s.Append(recs); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return dir, recs
}

// The table is gated like the chunks: no call reads an entry whose table
// page is not held (ErrNotResident, never the ErrCorrupt a zero entry would
// give), an entry that straddles two pages needs both, a record that
// straddles two chunk pages needs both, and Stats and Verify need every
// page they read.
func TestResidencyGatesTheTable(t *testing.T) {
	const n, size, page = 2000, 40, 4096
	src, recs := ztPagedStore(t, n, size)
	m := newPagedMirror(t, src, page, page)
	s, err := zrecord.Open(m.dir, zrecord.WithReadOnly())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.SetResidency(m.residency); err != nil {
		t.Fatal(err)
	}
	one := make([]uint32, 1)
	sizes := make([]int64, 1)
	dst := make([]byte, size)
	refused := func(i int64) {
		t.Helper()
		ztIs(t, s.Sizes([]int64{i}, sizes), zrecord.ErrNotResident)
		ztIs(t, s.Spans([]int64{i}, one, one, one), zrecord.ErrNotResident)
		ztIs(t, s.CheckBytes([]int64{i}, 0, 0, make([]byte, n*size)), zrecord.ErrNotResident)
		ztIs(t, s.Gather([]int64{i}, dst, size), zrecord.ErrNotResident)
	}
	refused(5)
	m.bring(m.table, 0)
	if err := s.Sizes([]int64{5}, sizes); err != nil || sizes[0] != size {
		t.Fatalf("Sizes of a held entry: %v, %d", err, sizes[0])
	}
	ztIs(t, s.Gather([]int64{5}, dst, size), zrecord.ErrNotResident) // its chunk page is not held
	m.bring(m.chunk, 0)
	if err := s.Gather([]int64{5}, dst, size); err != nil || !bytes.Equal(dst, recs[5]) {
		t.Fatalf("a held record: %v", err)
	}
	// entry 170 is bytes [4080, 4104) of the table: pages 0 and 1
	refused(170)
	m.bring(m.table, 1)
	if err := s.Sizes([]int64{170}, sizes); err != nil {
		t.Fatal(err)
	}
	// record 102 is bytes [4080, 4120) of the chunk: pages 0 and 1
	ztIs(t, s.Gather([]int64{102}, dst, size), zrecord.ErrNotResident)
	m.bring(m.chunk, 1)
	if err := s.Gather([]int64{102}, dst, size); err != nil || !bytes.Equal(dst, recs[102]) {
		t.Fatalf("a record over two held pages: %v", err)
	}
	_, err = s.Stats()
	ztIs(t, err, zrecord.ErrNotResident)
	_, err = s.Verify()
	ztIs(t, err, zrecord.ErrNotResident)
	// a page marked held that holds zeros (lost in a crash): the entry's
	// checksum still refuses it, as damage
	m.held[m.chunkPages+5] = 1
	ztIs(t, s.Sizes([]int64{5*page/24 + 1}, sizes), zrecord.ErrCorrupt) // wholly in page 5
	m.bringAll()
	st, err := s.Stats()
	if err != nil || st.LiveBytes != n*size || !st.Verified {
		t.Fatalf("Stats with every table page held: %+v, %v", st, err)
	}
	if r, err := s.Verify(); err != nil || !r.OK() {
		t.Fatalf("Verify with every page held: %+v, %v", r, err)
	}
	all := make([]int64, n)
	for i := range all {
		all[i] = int64(n - 1 - i)
	}
	out := make([]byte, n*size)
	if err := s.Gather(all, out, size); err != nil {
		t.Fatal(err)
	}
	for k, i := range all {
		if !bytes.Equal(out[k*size:(k+1)*size], recs[i]) {
			t.Fatalf("record %d differs", i)
		}
	}
	ztIs(t, s.SetResidency(&zrecord.Residency{Held: m.held[:3], ChunkBase: []int64{0}, ChunkPage: page,
		TableBase: []int64{0}, TablePage: page}), zrecord.ErrInvalidArgument) // the chunk does not fit
	ztIs(t, s.SetResidency(&zrecord.Residency{Held: m.held, ChunkBase: []int64{0}, ChunkPage: page,
		TableBase: []int64{int64(len(m.held)) - 2}, TablePage: page}), zrecord.ErrInvalidArgument) // nor the table
	ztIs(t, s.SetResidency(&zrecord.Residency{Held: m.held, ChunkBase: []int64{0}, ChunkPage: page,
		TableBase: []int64{0}}), zrecord.ErrInvalidArgument) // no table page size
}

// A store with a residency map checks every raw record it reads, even with
// verification turned off: its bytes were brought in from elsewhere.
func TestResidencyChecksRawRecords(t *testing.T) {
	const n, size = 300, 64
	src, recs := ztPagedStore(t, n, size)
	m := newPagedMirror(t, src, 4096, 4096)
	m.bringAll()
	f, err := os.OpenFile(filepath.Join(m.dir, m.chunk), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte{recs[7][3] ^ 0xFF}, 7*size+3); err != nil {
		t.Fatal(err)
	}
	f.Close()
	s, err := zrecord.Open(m.dir, zrecord.WithReadOnly(), zrecord.WithVerify(false))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	dst := make([]byte, size)
	if err := s.Gather([]int64{7}, dst, size); err != nil {
		t.Fatalf("without a map and with verification off the record reads unchecked: %v", err)
	}
	if err := s.SetResidency(m.residency); err != nil {
		t.Fatal(err)
	}
	ztIs(t, s.Gather([]int64{7}, dst, size), zrecord.ErrCorrupt)
	if st, err := s.Stats(); err != nil || !st.Verified {
		t.Fatalf("a store with a map reports verified reads: %+v, %v", st, err)
	}
	// through a lazy set's view of the store too
	set, err := zrecord.OpenSet([]zrecord.Shard{{Dir: m.dir, Len: n}}, func(_ int, dir string) (*zrecord.Store, error) {
		return zrecord.Open(dir, zrecord.WithReadOnly(), zrecord.WithVerify(false))
	})
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	if err := set.SetResidency(0, m.residency); err != nil {
		t.Fatal(err)
	}
	set.SetVerify(false)
	two := make([]byte, 2*size)
	ztIs(t, set.Gather([]int64{7, 8}, two, size), zrecord.ErrCorrupt)
	if err := set.Gather([]int64{9, 8}, two, size); err != nil || !bytes.Equal(two[:size], recs[9]) {
		t.Fatalf("sound records through the set: %v", err)
	}
}

// CheckTable checks every whole entry of the bytes it is given below the
// store's length, names the first bad one, and leaves the entries a range
// cuts to the read that uses them.
func TestCheckTable(t *testing.T) {
	const n, size = 2000, 40
	dir, _ := ztPagedStore(t, n, size)
	table, err := os.ReadFile(filepath.Join(dir, "0.tab"))
	if err != nil {
		t.Fatal(err)
	}
	s, err := zrecord.Open(dir, zrecord.WithReadOnly())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.CheckTable(0, 0, table); err != nil {
		t.Fatal(err)
	}
	page := append([]byte(nil), table[4096:8192]...)
	if err := s.CheckTable(0, 4096, page); err != nil {
		t.Fatalf("a page whose first and last entries are cut: %v", err)
	}
	page[0] ^= 0xFF // entry 170, which the page holds only part of
	if err := s.CheckTable(0, 4096, page); err != nil {
		t.Fatalf("a cut entry is not the page's to check: %v", err)
	}
	page[200*24-4096] ^= 0xFF // entry 200, whole in the page
	err = s.CheckTable(0, 4096, page)
	ztIs(t, err, zrecord.ErrCorrupt)
	if !strings.Contains(err.Error(), "record 200") || !strings.Contains(err.Error(), "0.tab") {
		t.Fatalf("the error names neither the record nor the segment: %v", err)
	}
	past := append(append([]byte(nil), table[n*24-48:n*24]...), bytes.Repeat([]byte{0xEE}, 96)...)
	if err := s.CheckTable(0, n*24-48, past); err != nil {
		t.Fatalf("bytes past the length are not entries: %v", err)
	}
	ztIs(t, s.CheckTable(0, -1, page), zrecord.ErrInvalidArgument)
}

// A set that requires residency refuses a store whose position has no map
// before it opens the store, Stats included, and reads it once given one.
func TestSetRequiresResidency(t *testing.T) {
	const size = 256
	shards, recs := ztShards(t, size, []setShard{{zrecord.Raw, 10}, {zrecord.Raw, 10}})
	o := newCountingOpener()
	set := ztLazy(t, shards, o, 0)
	set.RequireResidency()
	dst := make([]byte, size)
	ztIs(t, set.Gather([]int64{15}, dst, size), zrecord.ErrNotResident)
	_, err := set.Stats()
	ztIs(t, err, zrecord.ErrNotResident)
	if o.total.Load() != 0 {
		t.Fatalf("%d stores opened before their maps were given", o.total.Load())
	}
	held := []byte{1}
	if err := set.SetResidency(1, &zrecord.Residency{Held: held, ChunkBase: []int64{0}, ChunkPage: 1 << 20}); err != nil {
		t.Fatal(err)
	}
	if err := set.Gather([]int64{15}, dst, size); err != nil || !bytes.Equal(dst, recs[15]) {
		t.Fatalf("a store with its map: %v", err)
	}
	ztIs(t, set.Gather([]int64{15, 3}, make([]byte, 2*size), size), zrecord.ErrNotResident)
	if o.count(0) != 0 {
		t.Fatal("store 0 was opened without its map")
	}
	if err := set.SetResidency(1, nil); err != nil {
		t.Fatal(err)
	}
	err = set.Gather([]int64{15}, dst, size)
	ztIs(t, err, zrecord.ErrNotResident)
	if !errors.Is(err, zrecord.ErrNotResident) || !strings.Contains(err.Error(), "residency") {
		t.Fatalf("a map removed from a set that requires one: %v", err)
	}
}

// chunkMap is a residency map of held over chunk 0's pages of page bytes,
// the table left ungated.
func chunkMap(held []byte, page int64) *zrecord.Residency {
	return &zrecord.Residency{Held: held, ChunkBase: []int64{0}, ChunkPage: page}
}
