package zrecord_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/loaderx/loaderx/zrecord"
)

// Every rejected call must name what is wrong, match its sentinel, and
// leave both the destination and the files on disk untouched.
func TestBadInputs(t *testing.T) {
	for _, codec := range []zrecord.Codec{zrecord.Raw, zrecord.Zstd} {
		t.Run(codec.String(), func(t *testing.T) {
			s, dir := ztCreate(t, codec)
			recs := [][]byte{ztRecord(0, 100), ztRecord(1, 100), ztRecord(2, 7), ztRecord(3, 0)}
			if _, err := s.Append(recs); err != nil {
				t.Fatal(err)
			}
			if err := s.Sync(); err != nil {
				t.Fatal(err)
			}
			disk := ztDirDigest(t, dir)
			fresh := func(n int) []byte { return bytes.Repeat([]byte{0xAB}, n) }
			untouched := func(name string, b []byte) {
				t.Helper()
				for _, c := range b {
					if c != 0xAB {
						t.Fatalf("%s: destination written by a rejected call", name)
					}
				}
			}
			cases := []struct {
				name    string
				call    func(dst []byte) error
				want    error
				mention string
			}{
				{"gather index past end", func(d []byte) error { return s.Gather([]int64{0, 4}, d, 100) }, zrecord.ErrIndexOutOfRange, "index 4"},
				{"gather negative index", func(d []byte) error { return s.Gather([]int64{1, -1}, d, 100) }, zrecord.ErrIndexOutOfRange, "index -1"},
				{"gather wrong stride", func(d []byte) error { return s.Gather([]int64{0, 2}, d, 100) }, zrecord.ErrSizeMismatch, "record 2"},
				{"gather small buffer", func(d []byte) error { return s.Gather([]int64{0, 1}, d[:199], 100) }, zrecord.ErrBufferTooSmall, "199"},
				{"gather negative stride", func(d []byte) error { return s.Gather([]int64{0}, d, -1) }, zrecord.ErrInvalidArgument, "-1"},
				{"packed index past end", func(d []byte) error { return s.GatherPacked([]int64{0, 9}, d, []int64{0, 100, 200}) }, zrecord.ErrIndexOutOfRange, "index 9"},
				{"packed slot too big", func(d []byte) error { return s.GatherPacked([]int64{2}, d, []int64{0, 8}) }, zrecord.ErrSizeMismatch, "record 2"},
				{"packed slot too small", func(d []byte) error { return s.GatherPacked([]int64{0}, d, []int64{0, 99}) }, zrecord.ErrSizeMismatch, "record 0"},
				{"packed offsets count", func(d []byte) error { return s.GatherPacked([]int64{0}, d, []int64{0}) }, zrecord.ErrInvalidArgument, "offsets"},
				{"packed offsets decrease", func(d []byte) error { return s.GatherPacked([]int64{3, 3}, d, []int64{5, 0, 0}) }, zrecord.ErrInvalidArgument, "offsets[1]"},
				{"packed negative start", func(d []byte) error { return s.GatherPacked([]int64{3}, d, []int64{-1, -1}) }, zrecord.ErrInvalidArgument, "-1"},
				{"packed past dst", func(d []byte) error { return s.GatherPacked([]int64{0}, d[:50], []int64{0, 100}) }, zrecord.ErrBufferTooSmall, "50"},
				{"sizes index", func(d []byte) error { return s.Sizes([]int64{4}, make([]int64, 1)) }, zrecord.ErrIndexOutOfRange, "index 4"},
				{"sizes short", func(d []byte) error { return s.Sizes([]int64{0, 1}, make([]int64, 1)) }, zrecord.ErrBufferTooSmall, "1 slots"},
				{"delete index", func(d []byte) error { return s.Delete([]int64{0, 4}) }, zrecord.ErrIndexOutOfRange, "index 4"},
				{"delete negative", func(d []byte) error { return s.Delete([]int64{-3}) }, zrecord.ErrIndexOutOfRange, "index -3"},
				{"delete duplicate", func(d []byte) error { return s.Delete([]int64{1, 2, 1}) }, zrecord.ErrDuplicateIndex, "index 1"},
			}
			for _, c := range cases {
				dst := fresh(300)
				err := c.call(dst)
				if !errors.Is(err, c.want) {
					t.Fatalf("%s: err %v, want %v", c.name, err, c.want)
				}
				if !strings.Contains(err.Error(), c.mention) {
					t.Fatalf("%s: error %q does not mention %q", c.name, err, c.mention)
				}
				untouched(c.name, dst)
			}
			if ztDirDigest(t, dir) != disk {
				t.Fatal("rejected calls changed the files")
			}
			if s.Len() != 4 {
				t.Fatalf("Len = %d after rejected calls", s.Len())
			}
			ztExpect(t, s, recs)
		})
	}
}

func TestRecordTooLarge(t *testing.T) {
	if testing.Short() {
		t.Skip("allocates 2 GiB of virtual memory")
	}
	s, dir := ztCreate(t, zrecord.Raw)
	if _, err := s.Append([][]byte{[]byte("keep")}); err != nil {
		t.Fatal(err)
	}
	disk := ztDirDigest(t, dir)
	// make() does not touch the pages, so this costs address space only.
	huge := make([]byte, zrecord.MaxRecordSize+1)
	_, err := s.Append([][]byte{[]byte("ok"), huge})
	ztIs(t, err, zrecord.ErrRecordTooLarge)
	if !strings.Contains(err.Error(), "record 1") {
		t.Fatalf("error does not name the record: %v", err)
	}
	if s.Len() != 1 || ztDirDigest(t, dir) != disk {
		t.Fatal("a rejected append changed the store")
	}
}

func TestOpenDamaged(t *testing.T) {
	build := func(t *testing.T, codec zrecord.Codec) string {
		s, dir := ztCreate(t, codec, zrecord.WithChunkCapacity(8<<10))
		var recs [][]byte
		for i := range 10 {
			recs = append(recs, ztRecord(i, 3000))
		}
		if _, err := s.Append(recs); err != nil {
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	patch := func(t *testing.T, path string, off int64, b []byte) {
		f, err := os.OpenFile(path, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := f.WriteAt(b, off); err != nil {
			t.Fatal(err)
		}
	}
	u32 := func(v uint32) []byte { return binary.LittleEndian.AppendUint32(nil, v) }
	cases := []struct {
		name    string
		codec   zrecord.Codec
		damage  func(t *testing.T, dir string)
		want    []error
		mention string
		// bad is the damaged record of a table entry's damage, which
		// Open does not see (it does not read the table): the reads of
		// that record fail, the others succeed; -1 for damage Open finds.
		bad int64
	}{
		{"missing dir", zrecord.Raw, func(t *testing.T, dir string) { os.RemoveAll(dir) }, []error{zrecord.ErrNotStore, fs.ErrNotExist}, "", -1},
		{"no meta", zrecord.Raw, func(t *testing.T, dir string) { os.Remove(filepath.Join(dir, "meta.zr")) }, []error{zrecord.ErrNotStore}, "meta.zr", -1},
		{"bad magic", zrecord.Raw, func(t *testing.T, dir string) { patch(t, filepath.Join(dir, "meta.zr"), 0, []byte("ZREX")) }, []error{zrecord.ErrNotStore}, "meta.zr", -1},
		{"bad version", zrecord.Raw, func(t *testing.T, dir string) { patch(t, filepath.Join(dir, "meta.zr"), 4, []byte{2}) }, []error{zrecord.ErrVersion}, "version 2", -1},
		{"bad codec", zrecord.Raw, func(t *testing.T, dir string) {
			patch(t, filepath.Join(dir, "meta.zr"), 5, []byte{3})
			resealHeader(t, dir)
		}, []error{zrecord.ErrCorrupt}, "codec", -1},
		{"header bit flip", zrecord.Raw, func(t *testing.T, dir string) { patch(t, filepath.Join(dir, "meta.zr"), 15, []byte{0x0b}) }, []error{zrecord.ErrCorrupt}, "meta.zr: header checksum", -1},
		{"short table", zrecord.Raw, func(t *testing.T, dir string) { os.Truncate(filepath.Join(dir, "0.tab"), 24*9+3) }, []error{zrecord.ErrCorrupt}, "0.tab", -1},
		{"short tail chunk", zrecord.Raw, func(t *testing.T, dir string) {
			names, _ := ztDirNames(dir)
			last := -1
			for _, n := range names {
				if id, ok := strings.CutSuffix(n, ".chunk"); ok {
					v, _ := strconv.Atoi(id)
					last = max(last, v)
				}
			}
			os.Truncate(filepath.Join(dir, strconv.Itoa(last)+".chunk"), 10)
		}, []error{zrecord.ErrCorrupt}, ".chunk", -1},
		{"entry past chunk end", zrecord.Raw, func(t *testing.T, dir string) {
			patch(t, filepath.Join(dir, "0.tab"), 0, u32(9000))
			resealEntry(t, dir, 0)
		}, []error{zrecord.ErrCorrupt}, "entry 0", 0},
		{"entry past tail chunk", zrecord.Raw, func(t *testing.T, dir string) {
			patch(t, filepath.Join(dir, "0.tab"), 24*3+12, u32(77))
			resealEntry(t, dir, 3)
		}, []error{zrecord.ErrCorrupt}, "entry 3", 3},
		{"compressed entry in raw store", zrecord.Raw, func(t *testing.T, dir string) {
			patch(t, filepath.Join(dir, "0.tab"), 24*2+4, u32(10))
			resealEntry(t, dir, 2)
		}, []error{zrecord.ErrCorrupt}, "entry 2", 2},
		{"entry bit flip", zrecord.Raw, func(t *testing.T, dir string) { patch(t, filepath.Join(dir, "0.tab"), 24*4+9, []byte{0x0c}) }, []error{zrecord.ErrCorrupt}, "record 4 in ", 4},
		{"entry in the wrong slot", zrecord.Raw, func(t *testing.T, dir string) {
			b, _ := os.ReadFile(filepath.Join(dir, "0.tab"))
			patch(t, filepath.Join(dir, "0.tab"), 24*5, b[24*6:24*7])
		}, []error{zrecord.ErrCorrupt}, "0.tab: table entry checksum", 5},
		{"missing dict", zrecord.ZstdDict, func(t *testing.T, dir string) { os.Remove(filepath.Join(dir, "dict.zr")) }, []error{zrecord.ErrMissingDict}, "dict.zr", -1},
		{"garbage dict", zrecord.ZstdDict, func(t *testing.T, dir string) { os.WriteFile(filepath.Join(dir, "dict.zr"), []byte("garbage"), 0o644) }, []error{zrecord.ErrCorrupt}, "dict.zr", -1},
		{"dict bit flip", zrecord.ZstdDict, func(t *testing.T, dir string) {
			b, _ := os.ReadFile(filepath.Join(dir, "dict.zr"))
			patch(t, filepath.Join(dir, "dict.zr"), int64(len(b)/2), []byte{b[len(b)/2] ^ 4})
		}, []error{zrecord.ErrCorrupt}, "dict.zr: dictionary checksum", -1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := build(t, c.codec)
			c.damage(t, dir)
			before := ""
			if _, err := os.Stat(dir); err == nil {
				before = ztDirDigest(t, dir)
			}
			for _, ro := range []bool{true, false} {
				var opts []zrecord.Option
				if ro {
					opts = append(opts, zrecord.WithReadOnly())
				}
				s, err := zrecord.Open(dir, opts...)
				if c.bad >= 0 {
					if err != nil {
						t.Fatalf("read-only %v: Open: %v (a table entry's damage is for the read to find)", ro, err)
					}
					checkEntryDamage(t, s, c.bad, c.want, c.mention)
					if err := s.Close(); err != nil {
						t.Fatal(err)
					}
					continue
				}
				if err == nil {
					s.Close()
					t.Fatalf("read-only %v: Open succeeded", ro)
				}
				ztIs(t, err, c.want...)
				if !strings.Contains(err.Error(), c.mention) {
					t.Fatalf("error %q does not name %q", err, c.mention)
				}
			}
			if before != "" && ztDirDigest(t, dir) != before {
				t.Fatal("a failed Open changed the files")
			}
		})
	}
}

// checkEntryDamage checks a store of 10 records of 3000 bytes whose table
// entry bad is damaged: every call that uses that entry (Gather, Sizes,
// Stats, which sums the table, Verify) reports it with want naming mention,
// and the other records read.
func checkEntryDamage(t *testing.T, s *zrecord.Store, bad int64, want []error, mention string) {
	t.Helper()
	dst := make([]byte, 3000)
	for i := range int64(10) {
		err := s.Gather([]int64{i}, dst, 3000)
		if i != bad {
			if err != nil {
				t.Fatalf("Gather of sound record %d: %v", i, err)
			}
			continue
		}
		if err == nil {
			t.Fatalf("Gather of damaged record %d succeeded", i)
		}
		ztIs(t, err, want...)
		if !strings.Contains(err.Error(), mention) {
			t.Fatalf("Gather: error %q does not name %q", err, mention)
		}
	}
	sizes := make([]int64, 1)
	if err := s.Sizes([]int64{bad}, sizes); !errors.Is(err, zrecord.ErrCorrupt) {
		t.Fatalf("Sizes of damaged record %d: %v, want ErrCorrupt", bad, err)
	}
	if _, err := s.Stats(); !errors.Is(err, zrecord.ErrCorrupt) {
		t.Fatalf("Stats over a damaged table: %v, want ErrCorrupt", err)
	}
	rep, err := s.Verify()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, f := range rep.Faults {
		found = found || f.Index == bad
	}
	if !found {
		t.Fatalf("Verify did not report record %d: %+v", bad, rep.Faults)
	}
}

// A writable Open drops what an append cut short left behind: bytes past the
// frontier in the tail chunk and chunk files past the tail chunk.
func TestOpenRecoversFrontier(t *testing.T) {
	s, dir := ztCreate(t, zrecord.Raw, zrecord.WithChunkCapacity(4096))
	recs := [][]byte{ztRecord(0, 3000), ztRecord(1, 3000)}
	if _, err := s.Append(recs); err != nil {
		t.Fatal(err)
	}
	st, _ := s.Stats()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	tail := filepath.Join(dir, "1.chunk")
	f, err := os.OpenFile(tail, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Write([]byte("leftover of an append that never committed"))
	f.Close()
	os.WriteFile(filepath.Join(dir, "2.chunk"), []byte("orphan"), 0o644)
	os.WriteFile(filepath.Join(dir, "9.chunk"), []byte("orphan"), 0o644)

	// Read-only leaves the files alone and still reads correctly.
	ro, err := zrecord.Open(dir, zrecord.WithReadOnly())
	if err != nil {
		t.Fatal(err)
	}
	ztExpect(t, ro, recs)
	ro.Close()
	if _, err := os.Stat(filepath.Join(dir, "2.chunk")); err != nil {
		t.Fatal("read-only Open removed a file")
	}

	s, err = zrecord.Open(dir, zrecord.WithChunkCapacity(4096))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ztExpect(t, s, recs)
	if fi, _ := os.Stat(tail); fi.Size() != 3000 {
		t.Fatalf("tail chunk is %d bytes after recovery, want 3000", fi.Size())
	}
	for _, name := range []string{"2.chunk", "9.chunk"} {
		if _, err := os.Stat(filepath.Join(dir, name)); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("%s survived recovery", name)
		}
	}
	if st2, _ := s.Stats(); st2 != st {
		t.Fatalf("Stats after recovery %+v, before %+v", st2, st)
	}
	more := [][]byte{ztRecord(2, 3000)}
	if _, err := s.Append(more); err != nil {
		t.Fatal(err)
	}
	ztExpect(t, s, append(recs, more...))
}
