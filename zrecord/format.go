package zrecord

import (
	"encoding/binary"
	"hash/crc32"
	"strconv"
	"strings"
	"unsafe"
)

// On-disk layout constants. Everything is little-endian.
const (
	// formatVersion is the version this package writes.
	formatVersion = 4
	// versionV1 is this project's first format: no checksums.
	versionV1 = 1
	// versionV3 is the format of the original loaderx 1.5.2: the layout of
	// version 1, except that a compressed store keeps every record as a
	// zstd frame, even one larger than the record.
	versionV3 = 3
	// versionNarrow is the format of a Narrow store: version 4 with the
	// element type in the header's last two bytes. It has its own number
	// so that readers that predate the codec refuse such a store with
	// their version error instead of returning narrowed bytes as records.
	// Stores of the other codecs are still written as version 4.
	versionNarrow = 5

	headerSize = 32

	// maxEntrySize is the larger of the two table entry sizes.
	maxEntrySize = 24

	// chunkSpan is the virtual size every chunk is mapped at: offsets are
	// 32-bit, so no record byte lies at or beyond it.
	chunkSpan = 1 << 32

	metaName      = "meta.zr"
	dictName      = "dict.zr"
	deleteJournal = "delete.intent"
	compactJrnl   = "compact.journal"
	chunkSuffix   = ".chunk"
	oldSegSuffix  = ".loc"
	segSuffix     = ".tab"
)

var magic = [4]byte{'Z', 'R', 'E', 'C'}

// layout is the geometry of a format version's record table: entry i lives
// in segment i>>shift at byte (i & (1<<shift - 1)) * entSize of the file
// "<segment><suffix>".
type layout struct {
	version uint8
	entSize int64
	shift   uint
	suffix  string
}

var (
	// layoutV4: 24-byte entries, 2^27 per segment, so a segment file stays
	// below 4 GiB (3 GiB) and is mapped in one piece like a chunk.
	layoutV4 = layout{version: formatVersion, entSize: 24, shift: 27, suffix: segSuffix}
	// layoutV1 and layoutV3: 16-byte entries, 2^28 per segment (4 GiB).
	layoutV1 = layout{version: versionV1, entSize: 16, shift: 28, suffix: oldSegSuffix}
	layoutV3 = layout{version: versionV3, entSize: 16, shift: 28, suffix: oldSegSuffix}
	// layoutV5: the table of version 4.
	layoutV5 = layout{version: versionNarrow, entSize: 24, shift: 27, suffix: segSuffix}
)

// readVersions are the format versions this package reads, in ascending
// order. A variable only so that a test can play a reader that predates
// one of them.
var readVersions = []uint8{versionV1, versionV3, formatVersion, versionNarrow}

// layoutOf returns the layout of format version v, or false.
func layoutOf(v uint8) (layout, bool) {
	known := false
	for _, r := range readVersions {
		known = known || r == v
	}
	if !known {
		return layout{}, false
	}
	switch v {
	case formatVersion:
		return layoutV4, true
	case versionNarrow:
		return layoutV5, true
	case versionV1:
		return layoutV1, true
	case versionV3:
		return layoutV3, true
	}
	return layout{}, false
}

// versionError describes a format version this package does not read: a
// version above every one it reads comes from a newer loaderx, which the
// message says, with the versions this one reads.
func versionError(path string, v uint8) error {
	return errf(ErrVersion, "%s: %s", path, versionText(v))
}

// versionText is versionError's sentence, without the file.
func versionText(v uint8) string {
	names := make([]string, len(readVersions))
	for i, r := range readVersions {
		names[i] = strconv.Itoa(int(r))
	}
	list := strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
	if v > readVersions[len(readVersions)-1] {
		return "format version " + strconv.Itoa(int(v)) + ": the store was written by a newer loaderx; this one reads format versions " + list + ", so upgrade loaderx to open it"
	}
	return "format version " + strconv.Itoa(int(v)) + " is not one loaderx ever wrote (this one reads format versions " + list + ")"
}

// headerVersion is the format version a store of codec c is written as.
func headerVersion(c Codec) uint8 {
	if c == Narrow {
		return versionNarrow
	}
	return formatVersion
}

func (l layout) segEntries() int64 { return 1 << l.shift }
func (l layout) segMask() int64    { return l.segEntries() - 1 }
func (l layout) segBytes() int64   { return l.segEntries() * l.entSize }

// segOff is where entry i sits in its segment.
func (l layout) segOff(i int64) int64 { return (i & l.segMask()) * l.entSize }

// segName names segment id of the table.
func (l layout) segName(id uint32) string {
	return strconv.FormatUint(uint64(id), 10) + l.suffix
}

// segCount is the number of segments that length entries need.
func (l layout) segCount(length int64) int64 {
	return (length + l.segEntries() - 1) >> l.shift
}

// checksummed reports whether the format carries checksums (versions 4
// and 5).
func (l layout) checksummed() bool { return l.version >= formatVersion }

// header is the decoded content of meta.zr.
//
//	0–3   magic "ZREC"
//	4     version (u8)
//	5     codec (u8)
//	6–9   tail_chunk (u32): the chunk holding the write frontier
//	10–13 tail_offset (u32): the frontier's offset in that chunk
//	14–21 length (u64): number of records
//
// then, in version 4:
//
//	22–25 CRC-32C of bytes 0–21 and 26–31
//	26–29 CRC-32C of dict.zr (zero without a dictionary)
//	30–31 zero
//
// in version 5 (Narrow stores) the same, except bytes 30–31:
//
//	30    element size in bytes (1, 2, 4 or 8)
//	31    1 if the elements are signed, else 0
//
// and in versions 1 and 3, zeros from byte 22 on.
type header struct {
	version    uint8
	codec      Codec
	tailChunk  uint32
	tailOffset uint32
	length     uint64
	dictSum    uint32  // versions 4 and 5
	elem       Element // version 5 only
}

// headerSum is the checksum of a version-4 or -5 header: every byte but
// 22–25.
func headerSum(b []byte) uint32 {
	c := crc32.Update(0, castagnoli, b[0:22])
	return crc32.Update(c, castagnoli, b[26:headerSize])
}

func (h header) encode() [headerSize]byte {
	var b [headerSize]byte
	copy(b[0:4], magic[:])
	b[4] = h.version
	b[5] = byte(h.codec)
	binary.LittleEndian.PutUint32(b[6:10], h.tailChunk)
	binary.LittleEndian.PutUint32(b[10:14], h.tailOffset)
	binary.LittleEndian.PutUint64(b[14:22], h.length)
	if h.version >= formatVersion {
		binary.LittleEndian.PutUint32(b[26:30], h.dictSum)
		if h.version == versionNarrow {
			b[30], b[31] = h.elem.headerBytes()
		}
		binary.LittleEndian.PutUint32(b[22:26], headerSum(b[:]))
	}
	return b
}

// headerFields reads the fields of a header of at least headerSize bytes,
// without checking them.
func headerFields(b []byte) header {
	return header{
		version:    b[4],
		codec:      Codec(b[5]),
		tailChunk:  binary.LittleEndian.Uint32(b[6:10]),
		tailOffset: binary.LittleEndian.Uint32(b[10:14]),
		length:     binary.LittleEndian.Uint64(b[14:22]),
	}
}

// decodeHeader parses meta.zr's bytes. path names the file in errors.
func decodeHeader(b []byte, path string) (header, error) {
	if len(b) < len(magic) || [4]byte(b[0:4]) != magic {
		return header{}, errf(ErrNotStore, "%s: bad magic", path)
	}
	if len(b) < headerSize {
		return header{}, errf(ErrCorrupt, "%s: header is %d bytes, want %d", path, len(b), headerSize)
	}
	if _, ok := layoutOf(b[4]); !ok {
		return header{}, versionError(path, b[4])
	}
	h := headerFields(b)
	reserved := 22
	if h.version >= formatVersion {
		stored, sum := binary.LittleEndian.Uint32(b[22:26]), headerSum(b)
		if stored != sum {
			return header{}, errf(ErrCorrupt, "%s: header checksum %#08x, its bytes give %#08x", path, stored, sum)
		}
		h.dictSum = binary.LittleEndian.Uint32(b[26:30])
		reserved = 30
	}
	if !h.codec.valid() {
		return header{}, errf(ErrCorrupt, "%s: codec byte %d", path, b[5])
	}
	if (h.codec == Narrow) != (h.version == versionNarrow) {
		return header{}, errf(ErrCorrupt, "%s: codec %v in a format version %d header", path, h.codec, h.version)
	}
	if h.version == versionNarrow {
		el, ok := elementOfHeader(b[30], b[31])
		if !ok {
			return header{}, errf(ErrCorrupt, "%s: element type bytes %#x %#x (want size 1, 2, 4 or 8 and signedness 0 or 1)", path, b[30], b[31])
		}
		h.elem = el
		reserved = headerSize
	}
	for i := reserved; i < headerSize; i++ {
		if b[i] != 0 {
			return header{}, errf(ErrCorrupt, "%s: reserved byte %d is %#x", path, i, b[i])
		}
	}
	if h.codec != ZstdDict && h.dictSum != 0 {
		return header{}, errf(ErrCorrupt, "%s: dictionary checksum %#08x for codec %v", path, h.dictSum, h.codec)
	}
	// length must fit an int64 and its table must be addressable.
	if h.length > 1<<62 {
		return header{}, errf(ErrCorrupt, "%s: length %d", path, h.length)
	}
	return h, nil
}

// entry is one record-table slot: where a record lives, how big it is and,
// in versions 4 and 5, the CRC-32C of its stored bytes. In versions 1, 4
// and 5, phys == logic means the record is stored raw and phys < logic that
// it is encoded by the store's codec (a zstd frame, or narrowed); in
// version 3 every record of a compressed store is a frame.
type entry struct {
	off   uint32 // offset inside the chunk
	phys  uint32 // stored bytes
	logic uint32 // bytes after decoding
	chunk uint32 // chunk id
	sum   uint32 // CRC-32C of the stored bytes (versions 4 and 5)
}

// put writes the first 16 bytes of an entry: the fields every version has.
func (e entry) put(b []byte) {
	_ = b[15]
	binary.LittleEndian.PutUint32(b[0:4], e.off)
	binary.LittleEndian.PutUint32(b[4:8], e.phys)
	binary.LittleEndian.PutUint32(b[8:12], e.logic)
	binary.LittleEndian.PutUint32(b[12:16], e.chunk)
}

// put20 writes an entry with its data checksum: 20 bytes.
func (e entry) put20(b []byte) {
	e.put(b)
	binary.LittleEndian.PutUint32(b[16:20], e.sum)
}

func getEntry(b []byte) entry {
	_ = b[15]
	return entry{
		off:   binary.LittleEndian.Uint32(b[0:4]),
		phys:  binary.LittleEndian.Uint32(b[4:8]),
		logic: binary.LittleEndian.Uint32(b[8:12]),
		chunk: binary.LittleEndian.Uint32(b[12:16]),
	}
}

func getEntry20(b []byte) entry {
	e := getEntry(b)
	e.sum = binary.LittleEndian.Uint32(b[16:20])
	return e
}

// entrySum is the checksum that seals table entry idx: the CRC-32C of the
// index (u64) followed by the entry's first 20 bytes. The index in it makes
// an entry written to the wrong slot fail as surely as a damaged one.
func entrySum(idx int64, b []byte) uint32 {
	var ib [8]byte
	binary.LittleEndian.PutUint64(ib[:], uint64(idx))
	return crc32.Update(crc32.Update(0, castagnoli, ib[:]), castagnoli, b[:20])
}

// loadEntriesGo is loadEntries without the CRC instruction.
func loadEntriesGo(seg []byte, indices []int64, locs []entry) int {
	for k, i := range indices {
		if uint64(i) >= uint64(len(seg)/24) {
			return k
		}
		b := seg[i*24 : i*24+24]
		if binary.LittleEndian.Uint32(b[20:24]) != entrySum(i, b) {
			return k
		}
		locs[k] = getEntry20(b)
	}
	return len(indices)
}

// loadEntriesFromGo is loadEntriesFrom without the CRC instruction.
func loadEntriesFromGo(tables []unsafe.Pointer, indices []int64, locs []entry) int {
	for k, i := range indices {
		b := unsafe.Slice((*byte)(unsafe.Add(tables[k], i*24)), 24)
		if binary.LittleEndian.Uint32(b[20:24]) != entrySum(i, b) {
			return k
		}
		locs[k] = getEntry20(b)
	}
	return len(indices)
}

// putEntry encodes e as table entry idx in l's layout (l.entSize bytes).
func (l layout) putEntry(b []byte, idx int64, e entry) {
	if !l.checksummed() {
		e.put(b)
		return
	}
	e.put20(b)
	binary.LittleEndian.PutUint32(b[20:24], entrySumFast(idx, b))
}

// putEntriesGo is putEntries without the CRC instruction.
func putEntriesGo(dst []byte, first int64, ents []entry) {
	for k, e := range ents {
		layoutV4.putEntry(dst[24*k:24*k+24], first+int64(k), e)
	}
}

// entryFault describes why the bytes of table entry idx fail their checksum.
type entryFault struct {
	stored, computed uint32
}

// getEntryAt decodes table entry idx from b in l's layout. For a
// checksummed layout, a non-nil fault says the entry's checksum does not
// match its bytes.
func (l layout) getEntryAt(b []byte, idx int64) (entry, *entryFault) {
	if !l.checksummed() {
		return getEntry(b), nil
	}
	e := getEntry20(b)
	stored, computed := binary.LittleEndian.Uint32(b[20:24]), entrySumFast(idx, b)
	if stored != computed {
		return e, &entryFault{stored, computed}
	}
	return e, nil
}

// dataSum is the checksum of a record's stored bytes.
func dataSum(b []byte) uint32 {
	if len(b) <= shortSumMax {
		return shortSum(b)
	}
	return crc32.Checksum(b, castagnoli)
}

// shortSumMax is the longest input dataSum checksums with shortSum, a plain
// loop of CRC instructions; hash/crc32's dispatch costs more than the
// instructions for an input this short, and its interleaved loops pay only
// for longer ones.
const shortSumMax = 64

// end is the first byte after the record in its chunk.
func (e entry) end() uint64 { return uint64(e.off) + uint64(e.phys) }

func chunkName(id uint32) string { return strconv.FormatUint(uint64(id), 10) + chunkSuffix }

// parseID returns the numeric id of a "<id><suffix>" file name.
func parseID(name, suffix string) (uint32, bool) {
	s, ok := strings.CutSuffix(name, suffix)
	if !ok || s == "" || (len(s) > 1 && s[0] == '0') {
		return 0, false
	}
	v, err := strconv.ParseUint(s, 10, 32)
	if err != nil {
		return 0, false
	}
	return uint32(v), true
}

// isStoreFile reports whether name is one the store itself may create in
// its directory.
func isStoreFile(name string) bool {
	switch name {
	case metaName, dictName, deleteJournal, compactJrnl:
		return true
	}
	for _, suffix := range []string{chunkSuffix, segSuffix, oldSegSuffix} {
		if _, ok := parseID(name, suffix); ok {
			return true
		}
	}
	return false
}

// isCompanionName reports whether name may be given to WithFile: a plain
// file name that the store does not use itself.
func isCompanionName(name string) bool {
	return name != "" && name != "." && name != ".." && !strings.ContainsAny(name, `/\`) && !isStoreFile(name)
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// sealed appends a CRC-32C of b to b. Journals are sealed so a torn write is
// recognised and discarded.
func sealed(b []byte) []byte {
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

// unseal checks the trailing CRC-32C of b and returns the body.
func unseal(b []byte) ([]byte, bool) {
	if len(b) < 4 {
		return nil, false
	}
	body := b[:len(b)-4]
	return body, crc32.Checksum(body, castagnoli) == binary.LittleEndian.Uint32(b[len(b)-4:])
}
