package zrecord_test

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/loaderx/loaderx/zrecord"
	"github.com/loaderx/loaderx/zrecord/internal/faultfs"
)

// TestUpgradeFaults makes every mutating file operation of an Upgrade fail
// in turn, crash (nothing after it happens), crash torn, or lose power (a
// crash after which only some unsynced writes reach the disk): the store
// must reopen as the old or the new version with the same records, and go
// on working.
func TestUpgradeFaults(t *testing.T) {
	rng := newRand(11)
	var recs [][]byte
	for i := range 40 {
		b := make([]byte, 1+rng.IntN(9000))
		if i%2 == 0 {
			fillRandom(rng, b) // a version-3 frame larger than the record
		}
		recs = append(recs, b)
	}
	const capacity = 32 << 10
	for _, old := range []struct {
		version uint8
		codec   zrecord.Codec
	}{{1, zrecord.Zstd}, {3, zrecord.Zstd}, {1, zrecord.Raw}} {
		t.Run(fmt.Sprintf("v%d-%v", old.version, old.codec), func(t *testing.T) {
			tmpl := filepath.Join(t.TempDir(), "tmpl")
			if err := zrecord.WriteOldStore(tmpl, old.version, old.codec, nil, recs, capacity); err != nil {
				t.Fatal(err)
			}
			// Count the operations of an undisturbed upgrade.
			dir := filepath.Join(t.TempDir(), "count")
			copyTree(t, tmpl, dir)
			fs := faultfs.New(zrecord.OSFS)
			s, err := zrecord.Open(dir, zrecord.WithFS(fs), zrecord.WithChunkCapacity(capacity))
			if err != nil {
				t.Fatal(err)
			}
			fs.Arm(0, faultfs.Fail)
			if err := s.Upgrade(); err != nil {
				t.Fatal(err)
			}
			ops := fs.Count()
			s.Close()
			if ops < 5 {
				t.Fatalf("an upgrade of %d operations", ops)
			}
			step := 1
			if testing.Short() {
				step = 3
			}
			for k := 1; k <= ops; k += step {
				for _, mode := range []string{"fail", "crash", "torn", "power"} {
					what := fmt.Sprintf("%s at operation %d of %d", mode, k, ops)
					dir := filepath.Join(t.TempDir(), fmt.Sprintf("%s%d", mode, k))
					copyTree(t, tmpl, dir)
					fs := faultfs.New(zrecord.OSFS)
					if mode == "power" {
						fs.TrackDurability(true)
					}
					s, err := zrecord.Open(dir, zrecord.WithFS(fs), zrecord.WithChunkCapacity(capacity))
					if err != nil {
						t.Fatal(err)
					}
					switch mode {
					case "fail":
						fs.Arm(k, faultfs.Fail)
					case "torn":
						fs.Arm(k, faultfs.TornCrash)
					default:
						fs.Arm(k, faultfs.Crash)
					}
					uerr := s.Upgrade()
					if mode == "fail" && uerr == nil && fs.Fired() {
						// A failure the upgrade shrugged off (a removal of
						// an old segment, say): the handle must still be
						// right.
						if err := diffStore(s, recs, rng); err != nil {
							t.Fatalf("%s: the handle after a successful upgrade: %v", what, err)
						}
					}
					if mode == "power" {
						if err := fs.PowerCut(func(path string, i int) bool { return (i+k)%2 == 0 }); err != nil {
							t.Fatal(err)
						}
					} else {
						s.Close()
					}
					fs.CloseAll()
					s, err = zrecord.Open(dir, zrecord.WithChunkCapacity(capacity))
					if err != nil {
						t.Fatalf("%s (upgrade returned %v): reopen: %v", what, uerr, err)
					}
					st, _ := s.Stats()
					if st.Version != int(old.version) && st.Version != 4 {
						t.Fatalf("%s: version %d after reopening", what, st.Version)
					}
					if err := diffStore(s, recs, rng); err != nil {
						t.Fatalf("%s (upgrade returned %v, version %d): %v", what, uerr, st.Version, err)
					}
					if _, err := s.Append([][]byte{[]byte("after")}); err != nil {
						t.Fatalf("%s: Append after reopening: %v", what, err)
					}
					if err := diffStore(s, model(recs).appended([][]byte{[]byte("after")}), rng); err != nil {
						t.Fatalf("%s: after an Append: %v", what, err)
					}
					if r, err := s.Verify(); err != nil || !r.OK() {
						t.Fatalf("%s: Verify after reopening and appending: %+v, %v", what, r, err)
					}
					s.Close()
				}
			}
		})
	}
}
