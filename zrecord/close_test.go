package zrecord_test

import (
	"path/filepath"
	"testing"

	"github.com/loaderx/loaderx/zrecord"
	"github.com/loaderx/loaderx/zrecord/internal/faultfs"
)

// CloseUnsynced syncs nothing, Close syncs what was written; after either,
// a new handle reads every record, and closing again does nothing.
func TestCloseUnsynced(t *testing.T) {
	rng, _ := seeded(t)
	for _, unsynced := range []bool{false, true} {
		dir := filepath.Join(t.TempDir(), "s")
		fs := faultfs.New(zrecord.OSFS)
		s, err := zrecord.Create(dir, zrecord.WithCodec(zrecord.Zstd), zrecord.WithChunkCapacity(64<<10), zrecord.WithFS(fs))
		if err != nil {
			t.Fatal(err)
		}
		fs.KeepLog(true)
		m := model(genBatch(rng, 20, 16<<10))
		if _, err := s.Append(m); err != nil {
			t.Fatal(err)
		}
		closeFn := s.Close
		if unsynced {
			closeFn = s.CloseUnsynced
		}
		if err := closeFn(); err != nil {
			t.Fatalf("unsynced=%v: close: %v", unsynced, err)
		}
		syncs := 0
		for _, op := range fs.Log() {
			if op.Kind == "sync" {
				syncs++
			}
		}
		if unsynced && syncs != 0 {
			t.Fatalf("CloseUnsynced made %d syncs", syncs)
		}
		if !unsynced && syncs == 0 {
			t.Fatal("Close after an append made no sync")
		}
		if err := s.CloseUnsynced(); err != nil {
			t.Fatalf("closing twice: %v", err)
		}
		if _, err := s.Append(m[:1]); err == nil {
			t.Fatal("Append on a closed handle succeeded")
		}
		r, err := zrecord.Open(dir, zrecord.WithReadOnly())
		if err != nil {
			t.Fatal(err)
		}
		if err := diffStore(r, m, rng); err != nil {
			t.Fatalf("unsynced=%v: reopened: %v", unsynced, err)
		}
		r.Close()
	}
}
