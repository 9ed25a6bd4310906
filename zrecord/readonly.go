package zrecord

import (
	"errors"
	"fmt"
	"os"
)

// What a read-only handle does that a writable one cannot, so that a Set
// can keep thousands of them open: it gives up its file descriptors once
// its files are mapped (WithReleaseFiles; mmap.go maps its files at the
// size it reads), and it remembers what it saw of the store (its
// identity), which a Set compares when it opens the store again after
// closing it.

// storeIdentity is what a handle saw of its store when it opened it: the
// meta.zr file it read (device and inode, where the system has them) and
// the header's fields. A store that was replaced while a Set had it closed
// (a new store at the path: Create and its replacement make a new meta.zr)
// or changed (another length, frontier, codec or dictionary) shows another
// identity when the Set opens it again, and its records then cannot be the
// ones the Set's callers were sized by. Open reads no table entry for it: a
// checksummed store's Open touches none of its table (see loadFiles).
type storeIdentity struct {
	dev, ino uint64
	hasFile  bool // dev and ino are known
	// mtime is meta.zr's modification time (ns): a file system may give a
	// new file the inode number of one just removed, so a store removed and
	// written again at the same path can have its predecessor's dev, inode
	// and header; its header was written at another time.
	mtime   int64
	version uint8
	codec   Codec
	tail    position
	length  int64
	dictSum uint32
}

// noteIdentity completes s.ident (the file's part is taken when meta.zr is
// read) with the header's fields.
func (s *Store) noteIdentity() {
	id := &s.ident
	id.version, id.codec, id.tail, id.dictSum = s.lay.version, s.codec, s.tail, s.dictSum
	id.length = s.length.Load()
}

// differs says how b, the identity of a store opened again, differs from
// a, the one it had when it was first opened; "" when it does not.
func (a storeIdentity) differs(b storeIdentity) string {
	switch {
	case a.hasFile && b.hasFile && (a.dev != b.dev || a.ino != b.ino):
		return fmt.Sprintf("its %s is another file (inode %d, first opened as inode %d)", metaName, b.ino, a.ino)
	case a.mtime != b.mtime:
		return fmt.Sprintf("its %s was written again (modified at %d ns, first opened when modified at %d ns)", metaName, b.mtime, a.mtime)
	case a.length != b.length:
		return fmt.Sprintf("it holds %d records, %d when first opened", b.length, a.length)
	case a.version != b.version || a.codec != b.codec || a.tail != b.tail || a.dictSum != b.dictSum:
		return fmt.Sprintf("its header changed (version %d, codec %s, frontier %d:%d; first opened with version %d, codec %s, frontier %d:%d)",
			b.version, b.codec, b.tail.chunk, b.tail.off, a.version, a.codec, a.tail.chunk, a.tail.off)
	}
	return ""
}

// errReleased is what a released file's methods return; no read path of a
// read-only handle reaches one, since a file is released only once it is
// mapped.
var errReleased = errors.New("file released: the read-only handle reads it through its mapping")

// releasedFile stands for a file a read-only handle has closed.
type releasedFile struct{}

func (releasedFile) ReadAt([]byte, int64) (int, error)  { return 0, errReleased }
func (releasedFile) WriteAt([]byte, int64) (int, error) { return 0, errReleased }
func (releasedFile) Truncate(int64) error               { return errReleased }
func (releasedFile) Sync() error                        { return errReleased }
func (releasedFile) Close() error                       { return nil }
func (releasedFile) Stat() (os.FileInfo, error)         { return nil, errReleased }
func (releasedFile) Fd() uintptr                        { return NoFd }

// releaseFiles closes meta.zr and every mapped chunk file and table
// segment of a read-only handle that has finished opening: from then on
// it reads them through their mappings alone. A file that is not mapped
// stays open. A failed close loses nothing (the mapping holds the file),
// so it is not reported.
func (s *Store) releaseFiles() {
	if s.meta != nil {
		_ = s.meta.Close()
		s.meta = nil
	}
	for _, c := range *s.chunks.Load() {
		if c.bytes() != nil {
			_ = c.f.Close()
			c.f = releasedFile{}
		}
	}
	for _, g := range *s.segs.Load() {
		if g.bytes() != nil {
			_ = g.f.Close()
			g.f = releasedFile{}
		}
	}
}
