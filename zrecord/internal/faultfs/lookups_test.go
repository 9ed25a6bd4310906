package faultfs_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/loaderx/loaderx/zrecord"
	"github.com/loaderx/loaderx/zrecord/internal/faultfs"
)

// bareFS is the OS file system with only zrecord.FS's methods.
type bareFS struct{ zrecord.FS }

func TestLookups(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"a", "b", "c"} {
		if err := os.WriteFile(filepath.Join(dir, name), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink("a", link); err != nil {
		t.Skip("no symbolic links here:", err)
	}
	fs := faultfs.New(zrecord.OSFS)
	if fi, err := fs.Lstat(link); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Fatalf("Lstat of a link = %v, %v", fi, err)
	}
	if ents, err := fs.ReadDirN(dir, 2); err != nil || len(ents) != 2 {
		t.Fatalf("ReadDirN(2) of 4 entries = %d entries, %v", len(ents), err)
	}
	if ents, err := fs.ReadDirN(dir, 10); err != nil || len(ents) != 4 {
		t.Fatalf("ReadDirN(10) of 4 entries = %d entries, %v", len(ents), err)
	}
	if fs.Count() != 0 {
		t.Fatalf("lookups counted %d operations", fs.Count())
	}

	bare := faultfs.New(bareFS{zrecord.OSFS})
	if _, err := bare.Lstat(link); !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("Lstat through a layer without it = %v", err)
	}
	if _, err := bare.ReadDirN(dir, 2); !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("ReadDirN through a layer without it = %v", err)
	}

	fs.Arm(1, faultfs.Crash)
	fs.Remove(filepath.Join(dir, "c"))
	if _, err := fs.Lstat(link); !errors.Is(err, faultfs.ErrCrashed) {
		t.Fatalf("Lstat after a crash = %v", err)
	}
	if _, err := fs.ReadDirN(dir, 2); !errors.Is(err, faultfs.ErrCrashed) {
		t.Fatalf("ReadDirN after a crash = %v", err)
	}
}
