package zrecord_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"testing"

	"github.com/loaderx/loaderx/zrecord"
)

// Helpers of the unit tests carry a "zt" prefix to stay clear of names used
// by other test files of the package.

// ztRecord returns deterministic, mildly compressible content for record
// id of n bytes: a smooth ramp with a little noise, like an image row.
func ztRecord(id, n int) []byte {
	b := make([]byte, n)
	r := rand.New(rand.NewPCG(uint64(id), uint64(n)))
	base := byte(id * 7)
	for i := range b {
		b[i] = base + byte(i/64) + byte(r.IntN(4))
	}
	if n >= 8 {
		binary.LittleEndian.PutUint64(b, uint64(id)) // unique prefix
	}
	return b
}

// ztStructured returns small records that share most of their structure,
// the case a trained dictionary is for.
func ztStructured(id int) []byte {
	var buf bytes.Buffer
	r := rand.New(rand.NewPCG(uint64(id), 99))
	fmt.Fprintf(&buf, `{"id":%d,"kind":"sample","tags":["train","v2","shard-%02d"],`, id, id%16)
	buf.WriteString(`"pixels":[`)
	for i := range 160 {
		if i > 0 {
			buf.WriteByte(',')
		}
		fmt.Fprintf(&buf, "%d", 100+(i%24)*3+r.IntN(3))
	}
	fmt.Fprintf(&buf, `],"label":%d,"source":"camera-%d","flags":{"augmented":false,"verified":true}}`, r.IntN(10), id%4)
	return buf.Bytes()
}

var (
	ztDictOnce sync.Once
	ztDict     []byte
	ztDictErr  error
)

// ztTrainedDict trains (once per test binary) a dictionary on structured records.
func ztTrainedDict(t testing.TB) []byte {
	t.Helper()
	ztDictOnce.Do(func() {
		samples := make([][]byte, 0, 1500)
		for i := range 1500 {
			samples = append(samples, ztStructured(1_000_000+i))
		}
		ztDict, ztDictErr = zrecord.TrainDict(samples, zrecord.TierFast, 16<<10)
	})
	if ztDictErr != nil {
		t.Fatalf("TrainDict: %v", ztDictErr)
	}
	return ztDict
}

// ztCreate makes a store in a fresh directory; ZstdDict gets the trained dictionary.
func ztCreate(t testing.TB, codec zrecord.Codec, opts ...zrecord.Option) (*zrecord.Store, string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "store")
	all := []zrecord.Option{zrecord.WithCodec(codec)}
	if codec == zrecord.ZstdDict {
		all = append(all, zrecord.WithDict(ztTrainedDict(t)))
	}
	s, err := zrecord.Create(dir, append(all, opts...)...)
	if err != nil {
		t.Fatalf("Create(%s): %v", codec, err)
	}
	t.Cleanup(func() { s.Close() })
	return s, dir
}

// ztExpect checks that the store holds exactly want, in order, through
// Sizes, Gather (per size) and GatherPacked.
func ztExpect(t *testing.T, s *zrecord.Store, want [][]byte) {
	t.Helper()
	if got := s.Len(); got != int64(len(want)) {
		t.Fatalf("Len = %d, want %d", got, len(want))
	}
	n := len(want)
	if n == 0 {
		return
	}
	idx := make([]int64, n)
	for i := range idx {
		idx[i] = int64(i)
	}
	sizes := make([]int64, n)
	if err := s.Sizes(idx, sizes); err != nil {
		t.Fatalf("Sizes: %v", err)
	}
	offsets := make([]int64, n+1)
	for i, r := range want {
		if sizes[i] != int64(len(r)) {
			t.Fatalf("Sizes[%d] = %d, want %d", i, sizes[i], len(r))
		}
		offsets[i+1] = offsets[i] + int64(len(r))
	}
	// Packed, in reverse order to exercise arbitrary index order.
	rev := make([]int64, n)
	roff := make([]int64, n+1)
	for k := range rev {
		rev[k] = int64(n - 1 - k)
		roff[k+1] = roff[k] + int64(len(want[n-1-k]))
	}
	dst := make([]byte, roff[n]+17)
	for i := range dst {
		dst[i] = 0xEE
	}
	if err := s.GatherPacked(rev, dst, roff); err != nil {
		t.Fatalf("GatherPacked: %v", err)
	}
	for k := range rev {
		if got := dst[roff[k]:roff[k+1]]; !bytes.Equal(got, want[rev[k]]) {
			t.Fatalf("GatherPacked: record %d differs (%d bytes)", rev[k], len(got))
		}
	}
	for _, b := range dst[roff[n]:] {
		if b != 0xEE {
			t.Fatal("GatherPacked wrote past the last offset")
		}
	}
	// Dense, one call per distinct size.
	bySize := map[int][]int64{}
	for i, r := range want {
		bySize[len(r)] = append(bySize[len(r)], int64(i))
	}
	for size, ids := range bySize {
		buf := make([]byte, size*len(ids)+5)
		for i := range buf {
			buf[i] = 0xEE
		}
		if err := s.Gather(ids, buf, size); err != nil {
			t.Fatalf("Gather(size %d): %v", size, err)
		}
		for k, id := range ids {
			if !bytes.Equal(buf[k*size:(k+1)*size], want[id]) {
				t.Fatalf("Gather: record %d (size %d) differs", id, size)
			}
		}
		if !bytes.Equal(buf[size*len(ids):], bytes.Repeat([]byte{0xEE}, 5)) {
			t.Fatal("Gather wrote past the end")
		}
	}
}

// ztDirDigest hashes every file of dir (names, sizes, contents).
func ztDirDigest(t *testing.T, dir string) string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	names := make([]string, 0, len(ents))
	for _, e := range ents {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	h := sha256.New()
	for _, name := range names {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(h, "%s %d\n", name, len(b))
		h.Write(b)
	}
	return fmt.Sprintf("%x", h.Sum(nil))
}

// ztIs fails the test unless err matches every target.
func ztIs(t *testing.T, err error, targets ...error) {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want %v", targets)
	}
	for _, target := range targets {
		if !errors.Is(err, target) {
			t.Fatalf("error %q does not match %v", err, target)
		}
	}
}

// ztDirNames lists the names in dir (none if it does not exist).
func ztDirNames(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names, err
}

// resealHeader recomputes the checksum of dir's version-4 header after a
// test changed one of its fields, so that the field's own check is what
// the change meets.
func resealHeader(t testing.TB, dir string) {
	t.Helper()
	p := filepath.Join(dir, "meta.zr")
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	c := crc32.Update(0, castagnoli, b[0:22])
	c = crc32.Update(c, castagnoli, b[26:32])
	binary.LittleEndian.PutUint32(b[22:26], c)
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// resealEntry recomputes the checksum of table entry i (segment 0 of a
// version-4 store) after a test changed one of its fields.
func resealEntry(t testing.TB, dir string, i int64) {
	t.Helper()
	p := filepath.Join(dir, "0.tab")
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var b [24]byte
	if _, err := f.ReadAt(b[:], i*24); err != nil {
		t.Fatal(err)
	}
	binary.LittleEndian.PutUint32(b[20:], entryChecksum(i, b[:20]))
	if _, err := f.WriteAt(b[:], i*24); err != nil {
		t.Fatal(err)
	}
}

// entryChecksum is the checksum of table entry i with the given first 20
// bytes: CRC-32C of the index (u64) and the bytes.
func entryChecksum(i int64, b []byte) uint32 {
	var ib [8]byte
	binary.LittleEndian.PutUint64(ib[:], uint64(i))
	return crc32.Update(crc32.Update(0, castagnoli, ib[:]), castagnoli, b[:20])
}
