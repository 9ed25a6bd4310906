package zrecord

import (
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
)

// Create makes a new store in dir, which must not exist or be an empty
// directory (else ErrExists; WithReplace lets it replace a previous store).
// Options: WithCodec, WithDict (required for ZstdDict), WithDictTier,
// WithChunkCapacity, WithFS, WithFile, WithReplace. The returned handle is
// writable and holds the store's lock.
//
// The files are made in an order that never leaves a store half made: the
// dictionary, the first chunk and table segment and the WithFile files are
// written and fsynced first, the header of meta.zr last, and then the
// directory is fsynced. A directory whose meta.zr lacks the header is not a
// store, and a Create that fails removes what it made.
func Create(dir string, opts ...Option) (s *Store, err error) {
	defer recoverTo(&err, "create "+dir)
	o := buildOptions(opts)
	if err := o.validateCommon(); err != nil {
		return nil, err
	}
	if err := o.validateCreate(dir); err != nil {
		return nil, err
	}
	if o.readOnly {
		return nil, errf(ErrInvalidArgument, "create %s: WithReadOnly is for Open", dir)
	}
	if !o.codec.valid() {
		return nil, errf(ErrInvalidArgument, "create %s: %v", dir, o.codec)
	}
	if o.codec == ZstdDict {
		if len(o.dict) == 0 {
			return nil, errf(ErrMissingDict, "create %s: codec zstd_dict needs WithDict", dir)
		}
		if err := checkDict(o.dict); err != nil {
			return nil, fmt.Errorf("zrecord: create %s: %w", dir, err)
		}
	} else if len(o.dict) > 0 {
		return nil, errf(ErrInvalidArgument, "create %s: WithDict given for codec %v", dir, o.codec)
	}
	if o.elemSet && o.codec != Narrow {
		return nil, errf(ErrInvalidArgument, "create %s: WithElement given for codec %v (it is for narrow)", dir, o.codec)
	}
	if o.codec == Narrow && !o.elem.valid() {
		return nil, errf(ErrInvalidArgument, "create %s: WithElement(%d, %v): the size must be 1, 2, 4 or 8 bytes", dir, o.elem.Size, o.elem.Signed)
	}
	fsys := o.fs
	madeDir := false
	if fi, err := fsys.Stat(dir); err == nil {
		if !fi.IsDir() {
			return nil, errf(ErrExists, "create %s: not a directory", dir)
		}
		ents, err := fsys.ReadDir(dir)
		if err != nil {
			return nil, wrapf(err, "create %s", dir)
		}
		if len(ents) > 0 && !o.replace {
			return nil, errf(ErrExists, "create %s: directory not empty", dir)
		}
		if len(ents) > 0 {
			if err := removePrevious(fsys, dir, ents, &o); err != nil {
				return nil, err
			}
		}
	} else if isNotExist(err) {
		if err := fsys.MkdirAll(dir, 0o755); err != nil {
			return nil, wrapf(err, "create %s", dir)
		}
		madeDir = true
	} else {
		return nil, wrapf(err, "create %s", dir)
	}

	// A failed Create removes what it made (a directory only if it made it).
	var created []string
	if madeDir {
		created = append(created, dir)
	}
	var meta File
	defer func() {
		if err != nil {
			if meta != nil {
				meta.Close()
			}
			for i := len(created) - 1; i >= 0; i-- {
				fsys.Remove(created[i])
			}
		}
	}()
	metaPath := filepath.Join(dir, metaName)
	meta, err = fsys.OpenFile(metaPath, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		meta = nil
		if errors.Is(err, os.ErrExist) {
			return nil, errf(ErrExists, "create %s", metaPath)
		}
		return nil, wrapf(err, "create %s", metaPath)
	}
	created = append(created, metaPath)
	if ok, err := lockFile(meta); err != nil {
		return nil, wrapf(err, "lock %s", metaPath)
	} else if !ok {
		return nil, errf(ErrLocked, "create %s", dir)
	}
	newFile := func(name string, content []byte) error {
		p := filepath.Join(dir, name)
		f, err := fsys.OpenFile(p, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
		if err != nil {
			return wrapf(err, "create %s", p)
		}
		created = append(created, p)
		return writeSyncClose(f, p, content)
	}
	if o.codec == ZstdDict {
		if err := newFile(dictName, o.dict); err != nil {
			return nil, err
		}
	}
	if err := newFile(chunkName(0), nil); err != nil {
		return nil, err
	}
	if err := newFile(layoutV4.segName(0), nil); err != nil {
		return nil, err
	}
	for _, f := range o.files {
		if err := newFile(f.name, f.data); err != nil {
			return nil, err
		}
	}
	// The header goes last: a directory whose meta.zr lacks the magic is
	// not a store, so a Create cut short never looks like one.
	h := header{version: headerVersion(o.codec), codec: o.codec}
	if o.codec == ZstdDict {
		h.dictSum = dataSum(o.dict)
	}
	if o.codec == Narrow {
		h.elem = o.elem
	}
	hb := h.encode()
	if err := writeFull(meta, hb[:], 0); err != nil {
		return nil, wrapf(err, "write %s", metaPath)
	}
	if err := meta.Sync(); err != nil {
		return nil, wrapf(err, "sync %s", metaPath)
	}
	if err := syncDir(fsys, dir); err != nil {
		return nil, wrapf(err, "sync %s", dir)
	}
	return load(dir, o, meta)
}

// removePrevious empties dir, which holds ents, of the store it holds, for
// a Create WithReplace: see WithReplace for what it accepts. It holds the
// previous store's lock while it removes, and removes meta.zr last, so a
// removal cut short leaves a directory it accepts again.
func removePrevious(fsys FS, dir string, ents []os.DirEntry, o *options) error {
	if !slices.ContainsFunc(ents, func(e os.DirEntry) bool { return e.Name() == metaName }) {
		return errf(ErrExists, "create %s: the directory holds no %s, so it is not a store to replace", dir, metaName)
	}
	for _, e := range ents {
		if name := e.Name(); !e.Type().IsRegular() || !(isStoreFile(name) || o.companion(name)) {
			return errf(ErrExists, "create %s: %s is not a file of a store, so the directory is not replaced", dir, name)
		}
	}
	metaPath := filepath.Join(dir, metaName)
	meta, err := fsys.OpenFile(metaPath, os.O_RDWR, 0)
	if err != nil {
		return wrapf(err, "create %s: open the previous %s", dir, metaPath)
	}
	closed := false
	defer func() {
		if !closed {
			meta.Close()
		}
	}()
	if ok, err := lockFile(meta); err != nil {
		return wrapf(err, "lock %s", metaPath)
	} else if !ok {
		return errf(ErrLocked, "create %s: replace the previous store", dir)
	}
	for _, e := range ents {
		if e.Name() == metaName {
			continue
		}
		p := filepath.Join(dir, e.Name())
		if err := fsys.Remove(p); err != nil && !isNotExist(err) {
			return wrapf(err, "create %s: remove %s", dir, p)
		}
	}
	// Close (and so unlock) meta.zr before removing it: Windows refuses to
	// remove an open file. Every other file of the store is gone by now, so
	// a writer that opens the old store in between finds it unusable.
	closed = true
	if err := meta.Close(); err != nil {
		return wrapf(err, "create %s: close %s", dir, metaPath)
	}
	if err := fsys.Remove(metaPath); err != nil && !isNotExist(err) {
		return wrapf(err, "create %s: remove %s", dir, metaPath)
	}
	return nil
}

// companion reports whether a file called name may sit beside a store that
// Create replaces: one named by WithFile or matched by a WithReplace pattern.
func (o *options) companion(name string) bool {
	for _, f := range o.files {
		if f.name == name {
			return true
		}
	}
	for _, p := range o.keep {
		if ok, _ := path.Match(p, name); ok {
			return true
		}
	}
	return false
}
