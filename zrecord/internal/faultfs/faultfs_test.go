package faultfs_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/loaderx/loaderx/zrecord"
	"github.com/loaderx/loaderx/zrecord/internal/faultfs"
)

func create(t *testing.T, fs *faultfs.FS, name string) zrecord.File {
	t.Helper()
	f, err := fs.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatalf("open %s: %v", name, err)
	}
	return f
}

func TestCountsMutatingOps(t *testing.T) {
	dir := t.TempDir()
	fs := faultfs.New(zrecord.OSFS)
	fs.KeepLog(true)
	a := filepath.Join(dir, "a")
	f := create(t, fs, a)
	if _, err := f.WriteAt([]byte("hello"), 0); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 5)
	if _, err := f.ReadAt(buf, 0); err != nil || string(buf) != "hello" {
		t.Fatalf("read back %q, %v", buf, err)
	}
	if err := f.Truncate(3); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Stat(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := fs.Rename(a, a+"2"); err != nil {
		t.Fatal(err)
	}
	if _, err := fs.Stat(a + "2"); err != nil {
		t.Fatal(err)
	}
	if _, err := fs.ReadDir(dir); err != nil {
		t.Fatal(err)
	}
	if err := fs.Remove(a + "2"); err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, op := range fs.Log() {
		kinds = append(kinds, op.Kind)
	}
	want := "create write truncate sync rename remove"
	if got := strings.Join(kinds, " "); got != want {
		t.Fatalf("log %q, want %q", got, want)
	}
	if fs.Count() != 6 {
		t.Fatalf("count %d, want 6", fs.Count())
	}
	if fs.OpenFiles() != 0 {
		t.Fatalf("%d files still open", fs.OpenFiles())
	}
}

func TestFailIsOneShot(t *testing.T) {
	dir := t.TempDir()
	fs := faultfs.New(zrecord.OSFS)
	f := create(t, fs, filepath.Join(dir, "a"))
	defer f.Close()
	fs.Arm(2, faultfs.Fail)
	if _, err := f.WriteAt([]byte("xx"), 0); err != nil {
		t.Fatal(err)
	}
	_, err := f.WriteAt([]byte("yy"), 2)
	if !errors.Is(err, faultfs.ErrInjected) {
		t.Fatalf("second write: %v, want ErrInjected", err)
	}
	if !strings.Contains(err.Error(), filepath.Join(dir, "a")) {
		t.Fatalf("error %q does not name the file", err)
	}
	if !fs.Fired() || fs.Crashed() {
		t.Fatalf("fired=%v crashed=%v", fs.Fired(), fs.Crashed())
	}
	if _, err := f.WriteAt([]byte("zz"), 2); err != nil {
		t.Fatalf("write after a one-shot failure: %v", err)
	}
	got, _ := os.ReadFile(filepath.Join(dir, "a"))
	if string(got) != "xxzz" {
		t.Fatalf("content %q, want xxzz (the failed write must have no effect)", got)
	}
	if op, ok := fs.LastFault(); !ok || op.Kind != "write" || op.Off != 2 {
		t.Fatalf("last fault %+v %v", op, ok)
	}
}

func TestCrashRefusesEverything(t *testing.T) {
	for _, mode := range []faultfs.Mode{faultfs.Crash, faultfs.TornCrash} {
		t.Run(mode.String(), func(t *testing.T) {
			dir := t.TempDir()
			name := filepath.Join(dir, "a")
			fs := faultfs.New(zrecord.OSFS)
			f := create(t, fs, name)
			fs.Arm(1, mode)
			data := bytes.Repeat([]byte("abcdefgh"), 3*faultfs.SectorSize/8)
			_, err := f.WriteAt(data, 0)
			if !errors.Is(err, faultfs.ErrInjected) && !errors.Is(err, faultfs.ErrCrashed) {
				t.Fatalf("armed write: %v", err)
			}
			if !fs.Crashed() {
				t.Fatal("not crashed")
			}
			checks := map[string]error{}
			_, checks["ReadAt"] = f.ReadAt(make([]byte, 1), 0)
			_, checks["WriteAt"] = f.WriteAt([]byte("x"), 0)
			checks["Truncate"] = f.Truncate(0)
			checks["Sync"] = f.Sync()
			_, checks["File.Stat"] = f.Stat()
			_, checks["OpenFile"] = fs.OpenFile(name, os.O_RDONLY, 0)
			_, checks["OpenFile create"] = fs.OpenFile(name+"b", os.O_RDWR|os.O_CREATE, 0o644)
			checks["Remove"] = fs.Remove(name)
			checks["Rename"] = fs.Rename(name, name+"c")
			_, checks["Stat"] = fs.Stat(name)
			checks["MkdirAll"] = fs.MkdirAll(filepath.Join(dir, "d"), 0o755)
			_, checks["ReadDir"] = fs.ReadDir(dir)
			for op, err := range checks {
				if !errors.Is(err, faultfs.ErrCrashed) {
					t.Errorf("%s after crash: %v, want ErrCrashed", op, err)
				}
			}
			if err := fs.CloseAll(); err != nil {
				t.Fatal(err)
			}
			if fs.OpenFiles() != 0 {
				t.Fatal("CloseAll left files open")
			}
			got, err := os.ReadFile(name)
			if err != nil {
				t.Fatal(err)
			}
			var want []byte
			if mode == faultfs.TornCrash {
				want = data[:faultfs.SectorSize] // whole sectors of the first half
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("content has %d bytes, want %d", len(got), len(want))
			}
			if _, err := os.Stat(name + "b"); !os.IsNotExist(err) {
				t.Fatalf("file created after the crash: %v", err)
			}
		})
	}
}

func TestCrashAtRenameAndCreate(t *testing.T) {
	dir := t.TempDir()
	name := filepath.Join(dir, "a")
	if err := os.WriteFile(name, []byte("1"), 0o644); err != nil {
		t.Fatal(err)
	}
	fs := faultfs.New(zrecord.OSFS)
	fs.Arm(2, faultfs.Crash)
	f := create(t, fs, name+"x") // op 1
	f.Close()
	if err := fs.Rename(name, name+"y"); !errors.Is(err, faultfs.ErrInjected) {
		t.Fatalf("rename: %v", err)
	}
	if _, err := os.Stat(name); err != nil {
		t.Fatalf("crashed rename took effect: %v", err)
	}
}

func TestDiskFull(t *testing.T) {
	for _, short := range []bool{false, true} {
		name := "all-or-nothing"
		if short {
			name = "short"
		}
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "a")
			fs := faultfs.New(zrecord.OSFS)
			f := create(t, fs, path)
			defer f.Close()
			fs.SetSpaceLimit(10, short)
			if n, err := f.WriteAt([]byte("0123456"), 0); n != 7 || err != nil {
				t.Fatalf("write within budget: %d, %v", n, err)
			}
			// Overwriting needs no space.
			if n, err := f.WriteAt([]byte("0123456"), 0); n != 7 || err != nil {
				t.Fatalf("overwrite: %d, %v", n, err)
			}
			n, err := f.WriteAt([]byte("6789abc"), 6) // 1 byte overwritten, 6 new, 3 fit
			wantN, want := 0, "0123456"
			if short {
				wantN, want = 4, "0123456789"
			}
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("write over budget: %v, want ENOSPC", err)
			}
			if !strings.Contains(err.Error(), path) {
				t.Fatalf("error %q does not name the file", err)
			}
			if n != wantN {
				t.Fatalf("short count %d, want %d", n, wantN)
			}
			got, _ := os.ReadFile(path)
			if !bytes.Equal(got, []byte(want)) {
				t.Fatalf("content %q, want %q", got, want)
			}
			if !fs.Full() || fs.Crashed() {
				t.Fatalf("full=%v crashed=%v", fs.Full(), fs.Crashed())
			}
			// Overwrites and syncs still go through the FS; only bytes are rationed.
			if err := f.Sync(); err != nil {
				t.Fatal(err)
			}
			fs.SetSpaceLimit(-1, false)
			if _, err := f.WriteAt([]byte("more"), 20); err != nil {
				t.Fatalf("write after lifting the limit: %v", err)
			}
		})
	}
}

func TestHideFd(t *testing.T) {
	fs := faultfs.New(zrecord.OSFS)
	f := create(t, fs, filepath.Join(t.TempDir(), "a"))
	defer f.Close()
	if f.Fd() == zrecord.NoFd {
		t.Fatal("descriptor hidden by default")
	}
	fs.HideFd(true)
	if f.Fd() != zrecord.NoFd {
		t.Fatal("HideFd(true) still shows the descriptor")
	}
}

func TestPowerCut(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	fs := faultfs.New(zrecord.OSFS)
	fs.TrackDurability(true)
	fa := create(t, fs, a)
	fa.WriteAt([]byte("synced"), 0)
	if err := fa.Sync(); err != nil {
		t.Fatal(err)
	}
	fa.WriteAt([]byte("SY"), 0)        // 0: lost
	fa.WriteAt([]byte("NCED-more"), 2) // 1: kept
	fa.Truncate(8)                     // 2: kept
	fb := create(t, fs, b)
	fb.WriteAt([]byte("never synced"), 0) // 0: lost
	fs.Arm(1, faultfs.Crash)
	if _, err := fa.WriteAt([]byte("x"), 0); err == nil {
		t.Fatal("armed write succeeded")
	}
	keep := func(path string, i int) bool { return path == a && i > 0 }
	if err := fs.PowerCut(keep); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(a); string(got) != "syNCED-m" {
		t.Fatalf("a = %q, want %q", got, "syNCED-m")
	}
	if got, _ := os.ReadFile(b); len(got) != 0 {
		t.Fatalf("b = %q, want empty", got)
	}
	if fs.OpenFiles() != 0 {
		t.Fatal("PowerCut left files open")
	}
}

// TestDirectoryRenameAndExchange: a renamed or exchanged directory takes
// its files' unsynced writes and the names of its open files along, so a
// PowerCut rewrites them where they now are; Exchange counts as a mutating
// operation unless NoExchange makes it unsupported.
func TestDirectoryRenameAndExchange(t *testing.T) {
	dir := t.TempDir()
	x, y, z := filepath.Join(dir, "x"), filepath.Join(dir, "y"), filepath.Join(dir, "z")
	fs := faultfs.New(zrecord.OSFS)
	for _, d := range []string{x, y} {
		if err := fs.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	fs.TrackDurability(true)
	fs.KeepLog(true)
	fx, fy := create(t, fs, filepath.Join(x, "f")), create(t, fs, filepath.Join(y, "f"))
	fx.WriteAt([]byte("in x"), 0)
	fy.WriteAt([]byte("in y"), 0)
	fs.NoExchange(true)
	if err := fs.Exchange(x, y); !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("Exchange with NoExchange = %v", err)
	}
	fs.NoExchange(false)
	if err := fs.Exchange(x, y); err != nil {
		t.Skip("no exchange here:", err)
	}
	if err := fs.Rename(y, z); err != nil { // y held x's file
		t.Fatal(err)
	}
	fy.WriteAt([]byte("IN"), 0) // y's file, now in x
	var kinds []string
	for _, op := range fs.Log() {
		kinds = append(kinds, op.Kind)
	}
	if want := "create create write write exchange rename write"; strings.Join(kinds, " ") != want {
		t.Fatalf("operations %v, want %s", kinds, want)
	}
	if err := fs.PowerCut(func(string, int) bool { return true }); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]string{filepath.Join(x, "f"): "IN y", filepath.Join(z, "f"): "in x"} {
		if got, err := os.ReadFile(p); err != nil || string(got) != want {
			t.Errorf("%s = %q, %v; want %q", p, got, err, want)
		}
	}
	// Nothing kept: both files lose their unsynced writes where they are now.
	fs = faultfs.New(zrecord.OSFS)
	fs.TrackDurability(true)
	f := create(t, fs, filepath.Join(x, "g"))
	f.WriteAt([]byte("lost"), 0)
	if err := fs.Rename(x, y); err != nil {
		t.Fatal(err)
	}
	if err := fs.PowerCut(func(string, int) bool { return false }); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(filepath.Join(y, "g")); err != nil || len(got) != 0 {
		t.Errorf("the renamed directory's file = %q, %v; want it empty", got, err)
	}
}
