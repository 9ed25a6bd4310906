// Package zrecord is a persistent store of byte records built to feed
// training loops: a record is found in O(1) by its index, and a whole batch
// of them is copied (or decompressed) straight into one caller-owned buffer
// in a single call.
//
// The store is unordered and dense. Its live records are always exactly the
// indices 0..Len()-1: Delete fills each hole with the current last record
// instead of leaving a tombstone, so an index is stable only until the next
// Delete. Records are opaque bytes; giving them a type is the caller's job.
// Every operation takes a batch, and a single record is a batch of one.
//
//	s, err := zrecord.Create("train", zrecord.WithCodec(zrecord.Zstd))
//	first, err := s.Append(records)
//	err = s.Gather([]int64{7, 3, 7}, dst, recordSize) // dense, fixed stride
//	err = s.Close()
//
// # Format
//
// A store is a directory. All integers are little-endian.
//
//	meta.zr      32-byte header: magic "ZREC", version (u8), codec (u8),
//	             tail_chunk (u32), tail_offset (u32), length (u64), and
//	             10 reserved zero bytes
//	{id}.loc     record-table segment id holds the entries of indices
//	             [id<<28, (id+1)<<28); entry i sits at (i & (1<<28-1))*16
//	             and is four u32: offset, phys_length, logic_length, chunk_id
//	{id}.chunk   record bytes, packed back to back
//	dict.zr      the zstd dictionary (ZstdDict stores only)
//
// A record lives in one chunk and never straddles two; offsets are 32-bit,
// so a chunk holds less than 4 GiB and a record is at most 2 GiB
// (MaxRecordSize). tail_chunk and tail_offset mark the write frontier: the
// chunk files are exactly 0..tail_chunk and nothing at or past the frontier
// belongs to a record. The codec is chosen at Create and applies to every
// record; a record whose zstd frame would not be smaller than itself is
// stored raw, recognisable by phys_length == logic_length. The table
// grows one segment at a time, so there is no fixed record count.
//
// Two more files exist only while an operation runs: delete.intent (the
// entry writes of a Delete) and compact.journal (the moves of one group of
// a Compact, with copies of the records they overwrite). Both carry a
// CRC-32C; a torn one is ignored.
//
// # Concurrency
//
// A Store is safe for use by many goroutines. Gather, GatherPacked, Sizes,
// Stats and Append share the store; Delete, Compact and Close wait for them
// to finish and then run alone, so no reader ever sees a half-applied swap
// or a record in motion.
//
// Readers take no lock against appends. Chunk files and table segments are
// mapped once, read-only and shared, over their whole 4 GiB range, so a
// mapping never moves while the store grows; the lists of mappings are
// replaced (never changed in place) when a file is added. An Append
// compresses its records first, concurrently with everything else, then,
// under a lock shared only with other Appends, places them, writes their
// bytes and their table entries with positional writes, writes the header,
// and only then publishes the new length with an atomic store. A reader
// loads the length first and touches nothing at or beyond it, so it never
// sees a torn or premature record.
//
// Large batches fan out over Threads() goroutines (see SetThreads) in
// contiguous blocks; a batch under about 1 MiB per goroutine runs on the
// caller alone, because waking a goroutine costs more than the copy it
// would take over. Every goroutine that reads a mapping runs with
// debug.SetPanicOnFault and recovers, so a file truncated under a reader by
// another process produces an error, not a crash. No panic leaves the
// package: each exported call converts one into an error.
//
// A writable handle holds an exclusive flock on meta.zr for its lifetime,
// so a second writable Open, in this process or another, fails with
// ErrLocked. Read-only handles take no lock. They see the records that
// existed when they were opened and stay correct while a writer appends,
// but not while it deletes or compacts.
//
// # Durability
//
// This section is the one full description of how the store survives the
// death of the process and the loss of power; the methods refer to it.
//
// Create writes the dictionary, the first chunk and table segment and the
// WithFile files, each fsynced, then the header of meta.zr, fsynced, then
// fsyncs the directory. A directory whose meta.zr lacks the header is not a
// store, so a Create cut short never looks like one.
//
// Append writes record bytes, then table entries, then the header, and
// syncs nothing. If the process dies at any point, the store reopens with a
// prefix of its batches, never a torn record: a writable Open cuts the tail
// chunk back to the frontier recorded in meta.zr (raising the frontier to
// the end of the last record if the header was torn below it) and removes
// chunk files past it. Appended records survive a power failure once Sync
// (or Close) has returned. Sync fsyncs the chunk files written since the
// last Sync, then the table segments, then the directory if files were
// created or removed, then meta.zr, so the header that makes records
// visible reaches the disk after the records.
//
// Delete and Compact rewrite the places of records that may already be
// durable, so they make themselves safe against power failure as well as
// against the death of the process; each costs a few fsyncs. Both first
// sync the store, so that what they journal describes what the disk holds.
// Their journals carry a CRC-32C; a torn journal is ignored, and so is a
// stale one that does not match the store it sits in.
//
// Delete works out the final table in memory, then writes delete.intent:
// the frontier and length before, the length after, and every table entry
// it will write. It fsyncs the journal and the directory, writes the
// entries and the header with the new length, syncs the store, removes the
// journal and fsyncs the directory. A writable Open that finds the journal
// while the header still shows its before or its after length applies it
// again (the writes are idempotent), syncs, and removes it.
//
// Compact moves records, never to a higher address, in groups of at most
// 4096 moves or 64 MiB. For each group it overwrites compact.journal with
// the group's moves (index, old entry, new entry) and a copy of every record
// whose old bytes the group overwrites (one moved down by less than its
// length, or onto the old place of a record moved just before it), and
// fsyncs it; then writes the group's bytes at their new places and fsyncs
// the chunks; then writes the group's table entries and fsyncs the
// segments. A writable Open that finds the journal checks that every entry
// of the group is still its old or its new value, or a write between the
// two cut short (otherwise the journal is stale and ignored); it rewrites
// from the journal's copies the records whose entries are not yet new and
// whose old bytes may be lost, completes torn entries, and syncs before it
// removes the journal. After the last group the frontier moves down in
// meta.zr, fsynced before any chunk shrinks; then each chunk is cut to its
// packed size, chunk files past the frontier are removed, and the journal
// is removed and the directory fsynced. Compact cut short anywhere leaves a
// consistent store, and running it again finishes the job.
//
// So either operation leaves the store as it was before or as it is after,
// never in between. A read-only Open does no repair: it refuses a store
// whose journal shows an interrupted Delete or Compact (ErrCorrupt; open it
// writable once).
//
// # Errors
//
// Every error wraps one of the sentinel errors (ErrNotStore, ErrCorrupt,
// ErrIndexOutOfRange, ...) or an error of the file layer, with %w, and names
// the file, index or value at fault; test with errors.Is. A missing
// directory matches both ErrNotStore and fs.ErrNotExist. Calls that take
// indices check all of them, and all sizes, before writing a byte or
// changing the store, so an error leaves the destination and the store as
// they were; a Gather that fails while decoding may have filled part of
// dst. Open validates the whole record table and reports damage as
// ErrCorrupt (ErrVersion, ErrMissingDict where they apply) instead of
// returning wrong bytes later.
//
// If a write fails part way in a way the handle cannot undo (for instance
// the disk fails while the table is being rewritten), the handle refuses
// further writes, and reads too if the table may be inconsistent, with an
// error wrapping the original failure. Reopening the store recovers it.
package zrecord
