package zrecord

import (
	"encoding/hex"
	"errors"
	"hash/fnv"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"unicode/utf8"
)

// A Create builds its store in a staging directory beside the final path
// and publishes it with one rename, so that the path never holds a store
// in the making: a process killed during a Create leaves at the path what
// was there before, and the staging directory beside it.
//
// The staging directory of a Create of .../NAME is .../.NAME.zrecord-create-
// followed by 16 hex digits (a NAME past 200 bytes is cut, and a hash of it
// appended, to keep the name within the file system's limit). Its meta.zr is the first file made in it, and
// the Create holds an flock on it (the store's writer lock) from then on,
// through the rename and for the life of the returned handle. A Create
// WithReplace that cannot swap the two directories in one step (below)
// first moves the previous store to .../.NAME.zrecord-trash- with the same
// digits. Every Create of a path first clears the staging and trash
// directories of earlier Creates of it whose meta.zr it can lock (or that
// have none and can be removed, being empty): those of a Create still
// running elsewhere stay, since their lock is held. Removing one starts
// with its meta.zr, under the lock, so a directory that is left with other
// files but no meta.zr is a cleanup cut short, which the next one finishes;
// a Create checks, once it holds its lock, that its meta.zr is still the
// one at its path, and starts over in a new directory if a cleanup removed
// it in between.
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
// writable. A Create in
// place writes the header last, so it never leaves a directory that looks
// like a store; what it leaves when cut short (store files only, and a
// meta.zr without a header) is recognised by the next Create of the path
// (clearUnfinished), which empties it: this covers the directories that
// Creates before staging left as well.

// Names of the directories beside a store's path.
const (
	stageTag    = ".zrecord-create-"
	trashTag    = ".zrecord-trash-"
	stageDigits = 16 // hex digits after the tag
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

// siblingName returns the name of the directory beside final of kind tag
// (stageTag or trashTag) with suffix.
func (c *creation) siblingName(tag, suffix string) string {
	return filepath.Join(c.parent, "."+siblingStem(c.base)+tag+suffix)
}

// maxStem keeps a sibling's name within the 255 bytes most file systems
// allow in one name: a dot, the stem, the tag and the digits.
const maxStem = 200

// siblingStem is the part of a sibling's name that stands for base: base
// itself, or, for a long one, its first bytes (cut at a character) and a
// hash of the whole, so that siblings of different long names differ.
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

// isSibling reports whether name is a staging or trash directory of a
// Create of a path called base.
func isSibling(name, base string) bool {
	for _, tag := range []string{stageTag, trashTag} {
		rest, ok := strings.CutPrefix(name, "."+siblingStem(base)+tag)
		if !ok || len(rest) != stageDigits {
			continue
		}
		if _, err := hex.DecodeString(rest); err == nil && strings.ToLower(rest) == rest {
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
// open and locked: a new sibling of the path, or the path itself in place.
func (c *creation) makeStage() error {
	fsys := c.fsys
	for attempt := 1; !c.inPlace; attempt++ {
		var b [stageDigits / 2]byte
		for i := range b {
			b[i] = byte(rand.Uint32())
		}
		c.suffix = hex.EncodeToString(b[:])
		stage := c.siblingName(stageTag, c.suffix)
		if _, err := fsys.Stat(stage); err == nil {
			continue
		}
		if err := fsys.MkdirAll(stage, 0o755); err != nil {
			if c.emptyDir && c.prev == nil && errors.Is(err, os.ErrPermission) {
				c.inPlace = true // the parent is not ours to write
				break
			}
			return wrapf(err, "create %s: make %s", c.final, stage)
		}
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
			meta.Close()
			removeTree(fsys, stage, nil)
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

// restartInPlace drops the staged store and builds it again in place,
// after the rename onto the path failed because the path is a mount point.
func (c *creation) restartInPlace() error {
	removeTree(c.fsys, c.stage, c.meta)
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
			c.trash = c.siblingName(trashTag, c.suffix)
			if err := fsys.Rename(c.final, c.trash); err != nil {
				return wrapf(err, "create %s: move the previous store aside", c.final)
			}
			c.swap = swapOldMoved
			if err := fsys.Rename(c.stage, c.final); err != nil {
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
// one is open. A failure leaves a trash or staging directory, which the
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
}

// abandon undoes a Create that failed: it puts back what the path held
// and removes what the Create made. Every step is best effort: a failure
// leaves what the next Create of the path clears.
func (c *creation) abandon() {
	fsys := c.fsys
	undone := true
	switch c.swap {
	case swapRenamed:
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
}

// clearLeftovers removes the staging and trash directories of earlier
// Creates of the path that are not in use (see the top of this file). It
// reports whether the path itself is a symbolic link.
func (c *creation) clearLeftovers() (link bool) {
	ents, err := c.fsys.ReadDir(c.parent)
	if err != nil {
		return false
	}
	for _, e := range ents {
		name := e.Name()
		if name == c.base {
			link = e.Type()&os.ModeSymlink != 0
			continue
		}
		if e.IsDir() && isSibling(name, c.base) {
			clearSibling(c.fsys, filepath.Join(c.parent, name))
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
// holds open and locked (or nil): meta.zr first while the lock is held
// (where an open file can be removed), then the other files, then dir. A
// directory holding anything but regular files is left as it is. lock is
// closed in any case.
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
	if lock != nil && removeOpenFile {
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
	closeLock()
	if err := fsys.Remove(metaPath); err != nil && !isNotExist(err) {
		return err
	}
	return fsys.Remove(dir)
}

// clearUnfinished empties dir, which holds ents, if they are what a Create
// built in place leaves when cut short: a meta.zr without a header (empty,
// or zero bytes, at most a header long), empty first chunk and table files,
// a dictionary, and files this Create names with WithFile. It reports
// whether it did; ErrLocked means such a Create is still running.
func clearUnfinished(fsys FS, dir string, ents []os.DirEntry, o *options) (bool, error) {
	hasMeta := false
	for _, e := range ents {
		name := e.Name()
		if !e.Type().IsRegular() {
			return false, nil
		}
		switch {
		case name == metaName:
			hasMeta = true
			b, ok := readSmall(fsys, filepath.Join(dir, name), headerSize)
			if !ok || strings.Trim(string(b), "\x00") != "" {
				return false, nil
			}
		case name == chunkName(0) || name == layoutV4.segName(0):
			if fi, err := e.Info(); err != nil || fi.Size() != 0 {
				return false, nil
			}
		case name == dictName:
		case o.namedFile(name):
		default:
			return false, nil
		}
	}
	if !hasMeta {
		return false, nil
	}
	metaPath := filepath.Join(dir, metaName)
	meta, err := fsys.OpenFile(metaPath, os.O_RDWR, 0)
	if err != nil {
		return false, wrapf(err, "create %s: open %s", dir, metaPath)
	}
	if ok, err := lockFile(meta); err != nil {
		meta.Close()
		return false, wrapf(err, "lock %s", metaPath)
	} else if !ok {
		meta.Close()
		return false, errf(ErrLocked, "create %s: another Create of it is running", dir)
	}
	for _, e := range ents {
		if e.Name() == metaName {
			continue
		}
		p := filepath.Join(dir, e.Name())
		if err := fsys.Remove(p); err != nil && !isNotExist(err) {
			meta.Close()
			return false, wrapf(err, "create %s: remove %s", dir, p)
		}
	}
	// meta.zr last, so that a removal cut short is recognised again.
	if removeOpenFile {
		err = fsys.Remove(metaPath)
		meta.Close()
	} else {
		meta.Close()
		err = fsys.Remove(metaPath)
	}
	if err != nil && !isNotExist(err) {
		return false, wrapf(err, "create %s: remove %s", dir, metaPath)
	}
	return true, nil
}

// namedFile reports whether name is one of o's WithFile names.
func (o *options) namedFile(name string) bool {
	for _, f := range o.files {
		if f.name == name {
			return true
		}
	}
	return false
}

// readSmall reads the file at p if it holds at most max bytes.
func readSmall(fsys FS, p string, max int) ([]byte, bool) {
	f, err := fsys.OpenFile(p, os.O_RDONLY, 0)
	if err != nil {
		return nil, false
	}
	defer f.Close()
	size, err := fileSize(f)
	if err != nil || size > int64(max) {
		return nil, false
	}
	b := make([]byte, size)
	if err := readFull(f, b, 0); err != nil {
		return nil, false
	}
	return b, true
}
