package zrecord_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/loaderx/loaderx/zrecord"
	"github.com/loaderx/loaderx/zrecord/internal/faultfs"
)

// TestWithFileBeforeHeader checks that a WithFile file is written and
// synced, in the staging directory, before the header that publishes the
// store, that the rename onto the path comes after both, and that a Create
// failing at any step leaves no store (and no file, and no staging
// directory) behind.
func TestWithFileBeforeHeader(t *testing.T) {
	data := []byte("the caller's schema")
	dir := filepath.Join(t.TempDir(), "s")
	fs := faultfs.New(zrecord.OSFS)
	fs.KeepLog(true)
	s, err := zrecord.Create(dir, zrecord.WithFS(fs), zrecord.WithFile("schema.bin", data))
	if err != nil {
		t.Fatal(err)
	}
	steps := fs.Count()
	log := fs.Log()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	side := filepath.Join(dir, "schema.bin")
	// The staging directory is where the header is written.
	stage := ""
	for _, o := range log {
		if o.Kind == "write" && filepath.Base(o.Path) == "meta.zr" {
			stage = filepath.Dir(o.Path)
			break
		}
	}
	if !strings.HasPrefix(filepath.Base(stage), "create-") || filepath.Dir(stage) != filepath.Join(filepath.Dir(dir), ".s.zrecord-stage") {
		t.Fatalf("the header was written in %q, want a staging directory in .s.zrecord-stage beside %s\n%v", stage, dir, log)
	}
	at := func(kind, path string) int {
		return slices.IndexFunc(log, func(o faultfs.Op) bool { return o.Kind == kind && o.Path == path })
	}
	staged := filepath.Join(stage, "schema.bin")
	wrote, synced, header := at("write", staged), at("sync", staged), at("write", filepath.Join(stage, "meta.zr"))
	if wrote < 0 || synced < wrote || header < synced {
		t.Fatalf("write %d, sync %d of %s and the header write %d: want the file durable first\n%v", wrote, synced, staged, header, log)
	}
	metaSync, dirSync, rename, parentSync := at("sync", filepath.Join(stage, "meta.zr")), at("sync", stage), at("rename", stage), at("sync", filepath.Dir(dir))
	if metaSync < header || dirSync < metaSync || rename < dirSync || parentSync < rename || log[rename].To != dir {
		t.Fatalf("header synced at %d, the staging directory at %d, renamed at %d (to %s), the parent synced at %d: want that order\n%v",
			metaSync, dirSync, rename, log[max(rename, 0)].To, parentSync, log)
	}
	if got, err := os.ReadFile(side); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("%s = %q, %v", side, got, err)
	}

	for k := 1; k <= steps; k++ {
		parent := t.TempDir()
		dir := filepath.Join(parent, "s")
		fs := faultfs.New(zrecord.OSFS)
		fs.Arm(k, faultfs.Fail)
		s, err := zrecord.Create(dir, zrecord.WithFS(fs), zrecord.WithFile("schema.bin", data))
		if err == nil {
			s.Close()
			if _, err := os.Stat(filepath.Join(dir, "schema.bin")); err != nil {
				t.Fatalf("step %d: Create succeeded without the file: %v", k, err)
			}
			continue
		}
		if names, _ := ztDirNames(dir); len(names) > 0 {
			t.Fatalf("step %d: a failed Create (%v) left %v", k, err, names)
		}
		if names, _ := ztDirNames(parent); len(names) > 0 {
			t.Fatalf("step %d: a failed Create (%v) left %v beside the store's path", k, err, names)
		}
	}
}

func TestWithFileNames(t *testing.T) {
	for _, name := range []string{"", ".", "..", "a/b", "meta.zr", "dict.zr", "0.chunk", "3.loc", "delete.intent", "compact.journal"} {
		dir := filepath.Join(t.TempDir(), "s")
		_, err := zrecord.Create(dir, zrecord.WithFile(name, []byte("x")))
		ztIs(t, err, zrecord.ErrInvalidArgument)
		if _, serr := os.Stat(dir); !errors.Is(serr, os.ErrNotExist) {
			t.Fatalf("WithFile(%q) refused (%v) but made the directory", name, err)
		}
	}
	_, err := zrecord.Create(filepath.Join(t.TempDir(), "s"), zrecord.WithFile("a", nil), zrecord.WithFile("a", nil))
	ztIs(t, err, zrecord.ErrInvalidArgument)
	_, err = zrecord.Create(filepath.Join(t.TempDir(), "s"), zrecord.WithReplace("[x"))
	ztIs(t, err, zrecord.ErrInvalidArgument)
}

// previousStore makes a store with records and a companion file in a fresh
// directory and closes it.
func previousStore(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "s")
	s, err := zrecord.Create(dir, zrecord.WithCodec(zrecord.Zstd), zrecord.WithChunkCapacity(64), zrecord.WithFile("schema.bin", []byte("old")))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		if _, err := s.Append([][]byte{ztRecord(i, 50)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, ".schema.bin.123.tmp"), []byte("left over"), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestWithReplace(t *testing.T) {
	dir := previousStore(t)
	_, err := zrecord.Create(dir)
	ztIs(t, err, zrecord.ErrExists)

	s, err := zrecord.Create(dir, zrecord.WithFile("schema.bin", []byte("new")), zrecord.WithReplace(".schema.bin.*.tmp"))
	if err != nil {
		t.Fatal(err)
	}
	if s.Len() != 0 || s.Codec() != zrecord.Raw {
		t.Fatalf("replaced store: %d records, codec %v", s.Len(), s.Codec())
	}
	ztExpect(t, s, nil)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	names, err := ztDirNames(dir)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"0.chunk", "0.tab", "meta.zr", "schema.bin"}; !slices.Equal(names, want) {
		t.Fatalf("after the replace the directory holds %v, want %v", names, want)
	}
	if got, _ := os.ReadFile(filepath.Join(dir, "schema.bin")); string(got) != "new" {
		t.Fatalf("companion file = %q", got)
	}

	// Empty and missing directories need no previous store.
	for _, d := range []string{t.TempDir(), filepath.Join(t.TempDir(), "new")} {
		s, err := zrecord.Create(d, zrecord.WithReplace())
		if err != nil {
			t.Fatal(err)
		}
		s.Close()
	}
}

func TestWithReplaceRefuses(t *testing.T) {
	keep := zrecord.WithReplace(".schema.bin.*.tmp")
	check := func(what, dir string, target error, opts ...zrecord.Option) {
		t.Helper()
		before := ztDirDigest(t, dir)
		_, err := zrecord.Create(dir, opts...)
		if !errors.Is(err, target) {
			t.Fatalf("%s: Create = %v, want %v", what, err, target)
		}
		if ztDirDigest(t, dir) != before {
			t.Fatalf("%s: a refused replace changed the directory", what)
		}
	}

	dir := previousStore(t)
	if err := os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("keep me"), 0o644); err != nil {
		t.Fatal(err)
	}
	check("a foreign file", dir, zrecord.ErrExists, zrecord.WithFile("schema.bin", nil), keep)

	dir = previousStore(t)
	check("an undeclared companion", dir, zrecord.ErrExists, keep)

	dir = previousStore(t)
	if err := os.Mkdir(filepath.Join(dir, "999.chunk"), 0o755); err != nil {
		t.Fatal(err)
	}
	before, _ := ztDirNames(dir)
	_, err := zrecord.Create(dir, zrecord.WithFile("schema.bin", nil), keep)
	ztIs(t, err, zrecord.ErrExists)
	if after, _ := ztDirNames(dir); !slices.Equal(before, after) {
		t.Fatalf("a directory among the files: a refused replace left %v of %v", after, before)
	}

	dir = t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "0.chunk"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	check("no meta.zr", dir, zrecord.ErrExists, zrecord.WithReplace())

	dir = previousStore(t)
	s, err := zrecord.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	check("a store held by a writer", dir, zrecord.ErrLocked, zrecord.WithFile("schema.bin", nil), keep)
}
