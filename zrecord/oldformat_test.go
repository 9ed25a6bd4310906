package zrecord_test

import (
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/loaderx/loaderx/zrecord"
)

// Stores of earlier format versions: version 1, written by this package
// before checksums (testdata/v1, made by the code of that version), and
// version 3, written by the original loaderx 1.5.2 (testdata/v3: its stores
// with each file cut to the part in use, since the original preallocates
// sparse 4 GiB files). Each fixture holds expected.bin: the records as the
// writer read them back, each as a u32 length and the bytes.

func fixtureRecords(t *testing.T, dir string) model {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "expected.bin"))
	if err != nil {
		t.Fatal(err)
	}
	var m model
	for len(b) > 0 {
		n := binary.LittleEndian.Uint32(b)
		m = append(m, b[4:4+n])
		b = b[4+n:]
	}
	return m
}

// fixtureDirs lists the fixture stores with their format version.
func fixtureDirs(t *testing.T) map[string]int {
	out := map[string]int{}
	for _, v := range []string{"v1", "v3"} {
		ents, err := os.ReadDir(filepath.Join("testdata", v))
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ents {
			out[filepath.Join("testdata", v, e.Name())] = int(v[1] - '0')
		}
	}
	if len(out) < 7 {
		t.Fatalf("only %d fixture stores", len(out))
	}
	return out
}

func wantStats(t *testing.T, s *zrecord.Store, version int, checksummed, verified bool) zrecord.Stats {
	t.Helper()
	st, err := s.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if st.Version != version || st.Checksummed != checksummed || st.Verified != verified {
		t.Fatalf("Stats: version %d, checksummed %v, verified %v; want %d, %v, %v",
			st.Version, st.Checksummed, st.Verified, version, checksummed, verified)
	}
	return st
}

func wantReport(t *testing.T, r zrecord.Report, err error, version int, records int64) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	if !r.OK() || r.Version != version || r.Records != records || r.Checked != records || r.Checksummed != (version == 4) {
		t.Fatalf("Verify: %+v, want a clean report of %d records at version %d", r, records, version)
	}
}

func TestOldFormatsRead(t *testing.T) {
	for src, version := range fixtureDirs(t) {
		t.Run(src, func(t *testing.T) {
			rng := newRand(1)
			want := fixtureRecords(t, src)
			dir := filepath.Join(t.TempDir(), "s")
			copyTree(t, src, dir)
			r, err := zrecord.VerifyDir(dir)
			wantReport(t, r, err, version, int64(len(want)))

			s, err := zrecord.Open(dir, zrecord.WithReadOnly())
			if err != nil {
				t.Fatal(err)
			}
			ro := wantStats(t, s, version, false, false)
			if err := diffStore(s, want, rng); err != nil {
				t.Fatal(err)
			}
			s.Close()
			if version == 3 {
				// The original preallocates its files (sparse, 4 GiB):
				// the fixture's are cut to the part in use; grow them back
				// (to 1 MiB here) to read them as the original leaves them.
				for _, name := range []string{"0.chunk", "0.loc"} {
					if err := os.Truncate(filepath.Join(dir, name), 1<<20); err != nil {
						t.Fatal(err)
					}
				}
			}

			// A writable Open does not change an old store by itself; the
			// original's files, in particular, are left as they are.
			before := ztDirDigest(t, dir)
			s, err = zrecord.Open(dir)
			if err != nil {
				t.Fatal(err)
			}
			if rw := wantStats(t, s, version, false, false); rw != ro {
				t.Fatalf("writable Open: %+v, read-only: %+v", rw, ro)
			}
			if err := diffStore(s, want, rng); err != nil {
				t.Fatal(err)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			if version == 3 && ztDirDigest(t, dir) != before {
				t.Fatal("a writable Open and Close changed a version-3 store")
			}
		})
	}
}

func TestOldFormatsUpgrade(t *testing.T) {
	for src, version := range fixtureDirs(t) {
		t.Run(src, func(t *testing.T) {
			rng := newRand(2)
			want := fixtureRecords(t, src)
			dir := filepath.Join(t.TempDir(), "s")
			copyTree(t, src, dir)
			s, err := zrecord.Open(dir)
			if err != nil {
				t.Fatal(err)
			}
			before := wantStats(t, s, version, false, false)
			if err := s.Upgrade(); err != nil {
				t.Fatal(err)
			}
			after := wantStats(t, s, 4, true, true) // every record checked by default
			if after.Length != before.Length || after.LogicalBytes != before.LogicalBytes {
				t.Fatalf("upgrade changed the figures: %+v -> %+v", before, after)
			}
			// Version 4 holds no frame larger than its record.
			if after.LiveBytes > after.LogicalBytes {
				t.Fatalf("after the upgrade %d stored bytes for %d logical ones", after.LiveBytes, after.LogicalBytes)
			}
			if err := diffStore(s, want, rng); err != nil {
				t.Fatal(err)
			}
			r, err := s.Verify()
			wantReport(t, r, err, 4, int64(len(want)))
			if err := s.Upgrade(); err != nil { // a no-op now
				t.Fatal(err)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			names, _ := ztDirNames(dir)
			if slices.ContainsFunc(names, func(n string) bool { return strings.HasSuffix(n, ".loc") }) || !slices.Contains(names, "0.tab") {
				t.Fatalf("after the upgrade the directory holds %v", names)
			}
			s, err = zrecord.Open(dir, zrecord.WithReadOnly())
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			wantStats(t, s, 4, true, true)
			if err := diffStore(s, want, rng); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// Every write upgrades an old store first.
func TestOldFormatsWrite(t *testing.T) {
	for src := range fixtureDirs(t) {
		t.Run(src, func(t *testing.T) {
			rng := newRand(3)
			want := fixtureRecords(t, src)
			for _, op := range []string{"append", "delete", "compact"} {
				dir := filepath.Join(t.TempDir(), op)
				copyTree(t, src, dir)
				s, err := zrecord.Open(dir)
				if err != nil {
					t.Fatal(err)
				}
				m := want
				switch op {
				case "append":
					extra := [][]byte{[]byte("one more record"), {}}
					if _, err = s.Append(extra); err == nil {
						m = m.appended(extra)
					}
				case "delete":
					if err = s.Delete([]int64{0, 2}); err == nil {
						m = m.deleted([]int64{0, 2})
					}
				case "compact":
					err = s.Compact()
				}
				if err != nil {
					t.Fatalf("%s: %v", op, err)
				}
				wantStats(t, s, 4, true, true)
				if err := diffStore(s, m, rng); err != nil {
					t.Fatalf("%s: %v", op, err)
				}
				if err := s.Close(); err != nil {
					t.Fatal(err)
				}
				s, err = zrecord.Open(dir, zrecord.WithReadOnly())
				if err != nil {
					t.Fatal(err)
				}
				if err := diffStore(s, m, rng); err != nil {
					t.Fatalf("%s, reopened: %v", op, err)
				}
				s.Close()
			}
		})
	}
}

// Stores written by WriteOldStore, larger and of every codec: the
// version-3 rule that every record of a compressed store is a frame (even
// a larger one), and their upgrade.
func TestOldFormatsGenerated(t *testing.T) {
	rng := newRand(4)
	var recs [][]byte
	for i := range 60 {
		b := make([]byte, rng.IntN(3000))
		if i%3 == 0 {
			fillRandom(rng, b) // its frame is larger than the record
		} else {
			for k := range b {
				b[k] = byte(k / 100)
			}
		}
		recs = append(recs, b)
	}
	for _, version := range []uint8{1, 3} {
		for _, c := range codecCases {
			t.Run(c.name+"/v"+string(rune('0'+version)), func(t *testing.T) {
				dir := filepath.Join(t.TempDir(), "s")
				var dict []byte
				if c.dict {
					dict = mustDict(t)
				}
				if err := zrecord.WriteOldStore(dir, version, c.codec, dict, recs, 16<<10); err != nil {
					t.Fatal(err)
				}
				s, err := zrecord.Open(dir, zrecord.WithChunkCapacity(16<<10))
				if err != nil {
					t.Fatal(err)
				}
				defer s.Close()
				old := wantStats(t, s, int(version), false, false)
				if err := diffStore(s, recs, rng); err != nil {
					t.Fatal(err)
				}
				if err := s.Upgrade(); err != nil {
					t.Fatal(err)
				}
				st := wantStats(t, s, 4, true, true)
				// The random records' frames, larger than the records,
				// are stored raw now (one byte at least saved on each).
				if version == 3 && c.codec != zrecord.Raw && st.LiveBytes > old.LiveBytes-20 {
					t.Fatalf("after the upgrade %d stored bytes, before %d", st.LiveBytes, old.LiveBytes)
				}
				if version == 1 && st.LiveBytes != old.LiveBytes {
					t.Fatalf("after the upgrade %d stored bytes, before %d", st.LiveBytes, old.LiveBytes)
				}
				if err := diffStore(s, recs, rng); err != nil {
					t.Fatal(err)
				}
				r, err := s.Verify()
				wantReport(t, r, err, 4, int64(len(recs)))
			})
		}
	}
}

// A damaged frame stops an upgrade before anything changes: its checksum
// would otherwise vouch for the damage.
func TestUpgradeRefusesDamage(t *testing.T) {
	src := filepath.Join("testdata", "v3", "dense_zstd")
	dir := filepath.Join(t.TempDir(), "s")
	copyTree(t, src, dir)
	p := filepath.Join(dir, "0.chunk")
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	b[30] ^= 0x55 // inside record 1's frame
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := zrecord.VerifyDir(dir)
	if err != nil || r.OK() || r.Faults[0].Index != 1 || !strings.HasSuffix(r.Faults[0].File, "0.chunk") {
		t.Fatalf("VerifyDir: %+v, %v; want a fault of record 1 in 0.chunk", r, err)
	}
	before := ztDirDigest(t, dir)
	s, err := zrecord.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	err = s.Upgrade()
	if !errors.Is(err, zrecord.ErrCorrupt) || !strings.Contains(err.Error(), "record 1") {
		t.Fatalf("Upgrade: %v, want ErrCorrupt naming record 1", err)
	}
	wantStats(t, s, 3, false, false)
	s.Close()
	if ztDirDigest(t, dir) != before {
		t.Fatal("a refused upgrade changed the files")
	}
}
