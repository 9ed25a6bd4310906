package zrecord

import (
	"encoding/binary"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The Format section of doc.go is the one description of the on-disk
// format, and it drifted from the code once already (it named version 4
// after version 5 existed). These tests read its numbers (the version
// sentence, the codec tag table, and the byte offsets of the header and of
// a table entry) and hold them to the constants and to what the encoders
// write, so that changing either side alone fails here.

// docSpan is where a value the checker read sits in doc.go's text, so that
// the drift test can change exactly that value.
type docSpan struct{ start, end int }

// docField is a row of one of the section's byte tables: bytes lo..hi.
type docField struct {
	lo, hi int
	name   string
}

// formatDoc is what checkFormatDoc reads from doc.go.
type formatDoc struct {
	writes, narrow int
	reads          []int
	codecs         []struct {
		tag     int
		name    string
		version int
	}
	header         []docField
	entryShift     int
	entryMaskShift int
	entrySize      int
	entry          []docField
	spans          []docSpan // every number and codec name read
	problems       []string
}

func (d *formatDoc) fail(format string, args ...any) {
	d.problems = append(d.problems, fmt.Sprintf(format, args...))
}

// atoi reads the decimal number text[s.start:s.end] and records its span.
func (d *formatDoc) atoi(text string, start, end int) int {
	d.spans = append(d.spans, docSpan{start, end})
	v, err := strconv.Atoi(text[start:end])
	if err != nil {
		d.fail("%q is not a number", text[start:end])
	}
	return v
}

// prose turns a sentence into a pattern that matches it across comment
// lines: each space matches any run of spaces, newlines and "//".
func prose(sentence string) *regexp.Regexp {
	return regexp.MustCompile(strings.ReplaceAll(sentence, " ", `[\s/]+`))
}

var (
	docVersionSentence = prose(`This package writes format version (\d+), and version (\d+) for a store of the narrow codec; it reads versions ((?:\d+, )*\d+) and (\d+)\.`)
	docCodecHead       = regexp.MustCompile(`(?m)^//\ttag +codec +version\b.*\n`)
	docCodecRow        = regexp.MustCompile(`^//\t(\d+) +(\w+) +(\d+) `)
	docHeaderIntro     = prose(`meta.zr holds, at these byte offsets:`)
	docEntryIntro      = prose(`Table entry i sits in segment i>>(\d+) at byte \(i & \(1<<(\d+)-1\)\)\*(\d+):`)
	docTableRow        = regexp.MustCompile(`^//\t(\d+)(?:-(\d+))? +(\w+) `)
	docNumberList      = regexp.MustCompile(`\d+`)
)

// formatSection returns the bounds of the "# Format" section of text.
func formatSection(text string) (int, int, bool) {
	start := strings.Index(text, "\n// # Format\n")
	if start < 0 {
		return 0, 0, false
	}
	end := strings.Index(text[start+1:], "\n// # ")
	if end < 0 {
		return 0, 0, false
	}
	return start, start + 1 + end, true
}

// tableAfter reads the rows of the byte table that starts on the line after
// position at (a blank comment line before the table is skipped), up to the
// first comment line that is not a row or a row's continuation.
func (d *formatDoc) tableAfter(text string, at int) []docField {
	var rows []docField
	pos := at
	for pos < len(text) {
		nl := strings.IndexByte(text[pos:], '\n')
		if nl < 0 {
			break
		}
		line := text[pos : pos+nl]
		if m := docTableRow.FindStringSubmatchIndex(line); m != nil {
			f := docField{name: line[m[6]:m[7]]}
			f.lo = d.atoi(text, pos+m[2], pos+m[3])
			f.hi = f.lo
			if m[4] >= 0 {
				f.hi = d.atoi(text, pos+m[4], pos+m[5])
			}
			rows = append(rows, f)
		} else if !(line == "//" && len(rows) == 0) && !strings.HasPrefix(line, "//\t ") {
			break
		}
		pos += nl + 1
	}
	return rows
}

// readFormatDoc reads the numbers of doc.go's Format section from text.
func readFormatDoc(text string) *formatDoc {
	d := &formatDoc{}
	lo, hi, ok := formatSection(text)
	if !ok {
		d.fail("no \"# Format\" section followed by another section")
		return d
	}
	sec := text[:hi] // matches must start at or after lo

	if m := docVersionSentence.FindStringSubmatchIndex(sec[lo:]); m == nil {
		d.fail("no sentence %q", "This package writes format version N, and version M for a store of the narrow codec; it reads versions ...")
	} else {
		for k := range m {
			if m[k] >= 0 {
				m[k] += lo
			}
		}
		d.writes = d.atoi(text, m[2], m[3])
		d.narrow = d.atoi(text, m[4], m[5])
		for _, n := range docNumberList.FindAllStringIndex(text[m[6]:m[7]], -1) {
			d.reads = append(d.reads, d.atoi(text, m[6]+n[0], m[6]+n[1]))
		}
		d.reads = append(d.reads, d.atoi(text, m[8], m[9]))
	}

	if m := docCodecHead.FindStringIndex(sec[lo:]); m == nil {
		d.fail("no codec table (a line \"tag  codec  version ...\")")
	} else {
		for pos := lo + m[1]; pos < hi; {
			nl := strings.IndexByte(text[pos:], '\n')
			line := text[pos : pos+nl]
			r := docCodecRow.FindStringSubmatchIndex(line)
			if r == nil {
				break
			}
			row := struct {
				tag     int
				name    string
				version int
			}{name: line[r[4]:r[5]]}
			row.tag = d.atoi(text, pos+r[2], pos+r[3])
			d.spans = append(d.spans, docSpan{pos + r[4], pos + r[5]})
			row.version = d.atoi(text, pos+r[6], pos+r[7])
			d.codecs = append(d.codecs, row)
			pos += nl + 1
		}
	}

	if m := docHeaderIntro.FindStringIndex(sec[lo:]); m == nil {
		d.fail("no header table (after %q)", "meta.zr holds, at these byte offsets:")
	} else {
		d.header = d.tableAfter(text, lo+m[1]+1)
	}

	if m := docEntryIntro.FindStringSubmatchIndex(sec[lo:]); m == nil {
		d.fail("no entry table (after %q)", "Table entry i sits in segment i>>S at byte (i & (1<<S-1))*N:")
	} else {
		d.entryShift = d.atoi(text, lo+m[2], lo+m[3])
		d.entryMaskShift = d.atoi(text, lo+m[4], lo+m[5])
		d.entrySize = d.atoi(text, lo+m[6], lo+m[7])
		d.entry = d.tableAfter(text, lo+m[1]+1)
	}
	return d
}

// checkFormatDoc returns every way the Format section of text disagrees
// with the code.
func checkFormatDoc(text string) []string {
	d := readFormatDoc(text)
	if len(d.problems) > 0 {
		return d.problems
	}

	// Versions.
	if d.writes != formatVersion {
		d.fail("doc.go: this package writes format version %d; the code writes %d (formatVersion)", d.writes, formatVersion)
	}
	if d.narrow != versionNarrow || d.narrow != int(headerVersion(Narrow)) {
		d.fail("doc.go: a narrow store is version %d; the code writes %d", d.narrow, headerVersion(Narrow))
	}
	var reads []int
	for _, v := range readVersions {
		reads = append(reads, int(v))
	}
	if !slices.Equal(d.reads, reads) {
		d.fail("doc.go: reads versions %v; the code reads %v (readVersions)", d.reads, reads)
	}

	// Codec tags: every valid codec once, in order, with its name and the
	// version its stores are written as.
	var want []int
	for c := 0; c < 256; c++ {
		if Codec(c).valid() {
			want = append(want, c)
		}
	}
	var tags []int
	for _, row := range d.codecs {
		tags = append(tags, row.tag)
		c := Codec(row.tag)
		if !c.valid() {
			d.fail("doc.go: codec tag %d (%s) is not a codec of the code", row.tag, row.name)
			continue
		}
		if c.String() != row.name {
			d.fail("doc.go: codec tag %d is %q; the code names it %q", row.tag, row.name, c.String())
		}
		if pc, err := ParseCodec(row.name); err != nil || pc != c {
			d.fail("doc.go: codec name %q parses to %v, %v; want tag %d", row.name, pc, err, row.tag)
		}
		if int(headerVersion(c)) != row.version {
			d.fail("doc.go: codec %s is format version %d; the code writes %d", row.name, row.version, headerVersion(c))
		}
	}
	if !slices.Equal(tags, want) {
		d.fail("doc.go: codec tags %v; the code has %v", tags, want)
	}

	// The header: encode one with a distinct value in every field and read
	// each field back at the offsets doc.go gives.
	h := header{version: versionNarrow, codec: Narrow, tailChunk: 0x11223344, tailOffset: 0x55667788,
		length: 0x0102030405060708, dictSum: 0x99aabbcc, elem: Element{Size: 8, Signed: true}}
	hb := h.encode()
	checkTable(d, "meta.zr", d.header, hb[:], map[string]uint64{
		"magic":       uint64(binary.LittleEndian.Uint32(magic[:])),
		"version":     uint64(h.version),
		"codec":       uint64(h.codec),
		"tail_chunk":  uint64(h.tailChunk),
		"tail_offset": uint64(h.tailOffset),
		"length":      h.length,
		"header_crc":  uint64(headerSum(hb[:])),
		"dict_crc":    uint64(h.dictSum),
		"elem_size":   8,
		"elem_signed": 1,
	})

	// A table entry: the geometry, then the fields of one written at an
	// index whose checksum depends on it.
	l := layoutV4
	if d.entryShift != int(l.shift) || d.entryMaskShift != int(l.shift) {
		d.fail("doc.go: entry i sits in segment i>>%d, slot i & (1<<%d-1); the code shifts by %d", d.entryShift, d.entryMaskShift, l.shift)
	}
	if d.entrySize != int(l.entSize) {
		d.fail("doc.go: entries of %d bytes; the code writes %d", d.entrySize, l.entSize)
	}
	const idx = 0x123456789
	e := entry{off: 0x01020304, phys: 0x05060708, logic: 0x090a0b0c, chunk: 0x0d0e0f10, sum: 0xdeadbeef}
	eb := make([]byte, l.entSize)
	l.putEntry(eb, idx, e)
	checkTable(d, "a table entry", d.entry, eb, map[string]uint64{
		"offset":       uint64(e.off),
		"phys_length":  uint64(e.phys),
		"logic_length": uint64(e.logic),
		"chunk_id":     uint64(e.chunk),
		"data_crc":     uint64(e.sum),
		"entry_crc":    uint64(entrySum(idx, eb)),
	})
	return d.problems
}

// checkTable checks rows, doc.go's table of what's bytes b, against want,
// the value each field holds: every field once, the rows in order and
// covering b exactly, each reading its value little-endian.
func checkTable(d *formatDoc, what string, rows []docField, b []byte, want map[string]uint64) {
	next := 0
	seen := map[string]bool{}
	for _, f := range rows {
		if f.lo != next || f.hi < f.lo {
			d.fail("doc.go: %s field %s at bytes %d-%d, after a field that ends at %d", what, f.name, f.lo, f.hi, next-1)
		}
		next = f.hi + 1
		v, ok := want[f.name]
		if !ok || seen[f.name] {
			d.fail("doc.go: %s field %q is unknown or given twice", what, f.name)
			continue
		}
		seen[f.name] = true
		if f.hi >= len(b) || f.hi-f.lo >= 8 {
			d.fail("doc.go: %s field %s at bytes %d-%d, outside its %d bytes", what, f.name, f.lo, f.hi, len(b))
			continue
		}
		var buf [8]byte
		copy(buf[:], b[f.lo:f.hi+1])
		if got := binary.LittleEndian.Uint64(buf[:]); got != v {
			d.fail("doc.go: %s field %s at bytes %d-%d holds %#x; the code puts %#x there", what, f.name, f.lo, f.hi, got, v)
		}
	}
	if next != len(b) {
		d.fail("doc.go: the %s fields cover bytes 0-%d of %d", what, next-1, len(b))
	}
	for name := range want {
		if !seen[name] {
			d.fail("doc.go: %s field %s is missing", what, name)
		}
	}
}

func readDocGo(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestFormatDocMatchesCode(t *testing.T) {
	for _, p := range checkFormatDoc(readDocGo(t)) {
		t.Error(p)
	}
}

// TestFormatDocCatchesDrift changes, one at a time, every number and codec
// name the check reads in doc.go, and requires the check to notice each.
func TestFormatDocCatchesDrift(t *testing.T) {
	text := readDocGo(t)
	d := readFormatDoc(text)
	if len(d.problems) > 0 {
		t.Fatal(d.problems)
	}
	if len(d.codecs) == 0 || len(d.header) == 0 || len(d.entry) == 0 || len(d.reads) == 0 {
		t.Fatalf("doc.go: read %d codecs, %d header fields, %d entry fields, %d read versions",
			len(d.codecs), len(d.header), len(d.entry), len(d.reads))
	}
	for _, s := range d.spans {
		old := text[s.start:s.end]
		repl := old + "x"
		if n, err := strconv.Atoi(old); err == nil {
			repl = strconv.Itoa(n + 1)
		}
		mutated := text[:s.start] + repl + text[s.end:]
		if p := checkFormatDoc(mutated); len(p) == 0 {
			line := strings.Count(text[:s.start], "\n") + 1
			t.Errorf("doc.go:%d: %q changed to %q, and the check saw nothing", line, old, repl)
		}
	}
}
