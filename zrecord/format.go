package zrecord

import (
	"encoding/binary"
	"hash/crc32"
	"strconv"
	"strings"
)

// On-disk layout constants. Everything is little-endian.
const (
	formatVersion = 1

	headerSize = 32
	entrySize  = 16

	// segShift: a .loc segment holds 2^segShift entries; index i lives in
	// segment i>>segShift at byte (i & segMask) * entrySize.
	segShift   = 28
	segEntries = 1 << segShift
	segMask    = segEntries - 1
	segBytes   = segEntries * entrySize // 4 GiB

	// chunkSpan is the virtual size every chunk is mapped at: offsets are
	// 32-bit, so no record byte lies at or beyond it.
	chunkSpan = 1 << 32

	metaName      = "meta.zr"
	dictName      = "dict.zr"
	deleteJournal = "delete.intent"
	compactJrnl   = "compact.journal"
	chunkSuffix   = ".chunk"
	segSuffix     = ".loc"
)

var magic = [4]byte{'Z', 'R', 'E', 'C'}

// header is the decoded content of meta.zr.
//
//	0–3   magic "ZREC"
//	4     version (u8)
//	5     codec (u8)
//	6–9   tail_chunk (u32): the chunk holding the write frontier
//	10–13 tail_offset (u32): the frontier's offset in that chunk
//	14–21 length (u64): number of records
//	22–31 reserved, zero
type header struct {
	codec      Codec
	tailChunk  uint32
	tailOffset uint32
	length     uint64
}

func (h header) encode() [headerSize]byte {
	var b [headerSize]byte
	copy(b[0:4], magic[:])
	b[4] = formatVersion
	b[5] = byte(h.codec)
	binary.LittleEndian.PutUint32(b[6:10], h.tailChunk)
	binary.LittleEndian.PutUint32(b[10:14], h.tailOffset)
	binary.LittleEndian.PutUint64(b[14:22], h.length)
	return b
}

// decodeHeader parses meta.zr's bytes. path names the file in errors.
func decodeHeader(b []byte, path string) (header, error) {
	if len(b) < len(magic) || [4]byte(b[0:4]) != magic {
		return header{}, errf(ErrNotStore, "%s: bad magic", path)
	}
	if len(b) < headerSize {
		return header{}, errf(ErrCorrupt, "%s: header is %d bytes, want %d", path, len(b), headerSize)
	}
	if b[4] != formatVersion {
		return header{}, errf(ErrVersion, "%s: version %d (this package reads %d)", path, b[4], formatVersion)
	}
	h := header{
		codec:      Codec(b[5]),
		tailChunk:  binary.LittleEndian.Uint32(b[6:10]),
		tailOffset: binary.LittleEndian.Uint32(b[10:14]),
		length:     binary.LittleEndian.Uint64(b[14:22]),
	}
	if !h.codec.valid() {
		return header{}, errf(ErrCorrupt, "%s: codec byte %d", path, b[5])
	}
	for i := 22; i < headerSize; i++ {
		if b[i] != 0 {
			return header{}, errf(ErrCorrupt, "%s: reserved byte %d is %#x", path, i, b[i])
		}
	}
	// length must fit an int64 and its table must be addressable.
	if h.length > 1<<62 {
		return header{}, errf(ErrCorrupt, "%s: length %d", path, h.length)
	}
	return h, nil
}

// entry is one record-table slot: where a record lives and how big it is.
// phys == logic means the record is stored raw; phys < logic means it is a
// zstd frame of the store's codec.
type entry struct {
	off   uint32 // offset inside the chunk
	phys  uint32 // stored bytes
	logic uint32 // bytes after decoding
	chunk uint32 // chunk id
}

func (e entry) put(b []byte) {
	_ = b[entrySize-1]
	binary.LittleEndian.PutUint32(b[0:4], e.off)
	binary.LittleEndian.PutUint32(b[4:8], e.phys)
	binary.LittleEndian.PutUint32(b[8:12], e.logic)
	binary.LittleEndian.PutUint32(b[12:16], e.chunk)
}

func getEntry(b []byte) entry {
	_ = b[entrySize-1]
	return entry{
		off:   binary.LittleEndian.Uint32(b[0:4]),
		phys:  binary.LittleEndian.Uint32(b[4:8]),
		logic: binary.LittleEndian.Uint32(b[8:12]),
		chunk: binary.LittleEndian.Uint32(b[12:16]),
	}
}

// end is the first byte after the record in its chunk.
func (e entry) end() uint64 { return uint64(e.off) + uint64(e.phys) }

func chunkName(id uint32) string { return strconv.FormatUint(uint64(id), 10) + chunkSuffix }
func segName(id uint32) string   { return strconv.FormatUint(uint64(id), 10) + segSuffix }

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
	if _, ok := parseID(name, chunkSuffix); ok {
		return true
	}
	_, ok := parseID(name, segSuffix)
	return ok
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
