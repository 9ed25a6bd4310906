package zrecord

import "sync/atomic"

// A batch of many small records writes more table than record bytes: a
// 24-byte entry per record, against 16 bytes for a record of four int32s.
// Encoding the entries (a checksum each) and copying them into the page
// cache then costs as much as the records themselves, so such a batch has
// its table written aside, on a goroutine of its own, part by part as the
// record bytes of each part are written and their checksums known, while
// the caller goes on with the next part. The table is a file of its own,
// so the two writers do not contend for one inode's lock, as two writers
// of one chunk file would (see appendRawParts). Visibility is unchanged:
// the header is written only after both are done (finish), so a batch still
// appears whole or not at all.

// tableAsideEntries is the smallest batch whose table is written aside: at
// 1.5 MiB of entries the hand-over costs nothing next to the writes. Tests
// lower it to send small batches this way.
var tableAsideEntries atomic.Int64

func init() { tableAsideEntries.Store(1 << 16) }

// tableWriter writes the table entries of one batch's parts as they are
// handed over (add), then reports the first error (wait).
type tableWriter struct {
	w     *batchWriter
	ents  []entry // the batch's entries: the whole backing array of w.entries
	table []byte
	ready chan [2]int
	done  chan error
	ended bool
}

// tableAside starts writing the batch's table aside into the scratch
// table, or returns nil when the batch is too small for it to pay (the
// caller then has publish write the table).
func (w *batchWriter) tableAside(table []byte) *tableWriter {
	if w.n < tableAsideEntries.Load() {
		return nil
	}
	t := &tableWriter{w: w, ents: w.entries[:w.n], table: table, ready: make(chan [2]int, 256), done: make(chan error, 1)}
	go t.run()
	return t
}

func (t *tableWriter) run() {
	var err error
	for r := range t.ready {
		if err == nil {
			err = guarded("append", 0, func(int) error { return t.w.writeTable(t.ents, t.table, r[0], r[1]) })
		}
	}
	t.done <- err
}

// add hands over the records [lo, hi) of the batch, whose entries (bytes
// written, checksums set) are final; the caller does not change them again.
func (t *tableWriter) add(lo, hi int) { t.ready <- [2]int{lo, hi} }

// wait ends the hand-over and returns the first error of the parts' table
// writes. Calling it again returns nil.
func (t *tableWriter) wait() error {
	if t == nil || t.ended {
		return nil
	}
	t.ended = true
	close(t.ready)
	return <-t.done
}
