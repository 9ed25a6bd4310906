package zrecord_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/loaderx/loaderx/zrecord"
)

// fuzzStore is a small valid store to corrupt: self-checking records spread
// over several chunks.
type fuzzStore struct {
	dir     string
	codec   zrecord.Codec
	recs    model
	files   map[string][]byte // the template's files (holes read as zeros)
	entries [][24]byte
}

const fuzzRecords = 12

func buildFuzzStores(t testing.TB) []*fuzzStore {
	t.Helper()
	root, err := os.MkdirTemp("", "zrecord-fuzz-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	var out []*fuzzStore
	for vi, c := range codecCases {
		rng := newRand(int64(100 + vi))
		fsx := &fuzzStore{dir: filepath.Join(root, c.name), codec: c.codec}
		s, err := zrecord.Create(fsx.dir, createOpts(t, c, 4<<10)...)
		if err != nil {
			t.Fatalf("Create: %v", err)
		}
		for i := range fuzzRecords {
			size := selfHeader + rng.IntN(3000)
			if i == 3 {
				size = 5000 // larger than a chunk
			}
			if i == 5 || i == 9 {
				// Feature rows: the zstd codecs store them with plain
				// literals, so the stores hold both kinds of frame.
				fsx.recs = append(fsx.recs, featureSelfRecord(rng, uint64(i)))
				continue
			}
			fsx.recs = append(fsx.recs, selfRecord(rng, uint64(i), size))
		}
		if _, err := s.Append(fsx.recs[:7]); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Append(fsx.recs[7:]); err != nil {
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		fsx.files = readSmallFiles(t, fsx.dir)
		loc := fsx.files["0.tab"]
		for i := range fuzzRecords {
			var e [24]byte
			copy(e[:], loc[i*24:])
			fsx.entries = append(fsx.entries, e)
		}
		out = append(out, fsx)
	}
	return out
}

// readSmallFiles reads every file of dir, up to 1 MiB of each.
func readSmallFiles(t testing.TB, dir string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		f, err := os.Open(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		fi, _ := f.Stat()
		b := make([]byte, min(fi.Size(), 1<<20))
		n, _ := f.ReadAt(b, 0)
		f.Close()
		out[e.Name()] = b[:n]
	}
	return out
}

type locEntry struct{ off, phys, logic, chunk, sum uint32 }

func parseEntry(b []byte) locEntry {
	return locEntry{
		off:   binary.LittleEndian.Uint32(b[0:]),
		phys:  binary.LittleEndian.Uint32(b[4:]),
		logic: binary.LittleEndian.Uint32(b[8:]),
		chunk: binary.LittleEndian.Uint32(b[12:]),
		sum:   binary.LittleEndian.Uint32(b[16:]),
	}
}

// sealedAt reports whether b (24 bytes) carries the checksum of entry i.
func sealedAt(b []byte, i int64) bool {
	return binary.LittleEndian.Uint32(b[20:]) == entryChecksum(i, b[:20])
}

// fuzzPatch describes one corruption.
type fuzzPatch struct {
	meta     []byte // written over meta.zr at metaOff
	metaOff  uint8
	loc      []byte // written over 0.tab at locOff
	locOff   uint16
	chunkLen int32 // ≥ 0: truncate a chunk (modulo its size + 1)
	flags    uint8
}

const (
	fTruncMeta  = 1 << iota // truncate meta.zr to metaOff
	fTruncLoc               // truncate 0.tab to locOff
	fLastChunk              // chunkLen applies to the last chunk, not 0.chunk
	fRemoveLast             // remove the last chunk file
	fRemoveDict             // remove dict.zr
	fReadOnly               // open read-only
	fWriteAfter             // then try Append, Delete, Compact
)

func u32(v uint32) []byte { return binary.LittleEndian.AppendUint32(nil, v) }
func u64(v uint64) []byte { return binary.LittleEndian.AppendUint64(nil, v) }

func chunkFiles(dir string) []string {
	var out []string
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".chunk") {
			out = append(out, e.Name())
		}
	}
	slices.SortFunc(out, func(a, b string) int {
		x, _ := strconv.Atoi(strings.TrimSuffix(a, ".chunk"))
		y, _ := strconv.Atoi(strings.TrimSuffix(b, ".chunk"))
		return x - y
	})
	return out
}

func patchFile(t *testing.T, path string, off int64, data []byte) {
	t.Helper()
	if len(data) == 0 {
		return
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return
		}
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(data, off); err != nil {
		t.Fatal(err)
	}
}

func truncFile(t *testing.T, path string, size int64) {
	t.Helper()
	if err := os.Truncate(path, size); err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
}

func (p fuzzPatch) apply(t *testing.T, dir string) {
	t.Helper()
	meta := filepath.Join(dir, "meta.zr")
	loc := filepath.Join(dir, "0.tab")
	patchFile(t, meta, int64(p.metaOff%64), p.meta[:min(len(p.meta), 64)])
	patchFile(t, loc, int64(p.locOff%1024), p.loc[:min(len(p.loc), 256)])
	if p.flags&fTruncMeta != 0 {
		truncFile(t, meta, int64(p.metaOff%40))
	}
	if p.flags&fTruncLoc != 0 {
		truncFile(t, loc, int64(p.locOff%1024))
	}
	chunks := chunkFiles(dir)
	if p.chunkLen >= 0 && len(chunks) > 0 {
		name := chunks[0]
		if p.flags&fLastChunk != 0 {
			name = chunks[len(chunks)-1]
		}
		path := filepath.Join(dir, name)
		if fi, err := os.Stat(path); err == nil {
			truncFile(t, path, int64(p.chunkLen)%(fi.Size()+1))
		}
	}
	if p.flags&fRemoveLast != 0 && len(chunks) > 0 {
		os.Remove(filepath.Join(dir, chunks[len(chunks)-1]))
	}
	if p.flags&fRemoveDict != 0 {
		os.Remove(filepath.Join(dir, "dict.zr"))
	}
}

// diskView is what the files say after Open (which may have recovered).
type diskView struct {
	dir        string
	codecByte  byte
	tailChunk  uint32
	tailOffset uint32
	haveHeader bool
}

func readDiskView(dir string) diskView {
	v := diskView{dir: dir}
	b, err := os.ReadFile(filepath.Join(dir, "meta.zr"))
	if err == nil && len(b) >= 32 {
		v.haveHeader = true
		v.codecByte = b[5]
		v.tailChunk = binary.LittleEndian.Uint32(b[6:])
		v.tailOffset = binary.LittleEndian.Uint32(b[10:])
	}
	return v
}

// entry reads entry i from disk; ok is false when the table does not hold it.
func (v diskView) entry(i int64) (e [24]byte, ok bool) {
	f, err := os.Open(filepath.Join(v.dir, strconv.FormatInt(i>>27, 10)+".tab"))
	if err != nil {
		return e, false
	}
	defer f.Close()
	n, _ := f.ReadAt(e[:], (i&(1<<27-1))*24)
	return e, n == 24
}

// chunkBytes reads [off, off+n) of a chunk; ok is false when the file does
// not hold all of it.
func (v diskView) chunkBytes(chunk uint32, off, n int64) ([]byte, bool) {
	f, err := os.Open(filepath.Join(v.dir, strconv.FormatUint(uint64(chunk), 10)+".chunk"))
	if err != nil {
		return nil, false
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || off+n > fi.Size() {
		return nil, false
	}
	b := make([]byte, n)
	if _, err := f.ReadAt(b, off); err != nil && n > 0 {
		return nil, false
	}
	return b, true
}

// verdict is what a correct reader may return for record i.
type verdict struct {
	mustFail bool
	want     []byte // exact bytes, when known
	why      string
}

func (fsx *fuzzStore) judge(v diskView, i int64) verdict {
	raw, ok := v.entry(i)
	if !ok {
		return verdict{mustFail: true, why: "the record table does not hold the entry"}
	}
	e := parseEntry(raw[:])
	orig := fsx.files
	origChunk := orig[strconv.FormatUint(uint64(e.chunk), 10)+".chunk"]
	disk, inFile := v.chunkBytes(e.chunk, int64(e.off), int64(e.phys))
	unchanged := i < int64(len(fsx.recs)) && raw == fsx.entries[i] && v.haveHeader && v.codecByte == orig["meta.zr"][5] &&
		inFile && int64(e.off)+int64(e.phys) <= int64(len(origChunk)) && bytes.Equal(disk, origChunk[e.off:int64(e.off)+int64(e.phys)])
	if unchanged {
		return verdict{want: fsx.recs[i], why: "entry and bytes unchanged"}
	}
	switch {
	case !v.haveHeader:
		return verdict{why: "no header on disk"}
	case !sealedAt(raw[:], i):
		return verdict{mustFail: true, why: "the entry's checksum does not match"}
	case inFile && crc32.Checksum(disk, castagnoli) != e.sum:
		return verdict{mustFail: true, why: "the stored bytes do not match the entry's checksum"}
	case e.chunk > v.tailChunk:
		return verdict{mustFail: true, why: fmt.Sprintf("chunk %d past the tail chunk %d", e.chunk, v.tailChunk)}
	case !inFile:
		return verdict{mustFail: true, why: fmt.Sprintf("bytes [%d, +%d) not in chunk %d", e.off, e.phys, e.chunk)}
	case e.chunk == v.tailChunk && int64(e.off)+int64(e.phys) > int64(v.tailOffset):
		return verdict{mustFail: true, why: fmt.Sprintf("bytes [%d, +%d) past the tail offset %d", e.off, e.phys, v.tailOffset)}
	case e.phys > e.logic:
		return verdict{mustFail: true, why: fmt.Sprintf("phys %d > logic %d", e.phys, e.logic)}
	case e.phys < e.logic && v.codecByte == byte(zrecord.Raw):
		return verdict{mustFail: true, why: "a compressed entry in a raw store"}
	case e.phys == e.logic:
		return verdict{want: disk, why: "raw entry, read from disk"}
	}
	return verdict{why: "compressed entry, content not judged"}
}

func FuzzOpen(f *testing.F) {
	stores := buildFuzzStores(f)
	tmpl := stores[0]
	ent := func(i int) int { return i * 24 }
	tailChunk := binary.LittleEndian.Uint32(tmpl.files["meta.zr"][6:])
	tailOff := binary.LittleEndian.Uint32(tmpl.files["meta.zr"][10:])
	e2 := parseEntry(tmpl.entries[2][:])
	add := func(variant uint8, p fuzzPatch) {
		f.Add(variant, p.meta, p.metaOff, p.loc, p.locOff, p.chunkLen, p.flags)
	}
	for v := range uint8(len(stores)) {
		add(v, fuzzPatch{chunkLen: -1})                                 // intact
		add(v, fuzzPatch{chunkLen: -1, flags: fReadOnly | fWriteAfter}) // intact, read-only
		add(v, fuzzPatch{chunkLen: -1, flags: fWriteAfter})             // intact, then writes
		add(v, fuzzPatch{meta: []byte("XREC"), chunkLen: -1})           // bad magic
		add(v, fuzzPatch{meta: []byte{99}, metaOff: 4, chunkLen: -1})   // bad version
		add(v, fuzzPatch{meta: []byte{7}, metaOff: 5, chunkLen: -1})    // bad codec
		add(v, fuzzPatch{meta: []byte{0}, metaOff: 5, chunkLen: -1})    // codec → raw
		add(v, fuzzPatch{meta: []byte{1}, metaOff: 5, chunkLen: -1})    // codec → zstd
		add(v, fuzzPatch{meta: []byte{2}, metaOff: 5, chunkLen: -1})    // codec → zstd+dict
		add(v, fuzzPatch{meta: []byte{1}, metaOff: 25, chunkLen: -1})   // reserved byte set
		add(v, fuzzPatch{metaOff: 10, chunkLen: -1, flags: fTruncMeta}) // short header
		add(v, fuzzPatch{metaOff: 0, chunkLen: -1, flags: fTruncMeta})  // empty header
		add(v, fuzzPatch{metaOff: 31, chunkLen: -1, flags: fTruncMeta}) // one byte short
		add(v, fuzzPatch{chunkLen: -1, flags: fRemoveDict})             // no dict.zr
		add(v, fuzzPatch{chunkLen: -1, flags: fRemoveLast | fReadOnly}) // tail chunk gone
		add(v, fuzzPatch{chunkLen: -1, flags: fRemoveLast})             // tail chunk gone, recovery
		add(v, fuzzPatch{chunkLen: 0, flags: fLastChunk})               // tail chunk emptied
		add(v, fuzzPatch{chunkLen: 100, flags: fLastChunk | fReadOnly}) // tail chunk cut short
		add(v, fuzzPatch{chunkLen: 100, flags: fLastChunk})             // same, with recovery
		add(v, fuzzPatch{chunkLen: 100})                                // first chunk cut short
		add(v, fuzzPatch{chunkLen: 100, flags: fWriteAfter})            // then writes
		add(v, fuzzPatch{locOff: 40, chunkLen: -1, flags: fTruncLoc})   // table cut mid-entry
		add(v, fuzzPatch{locOff: 0, chunkLen: -1, flags: fTruncLoc})    // table empty
		add(v, fuzzPatch{meta: u64(fuzzRecords + 1), metaOff: 14, chunkLen: -1})
		add(v, fuzzPatch{meta: u64(fuzzRecords + 1000), metaOff: 14, chunkLen: -1})
		add(v, fuzzPatch{meta: u64(1 << 28), metaOff: 14, chunkLen: -1}) // a second segment that does not exist
		add(v, fuzzPatch{meta: u64(1 << 40), metaOff: 14, chunkLen: -1, flags: fWriteAfter})
		add(v, fuzzPatch{meta: u64(math.MaxUint64), metaOff: 14, chunkLen: -1})
		add(v, fuzzPatch{meta: u64(fuzzRecords - 1), metaOff: 14, chunkLen: -1, flags: fWriteAfter}) // shorter: fine
		add(v, fuzzPatch{meta: u64(0), metaOff: 14, chunkLen: -1})
		add(v, fuzzPatch{meta: u32(tailChunk + 5), metaOff: 6, chunkLen: -1})       // tail chunk past the files
		add(v, fuzzPatch{meta: u32(0), metaOff: 6, chunkLen: -1})                   // tail chunk too low
		add(v, fuzzPatch{meta: u32(0), metaOff: 6, chunkLen: -1, flags: fReadOnly}) // same, read-only
		add(v, fuzzPatch{meta: u32(tailOff / 2), metaOff: 10, chunkLen: -1})        // tail offset too low
		add(v, fuzzPatch{meta: u32(tailOff / 2), metaOff: 10, chunkLen: -1, flags: fReadOnly})
		add(v, fuzzPatch{meta: u32(tailOff + 4096), metaOff: 10, chunkLen: -1}) // tail offset too high
		add(v, fuzzPatch{meta: u32(math.MaxUint32), metaOff: 10, chunkLen: -1})
		add(v, fuzzPatch{loc: u32(0xFFFFFF00), locOff: uint16(ent(0)), chunkLen: -1})      // offset past the chunk end
		add(v, fuzzPatch{loc: u32(e2.off + 1), locOff: uint16(ent(2)), chunkLen: -1})      // offset off by one
		add(v, fuzzPatch{loc: u32(1 << 20), locOff: uint16(ent(2) + 4), chunkLen: -1})     // phys grows
		add(v, fuzzPatch{loc: u32(e2.phys + 1), locOff: uint16(ent(2) + 4), chunkLen: -1}) // phys one more
		add(v, fuzzPatch{loc: u32(1), locOff: uint16(ent(2) + 8), chunkLen: -1})           // logic shrinks
		add(v, fuzzPatch{loc: u32(1 << 31), locOff: uint16(ent(2) + 8), chunkLen: -1})     // logic 2 GiB
		add(v, fuzzPatch{loc: u32(math.MaxUint32), locOff: uint16(ent(2) + 8), chunkLen: -1})
		add(v, fuzzPatch{loc: u32(tailChunk + 1), locOff: uint16(ent(1) + 12), chunkLen: -1}) // chunk past the tail
		add(v, fuzzPatch{loc: u32(99), locOff: uint16(ent(1) + 12), chunkLen: -1, flags: fWriteAfter})
		add(v, fuzzPatch{loc: u32(tailChunk), locOff: uint16(ent(0) + 12), chunkLen: -1}) // another chunk
		add(v, fuzzPatch{loc: tmpl.entries[5][:], locOff: uint16(ent(4)), chunkLen: -1})  // entry 4 → record 5
		add(v, fuzzPatch{loc: make([]byte, 24), locOff: uint16(ent(fuzzRecords - 1)), chunkLen: -1})
		add(v, fuzzPatch{loc: bytes.Repeat([]byte{0xFF}, 64), locOff: uint16(ent(6)), chunkLen: -1, flags: fWriteAfter})
	}

	f.Fuzz(func(t *testing.T, variant uint8, meta []byte, metaOff uint8, loc []byte, locOff uint16, chunkLen int32, flags uint8) {
		fsx := stores[int(variant)%len(stores)]
		p := fuzzPatch{meta, metaOff, loc, locOff, chunkLen, flags}
		dir := filepath.Join(t.TempDir(), "s")
		copyTree(t, fsx.dir, dir)
		p.apply(t, dir)
		// Raw records are verified too, by default, so every codec must
		// notice damage.
		opts := []zrecord.Option{zrecord.WithChunkCapacity(4 << 10)}
		if flags&fReadOnly != 0 {
			opts = append(opts, zrecord.WithReadOnly())
		}
		s, err := zrecord.Open(dir, opts...)
		if err != nil {
			return
		}
		defer s.Close()
		fuzzCheckReads(t, fsx, s, dir)
		if flags&fWriteAfter != 0 && flags&fReadOnly == 0 {
			// Whatever was accepted must not make writes panic; on an
			// undamaged store they must do exactly what the model does.
			intact := len(meta) == 0 && len(loc) == 0 && chunkLen < 0 && flags&^(fWriteAfter|fLastChunk) == 0
			extra := selfRecord(newRand(1), 99, 100)
			m := fsx.recs.appended([][]byte{extra}).deleted([]int64{0})
			errs := []error{}
			_, err := s.Append([][]byte{extra})
			errs = append(errs, err, s.Delete([]int64{0}), s.Compact(), s.Close())
			s2, err := zrecord.Open(dir, opts...)
			if intact {
				if err := errors.Join(append(errs, err)...); err != nil {
					t.Fatalf("writes on an undamaged store: %v", err)
				}
				if err := diffStore(s2, m, newRand(2)); err != nil {
					t.Fatalf("after Append, Delete, Compact on an undamaged store: %v", err)
				}
			}
			if err == nil {
				fuzzCheckReads(t, fsx, s2, dir)
				s2.Close()
			}
		}
	})
}

// fuzzCheckReads gathers the records of an opened, possibly corrupt store:
// each must come back as an error or as the bytes a correct reader returns.
func fuzzCheckReads(t *testing.T, fsx *fuzzStore, s *zrecord.Store, dir string) {
	t.Helper()
	n := s.Len()
	if n < 0 {
		t.Fatalf("Len() = %d", n)
	}
	v := readDiskView(dir)
	var idx []int64
	for i := range min(n, int64(fuzzRecords+4)) {
		idx = append(idx, i)
	}
	if n > int64(fuzzRecords+4) {
		idx = append(idx, n-1, n/2)
	}
	// One record at a time, so that one bad record does not hide another.
	var judged []verdict
	for _, i := range idx {
		vd := fsx.judge(v, i)
		judged = append(judged, vd)
		sizes := []int64{-1}
		if err := s.Sizes([]int64{i}, sizes); err != nil {
			continue
		}
		if vd.want != nil && sizes[0] != int64(len(vd.want)) {
			t.Fatalf("record %d (%s): Sizes = %d, want %d", i, vd.why, sizes[0], len(vd.want))
		}
		if sizes[0] < 0 || sizes[0] > 1<<20 {
			continue // not worth a buffer: no real record is that large
		}
		dst, guard := guarded(int(sizes[0]))
		err := s.GatherPacked([]int64{i}, dst, []int64{0, sizes[0]})
		if gerr := guard(); gerr != nil {
			t.Fatalf("record %d: %v", i, gerr)
		}
		if err != nil {
			continue
		}
		if vd.mustFail {
			t.Fatalf("record %d: read %d bytes without error, but %s", i, len(dst), vd.why)
		}
		if vd.want != nil && !bytes.Equal(dst, vd.want) {
			t.Fatalf("wrong read (%s): %v", vd.why, recordMismatch(i, dst, vd.want))
		}
	}
	// All at once.
	sizes := make([]int64, len(idx))
	if err := s.Sizes(idx, sizes); err != nil {
		return
	}
	offsets := make([]int64, len(idx)+1)
	for j, sz := range sizes {
		if sz < 0 || sz > 1<<20 {
			return
		}
		offsets[j+1] = offsets[j] + sz
	}
	dst, guard := guarded(int(offsets[len(idx)]))
	err := s.GatherPacked(idx, dst, offsets)
	if gerr := guard(); gerr != nil {
		t.Fatalf("batch: %v", gerr)
	}
	if err != nil {
		return
	}
	for j, i := range idx {
		got := dst[offsets[j]:offsets[j+1]]
		if judged[j].mustFail {
			t.Fatalf("batch: record %d read without error, but %s", i, judged[j].why)
		}
		if w := judged[j].want; w != nil && !bytes.Equal(got, w) {
			t.Fatalf("batch: wrong read (%s): %v", judged[j].why, recordMismatch(i, got, w))
		}
	}
}

// TestOpenRejects checks the error each kind of damage is reported as.
func TestOpenRejects(t *testing.T) {
	stores := buildFuzzStores(t)
	raw, dict := stores[0], stores[2]
	cases := []struct {
		name  string
		store *fuzzStore
		patch fuzzPatch
		want  []error
	}{
		{"bad magic", raw, fuzzPatch{meta: []byte("XREC"), chunkLen: -1}, []error{zrecord.ErrNotStore}},
		{"bad version", raw, fuzzPatch{meta: []byte{99}, metaOff: 4, chunkLen: -1}, []error{zrecord.ErrVersion}},
		{"bad codec", raw, fuzzPatch{meta: []byte{7}, metaOff: 5, chunkLen: -1}, []error{zrecord.ErrCorrupt}},
		{"reserved byte", raw, fuzzPatch{meta: []byte{1}, metaOff: 30, chunkLen: -1}, []error{zrecord.ErrCorrupt}},
		{"short header", raw, fuzzPatch{metaOff: 20, chunkLen: -1, flags: fTruncMeta}, []error{zrecord.ErrCorrupt}},
		{"empty header", raw, fuzzPatch{metaOff: 0, chunkLen: -1, flags: fTruncMeta}, []error{zrecord.ErrNotStore, zrecord.ErrCorrupt}},
		{"no dict.zr", dict, fuzzPatch{chunkLen: -1, flags: fRemoveDict}, []error{zrecord.ErrMissingDict}},
		{"no dict.zr read-only", dict, fuzzPatch{chunkLen: -1, flags: fRemoveDict | fReadOnly}, []error{zrecord.ErrMissingDict}},
		{"length past the table", raw, fuzzPatch{meta: u64(1 << 40), metaOff: 14, chunkLen: -1}, []error{zrecord.ErrCorrupt}},
		{"tail chunk missing", raw, fuzzPatch{chunkLen: -1, flags: fRemoveLast}, []error{zrecord.ErrCorrupt}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "s")
			copyTree(t, c.store.dir, dir)
			c.patch.apply(t, dir)
			var opts []zrecord.Option
			if c.patch.flags&fReadOnly != 0 {
				opts = append(opts, zrecord.WithReadOnly())
			}
			s, err := zrecord.Open(dir, opts...)
			if err == nil {
				s.Close()
				t.Fatalf("Open succeeded, want one of %v", c.want)
			}
			for _, w := range c.want {
				if errors.Is(err, w) {
					return
				}
			}
			t.Fatalf("Open: %v, want one of %v", err, c.want)
		})
	}
	t.Run("not a store", func(t *testing.T) {
		dir := t.TempDir()
		if _, err := zrecord.Open(dir); !errors.Is(err, zrecord.ErrNotStore) {
			t.Fatalf("Open(empty dir): %v, want ErrNotStore", err)
		}
		if _, err := zrecord.Open(filepath.Join(dir, "nothing")); err == nil {
			t.Fatal("Open(missing dir) succeeded")
		}
	})
	t.Run("exists", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "s")
		copyTree(t, raw.dir, dir)
		if _, err := zrecord.Create(dir); !errors.Is(err, zrecord.ErrExists) {
			t.Fatalf("Create over a store: %v, want ErrExists", err)
		}
	})
	t.Run("locked", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "s")
		copyTree(t, raw.dir, dir)
		s, err := zrecord.Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if s2, err := zrecord.Open(dir); !errors.Is(err, zrecord.ErrLocked) {
			if err == nil {
				s2.Close()
			}
			t.Fatalf("second writable Open: %v, want ErrLocked", err)
		}
		ro, err := zrecord.Open(dir, zrecord.WithReadOnly())
		if err != nil {
			t.Fatalf("read-only Open next to a writer: %v", err)
		}
		ro.Close()
	})
}

// FuzzGatherArgs feeds arbitrary indices, offsets, strides and buffer sizes
// to Gather and GatherPacked: each call fails or places every record exactly
// where asked, and writes nothing else.
func FuzzGatherArgs(f *testing.F) {
	stores := buildFuzzStores(f)
	s, err := zrecord.Open(stores[1].dir, zrecord.WithReadOnly())
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { s.Close() })
	recs := stores[1].recs
	n := int64(len(recs))
	f.Add(true, []byte{0, 0, 1, 0, 2, 0}, []byte{}, int32(0), uint16(0), int32(0))
	f.Add(true, []byte{11, 0, 11, 0}, []byte{}, int32(0), uint16(0), int32(0))
	f.Add(true, []byte{12, 0}, []byte{}, int32(0), uint16(0), int32(0))                 // out of range
	f.Add(true, []byte{0xFF, 0xFF}, []byte{}, int32(0), uint16(0), int32(0))            // -1
	f.Add(true, []byte{0, 0, 1, 0}, []byte{0, 0}, int32(0), uint16(100), int32(0))      // too small
	f.Add(true, []byte{0, 0, 1, 0}, []byte{3, 200}, int32(5), uint16(9000), int32(0))   // wrong gaps
	f.Add(true, []byte{0, 0, 1, 0}, []byte{255, 255}, int32(7), uint16(9000), int32(1)) // shifted start
	f.Add(true, []byte{0, 0, 1, 0}, []byte{255, 1}, int32(0), uint16(9000), int32(2))   // extra offset
	f.Add(false, []byte{0, 0}, []byte{}, int32(int(len(recs[0]))), uint16(9000), int32(0))
	f.Add(false, []byte{0, 0, 1, 0}, []byte{}, int32(int(len(recs[0]))), uint16(9000), int32(0)) // sizes differ
	f.Add(false, []byte{0, 0}, []byte{}, int32(0), uint16(9000), int32(0))
	f.Add(false, []byte{0, 0}, []byte{}, int32(-5), uint16(9000), int32(0))
	f.Add(false, []byte{0, 0, 0, 0}, []byte{}, int32(int(len(recs[0]))), uint16(len(recs[0])), int32(0))
	f.Fuzz(func(t *testing.T, packed bool, idxb, deltas []byte, stride int32, dstLen uint16, shape int32) {
		var idx []int64
		for j := 0; j+1 < len(idxb) && len(idx) < 64; j += 2 {
			idx = append(idx, int64(int16(binary.LittleEndian.Uint16(idxb[j:]))))
		}
		valid := true
		for _, i := range idx {
			if i < 0 || i >= n {
				valid = false
			}
		}
		buf := make([]byte, int(dstLen)+64)
		for j := range buf {
			buf[j] = guardByte
		}
		dst := buf[:dstLen]
		var err error
		type region struct{ at, idx int64 }
		var placed []region
		if packed {
			// offsets: start at stride (as a byte offset), then per record
			// the true size (delta 255 or no delta), a step back (254) or
			// the delta; shape adds or drops an offset.
			offsets := []int64{int64(max(stride, 0) % 4096)}
			for j, i := range idx {
				d := int64(255)
				if j < len(deltas) {
					d = int64(deltas[j])
				}
				switch {
				case d == 255 && i >= 0 && i < n:
					d = int64(len(recs[i]))
				case d == 254:
					d = -8
				}
				offsets = append(offsets, offsets[len(offsets)-1]+d)
			}
			switch shape % 3 {
			case 1:
				offsets = offsets[:len(offsets)-1]
			case 2:
				offsets = append(offsets, offsets[len(offsets)-1])
			}
			err = s.GatherPacked(idx, dst, offsets)
			if err == nil {
				if !valid {
					t.Fatalf("GatherPacked(%v) succeeded with an index out of [0, %d)", idx, n)
				}
				if len(offsets) != len(idx)+1 && len(idx) > 0 { // an empty batch is let through
					t.Fatalf("GatherPacked with %d indices and %d offsets succeeded", len(idx), len(offsets))
				}
				for j, i := range idx {
					if offsets[j] < 0 || offsets[j+1]-offsets[j] < int64(len(recs[i])) {
						t.Fatalf("GatherPacked: record %d (%d bytes) given a %d-byte slot, no error", i, len(recs[i]), offsets[j+1]-offsets[j])
					}
					placed = append(placed, region{offsets[j], i})
				}
			}
		} else {
			err = s.Gather(idx, dst, int(stride))
			if err == nil {
				if !valid {
					t.Fatalf("Gather(%v) succeeded with an index out of [0, %d)", idx, n)
				}
				for j, i := range idx {
					if int(stride) != len(recs[i]) {
						t.Fatalf("Gather: record %d has %d bytes, stride %d, no error", i, len(recs[i]), stride)
					}
					placed = append(placed, region{int64(j) * int64(stride), i})
				}
			}
		}
		if err != nil {
			// A failed call may have filled part of dst, but nothing past it.
			for j, c := range buf[len(dst):] {
				if c != guardByte {
					t.Fatalf("failed call (%v) wrote %d bytes past the end of dst", err, j+1)
				}
			}
			return
		}
		written := make([]bool, len(buf))
		for _, r := range placed {
			rec := recs[r.idx]
			if r.at+int64(len(rec)) > int64(len(dst)) {
				t.Fatalf("record %d placed at %d past len(dst) %d without error", r.idx, r.at, len(dst))
			}
			if got := dst[r.at : r.at+int64(len(rec))]; !bytes.Equal(got, rec) {
				t.Fatalf("%v", recordMismatch(r.idx, got, rec))
			}
			for j := range rec {
				written[r.at+int64(j)] = true
			}
		}
		for j, c := range buf {
			if !written[j] && c != guardByte {
				t.Fatalf("byte %d of dst written outside every record's place", j)
			}
		}
	})
}

// featureSelfRecord is a self-checking record of 2 KiB whose payload is
// little-endian int32 values, a gradient plus four bits of noise, drawn
// until the Zstd codec stores it with plain literals (about half are).
func featureSelfRecord(rng *rand.Rand, tag uint64) []byte {
	for {
		b := selfRecord(rng, tag, 2048)
		p := b[selfHeader:]
		clear(p)
		base := rng.IntN(96)
		for k := 0; k+4 <= len(p); k += 4 {
			p[k] = byte(base + k*128/len(p) + rng.IntN(16))
		}
		binary.LittleEndian.PutUint32(b[16:], selfCRC(b))
		chosen, huff, _, err := zrecord.LiteralForms([][]byte{b})
		if err != nil {
			panic(err)
		}
		if chosen[0] != nil && !bytes.Equal(chosen[0], huff[0]) {
			return b
		}
	}
}
