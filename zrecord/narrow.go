package zrecord

import (
	"encoding/binary"
	"slices"
	"strconv"
	"strings"
)

// Element is the integer type every record of a Narrow store is an array
// of: Size bytes per value (1, 2, 4 or 8), two's complement when Signed.
// The store keeps it in its header (see the Format section of the package
// documentation); the other codecs have no element type.
type Element struct {
	Size   int
	Signed bool
}

// DefaultElement is the element type of a Narrow store created without
// WithElement: int32, the type token ids and most integer features come in.
var DefaultElement = Element{Size: 4, Signed: true}

// valid reports whether e is one of the eight element types.
func (e Element) valid() bool {
	switch e.Size {
	case 1, 2, 4, 8:
		return true
	}
	return false
}

// String returns the element's NumPy-style name: "int32", "uint8", ...
func (e Element) String() string {
	if !e.valid() {
		return "element(" + strconv.Itoa(e.Size) + ")"
	}
	name := "int"
	if !e.Signed {
		name = "uint"
	}
	return name + strconv.Itoa(8*e.Size)
}

// ParseElement parses an element type as returned by Element.String
// ("int8" to "uint64").
func ParseElement(s string) (Element, error) {
	signed := true
	rest, ok := strings.CutPrefix(s, "uint")
	if ok {
		signed = false
	} else if rest, ok = strings.CutPrefix(s, "int"); !ok {
		rest = ""
	}
	switch rest {
	case "8", "16", "32", "64":
		bits, _ := strconv.Atoi(rest)
		return Element{Size: bits / 8, Signed: signed}, nil
	}
	return Element{}, errf(ErrInvalidArgument, "element type %q (want int8, int16, int32, int64, uint8, uint16, uint32 or uint64)", s)
}

// WithElement sets the element type of a Narrow store's records: size bytes
// per integer (1, 2, 4 or 8), signed or not. It applies to Create with
// WithCodec(Narrow) only (Open reads the element type from meta.zr), and
// Create refuses it for another codec or an invalid size. Default
// DefaultElement (int32).
func WithElement(size int, signed bool) Option {
	return func(o *options) {
		o.elem = Element{Size: size, Signed: signed}
		o.elemSet = true
	}
}

// encode and decode the element type in header bytes 30 and 31.
func (e Element) headerBytes() (byte, byte) {
	if e.Signed {
		return byte(e.Size), 1
	}
	return byte(e.Size), 0
}

func elementOfHeader(size, flags byte) (Element, bool) {
	e := Element{Size: int(size), Signed: flags == 1}
	return e, e.valid() && flags <= 1
}

// A narrowed record is stored as
//
//	byte 0               width code w: 0, 1, 2 or 4, below the element size
//	bytes 1 .. size      base: the record's smallest value, as an element
//	then count*w bytes   each value minus base (modulo 2^(8*size)),
//	                     unsigned, w bytes little-endian
//
// where count is the logical size over the element size; with w == 0 every
// value equals base. It is recognised, as a frame is, by
// phys_length < logic_length; a record that would not shrink is stored raw.

// narrowHeader is the size of a narrowed record's header for element size es.
func narrowHeader(es int) int { return 1 + es }

// narrowedSize is the stored size of a narrowed record of count values of
// es bytes each, packed w bytes each.
func narrowedSize(es, w, count int) int { return narrowHeader(es) + count*w }

// narrowWidth returns the smallest width code that holds the span max-min
// of a record's values.
func narrowWidth(span uint64) int {
	switch {
	case span == 0:
		return 0
	case span <= 0xff:
		return 1
	case span <= 0xffff:
		return 2
	case span <= 0xffffffff:
		return 4
	}
	return 8
}

// narrowRecord appends r narrowed to dst when that is smaller than r and r
// is a whole number of elements; else it returns dst unchanged and false.
func narrowRecord(dst, r []byte, el Element) ([]byte, bool) {
	if el.Size == 4 && len(r) >= 4 && len(r) <= smallNarrow32 && len(r)%4 == 0 {
		return narrowSmall32(dst, r, el.Signed)
	}
	return narrowAny(dst, r, el)
}

// narrowAny is narrowRecord for any element type and record size.
func narrowAny(dst, r []byte, el Element) ([]byte, bool) {
	es := el.Size
	if len(r) == 0 || len(r)%es != 0 {
		return dst, false
	}
	count := len(r) / es
	lo, span, ok := recordSpan(r, el)
	if !ok {
		return dst, false
	}
	w := narrowWidth(span)
	if w >= es || narrowedSize(es, w, count) >= len(r) {
		return dst, false
	}
	start := len(dst)
	dst = slices.Grow(dst, narrowedSize(es, w, count))[:start+narrowedSize(es, w, count)]
	out := dst[start:]
	out[0] = byte(w)
	putElem(out[1:], es, lo)
	packValues(out[narrowHeader(es):], r, es, w, lo)
	return dst, true
}

// smallNarrow32 is the largest record of 32-bit elements narrowSmall32
// takes: for a record of a few values, the calls of the general path
// (recordSpan, rangeBlock, packValues, each switching on the element type)
// cost more than the values.
const smallNarrow32 = 64

// narrowSmall32 is narrowRecord for a record of 1 to 16 32-bit elements,
// in one function: the same bytes, and the same choice to leave the
// record raw.
func narrowSmall32(dst, r []byte, signed bool) ([]byte, bool) {
	n := len(r) / 4
	first := binary.LittleEndian.Uint32(r)
	lo, hi := first, first
	if signed {
		a, b := int32(first), int32(first)
		for i := 4; i+4 <= len(r); i += 4 {
			v := int32(binary.LittleEndian.Uint32(r[i:]))
			a, b = min(a, v), max(b, v)
		}
		lo, hi = uint32(a), uint32(b)
	} else {
		for i := 4; i+4 <= len(r); i += 4 {
			v := binary.LittleEndian.Uint32(r[i:])
			lo, hi = min(lo, v), max(hi, v)
		}
	}
	span := hi - lo // modulo 2^32, as recordSpan takes it
	if uint64(span) > maxNarrowSpan(4) {
		return dst, false
	}
	w := narrowWidth(uint64(span))
	size := narrowedSize(4, w, n)
	if w >= 4 || size >= len(r) {
		return dst, false
	}
	start := len(dst)
	dst = slices.Grow(dst, size)[:start+size]
	out := dst[start:]
	out[0] = byte(w)
	binary.LittleEndian.PutUint32(out[1:], lo)
	vals := out[narrowHeader(4):]
	switch w {
	case 1:
		for i := range n {
			vals[i] = byte(binary.LittleEndian.Uint32(r[4*i:]) - lo)
		}
	case 2:
		for i := range n {
			binary.LittleEndian.PutUint16(vals[2*i:], uint16(binary.LittleEndian.Uint32(r[4*i:])-lo))
		}
	}
	return dst, true
}

// spanBlock is how many bytes of a record recordSpan scans between checks
// of the span it has seen: a record that cannot narrow (noise over the
// whole range of its type) is given up on after its first block instead
// of being scanned to its end.
const spanBlock = 1 << 10

// maxNarrowSpan is the largest span of values that a record of es-byte
// elements can be narrowed with: the width must stay below es.
func maxNarrowSpan(es int) uint64 {
	switch es {
	case 1:
		return 0
	case 2:
		return 0xff
	case 4:
		return 0xffff
	}
	return 0xffffffff
}

// recordSpan returns the smallest value of r (elements of type el, as the
// low 8*Size bits of a uint64) and the span from it to the largest,
// modulo the element's range; ok is false, and the scan stops early, once
// the span is too wide to narrow.
func recordSpan(r []byte, el Element) (lo, span uint64, ok bool) {
	es := el.Size
	mask := ^uint64(0)
	if es < 8 {
		mask = 1<<(8*es) - 1
	}
	limit := maxNarrowSpan(es)
	first := getElem(r, es)
	lo, hi := first, first
	for off := 0; off < len(r); off += spanBlock {
		lo, hi = rangeBlock(r[off:min(off+spanBlock, len(r))], el, lo, hi)
		// The span is taken modulo the element's range: a signed
		// record's bounds come as their two's-complement bits.
		if span = (hi - lo) & mask; span > limit {
			return lo, span, false
		}
	}
	return lo, span, true
}

// rangeBlock widens the bounds lo and hi (bits of elements of type el) to
// the smallest and largest value of the block r.
func rangeBlock(r []byte, el Element, lo, hi uint64) (uint64, uint64) {
	switch el.Size {
	case 1:
		if el.Signed {
			a, b := int8(lo), int8(hi)
			for _, c := range r {
				v := int8(c)
				a, b = min(a, v), max(b, v)
			}
			return uint64(uint8(a)), uint64(uint8(b))
		}
		a, b := uint8(lo), uint8(hi)
		for _, c := range r {
			a, b = min(a, c), max(b, c)
		}
		return uint64(a), uint64(b)
	case 2:
		if el.Signed {
			a, b := int16(lo), int16(hi)
			for i := 0; i+2 <= len(r); i += 2 {
				v := int16(binary.LittleEndian.Uint16(r[i:]))
				a, b = min(a, v), max(b, v)
			}
			return uint64(uint16(a)), uint64(uint16(b))
		}
		a, b := uint16(lo), uint16(hi)
		for i := 0; i+2 <= len(r); i += 2 {
			v := binary.LittleEndian.Uint16(r[i:])
			a, b = min(a, v), max(b, v)
		}
		return uint64(a), uint64(b)
	case 4:
		if el.Signed {
			a, b := int32(lo), int32(hi)
			for i := 0; i+4 <= len(r); i += 4 {
				v := int32(binary.LittleEndian.Uint32(r[i:]))
				a, b = min(a, v), max(b, v)
			}
			return uint64(uint32(a)), uint64(uint32(b))
		}
		a, b := uint32(lo), uint32(hi)
		for i := 0; i+4 <= len(r); i += 4 {
			v := binary.LittleEndian.Uint32(r[i:])
			a, b = min(a, v), max(b, v)
		}
		return uint64(a), uint64(b)
	}
	if el.Signed {
		a, b := int64(lo), int64(hi)
		for i := 0; i+8 <= len(r); i += 8 {
			v := int64(binary.LittleEndian.Uint64(r[i:]))
			a, b = min(a, v), max(b, v)
		}
		return uint64(a), uint64(b)
	}
	a, b := lo, hi
	for i := 0; i+8 <= len(r); i += 8 {
		v := binary.LittleEndian.Uint64(r[i:])
		a, b = min(a, v), max(b, v)
	}
	return a, b
}

// getElem and putElem read and write one es-byte little-endian value.
func getElem(b []byte, es int) uint64 {
	switch es {
	case 1:
		return uint64(b[0])
	case 2:
		return uint64(binary.LittleEndian.Uint16(b))
	case 4:
		return uint64(binary.LittleEndian.Uint32(b))
	}
	return binary.LittleEndian.Uint64(b)
}

func putElem(b []byte, es int, v uint64) {
	switch es {
	case 1:
		b[0] = byte(v)
	case 2:
		binary.LittleEndian.PutUint16(b, uint16(v))
	case 4:
		binary.LittleEndian.PutUint32(b, uint32(v))
	default:
		binary.LittleEndian.PutUint64(b, v)
	}
}

// packValues writes each value of r (es bytes each) minus base into dst,
// w bytes each; every difference fits w bytes (narrowRecord chose w so).
// The common pairs have loops of their own, the rest share one.
func packValues(dst, r []byte, es, w int, base uint64) {
	n := len(r) / es
	switch {
	case w == 0:
	case es == 4 && w == 2:
		b := uint32(base)
		for i := 0; i < n; i++ {
			binary.LittleEndian.PutUint16(dst[2*i:], uint16(binary.LittleEndian.Uint32(r[4*i:])-b))
		}
	case es == 4 && w == 1:
		b := uint32(base)
		for i := 0; i < n; i++ {
			dst[i] = byte(binary.LittleEndian.Uint32(r[4*i:]) - b)
		}
	case es == 8 && w == 4:
		for i := 0; i < n; i++ {
			binary.LittleEndian.PutUint32(dst[4*i:], uint32(binary.LittleEndian.Uint64(r[8*i:])-base))
		}
	case es == 8 && w == 2:
		for i := 0; i < n; i++ {
			binary.LittleEndian.PutUint16(dst[2*i:], uint16(binary.LittleEndian.Uint64(r[8*i:])-base))
		}
	default:
		for i, j := 0, 0; i < len(r); i, j = i+es, j+w {
			putElem(dst[j:], w, getElem(r[i:], es)-base)
		}
	}
}

// errNarrowed describes a narrowed record whose header does not fit its
// sizes; the caller names the record.
type errNarrowed struct {
	width          int
	phys, logic    int
	size, expected int
}

func (e *errNarrowed) Error() string {
	if e.expected < 0 {
		return "narrowed record of " + strconv.Itoa(e.phys) + " stored bytes for " + strconv.Itoa(e.logic) +
			": width code " + strconv.Itoa(e.width) + " is not one of 0, 1, 2, 4 below the element size " + strconv.Itoa(e.size)
	}
	return "narrowed record with width code " + strconv.Itoa(e.width) + " has " + strconv.Itoa(e.phys) +
		" stored bytes, its " + strconv.Itoa(e.logic) + " logical bytes need " + strconv.Itoa(e.expected)
}

// checkNarrowed checks that src, a narrowed record of logic bytes of
// elements of es bytes, is consistent: a valid width code, and exactly the
// stored size that width and logic give. It returns the width.
func checkNarrowed(src []byte, logic, es int) (int, error) {
	if len(src) < narrowHeader(es) {
		return 0, &errNarrowed{width: -1, phys: len(src), logic: logic, size: es, expected: narrowHeader(es)}
	}
	w := int(src[0])
	switch w {
	case 0, 1, 2, 4:
	default:
		return 0, &errNarrowed{width: w, phys: len(src), logic: logic, size: es, expected: -1}
	}
	if w >= es {
		return 0, &errNarrowed{width: w, phys: len(src), logic: logic, size: es, expected: -1}
	}
	if logic%es != 0 || len(src) != narrowedSize(es, w, logic/es) {
		return 0, &errNarrowed{width: w, phys: len(src), logic: logic, size: es, expected: narrowedSize(es, w, logic/es)}
	}
	return w, nil
}

// widenRecord decodes the narrowed record src into out, whose length is the
// record's logical size, for elements of es bytes.
func widenRecord(out, src []byte, es int) error {
	return widenRecordTo(out, src, es, false)
}

// widenRecordTo is widenRecord, with stream as for widen.
func widenRecordTo(out, src []byte, es int, stream bool) error {
	w, err := checkNarrowed(src, len(out), es)
	if err != nil {
		return err
	}
	base := getElem(src[1:], es)
	widen(out, src[narrowHeader(es):], es, w, base, stream)
	return nil
}

// widen writes the len(out)/es values packed w bytes each in packed, each
// plus base, into out as es-byte values; the assembly kernels take the
// common widenings where the CPU has them. With stream (a destination not
// read again soon, see gatherScratch.stream), the kernels write out with
// streaming stores.
func widen(out, packed []byte, es, w int, base uint64, stream bool) {
	done := 0
	if w > 0 && useWidenSIMD {
		done = widenSIMD(out, packed, es, w, base, stream)
	}
	widenGo(out[done*es:], packed[done*w:], es, w, base)
}

// widenGo is widen in Go, for every width below the element size.
func widenGo(out, packed []byte, es, w int, base uint64) {
	n := len(out) / es
	switch {
	case w == 0:
		var v [8]byte
		putElem(v[:], es, base)
		for i := 0; i < len(out); i += es {
			copy(out[i:i+es], v[:es])
		}
	case w == 1 && es == 2:
		b := uint16(base)
		for i := 0; i < n; i++ {
			binary.LittleEndian.PutUint16(out[2*i:], uint16(packed[i])+b)
		}
	case w == 1 && es == 4:
		b := uint32(base)
		for i := 0; i < n; i++ {
			binary.LittleEndian.PutUint32(out[4*i:], uint32(packed[i])+b)
		}
	case w == 1 && es == 8:
		for i := 0; i < n; i++ {
			binary.LittleEndian.PutUint64(out[8*i:], uint64(packed[i])+base)
		}
	case w == 2 && es == 4:
		b := uint32(base)
		for i := 0; i < n; i++ {
			binary.LittleEndian.PutUint32(out[4*i:], uint32(binary.LittleEndian.Uint16(packed[2*i:]))+b)
		}
	case w == 2 && es == 8:
		for i := 0; i < n; i++ {
			binary.LittleEndian.PutUint64(out[8*i:], uint64(binary.LittleEndian.Uint16(packed[2*i:]))+base)
		}
	case w == 4 && es == 8:
		for i := 0; i < n; i++ {
			binary.LittleEndian.PutUint64(out[8*i:], uint64(binary.LittleEndian.Uint32(packed[4*i:]))+base)
		}
	}
}

// fillNarrowed is fill for a narrowed record e (record idx, in chunk c):
// its stored bytes are checked against their checksum (sumInto), as a
// frame's are, and then widened straight into out, with streaming stores
// in a call that streams.
func (s *Store) fillNarrowed(g *gatherScratch, w int, c *chunk, idx int64, e entry, out []byte) error {
	src, err := s.storedBytes(g, w, c, idx, e)
	if err != nil {
		return err
	}
	// A streamed destination is written once, by the widening: the check
	// folds through the worker's own buffer instead (see sumInto), which
	// stays in the cache.
	fold := out
	if g.stream {
		fold = g.foldBuffer(w, len(src))
	}
	if sum := sumInto(fold, src); sum != e.sum {
		return s.dataError(idx, e, sum)
	}
	if err := widenRecordTo(out, src, s.elem.Size, g.stream); err != nil {
		return errf(ErrDecode, "gather from %s: record %d in %s: %v", s.dir, idx, s.path(chunkName(e.chunk)), err)
	}
	return nil
}

// narrowedSizeOK reports whether phys stored bytes can be a narrowed record
// of logic bytes of es-byte elements, at one of the widths below es: the
// table check that catches a damaged length before any byte is read.
func narrowedSizeOK(phys, logic uint32, es int) bool {
	if es <= 0 || int(logic)%es != 0 || phys >= logic {
		return false
	}
	count := int(logic) / es
	for _, w := range [...]int{0, 1, 2, 4} {
		if w < es && int(phys) == narrowedSize(es, w, count) {
			return true
		}
	}
	return false
}
