package zrecord

import (
	"os"
	"path/filepath"
	"strings"
)

// What a Create built in place leaves when cut short, which the next
// Create of the path recognises and clears (staging.go).

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
