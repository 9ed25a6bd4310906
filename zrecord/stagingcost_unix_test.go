//go:build unix

package zrecord_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/loaderx/loaderx/zrecord"
	"github.com/loaderx/loaderx/zrecord/internal/faultfs"
)

// The tests of this file check what a Create costs and meets beside its
// path rather than what it leaves there: how many directory entries it
// reads in a crowded parent, Creates of one path running at once, and a
// parent it may not write.

// listing is one directory read: which, how many entries came back, and
// whether all were asked for (ReadDir) or at most a few (ReadDirN).
type listing struct {
	dir  string
	n    int
	full bool
}

// listFS passes everything to the FS it wraps, the lookups Create may use
// besides the FS's own methods included, and records each directory read.
type listFS struct {
	zrecord.FS
	mu    sync.Mutex
	lists []listing
}

func (l *listFS) note(dir string, n int, full bool) {
	l.mu.Lock()
	l.lists = append(l.lists, listing{dir, n, full})
	l.mu.Unlock()
}

func (l *listFS) take() []listing {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.lists
	l.lists = nil
	return out
}

func (l *listFS) ReadDir(name string) ([]os.DirEntry, error) {
	ents, err := l.FS.ReadDir(name)
	l.note(name, len(ents), true)
	return ents, err
}

func (l *listFS) ReadDirN(name string, n int) ([]os.DirEntry, error) {
	p, ok := l.FS.(interface {
		ReadDirN(string, int) ([]os.DirEntry, error)
	})
	if !ok {
		return nil, &os.PathError{Op: "readdir", Path: name, Err: errors.ErrUnsupported}
	}
	ents, err := p.ReadDirN(name, n)
	l.note(name, len(ents), false)
	return ents, err
}

func (l *listFS) Lstat(name string) (os.FileInfo, error) {
	s, ok := l.FS.(interface {
		Lstat(string) (os.FileInfo, error)
	})
	if !ok {
		return nil, &os.PathError{Op: "lstat", Path: name, Err: errors.ErrUnsupported}
	}
	return s.Lstat(name)
}

func (l *listFS) Exchange(a, b string) error {
	x, ok := l.FS.(interface{ Exchange(a, b string) error })
	if !ok {
		return &os.LinkError{Op: "exchange", Old: a, New: b, Err: errors.ErrUnsupported}
	}
	return x.Exchange(a, b)
}

// TestCreateReadsFewEntries: however many entries the parent holds, a
// Create (new, replacing by exchange, replacing by two renames) never
// lists the parent whole, reads at most OldScanLimit+1 of its entries, and
// reads the same number of entries in all, in a parent of 3,000 entries
// as in one of 6,000. It still clears the dead leftovers of its path in
// the path's directory of staging directories; those under the names of
// earlier releases are cleared in a small parent and left in a large one.
func TestCreateReadsFewEntries(t *testing.T) {
	tmpl := oldTemplate(t)
	// What writeOldDeadSiblings leaves, in order.
	oldLeftovers := []string{".s.zrecord-create-00112233445566ff", ".s.zrecord-create-0123456789abcdef", ".s.zrecord-trash-ffeeddccbbaa0099"}
	total := map[int][]int{}
	for _, crowd := range []int{3000, 6000, 10} {
		parent := t.TempDir()
		writeNeighbours(t, parent, crowd)
		writeOldDeadSiblings(t, tmpl, parent)
		dir := filepath.Join(parent, "s")
		for _, what := range []string{"new", "replace", "replace-two-renames"} {
			writeDeadSiblings(t, tmpl, parent)
			ffs := faultfs.New(zrecord.OSFS)
			ffs.NoExchange(what == "replace-two-renames")
			lfs := &listFS{FS: ffs}
			opts := []zrecord.Option{zrecord.WithFS(lfs)}
			if what != "new" {
				opts = append(opts, zrecord.WithReplace())
			}
			s, err := zrecord.Create(dir, opts...)
			if err != nil {
				t.Fatalf("%d neighbours, %s: %v", crowd, what, err)
			}
			lists := lfs.take()
			s.Close()
			sum := 0
			for _, l := range lists {
				sum += l.n
				switch {
				case l.dir == parent && l.full:
					t.Errorf("%d neighbours, %s: the Create listed the whole parent (%d entries)", crowd, what, l.n)
				case l.dir == parent && l.n > zrecord.OldScanLimit+1:
					t.Errorf("%d neighbours, %s: the Create read %d entries of the parent", crowd, what, l.n)
				case l.dir != parent && l.n > 8:
					t.Errorf("%d neighbours, %s: the Create listed %s, of %d entries", crowd, what, l.dir, l.n)
				}
			}
			total[crowd] = append(total[crowd], sum)
			if sum > zrecord.OldScanLimit+1+32 {
				t.Errorf("%d neighbours, %s: the Create read %d directory entries in all: %v", crowd, what, sum, lists)
			}
			want := []string{"s"}
			if crowd > zrecord.OldScanLimit {
				want = append(slices.Clone(oldLeftovers), "s")
			}
			if got := besidePath(parent); !slices.Equal(got, want) {
				t.Errorf("%d neighbours, %s: beside the path: %v, want %v", crowd, what, got, want)
			}
			if got := pathState(dir); got == "nothing" || got == "empty" {
				t.Fatalf("%d neighbours, %s: the path holds %s", crowd, what, got)
			}
		}
	}
	if !slices.Equal(total[3000], total[6000]) {
		t.Errorf("entries read per Create: %v beside 3,000 neighbours, %v beside 6,000", total[3000], total[6000])
	}
	t.Logf("entries read per Create (new, replace, two renames) by crowd: %v", total)
}

// TestCreateConcurrentOnePath runs Creates of one path at once, most of
// them WithReplace, in a crowded parent: each returns a store or
// ErrExists or ErrLocked (another holds the path), the path ends holding
// one of the stores whole, and nothing is left beside it. With the swap
// by two renames a Create may also find the path gone between another's
// two renames, and a replace may lose the race for the path to a Create
// that found it gone, leaving what the next Create clears.
func TestCreateConcurrentOnePath(t *testing.T) {
	workers, rounds := 6, 30
	if testing.Short() {
		rounds = 10
	}
	for _, mode := range []string{"exchange", "two-renames"} {
		t.Run(mode, func(t *testing.T) {
			parent := t.TempDir()
			writeNeighbours(t, parent, zrecord.OldScanLimit+8)
			dir := filepath.Join(parent, "s")
			fs := faultfs.New(zrecord.OSFS)
			fs.NoExchange(mode == "two-renames")
			var (
				mu       sync.Mutex
				outcomes = map[string]int{}
				wg       sync.WaitGroup
			)
			for w := range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for r := range rounds {
						tag := []byte(fmt.Sprintf("worker %d round %d", w, r))
						opts := []zrecord.Option{zrecord.WithFS(fs), zrecord.WithFile("schema.bin", tag)}
						if (w+r)%3 != 0 {
							opts = append(opts, zrecord.WithReplace())
						}
						s, err := zrecord.Create(dir, opts...)
						outcome := "made"
						switch {
						case err == nil:
							_, err = s.Append([][]byte{tag})
							if cerr := s.Close(); err == nil {
								err = cerr
							}
							if err != nil {
								t.Errorf("worker %d round %d: %v", w, r, err)
								return
							}
						case errors.Is(err, zrecord.ErrExists):
							outcome = "exists"
						case errors.Is(err, zrecord.ErrLocked):
							outcome = "locked"
						case mode == "two-renames" && errors.Is(err, os.ErrNotExist) && strings.Contains(err.Error(), dir):
							outcome = "gone"
						default:
							t.Errorf("worker %d round %d: %v", w, r, err)
							return
						}
						mu.Lock()
						outcomes[outcome]++
						mu.Unlock()
					}
				}()
			}
			wg.Wait()
			t.Logf("outcomes: %v", outcomes)
			if outcomes["made"] < 2 {
				t.Fatalf("only %d Creates made a store (%v): the test does not test racing ones", outcomes["made"], outcomes)
			}
			s, err := zrecord.Open(dir, zrecord.WithReadOnly())
			if err != nil {
				t.Fatal(err)
			}
			schema, _ := os.ReadFile(filepath.Join(dir, "schema.bin"))
			got, err := gatherPacked(s, seq(s.Len()))
			s.Close()
			if err != nil || len(got) != 1 || string(got[0]) != string(schema) {
				t.Fatalf("the path holds records %q (%v), its schema.bin %q: not one store whole", got, err, schema)
			}
			if names := besidePath(parent); mode == "exchange" && !slices.Equal(names, []string{"s"}) {
				t.Fatalf("after the Creates, beside the path: %v", names)
			}
			createAfter(t, parent, "old", "after the racing Creates")
		})
	}
}

// unwritableFS is the OS file system, except that it refuses, with
// EACCES, to make, rename or remove entries of the directory parent, as
// for a parent its caller may read but not write.
type unwritableFS struct {
	zrecord.FS
	parent string
}

func (u unwritableFS) refused(op, p string) error {
	if filepath.Dir(p) == u.parent {
		return &os.PathError{Op: op, Path: p, Err: syscall.EACCES}
	}
	return nil
}

func (u unwritableFS) MkdirAll(p string, perm os.FileMode) error {
	// The entry of parent that MkdirAll would have to make, if any.
	if rest, ok := strings.CutPrefix(p, u.parent+string(filepath.Separator)); ok {
		top := filepath.Join(u.parent, strings.Split(rest, string(filepath.Separator))[0])
		if _, err := os.Lstat(top); errors.Is(err, os.ErrNotExist) {
			return u.refused("mkdir", top)
		}
	}
	return u.FS.MkdirAll(p, perm)
}

func (u unwritableFS) Rename(oldname, newname string) error {
	if u.refused("rename", oldname) != nil || u.refused("rename", newname) != nil {
		return &os.LinkError{Op: "rename", Old: oldname, New: newname, Err: syscall.EACCES}
	}
	return u.FS.Rename(oldname, newname)
}

func (u unwritableFS) Remove(p string) error {
	if err := u.refused("remove", p); err != nil {
		return err
	}
	return u.FS.Remove(p)
}

// TestCreateUnwritableParent: in a parent it may not write, Create builds
// the store in the path's empty directory itself, whether the path's
// directory of staging directories cannot be made there or was made there
// before (and then the rename out of it is refused); where the path does
// not exist, it fails naming the path.
func TestCreateUnwritableParent(t *testing.T) {
	for _, before := range []string{"no staging directory", "a staging directory from before"} {
		parent := t.TempDir()
		dir := filepath.Join(parent, "s")
		mkdir(t, dir)
		want := []string{"s"}
		if before != "no staging directory" {
			mkdir(t, filepath.Join(parent, ".s.zrecord-stage"))
			want = []string{".s.zrecord-stage", "s"}
		}
		fs := unwritableFS{zrecord.OSFS, parent}
		s, err := zrecord.Create(dir, zrecord.WithFS(fs), zrecord.WithCodec(zrecord.Zstd), zrecord.WithFile("schema.bin", stagedSchema))
		if err != nil {
			t.Fatalf("%s: %v", before, err)
		}
		s.Close()
		if got := pathState(dir); got != "new" {
			t.Fatalf("%s: the path holds %s", before, got)
		}
		if names, _ := ztDirNames(parent); !slices.Equal(names, want) {
			t.Fatalf("%s: the parent holds %v, want %v", before, names, want)
		}
		if names, _ := ztDirNames(filepath.Join(parent, ".s.zrecord-stage")); len(names) > 0 {
			t.Fatalf("%s: the staging directories hold %v", before, names)
		}
	}
	parent := t.TempDir()
	dir := filepath.Join(parent, "s")
	_, err := zrecord.Create(dir, zrecord.WithFS(unwritableFS{zrecord.OSFS, parent}))
	if !errors.Is(err, os.ErrPermission) || !strings.Contains(err.Error(), dir) {
		t.Fatalf("Create of a new path in an unwritable parent = %v, want a permission error naming %s", err, dir)
	}
	if names, _ := ztDirNames(parent); len(names) > 0 {
		t.Fatalf("a refused Create left %v", names)
	}
}
