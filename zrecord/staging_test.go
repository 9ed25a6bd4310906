package zrecord_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/loaderx/loaderx/zrecord"
	"github.com/loaderx/loaderx/zrecord/internal/faultfs"
)

// The tests of this file cut a Create short at every step (a fault, a
// crash of the process, a power cut; stagingkill_test.go sends a real
// SIGKILL) and check that its path then holds what it held before, or the
// new store, and never a directory that is neither; and that the next
// Create of the path, without WithReplace where the path holds no store,
// succeeds and leaves nothing beside the path.

// The previous store of the replacing scenarios, and the new one.
var (
	stagedOld    = [][]byte{[]byte("one"), []byte("two"), []byte("three"), []byte("four"), []byte("five")}
	stagedSchema = bytes.Repeat([]byte("the new schema "), 200) // 3000 bytes: torn writes tear it
)

// createScenario is what a Create's path holds before the Create runs.
type createScenario struct {
	name    string
	replace bool // the Create is WithReplace
	noExch  bool // the file layer cannot exchange two paths
	// setup prepares parent/s from the template directory of old stores.
	setup func(t *testing.T, tmpl, parent string)
	// before is what a Create that fails without crashing leaves; allowed
	// is every state a crash may leave.
	before, allowed []string
}

var createScenarios = []createScenario{
	{name: "new", setup: func(*testing.T, string, string) {},
		before: []string{"nothing"}, allowed: []string{"nothing", "new"}},
	{name: "empty-dir", setup: func(t *testing.T, _, parent string) { mkdir(t, filepath.Join(parent, "s")) },
		before: []string{"empty"}, allowed: []string{"empty", "nothing", "new"}},
	{name: "replace", replace: true, setup: copyOld,
		before: []string{"old"}, allowed: []string{"old", "new"}},
	{name: "replace-two-renames", replace: true, noExch: true, setup: copyOld,
		before: []string{"old"}, allowed: []string{"old", "nothing", "new"}},
	{name: "unfinished-in-place", setup: writeUnfinished,
		before: []string{"unfinished", "empty"}, allowed: []string{"unfinished", "empty", "nothing", "new"}},
	{name: "dead-siblings", setup: writeDeadSiblings,
		before: []string{"nothing"}, allowed: []string{"nothing", "new"}},
	{name: "dead-siblings-old-names", setup: writeOldDeadSiblings,
		before: []string{"nothing"}, allowed: []string{"nothing", "new"}},
	{name: "crowded-replace", replace: true, setup: func(t *testing.T, tmpl, parent string) {
		writeNeighbours(t, parent, zrecord.OldScanLimit+8)
		writeDeadSiblings(t, tmpl, parent)
		copyOld(t, tmpl, parent)
	}, before: []string{"old"}, allowed: []string{"old", "new"}},
}

func mkdir(t *testing.T, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
}

func writeFile(t *testing.T, p string, b []byte) {
	t.Helper()
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// copyOld puts a copy of the template's previous store at parent/s.
func copyOld(t *testing.T, tmpl, parent string) {
	copyTree(t, filepath.Join(tmpl, "old"), filepath.Join(parent, "s"))
}

// writeUnfinished leaves at parent/s what a Create that built in place (as
// every Create did before staging) leaves when killed before its header.
func writeUnfinished(t *testing.T, _, parent string) {
	dir := filepath.Join(parent, "s")
	mkdir(t, dir)
	for _, name := range []string{"meta.zr", "0.chunk", "0.tab"} {
		writeFile(t, filepath.Join(dir, name), nil)
	}
	writeFile(t, filepath.Join(dir, "dict.zr"), []byte("a dictionary that was never published"))
	writeFile(t, filepath.Join(dir, "schema.bin"), []byte("an older schema"))
}

// writeDeadSiblings leaves in parent/.s.zrecord-stage the staging
// directory of a killed Create and the trash directory of a killed replace
// (a whole store), neither locked.
func writeDeadSiblings(t *testing.T, tmpl, parent string) {
	stages := filepath.Join(parent, ".s.zrecord-stage")
	stage := filepath.Join(stages, "create-00112233445566ff")
	mkdir(t, stage)
	writeFile(t, filepath.Join(stage, "meta.zr"), nil)
	writeFile(t, filepath.Join(stage, "0.chunk"), nil)
	copyTree(t, filepath.Join(tmpl, "old"), filepath.Join(stages, "trash-ffeeddccbbaa0099"))
	// A cleanup cut short: files left, meta.zr already gone.
	half := filepath.Join(stages, "create-0123456789abcdef")
	mkdir(t, half)
	writeFile(t, filepath.Join(half, "0.tab"), nil)
}

// writeOldDeadSiblings leaves the same beside parent/s under the names of
// earlier releases, straight in parent.
func writeOldDeadSiblings(t *testing.T, tmpl, parent string) {
	stage := filepath.Join(parent, ".s.zrecord-create-00112233445566ff")
	mkdir(t, stage)
	writeFile(t, filepath.Join(stage, "meta.zr"), nil)
	writeFile(t, filepath.Join(stage, "0.chunk"), nil)
	copyTree(t, filepath.Join(tmpl, "old"), filepath.Join(parent, ".s.zrecord-trash-ffeeddccbbaa0099"))
	// A cleanup cut short: files left, meta.zr already gone.
	half := filepath.Join(parent, ".s.zrecord-create-0123456789abcdef")
	mkdir(t, half)
	writeFile(t, filepath.Join(half, "0.tab"), nil)
}

// writeNeighbours fills parent with n empty files, the other shards of a
// dataset, say, which every Create leaves alone.
func writeNeighbours(t *testing.T, parent string, n int) {
	t.Helper()
	for i := range n {
		writeFile(t, filepath.Join(parent, fmt.Sprintf("%s%05d", neighbourPrefix, i)), nil)
	}
}

const neighbourPrefix = "neighbour-"

// besidePath lists parent without the neighbours writeNeighbours made.
func besidePath(parent string) []string {
	names, _ := ztDirNames(parent)
	return slices.DeleteFunc(names, func(n string) bool { return strings.HasPrefix(n, neighbourPrefix) })
}

// oldTemplate makes the previous store of the replacing scenarios in
// tmpl/old: raw records, and its own schema.bin.
func oldTemplate(t *testing.T) string {
	t.Helper()
	tmpl := t.TempDir()
	s, err := zrecord.Create(filepath.Join(tmpl, "old"), zrecord.WithFile("schema.bin", []byte("old")))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Append(stagedOld); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return tmpl
}

// stagedOpts are the options of the Create under test.
func stagedOpts(sc createScenario, fs zrecord.FS) []zrecord.Option {
	opts := []zrecord.Option{zrecord.WithFS(fs), zrecord.WithCodec(zrecord.Zstd), zrecord.WithFile("schema.bin", stagedSchema)}
	if sc.replace {
		opts = append(opts, zrecord.WithReplace())
	}
	return opts
}

// pathState says what dir holds: "nothing", "empty" (a directory), "old"
// (the previous store, whole), "new" (the new empty store), "unfinished"
// (what writeUnfinished left, or part of it), or a description of
// something that is none of these.
func pathState(dir string) string {
	names, err := ztDirNames(dir)
	switch {
	case err != nil:
		return fmt.Sprintf("unreadable: %v", err)
	case names == nil:
		if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
			return "nothing"
		}
		return "empty"
	}
	s, err := zrecord.Open(dir, zrecord.WithReadOnly())
	if err != nil {
		unfinished := []string{"0.chunk", "0.tab", "dict.zr", "meta.zr", "schema.bin"}
		if slices.Contains(names, "meta.zr") && !slices.ContainsFunc(names, func(n string) bool { return !slices.Contains(unfinished, n) }) {
			return "unfinished"
		}
		return fmt.Sprintf("neither a store nor empty (%v): %v", names, err)
	}
	defer s.Close()
	schema, _ := os.ReadFile(filepath.Join(dir, "schema.bin"))
	switch {
	case s.Len() == 0 && s.Codec() == zrecord.Zstd && bytes.Equal(schema, stagedSchema):
		return "new"
	case s.Len() == int64(len(stagedOld)) && s.Codec() == zrecord.Raw && string(schema) == "old":
		got, err := gatherPacked(s, []int64{0, 1, 2, 3, 4})
		if err == nil && slices.EqualFunc(got, stagedOld, bytes.Equal) {
			return "old"
		}
		return fmt.Sprintf("the old store, damaged: %v", err)
	}
	return fmt.Sprintf("a store of %d records, codec %v, schema %q", s.Len(), s.Codec(), schema)
}

// createAfter runs the next Create of parent/s as a caller would (plain,
// unless the path holds a store) and checks that it succeeds and that
// nothing but the store is left in parent.
func createAfter(t *testing.T, parent, state, what string) {
	t.Helper()
	dir := filepath.Join(parent, "s")
	opts := []zrecord.Option{zrecord.WithFile("schema.bin", []byte("next"))}
	if state == "old" || state == "new" {
		opts = append(opts, zrecord.WithReplace())
	}
	s, err := zrecord.Create(dir, opts...)
	if err != nil {
		t.Fatalf("%s: the path was left %s, and the next Create fails: %v", what, state, err)
	}
	if _, err := s.Append([][]byte{[]byte("x")}); err != nil {
		t.Fatalf("%s: append to the next store: %v", what, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if names := besidePath(parent); !slices.Equal(names, []string{"s"}) {
		t.Fatalf("%s: after the next Create, %s holds %v: a leftover survived", what, parent, names)
	}
	if got, _ := os.ReadFile(filepath.Join(dir, "schema.bin")); string(got) != "next" {
		t.Fatalf("%s: the next store's schema.bin = %q", what, got)
	}
}

// TestCreateCutShortAtEveryStep makes every mutating file operation of a
// Create fail, crash the process (faultfs.Crash: nothing runs after it,
// locks go with the descriptors) or crash it in the middle of a write.
func TestCreateCutShortAtEveryStep(t *testing.T) {
	tmpl := oldTemplate(t)
	for _, sc := range createScenarios {
		t.Run(sc.name, func(t *testing.T) {
			// A clean run counts the steps.
			parent := t.TempDir()
			sc.setup(t, tmpl, parent)
			fs := faultfs.New(zrecord.OSFS)
			fs.NoExchange(sc.noExch)
			fs.KeepLog(true)
			s, err := zrecord.Create(filepath.Join(parent, "s"), stagedOpts(sc, fs)...)
			if err != nil {
				t.Fatal(err)
			}
			steps, log := fs.Count(), fs.Log()
			s.Close()
			if got := pathState(filepath.Join(parent, "s")); got != "new" {
				t.Fatalf("without faults the path holds %s", got)
			}
			if names := besidePath(parent); !slices.Equal(names, []string{"s"}) {
				t.Fatalf("without faults the Create left %v", names)
			}
			kinds := map[string]int{}
			for _, op := range log {
				kinds[op.Kind]++
			}
			if sc.replace && !sc.noExch && kinds["exchange"] != 1 || sc.replace && sc.noExch && kinds["rename"] != 2 {
				t.Fatalf("a replace made %v", kinds)
			}
			t.Logf("%d steps: %v", steps, kinds)
			seen := map[string]int{}
			for _, mode := range []faultfs.Mode{faultfs.Fail, faultfs.Crash, faultfs.TornCrash} {
				for k := 1; k <= steps; k++ {
					if mode == faultfs.TornCrash && log[k-1].Kind != "write" {
						continue // the same as Crash
					}
					what := fmt.Sprintf("%s at step %d (%s)", mode, k, log[k-1])
					parent := t.TempDir()
					sc.setup(t, tmpl, parent)
					fs := faultfs.New(zrecord.OSFS)
					fs.NoExchange(sc.noExch)
					fs.Arm(k, mode)
					s, err := zrecord.Create(filepath.Join(parent, "s"), stagedOpts(sc, fs)...)
					if err == nil {
						s.Close()
					}
					fs.CloseAll() // the process is gone: its descriptors and locks too
					state := pathState(filepath.Join(parent, "s"))
					seen[state]++
					switch {
					case err == nil && state != "new":
						t.Fatalf("%s: Create returned a store, but the path holds %s", what, state)
					case err != nil && mode == faultfs.Fail && !slices.Contains(sc.before, state):
						t.Fatalf("%s: a failed Create (%v) left the path %s, want %v", what, err, state, sc.before)
					case !slices.Contains(sc.allowed, state):
						t.Fatalf("%s: the path holds %s (Create: %v)", what, state, err)
					}
					createAfter(t, parent, state, what)
				}
			}
			t.Logf("states left: %v", seen)
		})
	}
}

// TestCreatePowerCut loses power at every step of a Create (and right
// after it returned): every write no Sync made durable may be lost, in any
// combination. The path then holds its before-state or the new store.
func TestCreatePowerCut(t *testing.T) {
	rng, seed := seeded(t)
	tmpl := oldTemplate(t)
	for _, sc := range createScenarios {
		t.Run(sc.name, func(t *testing.T) {
			parent := t.TempDir()
			sc.setup(t, tmpl, parent)
			fs := faultfs.New(zrecord.OSFS)
			fs.NoExchange(sc.noExch)
			s, err := zrecord.Create(filepath.Join(parent, "s"), stagedOpts(sc, fs)...)
			if err != nil {
				t.Fatal(err)
			}
			steps := fs.Count()
			s.Close()
			trials := 2
			if testing.Short() {
				trials = 1
			}
			for k := 1; k <= steps+1; k++ {
				for trial := range trials {
					what := fmt.Sprintf("power cut at step %d, trial %d (seed %d)", k, trial, seed)
					parent := t.TempDir()
					sc.setup(t, tmpl, parent)
					fs := faultfs.New(zrecord.OSFS)
					fs.NoExchange(sc.noExch)
					fs.TrackDurability(true)
					fs.Arm(k, faultfs.Crash)
					s, err := zrecord.Create(filepath.Join(parent, "s"), stagedOpts(sc, fs)...)
					keepSeed := rng.Uint64()
					if perr := fs.PowerCut(func(path string, i int) bool {
						if trial == 0 {
							return i%2 == 1
						}
						return newRand(int64(keepSeed^uint64(i)*0x9e3779b97f4a7c15^uint64(len(path)))).IntN(2) == 0
					}); perr != nil {
						t.Fatal(perr)
					}
					if err == nil {
						s.Close()
					}
					state := pathState(filepath.Join(parent, "s"))
					switch {
					case err == nil && state != "new":
						t.Fatalf("%s: Create returned a store, but after the cut the path holds %s", what, state)
					case !slices.Contains(sc.allowed, state):
						t.Fatalf("%s: the path holds %s (Create: %v)", what, state, err)
					}
					createAfter(t, parent, state, what)
				}
			}
		})
	}
}

// TestCreateLeftoverRules checks what the next Create clears and what it
// refuses, naming the path.
func TestCreateLeftoverRules(t *testing.T) {
	unfinished := func(t *testing.T, extra map[string][]byte) string {
		parent := t.TempDir()
		writeUnfinished(t, "", parent)
		for name, b := range extra {
			writeFile(t, filepath.Join(parent, "s", name), b)
		}
		return filepath.Join(parent, "s")
	}
	// A leftover of an in-place Create is cleared without WithReplace...
	dir := unfinished(t, nil)
	s, err := zrecord.Create(dir, zrecord.WithFile("schema.bin", []byte("new")))
	if err != nil {
		t.Fatalf("Create over an unfinished Create's directory: %v", err)
	}
	s.Close()
	if names, _ := ztDirNames(dir); !slices.Equal(names, []string{"0.chunk", "0.tab", "meta.zr", "schema.bin"}) {
		t.Fatalf("the new store's directory holds %v", names)
	}
	// ... but not if anything in it could be someone's data.
	for what, extra := range map[string]map[string][]byte{
		"a header in meta.zr":              {"meta.zr": []byte("ZREC and then something more....")},
		"records in 0.chunk":               {"0.chunk": []byte("data")},
		"a table entry":                    {"0.tab": make([]byte, 24)},
		"a second chunk":                   {"1.chunk": nil},
		"a foreign file":                   {"notes.txt": []byte("keep me")},
		"a file this Create does not name": {"other.bin": nil},
	} {
		dir := unfinished(t, extra)
		before := ztDirDigest(t, dir)
		_, err := zrecord.Create(dir, zrecord.WithFile("schema.bin", []byte("new")))
		if !errors.Is(err, zrecord.ErrExists) || !strings.Contains(err.Error(), dir) {
			t.Errorf("%s: Create = %v, want ErrExists naming %s", what, err, dir)
		}
		if ztDirDigest(t, dir) != before {
			t.Errorf("%s: a refused Create changed the directory", what)
		}
	}
	// A store is refused without WithReplace, with a clear message.
	tmpl := oldTemplate(t)
	parent := t.TempDir()
	copyOld(t, tmpl, parent)
	dir = filepath.Join(parent, "s")
	_, err = zrecord.Create(dir)
	if !errors.Is(err, zrecord.ErrExists) || !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), "holds a store") {
		t.Errorf("Create over a store = %v", err)
	}
	if pathState(dir) != "old" {
		t.Errorf("a refused Create left the store %s", pathState(dir))
	}

	// Names that only look like a sibling's are left alone, and so is a
	// sibling holding a directory.
	parent = t.TempDir()
	keep := []string{".s.zrecord-create-0123", ".s.zrecord-create-0123456789ABCDEF", ".s.zrecord-create-0123456789abcdeg",
		".t.zrecord-create-0123456789abcdef", "s.zrecord-create-0123456789abcdef", ".s.zrecord-trash-0123456789abcdef0"}
	for _, name := range keep {
		mkdir(t, filepath.Join(parent, name))
		writeFile(t, filepath.Join(parent, name, "meta.zr"), nil)
	}
	nested := filepath.Join(parent, ".s.zrecord-create-aaaaaaaaaaaaaaaa")
	mkdir(t, filepath.Join(nested, "sub"))
	// The same in the path's own directory of staging directories, which
	// then stays, not being empty.
	stages := filepath.Join(parent, ".s.zrecord-stage")
	keepStaged := []string{"create-0123", "create-0123456789ABCDEF", "trash-0123456789abcdeg", "create-0123456789abcdef0",
		"0123456789abcdef", "notes.txt", "create-aaaaaaaaaaaaaaaa"}
	for _, name := range keepStaged[:len(keepStaged)-1] {
		mkdir(t, filepath.Join(stages, name))
		writeFile(t, filepath.Join(stages, name, "meta.zr"), nil)
	}
	mkdir(t, filepath.Join(stages, "create-aaaaaaaaaaaaaaaa", "sub"))
	s, err = zrecord.Create(filepath.Join(parent, "s"))
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	names, _ := ztDirNames(parent)
	want := append(slices.Clone(keep), filepath.Base(nested), filepath.Base(stages), "s")
	slices.Sort(want)
	if !slices.Equal(names, want) {
		t.Errorf("after a Create, %s holds %v, want %v", parent, names, want)
	}
	names, _ = ztDirNames(stages)
	slices.Sort(keepStaged)
	if !slices.Equal(names, keepStaged) {
		t.Errorf("after a Create, %s holds %v, want %v", stages, names, keepStaged)
	}
}

// TestCreateLongName: a path whose last element is as long as a name may be
// still gets a staging directory (under a shortened name), whose leftover
// the next Create of the same path clears, and not that of another path.
func TestCreateLongName(t *testing.T) {
	parent := t.TempDir()
	long := strings.Repeat("é", 127) // 254 bytes
	other := strings.Repeat("é", 126) + "x"
	for _, name := range []string{long, other} {
		s, err := zrecord.Create(filepath.Join(parent, name))
		if err != nil {
			t.Fatalf("Create of a %d-byte name: %v", len(name), err)
		}
		s.Close()
	}
	// Leave a dead staging directory of each: make one Create fail after
	// its staging directory exists, then crash.
	for _, name := range []string{long, other} {
		fs := faultfs.New(zrecord.OSFS)
		fs.Arm(4, faultfs.Crash) // mkdir parent, mkdir stage, create meta.zr, create 0.chunk
		if _, err := zrecord.Create(filepath.Join(parent, name), zrecord.WithFS(fs), zrecord.WithReplace()); err == nil {
			t.Fatal("the crashed Create succeeded")
		}
		fs.CloseAll()
	}
	names, _ := ztDirNames(parent)
	if len(names) != 4 {
		t.Fatalf("after two crashed Creates %s holds %d names, want 4", parent, len(names))
	}
	for _, n := range names {
		if len(n) > 255 {
			t.Fatalf("a %d-byte name", len(n))
		}
	}
	s, err := zrecord.Create(filepath.Join(parent, long), zrecord.WithReplace())
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if names, _ := ztDirNames(parent); len(names) != 3 || !slices.Contains(names, long) || !slices.Contains(names, other) {
		t.Fatalf("after the next Create of one path %s holds %q", parent, names)
	}
}

// TestCreateSymlinkAndDot: a path that is a symbolic link to an empty
// directory (through the link), or ".", is built in place.
func TestCreateSymlinkAndDot(t *testing.T) {
	parent := t.TempDir()
	target := filepath.Join(parent, "target")
	mkdir(t, target)
	link := filepath.Join(parent, "link")
	if err := os.Symlink(target, link); err != nil {
		t.Skip("no symbolic links here:", err)
	}
	s, err := zrecord.Create(link)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if fi, err := os.Lstat(link); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Fatalf("the link was replaced: %v %v", fi, err)
	}
	if pathState(target) == "nothing" || pathState(target) == "empty" {
		t.Fatalf("the store is not where the link points")
	}
	if names, _ := ztDirNames(parent); !slices.Equal(names, []string{"link", "target"}) {
		t.Fatalf("%s holds %v", parent, names)
	}

	// "." is the working directory: replacing it would leave the process
	// in a removed directory, so the store goes into it.
	cwd := filepath.Join(parent, "cwd")
	mkdir(t, cwd)
	t.Chdir(cwd)
	s, err = zrecord.Create(".")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Append([][]byte{[]byte("here")}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if names, _ := ztDirNames(cwd); !slices.Contains(names, "meta.zr") {
		t.Fatalf("Create(\".\") left the working directory holding %v", names)
	}
	if names, _ := ztDirNames(parent); !slices.Equal(names, []string{"cwd", "link", "target"}) {
		t.Fatalf("%s holds %v", parent, names)
	}
}
