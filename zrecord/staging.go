package zrecord

import (
	"encoding/hex"
	"errors"
	"hash/fnv"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"unicode/utf8"
)

// A Create builds its store in a staging directory and publishes it with
// one rename, so that the path never holds a store in the making: a
// process killed during a Create leaves at the path what was there before,
// and the staging directory.
//
// The staging directories of the Creates of .../NAME sit in a directory
// of that path's own beside it, .../.NAME.zrecord-stage (a NAME past 200
// bytes is cut, and a hash of it appended, to keep the name within the
// file system's limit). Each Create makes its staging directory there,
// create- followed by 16 hex digits. Its meta.zr is the first file made in
// it, and the Create holds an flock on it (the store's writer lock) from
// then on, through the rename and for the life of the returned handle. A
// Create WithReplace that cannot swap the two directories in one step
// (below) first moves the previous store to trash- with the same digits,
// in the same directory. Every Create of a path first clears the staging
// and trash directories there whose meta.zr it can lock (or that have none
// and can be removed, being empty): those of a Create still running
// elsewhere stay, since their lock is held. Removing one starts with its
// meta.zr, under the lock, so a directory that is left with other files
// but no meta.zr is a cleanup cut short, which the next one finishes; a
// Create checks, once it holds its lock, that its meta.zr is still the one
// at its path, and starts over in a new directory if a cleanup removed it
// in between. A Create that is done, whether it published, failed or built
// in place, removes the path's directory if it is empty; that fails, and
// is meant to, while another Create of the path has its staging directory
// there. A Create whose staging directory cannot be made because a
// finishing one just removed the path's directory makes both again.
//
// So a Create lists no directory but its own path's one (and its stores'),
// and its cost does not grow with the number of entries beside the path:
// a dataset directory of 10^5 shards takes about 90 ms to list, which,
// paid by each of its shards' Creates, made writing it quadratic. Whether
// the path is a symbolic link is an lstat. Creates of earlier releases
// kept their staging and trash directories straight beside the path,
// .NAME.zrecord-create- or .NAME.zrecord-trash- and 16 hex digits; a
// Create clears those as well, by the same rules, when the parent holds at
// most oldScanLimit entries, which it learns by reading no more than one
// past that many. In a larger parent they stay (loaderx's commit of a
// sharded dataset removes those its dead writers left, by name). A file
// layer without Lstat and ReadDirN (fs.go) has Create read the whole
// parent, as before.
//
// Publishing renames the staging directory out of the path's directory
// onto the path, in the same file system; the parent is fsynced, then the
// path's directory.
//
// Replacing a store swaps the two directories with renameat2's
// RENAME_EXCHANGE where the system has it (Linux), so the path holds the
// previous store until the one step that makes it hold the new one. The
// previous store, now under the staging name, is removed afterwards; a
// kill before that leaves it there for the next Create. Elsewhere the swap
// is two renames, previous store to the trash name and the new one onto
// the path, and a kill between the two leaves no store at the path (the
// previous one sits in the trash directory until the next Create removes
// it). Either way the previous store keeps its writer lock until it is
// gone, so no writer opens it meanwhile; readers of it are undisturbed.
//
// The store is built in the final directory itself (in place, as before
// staging) where renaming could not work or would change something the
// caller made: on Windows (stagedCreate), when the path is a symbolic
// link, the root or a "." or "..", when an existing empty directory at the
// path is a mount point (seen by its device number, or, for a bind mount of
// the same file system, by the rename failing with EBUSY or EXDEV, after
// which the store is built again in place), and when its parent is not
// writable (the path's directory cannot be made in it, or, where one was
// made before, the rename out of it is refused). A Create in place writes
// the header last, so it never leaves a directory that looks like a store;
// what it leaves when cut short (store files only, and a meta.zr without a
// header) is recognised by the next Create of the path (clearUnfinished),
// which empties it: this covers the directories that Creates before
// staging left as well.

// Names of the directories of a store's Creates.
const (
	stageDirTag = ".zrecord-stage"   // after the path's name: its directory
	stagePrefix = "create-"          // in it: a Create's staging directory
	trashPrefix = "trash-"           // in it: a replaced store on its way out
	stageDigits = 16                 // hex digits after either prefix
	oldStageTag = ".zrecord-create-" // earlier releases, beside the path
	oldTrashTag = ".zrecord-trash-"
	// oldScanLimit is the most entries a parent may hold for a Create to
	// look in it for its path's leftovers under the earlier names.
	oldScanLimit = 128
	// stageAttempts bounds how often a Create starts over in a new staging
	// directory because a concurrent cleanup took the one it began.
	stageAttempts = 8
)

// The states of a creation's swap, which abandon undoes.
const (
	swapNone      = iota
	swapRenamed   // the stage was renamed onto the path (nothing was there)
	swapExchanged // the stage and the previous store were exchanged
	swapOldMoved  // the previous store was moved to the trash name
	swapBoth      // ... and the stage renamed onto the path
)

// creation is the state of one Create: where the store is built, what it
// replaces, and what to undo if it fails.
type creation struct {
	fsys  FS
	o     *options
	final string // the store's path, as given

	parent, base string
	stageDir     string   // the path's directory of staging directories
	usedStageDir bool     // stageDir was there or made: remove it if empty
	inPlace      bool     // the store is built in final itself
	madeFinal    bool     // in place: Create made final
	emptyDir     bool     // final was an empty directory
	prev         File     // WithReplace: the previous store's meta.zr, locked
	stage        string   // where the store is built (final in place)
	suffix       string   // the stage's hex digits
	trash        string   // the previous store's trash name (two-rename swap)
	meta         File     // the new store's meta.zr, locked
	created      []string // files made, in order
	swap         int
}

// stageDirName returns the directory that holds the staging and trash
// directories of the Creates of the path parent/base.
func stageDirName(parent, base string) string {
	return filepath.Join(parent, "."+siblingStem(base)+stageDirTag)
}

// maxStem keeps the names beside a path within the 255 bytes most file
// systems allow in one name: a dot, the stem, and the longest tag with its
// digits.
const maxStem = 200

// siblingStem is the part of a name beside the path that stands for base:
// base itself, or, for a long one, its first bytes (cut at a character)
// and a hash of the whole, so that those of different long names differ.
func siblingStem(base string) string {
	if len(base) <= maxStem {
		return base
	}
	h := fnv.New64a()
	h.Write([]byte(base))
	n := maxStem - 17
	for n > 0 && !utf8.RuneStart(base[n]) {
		n--
	}
	return base[:n] + "-" + hex.EncodeToString(h.Sum(nil))
}

// hexDigits reports whether s is stageDigits lowercase hex digits.
func hexDigits(s string) bool {
	if len(s) != stageDigits || strings.ToLower(s) != s {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil
}

// isStaged reports whether name, in a path's directory of staging
// directories, is a Create's staging or trash directory.
func isStaged(name string) bool {
	for _, prefix := range []string{stagePrefix, trashPrefix} {
		if rest, ok := strings.CutPrefix(name, prefix); ok && hexDigits(rest) {
			return true
		}
	}
	return false
}

// isOldSibling reports whether name, beside a path called base, is a
// staging or trash directory of a Create of an earlier release.
func isOldSibling(name, base string) bool {
	for _, tag := range []string{oldStageTag, oldTrashTag} {
		if rest, ok := strings.CutPrefix(name, "."+siblingStem(base)+tag); ok && hexDigits(rest) {
			return true
		}
	}
	return false
}

// inspect looks at the path before anything is made: it clears the
// leftovers of earlier Creates, decides whether to build in place, and
// checks (and, WithReplace, locks) what the path holds.
func (c *creation) inspect() error {
	fsys := c.fsys
	clean := filepath.Clean(c.final)
	c.parent, c.base = filepath.Dir(clean), filepath.Base(clean)
	c.inPlace = !stagedCreate || c.base == "." || c.base == ".." || clean == c.parent
	if !c.inPlace {
		c.stageDir = stageDirName(c.parent, c.base)
		if err := fsys.MkdirAll(c.parent, 0o755); err != nil {
			return wrapf(err, "create %s", c.final)
		}
		if c.clearLeftovers() {
			c.inPlace = true // a symbolic link: keep it, build where it points
		}
	}
	fi, err := fsys.Stat(c.final)
	switch {
	case isNotExist(err):
		return nil
	case err != nil:
		return wrapf(err, "create %s", c.final)
	case !fi.IsDir():
		return errf(ErrExists, "create %s: not a directory", c.final)
	}
	if !c.inPlace {
		if pfi, err := fsys.Stat(c.parent); err == nil {
			d1, _, ok1 := fileIdentity(fi)
			d2, _, ok2 := fileIdentity(pfi)
			c.inPlace = ok1 && ok2 && d1 != d2 // a mount point
		}
	}
	ents, err := fsys.ReadDir(c.final)
	if isNotExist(err) {
		// Another Create swapped its store in and removed this directory
		// between the Stat and the read (the read of a removed directory
		// fails so): the path is as if looked at a moment later, when it
		// was gone. Whatever is there by publish time, publish sees.
		return nil
	}
	if err != nil {
		return wrapf(err, "create %s", c.final)
	}
	if len(ents) > 0 {
		cleared, err := clearUnfinished(fsys, c.final, ents, c.o)
		if err != nil {
			return err
		}
		if cleared {
			ents = nil
		}
	}
	if len(ents) == 0 {
		c.emptyDir = true
		return nil
	}
	hasMeta := false
	for _, e := range ents {
		hasMeta = hasMeta || e.Name() == metaName
	}
	switch {
	case !c.o.replace && hasMeta:
		return errf(ErrExists, "create %s: the directory holds a store (WithReplace replaces it)", c.final)
	case !c.o.replace:
		return errf(ErrExists, "create %s: directory not empty", c.final)
	case c.inPlace:
		if err := removePrevious(fsys, c.final, ents, c.o); err != nil {
			return err
		}
		c.emptyDir = true
		return nil
	}
	c.prev, err = lockPrevious(fsys, c.final, ents, c.o)
	return err
}

// makeStage makes the directory the store is built in and its meta.zr,
// open and locked: a new staging directory of the path, or the path itself
// in place.
func (c *creation) makeStage() error {
	fsys := c.fsys
	for attempt := 1; !c.inPlace; attempt++ {
		var b [stageDigits / 2]byte
		for i := range b {
			b[i] = byte(rand.Uint32())
		}
		c.suffix = hex.EncodeToString(b[:])
		stage := filepath.Join(c.stageDir, stagePrefix+c.suffix)
		if _, err := fsys.Stat(stage); err == nil {
			continue
		}
		if err := fsys.MkdirAll(stage, 0o755); err != nil {
			if c.emptyDir && c.prev == nil && errors.Is(err, os.ErrPermission) {
				c.inPlace = true // the parent is not ours to write
				break
			}
			if isNotExist(err) && attempt < stageAttempts {
				continue // a Create that finished removed stageDir meanwhile
			}
			return wrapf(err, "create %s: make %s", c.final, stage)
		}
		c.usedStageDir = true
		metaPath := filepath.Join(stage, metaName)
		meta, err := fsys.OpenFile(metaPath, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
		if err != nil {
			fsys.Remove(stage) // only if still empty: it may be another's now
			if (isNotExist(err) || errors.Is(err, os.ErrExist)) && attempt < stageAttempts {
				continue // a cleanup or a namesake took it
			}
			return wrapf(err, "create %s", metaPath)
		}
		ok, err := lockFile(meta)
		if err != nil {
			removeTree(fsys, stage, meta) // this Create's own, unlocked as it is
			return wrapf(err, "lock %s", metaPath)
		}
		if !ok || !stillAt(fsys, metaPath, meta) {
			// A cleanup locked it first and removes the directory.
			meta.Close()
			if attempt < stageAttempts {
				continue
			}
			return errf(ErrLocked, "create %s: the staging directory %s was taken %d times", c.final, stage, attempt)
		}
		c.stage, c.meta = stage, meta
		return nil
	}

	// In place, as before staging.
	c.stage = c.final
	if _, err := fsys.Stat(c.final); isNotExist(err) {
		if err := fsys.MkdirAll(c.final, 0o755); err != nil {
			return wrapf(err, "create %s", c.final)
		}
		c.madeFinal = true
	}
	metaPath := filepath.Join(c.final, metaName)
	meta, err := fsys.OpenFile(metaPath, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		if errors.Is(err, os.ErrExist) {
			return errf(ErrExists, "create %s", metaPath)
		}
		return wrapf(err, "create %s", metaPath)
	}
	c.meta = meta
	c.created = append(c.created, metaPath)
	if ok, err := lockFile(meta); err != nil {
		return wrapf(err, "lock %s", metaPath)
	} else if !ok {
		return errf(ErrLocked, "create %s", c.final)
	}
	return nil
}

// publishRefused reports whether err, from publishing the staged store
// when nothing was swapped yet, calls for building it in place instead:
// the path is a mount point that shares its parent's device (a bind mount,
// which the checks before could not see), or the parent refuses the
// rename into it while the path is an empty directory Create may write.
func (c *creation) publishRefused(err error) bool {
	if c.swap != swapNone {
		return false
	}
	return mountRefused(err) || c.emptyDir && c.prev == nil && errors.Is(err, os.ErrPermission)
}

// restartInPlace drops the staged store and builds it again in place,
// after the rename onto the path was refused (publishRefused).
func (c *creation) restartInPlace() error {
	removeTree(c.fsys, c.stage, c.meta)
	c.dropStageDir()
	c.meta, c.inPlace, c.created = nil, true, nil
	if c.prev != nil {
		c.prev.Close()
		c.prev = nil
		ents, err := c.fsys.ReadDir(c.final)
		if err != nil {
			return wrapf(err, "create %s", c.final)
		}
		if err := removePrevious(c.fsys, c.final, ents, c.o); err != nil {
			return err
		}
	}
	if err := c.makeStage(); err != nil {
		return err
	}
	return c.write()
}

// stillAt reports whether the file at p is f (where the file layer can
// tell: it cannot, unless both come from the operating system).
func stillAt(fsys FS, p string, f File) bool {
	ofi, err := f.Stat()
	if err != nil {
		return false
	}
	pfi, err := fsys.Stat(p)
	if err != nil {
		return false
	}
	d1, i1, ok1 := fileIdentity(ofi)
	d2, i2, ok2 := fileIdentity(pfi)
	return !ok1 || !ok2 || (d1 == d2 && i1 == i2)
}

// publish puts the staged store at the path and makes that durable.
func (c *creation) publish() error {
	if c.inPlace {
		return nil
	}
	fsys := c.fsys
	if c.prev != nil {
		err := exchange(fsys, c.stage, c.final)
		switch {
		case err == nil:
			c.swap = swapExchanged
		case errors.Is(err, errors.ErrUnsupported):
			c.trash = filepath.Join(c.stageDir, trashPrefix+c.suffix)
			if err := fsys.Rename(c.final, c.trash); err != nil {
				return wrapf(err, "create %s: move the previous store aside", c.final)
			}
			c.swap = swapOldMoved
			if err := fsys.Rename(c.stage, c.final); err != nil {
				if errors.Is(err, os.ErrExist) { // ENOTEMPTY too
					// Another Create put its store in the place this one
					// cleared: it replaced the previous store first.
					return errf(ErrExists, "create %s: made by another meanwhile: %v", c.final, err)
				}
				return wrapf(err, "create %s: rename %s", c.final, c.stage)
			}
			c.swap = swapBoth
		default:
			return wrapf(err, "create %s: swap in %s", c.final, c.stage)
		}
	} else {
		if err := fsys.Rename(c.stage, c.final); err != nil {
			if errors.Is(err, os.ErrExist) {
				return errf(ErrExists, "create %s: made by another meanwhile: %v", c.final, err)
			}
			return wrapf(err, "create %s: rename %s", c.final, c.stage)
		}
		c.swap = swapRenamed
	}
	if err := syncDir(fsys, c.parent); err != nil {
		return wrapf(err, "sync %s", c.parent)
	}
	// The rename took an entry out of stageDir too. Another Create of the
	// path may have removed stageDir since, if it was left empty.
	if err := syncDir(fsys, c.stageDir); err != nil && !isNotExist(err) {
		return wrapf(err, "sync %s", c.stageDir)
	}
	return nil
}

// exchange swaps a and b in one step, or fails with errors.ErrUnsupported
// where fsys cannot.
func exchange(fsys FS, a, b string) error {
	if x, ok := fsys.(exchanger); ok {
		return x.Exchange(a, b)
	}
	return &os.LinkError{Op: "exchange", Old: a, New: b, Err: errors.ErrUnsupported}
}

// finish removes the previous store of a replacing Create, once the new
// one is open, and the path's directory of staging directories if that is
// left empty. A failure leaves a trash or staging directory, which the
// next Create of the path clears.
func (c *creation) finish() {
	switch c.swap {
	case swapExchanged:
		removeTree(c.fsys, c.stage, c.prev)
	case swapBoth:
		removeTree(c.fsys, c.trash, c.prev)
	default:
		if c.prev != nil {
			c.prev.Close()
		}
	}
	c.prev = nil
	c.dropStageDir()
}

// dropStageDir removes the path's directory of staging directories if
// this Create found or made it and it is empty now. It fails, leaving it,
// while another Create of the path has its staging directory there.
func (c *creation) dropStageDir() {
	if c.usedStageDir {
		c.fsys.Remove(c.stageDir)
		c.usedStageDir = false
	}
}

// abandon undoes a Create that failed: it puts back what the path held
// and removes what the Create made. Every step is best effort: a failure
// leaves what the next Create of the path clears.
func (c *creation) abandon() {
	fsys := c.fsys
	undone := true
	switch c.swap {
	case swapRenamed:
		// stageDir may be gone, removed by another Create once this one's
		// rename left it empty.
		fsys.MkdirAll(c.stageDir, 0o755)
		undone = fsys.Rename(c.final, c.stage) == nil
		if undone && c.emptyDir {
			fsys.MkdirAll(c.final, 0o755)
		}
	case swapExchanged:
		undone = exchange(fsys, c.stage, c.final) == nil
	case swapOldMoved:
		undone = fsys.Rename(c.trash, c.final) == nil
	case swapBoth:
		undone = fsys.Rename(c.final, c.stage) == nil && fsys.Rename(c.trash, c.final) == nil
	}
	if c.swap != swapNone {
		syncDir(fsys, c.parent)
	}
	if c.prev != nil {
		c.prev.Close()
		c.prev = nil
	}
	switch {
	case !undone:
		// The path holds the new store (or nothing): leave it, and the
		// rest to the next Create.
		if c.meta != nil {
			c.meta.Close()
		}
	case c.inPlace:
		if c.meta != nil {
			c.meta.Close()
		}
		for i := len(c.created) - 1; i >= 0; i-- {
			fsys.Remove(c.created[i])
		}
		if c.madeFinal {
			fsys.Remove(c.final)
		}
	case c.meta != nil:
		removeTree(fsys, c.stage, c.meta)
	}
	c.meta = nil
	c.dropStageDir()
}

// clearLeftovers removes the staging and trash directories of earlier
// Creates of the path that are not in use (see the top of this file): in
// the path's directory of them, and, under the names of earlier releases,
// in a small parent. It reports whether the path itself is a symbolic
// link.
func (c *creation) clearLeftovers() (link bool) {
	fsys := c.fsys
	fi, lerr := lstat(fsys, c.final)
	beside, berr := readDirN(fsys, c.parent, oldScanLimit+1)
	whole := berr == nil && len(beside) <= oldScanLimit
	if errors.Is(lerr, errors.ErrUnsupported) || errors.Is(berr, errors.ErrUnsupported) {
		// A file layer that cannot look at one name, or at a few entries:
		// read the parent whole, as before.
		beside, berr = fsys.ReadDir(c.parent)
		whole = berr == nil
		for _, e := range beside {
			if e.Name() == c.base {
				link = e.Type()&os.ModeSymlink != 0
			}
		}
	} else if lerr == nil {
		link = fi.Mode()&os.ModeSymlink != 0
	}
	if whole {
		for _, e := range beside {
			if e.IsDir() && isOldSibling(e.Name(), c.base) {
				clearSibling(fsys, filepath.Join(c.parent, e.Name()))
			}
		}
	}
	ents, err := fsys.ReadDir(c.stageDir)
	if err != nil {
		return link // none (or not one to use: making the stage reports it)
	}
	c.usedStageDir = true
	for _, e := range ents {
		if e.IsDir() && isStaged(e.Name()) {
			clearSibling(fsys, filepath.Join(c.stageDir, e.Name()))
		}
	}
	return link
}

// clearSibling removes the staging or trash directory dir unless a live
// Create holds the lock on its meta.zr. A file layer without descriptors
// cannot tell, so it leaves such directories alone.
func clearSibling(fsys FS, dir string) {
	metaPath := filepath.Join(dir, metaName)
	f, err := fsys.OpenFile(metaPath, os.O_RDWR, 0)
	switch {
	case err == nil:
		if f.Fd() == NoFd {
			f.Close()
			return
		}
		if ok, err := lockFile(f); err != nil || !ok {
			f.Close()
			return
		}
		removeTree(fsys, dir, f)
	case isNotExist(err):
		// Empty (a Create between its mkdir and its meta.zr, which then
		// starts over, or one killed there), or a cleanup cut short.
		removeTree(fsys, dir, nil)
	}
}

// removeTree removes dir, a directory of store files, whose meta.zr lock
// holds open and locked: meta.zr first while the lock is held (where an
// open file can be removed), then the other files, then dir. A directory
// holding anything but regular files is left as it is. lock is closed in
// any case.
//
// With lock nil, dir is one without a meta.zr (the staging directory of a
// Create killed before it made one, or a cleanup cut short): its files are
// removed, then dir, unless a meta.zr is found in it, listed or looked up
// once more after the listing, which leaves dir as it is. A Create makes
// its meta.zr first, and only a holder of its lock removes it, so a file
// listed while no meta.zr was there is not one a live Create made, and a
// Create that makes its meta.zr after the look-up keeps dir from being
// removed, it not being empty.
func removeTree(fsys FS, dir string, lock File) error {
	closeLock := func() {
		if lock != nil {
			lock.Close()
			lock = nil
		}
	}
	defer closeLock()
	ents, err := fsys.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if !e.Type().IsRegular() {
			return errf(ErrExists, "%s holds %s, which is not a file of a store", dir, e.Name())
		}
	}
	metaPath := filepath.Join(dir, metaName)
	if lock == nil {
		_, err := fsys.Stat(metaPath)
		if !isNotExist(err) || slices.ContainsFunc(ents, func(e os.DirEntry) bool { return e.Name() == metaName }) {
			return errf(ErrLocked, "%s: a Create may be using it (it holds a %s)", dir, metaName)
		}
	} else if removeOpenFile {
		if err := fsys.Remove(metaPath); err != nil && !isNotExist(err) {
			return err
		}
	}
	for _, e := range ents {
		if e.Name() == metaName {
			continue
		}
		if err := fsys.Remove(filepath.Join(dir, e.Name())); err != nil && !isNotExist(err) {
			return err
		}
	}
	if lock != nil {
		closeLock()
		if err := fsys.Remove(metaPath); err != nil && !isNotExist(err) {
			return err
		}
	}
	return fsys.Remove(dir)
}
