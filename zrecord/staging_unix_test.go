//go:build unix

package zrecord_test

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"

	"github.com/loaderx/loaderx/zrecord"
)

// flocked opens p and takes an exclusive flock on it, as a Create running
// in another process holds on its staging directory's meta.zr.
func flocked(t *testing.T, p string) *os.File {
	t.Helper()
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	return f
}

// TestCreateSparesLiveSiblings: the staging and trash directories of a
// Create still running (their meta.zr locked), under this release's names
// and those of earlier ones, survive another Create of the same path, and
// go with the first Create after their locks are released.
func TestCreateSparesLiveSiblings(t *testing.T) {
	parent := t.TempDir()
	dir := filepath.Join(parent, "s")
	stages := filepath.Join(parent, ".s.zrecord-stage")
	live := []string{
		filepath.Join(stages, "create-0123456789abcdef"),
		filepath.Join(stages, "trash-0123456789abcdef"),
		filepath.Join(parent, ".s.zrecord-create-0123456789abcdef"),
		filepath.Join(parent, ".s.zrecord-trash-0123456789abcdef"),
	}
	var locks []*os.File
	for _, d := range live {
		mkdir(t, d)
		writeFile(t, filepath.Join(d, "meta.zr"), nil)
		writeFile(t, filepath.Join(d, "0.chunk"), []byte("being written"))
		locks = append(locks, flocked(t, filepath.Join(d, "meta.zr")))
	}
	s, err := zrecord.Create(dir)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	names, _ := ztDirNames(parent)
	if want := []string{".s.zrecord-create-0123456789abcdef", ".s.zrecord-stage", ".s.zrecord-trash-0123456789abcdef", "s"}; !slices.Equal(names, want) {
		t.Fatalf("with live siblings, the Create left %v, want %v", names, want)
	}
	if names, _ := ztDirNames(stages); !slices.Equal(names, []string{"create-0123456789abcdef", "trash-0123456789abcdef"}) {
		t.Fatalf("with live siblings, the Create left %v in %s", names, stages)
	}
	for _, d := range live {
		if b, err := os.ReadFile(filepath.Join(d, "0.chunk")); err != nil || string(b) != "being written" {
			t.Fatalf("a live sibling's file: %q, %v", b, err)
		}
	}
	for _, f := range locks {
		f.Close()
	}
	s, err = zrecord.Create(dir, zrecord.WithReplace())
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if names, _ := ztDirNames(parent); !slices.Equal(names, []string{"s"}) {
		t.Fatalf("once their locks were free, the Create left %v", names)
	}
}

// TestCreateUnfinishedInPlaceLocked: a directory an in-place Create is
// still writing (its meta.zr locked) is refused with ErrLocked and left
// alone.
func TestCreateUnfinishedInPlaceLocked(t *testing.T) {
	parent := t.TempDir()
	writeUnfinished(t, "", parent)
	dir := filepath.Join(parent, "s")
	lock := flocked(t, filepath.Join(dir, "meta.zr"))
	defer lock.Close()
	before := ztDirDigest(t, dir)
	_, err := zrecord.Create(dir, zrecord.WithFile("schema.bin", nil))
	if !errors.Is(err, zrecord.ErrLocked) {
		t.Fatalf("Create = %v, want ErrLocked", err)
	}
	if ztDirDigest(t, dir) != before {
		t.Fatal("a refused Create changed the directory")
	}
	if names, _ := ztDirNames(parent); !slices.Equal(names, []string{"s"}) {
		t.Fatalf("a refused Create left %v", names)
	}
}

// mountFS is the OS file system, except that renaming or exchanging onto
// busy fails with EBUSY, as for a bind mount of the parent's file system,
// which has the parent's device number.
type mountFS struct {
	zrecord.FS
	busy string
}

func (m mountFS) Rename(oldname, newname string) error {
	if newname == m.busy || oldname == m.busy {
		return &os.LinkError{Op: "rename", Old: oldname, New: newname, Err: syscall.EBUSY}
	}
	return m.FS.Rename(oldname, newname)
}

func (m mountFS) Exchange(a, b string) error {
	return &os.LinkError{Op: "exchange", Old: a, New: b, Err: syscall.EBUSY}
}

// TestCreateOnBindMount: a path the store cannot be renamed onto gets the
// store built in place instead, for a new store and for a replace, and
// nothing is left beside it.
func TestCreateOnBindMount(t *testing.T) {
	parent := t.TempDir()
	dir := filepath.Join(parent, "s")
	mkdir(t, dir)
	fs := mountFS{zrecord.OSFS, dir}
	s, err := zrecord.Create(dir, zrecord.WithFS(fs), zrecord.WithFile("schema.bin", []byte("old")))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Append(stagedOld); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if got := pathState(dir); got != "old" {
		t.Fatalf("the first store: %s", got)
	}
	s, err = zrecord.Create(dir, zrecord.WithFS(fs), zrecord.WithReplace(), zrecord.WithCodec(zrecord.Zstd), zrecord.WithFile("schema.bin", stagedSchema))
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if got := pathState(dir); got != "new" {
		t.Fatalf("the replacing store: %s", got)
	}
	if names, _ := ztDirNames(parent); !slices.Equal(names, []string{"s"}) {
		t.Fatalf("%s holds %v", parent, names)
	}
}
