package zrecord

import (
	"bytes"
	"os"
	"path/filepath"
)

// OldScanLimit is the most entries a parent may hold for Create to clear
// the leftovers that Creates of earlier releases left in it.
const OldScanLimit = oldScanLimit

// WriteOldStore writes a store of format version 1 (this package's first
// format) or 3 (the original loaderx's) in dir, holding recs, laid out as
// those writers lay it out: chunks of at most capacity bytes, 16-byte
// entries in 0.loc, and no checksums. In a version-3 compressed store every
// record is a zstd frame, even one larger than the record; in version 1 a
// frame is kept only when it is smaller. It exists for the tests.
func WriteOldStore(dir string, version uint8, codec Codec, dict []byte, recs [][]byte, capacity int64) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var enc interface {
		EncodeAll(src, dst []byte) []byte
		Close() error
	}
	if codec != Raw {
		e, err := newEncoder(codec, dict, TierFast)
		if err != nil {
			return err
		}
		defer e.Close()
		enc = e
	}
	if codec == ZstdDict {
		if err := os.WriteFile(filepath.Join(dir, dictName), dict, 0o644); err != nil {
			return err
		}
	}
	var chunks [][]byte
	chunks = append(chunks, nil)
	table := make([]byte, 0, len(recs)*16)
	for _, r := range recs {
		stored := r
		if enc != nil {
			frame := enc.EncodeAll(r, nil)
			if version == versionV3 || len(frame) < len(r) {
				stored = frame
			}
		}
		cur := len(chunks) - 1
		if len(chunks[cur]) > 0 && int64(len(chunks[cur])+len(stored)) > capacity {
			chunks = append(chunks, nil)
			cur++
		}
		e := entry{off: uint32(len(chunks[cur])), phys: uint32(len(stored)), logic: uint32(len(r)), chunk: uint32(cur)}
		chunks[cur] = append(chunks[cur], stored...)
		var b [16]byte
		e.put(b[:])
		table = append(table, b[:]...)
	}
	for id, c := range chunks {
		if err := os.WriteFile(filepath.Join(dir, chunkName(uint32(id))), c, 0o644); err != nil {
			return err
		}
	}
	if err := os.WriteFile(filepath.Join(dir, layoutV1.segName(0)), table, 0o644); err != nil {
		return err
	}
	last := len(chunks) - 1
	h := header{version: version, codec: codec, tailChunk: uint32(last), tailOffset: uint32(len(chunks[last])), length: uint64(len(recs))}
	b := h.encode()
	return os.WriteFile(filepath.Join(dir, metaName), b[:], 0o644)
}

// MappedSpans returns the length of the current mapping of every chunk and
// table segment of s (0 for a file that is not mapped) and how many retired
// mappings each holds in total.
func MappedSpans(s *Store) (chunks, segs []int64, retired int) {
	for _, c := range *s.chunks.Load() {
		chunks = append(chunks, c.span())
		retired += len(c.retired)
	}
	for _, g := range *s.segs.Load() {
		segs = append(segs, g.span())
		retired += len(g.retired)
	}
	return chunks, segs, retired
}

// MinSpan is the smallest span a file is mapped at.
const MinSpan = minSpan

// SetPipeStepPerThread sets the logical bytes of a pipelined append's part
// per compressing goroutine (n ≤ 0 restores the default) and returns the
// previous value. A step larger than any batch turns the pipeline off.
func SetPipeStepPerThread(n int64) int64 {
	if n <= 0 {
		n = 1 << 20
	}
	return pipeStepPerThread.Swap(n)
}

// SetTableAsideEntries sets the smallest batch whose table entries are
// written on a goroutine of their own as its parts are written (n ≤ 0
// restores the default) and returns the previous value.
func SetTableAsideEntries(n int64) int64 {
	if n <= 0 {
		n = 1 << 16
	}
	return tableAsideEntries.Swap(n)
}

// PipelinedAppends is how many appends have been pipelined so far.
func PipelinedAppends() int64 { return pipelinedAppends.Load() }

// CopyCRCPaths names the paths of copyCRC this CPU runs, fastest first.
func CopyCRCPaths() []string {
	var names []string
	for _, p := range copyCRCPaths() {
		names = append(names, p.name)
	}
	return names
}

// UseCopyCRCPath makes copyCRC, and so every checked gather, take the
// path called name (one of CopyCRCPaths), and returns the function that
// puts the previous one back. It is for benchmarks, which switch it
// between runs, never while a gather is running.
func UseCopyCRCPath(name string) (restore func()) {
	old := copyCRCImpl
	for _, p := range copyCRCPaths() {
		if p.name == name {
			copyCRCImpl = p
			return func() { copyCRCImpl = old }
		}
	}
	panic("no copyCRC path " + name)
}

// CopyCRC is copyCRC, for the benchmarks.
func CopyCRC(dst, src []byte, crc uint32) uint32 { return copyCRC(dst, src, crc) }

// LiteralForms returns, for each record, the bytes a Zstd store keeps
// (chosen), its entropy-coded frame (huff) and its plain-literal frame
// (plain); an entry is nil where the record would be kept raw instead.
func LiteralForms(recs [][]byte) (chosen, huff, plain [][]byte, err error) {
	encode, release, err := RecordEncoders()
	if err != nil {
		return nil, nil, nil, err
	}
	defer release()
	keep := func(f []byte, r []byte) []byte {
		if len(f) >= len(r) {
			return nil
		}
		return bytes.Clone(f)
	}
	for _, r := range recs {
		chosen = append(chosen, keep(encode["store"](r), r))
		huff = append(huff, keep(encode["huffman"](r), r))
		plain = append(plain, keep(encode["plain"](r), r))
	}
	return chosen, huff, plain, nil
}

// RecordEncoders returns a function per way a Zstd store's record may be
// encoded, each returning the frame in a buffer that the next call of any
// of them reuses: "store" the frame Append stores for the record (the
// encoder's frame, rewritten with plain literals where that pays, see
// preferPlain), or nil where Append stores the record raw; "huffman" the
// encoder's frame alone; "plain" a frame with every literal stored plain.
// release closes the encoders.
func RecordEncoders() (encode map[string]func(r []byte) []byte, release func(), err error) {
	enc, err := newRecordEncoder(Zstd, nil, TierBalanced)
	if err != nil {
		return nil, nil, err
	}
	pe := plainEncoder()
	var buf []byte
	encode = map[string]func(r []byte) []byte{
		"store": func(r []byte) []byte {
			var smaller bool
			if buf, smaller = encodeRecord(enc, Element{}, r, buf[:0]); !smaller {
				return nil
			}
			return buf
		},
		"huffman": func(r []byte) []byte {
			buf = enc.huff.EncodeAll(r, buf[:0])
			return buf
		},
		"plain": func(r []byte) []byte {
			buf = pe.EncodeAll(r, buf[:0])
			return buf
		},
	}
	return encode, func() { enc.Close(); pe.Close() }, nil
}

// SetOpenNow is how many of the lazy set t's stores are open now, and how
// many stores its cache holds open or opening (those of every set sharing
// it).
func SetOpenNow(t *Set) (mine, cache int) {
	c := t.cache
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.hand
	for range c.nodes {
		if n.set == t {
			mine++
		}
		n = n.next
	}
	return mine, c.open
}

// SetPinned is how many pins the lazy set t's open stores hold.
func SetPinned(t *Set) int {
	c := t.cache
	c.mu.Lock()
	defer c.mu.Unlock()
	pins := 0
	n := c.hand
	for range c.nodes {
		if n.set == t {
			pins += int(n.pins)
		}
		n = n.next
	}
	return pins
}

// SetSplitSmallBytes sets the least short-path batch that is split over
// two goroutines, and returns the setting it replaced.
func SetSplitSmallBytes(n int64) int64 {
	old := splitSmallBytes
	splitSmallBytes = n
	return old
}

// SetStreamSlotMin sets the least batch a gather into a slot writes with
// streaming stores, and returns the setting it replaced.
func SetStreamSlotMin(n int64) int64 {
	old := streamSlotMin
	streamSlotMin = n
	return old
}
