// Package faultfs is a zrecord.FS that wraps another FS and injects faults:
// a failure or a simulated crash at the k-th mutating operation, and a disk
// that fills up after a byte budget.
//
// Mutating operations are counted in the order they reach the file system:
// File.WriteAt, File.Truncate, File.Sync, FS.Rename, FS.Exchange, FS.Remove,
// FS.MkdirAll and FS.OpenFile with O_CREATE, O_TRUNC or O_APPEND. Reads,
// Stat, Lstat, ReadDir, ReadDirN and Close are not counted.
//
// After a simulated crash every further operation on the FS and on every
// file opened through it fails with ErrCrashed, as if the process had died
// at that point; CloseAll then releases the underlying descriptors (and any
// lock held through them), which is what process exit does. PowerCut goes
// further and also loses writes that no Sync made durable.
//
// Reads through a memory mapping of File.Fd bypass the wrapper; HideFd makes
// files report zrecord.NoFd so that a store reads through ReadAt.
package faultfs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"

	"github.com/loaderx/loaderx/zrecord"
)

var (
	// ErrInjected is the error returned by an operation that was made to fail.
	ErrInjected = errors.New("faultfs: injected fault")
	// ErrCrashed is returned by every operation after a simulated crash.
	ErrCrashed = errors.New("faultfs: file system crashed")
)

// Mode selects what happens at the armed operation.
type Mode int

const (
	// Fail makes the armed operation fail without effect; later operations
	// proceed normally.
	Fail Mode = iota
	// Crash makes the armed operation fail without effect and every later
	// operation fail with ErrCrashed.
	Crash
	// TornCrash is Crash, except that an armed WriteAt first writes a prefix
	// of its buffer: the whole 512-byte sectors of its first half, as a
	// process killed inside a large pwrite may leave. Writes shorter than
	// two sectors are not torn (they are performed not at all).
	TornCrash
)

func (m Mode) String() string {
	switch m {
	case Fail:
		return "fail"
	case Crash:
		return "crash"
	case TornCrash:
		return "torn-crash"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// Op describes one mutating operation.
type Op struct {
	Kind string // "write", "truncate", "sync", "rename", "exchange", "remove", "mkdir", "create"
	Path string // the file (for rename and exchange: the first name)
	To   string // rename target, or the other name of an exchange
	Off  int64  // write offset, truncate size
	N    int    // bytes requested by a write
}

func (o Op) String() string {
	switch o.Kind {
	case "write":
		return fmt.Sprintf("write %s @%d+%d", o.Path, o.Off, o.N)
	case "truncate":
		return fmt.Sprintf("truncate %s to %d", o.Path, o.Off)
	case "rename":
		return fmt.Sprintf("rename %s -> %s", o.Path, o.To)
	case "exchange":
		return fmt.Sprintf("exchange %s <-> %s", o.Path, o.To)
	}
	return o.Kind + " " + o.Path
}

// FS is a fault-injecting zrecord.FS. The zero value is not usable; call New.
type FS struct {
	base zrecord.FS

	mu      sync.Mutex
	count   int // mutating operations since the last Arm or Reset
	armAt   int // 1-based index of the operation to fault; 0: none
	mode    Mode
	fired   bool // the armed fault happened
	crashed bool
	space   int64 // bytes still writable; <0: unlimited
	short   bool  // on ENOSPC, write what fits first
	full    bool  // an ENOSPC was returned
	last    Op    // the operation that faulted (injected or ENOSPC)
	hasLast bool
	faults  []Op // every operation that faulted, in order
	log     []Op
	keepLog bool
	hideFd  bool // Fd reports zrecord.NoFd
	noExch  bool // Exchange reports errors.ErrUnsupported
	open    map[*file]struct{}

	// With durability tracking on, unsynced maps each file written since
	// its last Sync to its last synced content and the writes since.
	track    bool
	unsynced map[string]*pending
}

// pending is a file's durable content and the writes not yet synced.
type pending struct {
	base   []byte
	exists bool
	ops    []pendingOp
}

type pendingOp struct {
	truncate bool
	off      int64 // write offset, or truncate size
	data     []byte
}

// New wraps base. With no fault armed and no space limit it only counts.
func New(base zrecord.FS) *FS {
	return &FS{base: base, space: -1, open: make(map[*file]struct{})}
}

var _ zrecord.FS = (*FS)(nil)

// Arm makes the k-th mutating operation from now (k ≥ 1) fault in the given
// mode and resets the operation counter. k ≤ 0 disarms.
func (f *FS) Arm(k int, mode Mode) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.count = 0
	f.armAt = k
	f.mode = mode
	f.fired = false
}

// Reset disarms, clears the counter, the log, the space limit and the crash.
func (f *FS) Reset() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.count, f.armAt, f.fired, f.crashed = 0, 0, false, false
	f.space, f.short, f.full = -1, false, false
	f.hasLast = false
	f.faults = nil
	f.log = nil
}

// SectorSize is the unit a torn write is cut at.
const SectorSize = 512

// SetSpaceLimit lets files grow by at most n more bytes through WriteAt (n <
// 0: unlimited). Overwriting bytes a file already has needs no space, as on
// a real file system. A write that would grow a file past the limit fails
// with ENOSPC (wrapped in an *os.PathError naming the file); with short set
// it first writes the part that fits and reports that count.
func (f *FS) SetSpaceLimit(n int64, short bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.space, f.short, f.full = n, short, false
}

// TrackDurability starts (or stops) remembering, for every file, the content
// it had at its last Sync and the writes since, for PowerCut.
func (f *FS) TrackDurability(on bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.track = on
	f.unsynced = make(map[string]*pending)
}

// noteWrite records a performed write or truncate of h's file (f.mu held).
func (f *FS) noteWrite(h *file, op pendingOp) {
	if !f.track {
		return
	}
	p := f.unsynced[h.name]
	if p == nil {
		p = &pending{}
		// The content before this first unsynced change is durable.
		if fi, err := h.base.Stat(); err == nil {
			p.exists = true
			p.base = make([]byte, fi.Size())
			n, _ := h.base.ReadAt(p.base, 0)
			p.base = p.base[:n]
		}
		f.unsynced[h.name] = p
	}
	p.ops = append(p.ops, op)
}

// PowerCut simulates losing power: it closes every file (as CloseAll) and
// rewrites each file changed since its last Sync to its synced content plus
// those unsynced writes for which keep returns true, in their order (a
// page cache may have written back any of them). Directory changes are
// taken as durable. It needs TrackDurability.
func (f *FS) PowerCut(keep func(path string, i int) bool) error {
	f.mu.Lock()
	f.crashed = true
	files := f.unsynced
	f.unsynced = make(map[string]*pending)
	f.mu.Unlock()
	if err := f.CloseAll(); err != nil {
		return err
	}
	for path, p := range files {
		if _, err := f.base.Stat(path); err != nil {
			continue // removed since (directory changes are durable)
		}
		content := append([]byte(nil), p.base...)
		for i, op := range p.ops {
			if !keep(path, i) {
				continue
			}
			if op.truncate {
				if op.off <= int64(len(content)) {
					content = content[:op.off]
				} else {
					content = append(content, make([]byte, op.off-int64(len(content)))...)
				}
				continue
			}
			if end := op.off + int64(len(op.data)); end > int64(len(content)) {
				content = append(content, make([]byte, end-int64(len(content)))...)
			}
			copy(content[op.off:], op.data)
		}
		h, err := f.base.OpenFile(path, os.O_RDWR|os.O_TRUNC, 0)
		if err != nil {
			return err
		}
		_, werr := h.WriteAt(content, 0)
		if len(content) == 0 {
			werr = nil
		}
		cerr := h.Close()
		if werr != nil {
			return werr
		}
		if cerr != nil {
			return cerr
		}
	}
	return nil
}

// HideFd makes every file report zrecord.NoFd from Fd, so that a store reads
// through ReadAt (and sees read faults) instead of mapping the descriptor.
func (f *FS) HideFd(on bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.hideFd = on
}

// NoExchange makes Exchange fail with errors.ErrUnsupported (without
// counting an operation), as on a system that cannot swap two paths in one
// step, so that callers take their fallback.
func (f *FS) NoExchange(on bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.noExch = on
}

// KeepLog starts (or stops) recording every mutating operation.
func (f *FS) KeepLog(on bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.keepLog = on
	f.log = nil
}

// Log returns the recorded operations.
func (f *FS) Log() []Op {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Op(nil), f.log...)
}

// Count is the number of mutating operations since the last Arm or Reset.
func (f *FS) Count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.count
}

// Fired reports whether the armed fault happened.
func (f *FS) Fired() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.fired
}

// Crashed reports whether a simulated crash happened.
func (f *FS) Crashed() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.crashed
}

// Full reports whether a write failed with ENOSPC.
func (f *FS) Full() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.full
}

// LastFault returns the operation that last faulted.
func (f *FS) LastFault() (Op, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.last, f.hasLast
}

// Faults returns every operation that faulted since New or Reset, in
// order: with several goroutines writing, each may meet a fault of its own.
func (f *FS) Faults() []Op {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Op(nil), f.faults...)
}

// OpenFiles is the number of files opened through f and not yet closed.
func (f *FS) OpenFiles() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.open)
}

// CloseAll closes every underlying file still open, as process exit would.
func (f *FS) CloseAll() error {
	f.mu.Lock()
	files := make([]*file, 0, len(f.open))
	for h := range f.open {
		files = append(files, h)
	}
	f.open = make(map[*file]struct{})
	f.mu.Unlock()
	var first error
	for _, h := range files {
		if err := h.closeBase(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// step accounts for one mutating operation. It returns a non-nil error when
// the operation must not be performed; torn is set when a crashing write
// should write a prefix first.
func (f *FS) step(op Op) (torn bool, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.crashed {
		return false, ErrCrashed
	}
	f.count++
	if f.keepLog {
		f.log = append(f.log, op)
	}
	if f.armAt > 0 && f.count == f.armAt {
		f.fired = true
		f.last, f.hasLast = op, true
		f.faults = append(f.faults, op)
		switch f.mode {
		case Crash:
			f.crashed = true
		case TornCrash:
			f.crashed = true
			return op.Kind == "write", ErrCrashed
		}
		return false, ErrInjected
	}
	return false, nil
}

func (f *FS) alive() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.crashed {
		return ErrCrashed
	}
	return nil
}

func pathErr(op, path string, err error) error {
	return &os.PathError{Op: op, Path: path, Err: err}
}

// OpenFile implements zrecord.FS.
func (f *FS) OpenFile(name string, flag int, perm os.FileMode) (zrecord.File, error) {
	if flag&(os.O_CREATE|os.O_TRUNC|os.O_APPEND) != 0 {
		if _, err := f.step(Op{Kind: "create", Path: name}); err != nil {
			return nil, pathErr("open", name, err)
		}
	} else if err := f.alive(); err != nil {
		return nil, pathErr("open", name, err)
	}
	bf, err := f.base.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	h := &file{fs: f, base: bf, name: name}
	f.mu.Lock()
	f.open[h] = struct{}{}
	f.mu.Unlock()
	return h, nil
}

// Remove implements zrecord.FS.
func (f *FS) Remove(name string) error {
	if _, err := f.step(Op{Kind: "remove", Path: name}); err != nil {
		return pathErr("remove", name, err)
	}
	if err := f.base.Remove(name); err != nil {
		return err
	}
	f.mu.Lock()
	if f.track {
		delete(f.unsynced, name)
	}
	f.mu.Unlock()
	return nil
}

// Rename implements zrecord.FS.
func (f *FS) Rename(oldname, newname string) error {
	if _, err := f.step(Op{Kind: "rename", Path: oldname, To: newname}); err != nil {
		return &os.LinkError{Op: "rename", Old: oldname, New: newname, Err: err}
	}
	if err := f.base.Rename(oldname, newname); err != nil {
		return err
	}
	f.mu.Lock()
	// The data moves with the name (a directory's files with it); what
	// replaced newname is gone.
	f.moveNames(func(p string) (string, bool) { return under(p, newname, "") })
	f.moveNames(func(p string) (string, bool) { return under(p, oldname, newname) })
	f.mu.Unlock()
	return nil
}

// exchanger is a file layer that swaps two paths in one step.
type exchanger interface {
	Exchange(a, b string) error
}

// Exchange swaps a and b in one step, if the wrapped FS can (an operation
// like Rename); it fails with errors.ErrUnsupported, uncounted, if the
// wrapped FS has no Exchange or NoExchange is on.
func (f *FS) Exchange(a, b string) error {
	x, ok := f.base.(exchanger)
	f.mu.Lock()
	no := f.noExch
	f.mu.Unlock()
	if !ok || no {
		if err := f.alive(); err != nil {
			return &os.LinkError{Op: "exchange", Old: a, New: b, Err: err}
		}
		return &os.LinkError{Op: "exchange", Old: a, New: b, Err: errors.ErrUnsupported}
	}
	if _, err := f.step(Op{Kind: "exchange", Path: a, To: b}); err != nil {
		return &os.LinkError{Op: "exchange", Old: a, New: b, Err: err}
	}
	if err := x.Exchange(a, b); err != nil {
		return err
	}
	f.mu.Lock()
	const mid = "\x00exchange" // a name no path has
	f.moveNames(func(p string) (string, bool) { return under(p, a, mid) })
	f.moveNames(func(p string) (string, bool) { return under(p, b, a) })
	f.moveNames(func(p string) (string, bool) { return under(p, mid, b) })
	f.mu.Unlock()
	return nil
}

// under reports whether p is dir or a path inside it, and returns p moved
// from dir to to (to == "": dropped).
func under(p, dir, to string) (string, bool) {
	if p == dir {
		return to, true
	}
	if rest, ok := strings.CutPrefix(p, dir+string(filepath.Separator)); ok {
		if to == "" {
			return "", true
		}
		return filepath.Join(to, rest), true
	}
	return "", false
}

// moveNames renames (or, to "", drops) the tracked unsynced files and the
// names of open files for which move says so (f.mu held).
func (f *FS) moveNames(move func(p string) (string, bool)) {
	if f.track {
		moved := map[string]*pending{}
		for p, pend := range f.unsynced {
			if to, ok := move(p); ok {
				delete(f.unsynced, p)
				if to != "" {
					moved[to] = pend
				}
			}
		}
		for p, pend := range moved {
			f.unsynced[p] = pend
		}
	}
	for h := range f.open {
		if to, ok := move(h.name); ok && to != "" {
			h.name = to
		}
	}
}

// Stat implements zrecord.FS.
func (f *FS) Stat(name string) (os.FileInfo, error) {
	if err := f.alive(); err != nil {
		return nil, pathErr("stat", name, err)
	}
	return f.base.Stat(name)
}

// MkdirAll implements zrecord.FS.
func (f *FS) MkdirAll(path string, perm os.FileMode) error {
	if _, err := f.step(Op{Kind: "mkdir", Path: path}); err != nil {
		return pathErr("mkdir", path, err)
	}
	return f.base.MkdirAll(path, perm)
}

// ReadDir implements zrecord.FS.
func (f *FS) ReadDir(name string) ([]os.DirEntry, error) {
	if err := f.alive(); err != nil {
		return nil, pathErr("readdir", name, err)
	}
	return f.base.ReadDir(name)
}

type file struct {
	fs   *FS
	base zrecord.File
	name string

	mu     sync.Mutex
	closed bool
}

var _ zrecord.File = (*file)(nil)

func (h *file) closeBase() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil
	}
	h.closed = true
	return h.base.Close()
}

func (h *file) ReadAt(p []byte, off int64) (int, error) {
	if err := h.fs.alive(); err != nil {
		return 0, pathErr("read", h.name, err)
	}
	return h.base.ReadAt(p, off)
}

func (h *file) WriteAt(p []byte, off int64) (int, error) {
	torn, err := h.fs.step(Op{Kind: "write", Path: h.name, Off: off, N: len(p)})
	if err != nil {
		if n := len(p) / 2 / SectorSize * SectorSize; torn && n > 0 {
			h.fs.mu.Lock()
			h.fs.noteWrite(h, pendingOp{off: off, data: append([]byte(nil), p[:n]...)})
			h.fs.mu.Unlock()
			h.base.WriteAt(p[:n], off) //nolint:errcheck // best effort, the process is "dead"
		}
		return 0, pathErr("write", h.name, err)
	}
	f := h.fs
	f.mu.Lock()
	if f.space < 0 {
		f.noteWrite(h, pendingOp{off: off, data: append([]byte(nil), p...)})
		f.mu.Unlock()
		return h.base.WriteAt(p, off)
	}
	fi, err := h.base.Stat()
	if err != nil {
		f.mu.Unlock()
		return 0, err
	}
	size, end := fi.Size(), off+int64(len(p))
	growth := end - max(off, size)
	if growth <= f.space {
		f.space -= max(growth, 0)
		f.noteWrite(h, pendingOp{off: off, data: append([]byte(nil), p...)})
		f.mu.Unlock()
		return h.base.WriteAt(p, off)
	}
	fit := int64(0) // bytes of p that fit: the overwrite plus the space left
	if f.short {
		fit = max(size, off) + f.space - off
		f.space = 0
	}
	f.full = true
	f.last, f.hasLast = Op{Kind: "write", Path: h.name, Off: off, N: len(p)}, true
	f.faults = append(f.faults, f.last)
	if fit > 0 {
		f.noteWrite(h, pendingOp{off: off, data: append([]byte(nil), p[:fit]...)})
	}
	f.mu.Unlock()
	n := 0
	if fit > 0 {
		n, _ = h.base.WriteAt(p[:fit], off)
	}
	return n, pathErr("write", h.name, syscall.ENOSPC)
}

func (h *file) Truncate(size int64) error {
	if _, err := h.fs.step(Op{Kind: "truncate", Path: h.name, Off: size}); err != nil {
		return pathErr("truncate", h.name, err)
	}
	h.fs.mu.Lock()
	h.fs.noteWrite(h, pendingOp{truncate: true, off: size})
	h.fs.mu.Unlock()
	return h.base.Truncate(size)
}

func (h *file) Sync() error {
	if _, err := h.fs.step(Op{Kind: "sync", Path: h.name}); err != nil {
		return pathErr("sync", h.name, err)
	}
	if err := h.base.Sync(); err != nil {
		return err
	}
	h.fs.mu.Lock()
	if h.fs.track {
		delete(h.fs.unsynced, h.name)
	}
	h.fs.mu.Unlock()
	return nil
}

// Close releases the descriptor even after a crash (so that a crashed store
// cannot keep a lock), but reports ErrCrashed then.
func (h *file) Close() error {
	h.fs.mu.Lock()
	delete(h.fs.open, h)
	crashed := h.fs.crashed
	h.fs.mu.Unlock()
	err := h.closeBase()
	if crashed {
		return pathErr("close", h.name, ErrCrashed)
	}
	return err
}

func (h *file) Stat() (os.FileInfo, error) {
	if err := h.fs.alive(); err != nil {
		return nil, pathErr("stat", h.name, err)
	}
	return h.base.Stat()
}

func (h *file) Fd() uintptr {
	h.fs.mu.Lock()
	hide := h.fs.hideFd
	h.fs.mu.Unlock()
	if hide {
		return zrecord.NoFd
	}
	return h.base.Fd()
}
