package zrecord

import (
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
// The store appears at dir whole or not at all: Create builds it in a
// hidden directory beside dir (in .NAME.zrecord-stage, NAME being dir's
// last element) and renames that onto dir once every file is written and
// fsynced (staging.go has the details, including what a Create
// cut short leaves and how the next Create of dir clears it). A replaced
// store stays readable until the new one takes its place. A Create that
// fails removes what it made.
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

	c := &creation{fsys: o.fs, o: &o, final: dir}
	defer func() {
		if r := recover(); r != nil {
			c.abandon()
			panic(r) // for recoverTo
		}
		if err != nil {
			c.abandon()
		}
	}()
	if err := c.inspect(); err != nil {
		return nil, err
	}
	if err := c.makeStage(); err != nil {
		return nil, err
	}
	if err := c.write(); err != nil {
		return nil, err
	}
	if err := c.publish(); err != nil {
		if !c.publishRefused(err) {
			return nil, err
		}
		if err := c.restartInPlace(); err != nil {
			return nil, err
		}
	}
	if s, err = load(dir, o, c.meta); err != nil {
		return nil, err
	}
	c.meta = nil // the store's now
	c.finish()
	return s, nil
}

// write writes the store's files into c.stage, whose meta.zr c.meta is
// open and locked: the dictionary, the first chunk and table segment and
// the WithFile files, each fsynced, then the header of meta.zr, fsynced,
// then the directory's entries.
func (c *creation) write() error {
	fsys, o := c.fsys, c.o
	newFile := func(name string, content []byte) error {
		p := filepath.Join(c.stage, name)
		f, err := fsys.OpenFile(p, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
		if err != nil {
			return wrapf(err, "create %s", p)
		}
		c.created = append(c.created, p)
		return writeSyncClose(f, p, content)
	}
	if o.codec == ZstdDict {
		if err := newFile(dictName, o.dict); err != nil {
			return err
		}
	}
	if err := newFile(chunkName(0), nil); err != nil {
		return err
	}
	if err := newFile(layoutV4.segName(0), nil); err != nil {
		return err
	}
	for _, f := range o.files {
		if err := newFile(f.name, f.data); err != nil {
			return err
		}
	}
	// The header goes last: a directory whose meta.zr lacks the magic is
	// not a store, so a Create built in place and cut short never looks
	// like one (and one built beside dir is not at dir yet).
	metaPath := filepath.Join(c.stage, metaName)
	h := header{version: headerVersion(o.codec), codec: o.codec}
	if o.codec == ZstdDict {
		h.dictSum = dataSum(o.dict)
	}
	if o.codec == Narrow {
		h.elem = o.elem
	}
	hb := h.encode()
	if err := writeFull(c.meta, hb[:], 0); err != nil {
		return wrapf(err, "write %s", metaPath)
	}
	if err := c.meta.Sync(); err != nil {
		return wrapf(err, "sync %s", metaPath)
	}
	if err := syncDir(fsys, c.stage); err != nil {
		return wrapf(err, "sync %s", c.stage)
	}
	return nil
}

// lockPrevious checks that dir, which holds ents, is a store that a Create
// WithReplace may replace (see WithReplace for what it accepts) and returns
// its meta.zr, open and locked, so that no writer opens it while the new
// store is made.
func lockPrevious(fsys FS, dir string, ents []os.DirEntry, o *options) (File, error) {
	if !slices.ContainsFunc(ents, func(e os.DirEntry) bool { return e.Name() == metaName }) {
		return nil, errf(ErrExists, "create %s: the directory holds no %s, so it is not a store to replace", dir, metaName)
	}
	for _, e := range ents {
		if name := e.Name(); !e.Type().IsRegular() || !(isStoreFile(name) || o.companion(name)) {
			return nil, errf(ErrExists, "create %s: %s is not a file of a store, so the directory is not replaced", dir, name)
		}
	}
	metaPath := filepath.Join(dir, metaName)
	meta, err := fsys.OpenFile(metaPath, os.O_RDWR, 0)
	if err != nil {
		return nil, wrapf(err, "create %s: open the previous %s", dir, metaPath)
	}
	if ok, err := lockFile(meta); err != nil {
		meta.Close()
		return nil, wrapf(err, "lock %s", metaPath)
	} else if !ok {
		meta.Close()
		return nil, errf(ErrLocked, "create %s: replace the previous store", dir)
	}
	return meta, nil
}

// removePrevious empties dir, which holds ents, of the store it holds, for
// a Create WithReplace that builds in place (staging.go). It holds the
// previous store's lock while it removes, and removes meta.zr last, so a
// removal cut short leaves a directory it accepts again.
func removePrevious(fsys FS, dir string, ents []os.DirEntry, o *options) error {
	meta, err := lockPrevious(fsys, dir, ents, o)
	if err != nil {
		return err
	}
	closed := false
	defer func() {
		if !closed {
			meta.Close()
		}
	}()
	metaPath := filepath.Join(dir, metaName)
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
