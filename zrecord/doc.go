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
// A store is a directory. All integers are little-endian and every
// checksum is a CRC-32C (Castagnoli). This package writes format version
// 4, and version 5 for a store of the narrow codec; it reads versions 1,
// 3, 4 and 5. Its files, where {id} is a decimal number without leading
// zeros:
//
//	meta.zr          the 32-byte header below; a writer holds an flock on it
//	{id}.tab         record-table segment id: the 24-byte entries of the
//	                 indices [id<<27, (id+1)<<27)
//	{id}.chunk       chunk id: record bytes as stored, packed back to back
//	dict.zr          the zstd dictionary (zstd_dict stores only)
//	delete.intent    the log of the Deletes the table has not taken yet
//	compact.journal  the moves of the last Compact, until the next sync
//	{id}.loc         versions 1 and 3 only: their table segments
//
// and the companion files Create wrote with WithFile, which the store never
// reads or changes (loaderx's schema.msgpack is one, below).
//
// meta.zr holds, at these byte offsets:
//
//	0-3    magic       "ZREC"
//	4      version     u8: 4, or 5 for a narrow store (1 and 3: below)
//	5      codec       u8: the codec's tag, from the table below
//	6-9    tail_chunk  u32: the chunk that holds the write frontier
//	10-13  tail_offset u32: the frontier's offset in that chunk
//	14-21  length      u64: the number of records
//	22-25  header_crc  u32: CRC-32C of bytes 0-21 followed by bytes 26-31
//	26-29  dict_crc    u32: CRC-32C of dict.zr; zero without a dictionary
//	30     elem_size   u8: version 5: the element size in bytes (1, 2, 4
//	                   or 8); version 4: zero
//	31     elem_signed u8: version 5: 1 if the elements are signed, else
//	                   0; version 4: zero
//
// The codec is chosen at Create, applies to every record and decides the
// header's version:
//
//	tag  codec      version  an encoded record is
//	0    raw        4        (none: every record is stored as it is)
//	1    zstd       4        one zstd frame
//	2    zstd_dict  4        one zstd frame made against dict.zr
//	3    narrow     5        narrowed integers of the header's element type
//
// Open refuses a header with another magic (ErrNotStore), a version it
// does not read (ErrVersion, below), or (ErrCorrupt) a header_crc that
// does not match, a tag outside that table or not of that version, an
// elem_size or elem_signed outside the values above, a nonzero reserved
// byte, a nonzero dict_crc for a codec other than zstd_dict, a length
// above 2^62, or a dict.zr whose CRC-32C is not dict_crc (a zstd_dict
// store without dict.zr is ErrMissingDict).
//
// Table entry i sits in segment i>>27 at byte (i & (1<<27-1))*24:
//
//	0-3    offset       u32: where the stored bytes start in the chunk
//	4-7    phys_length  u32: the number of stored bytes
//	8-11   logic_length u32: the record's size as Gather returns it
//	12-15  chunk_id     u32: the chunk that holds the stored bytes
//	16-19  data_crc     u32: CRC-32C of the phys_length stored bytes
//	20-23  entry_crc    u32: CRC-32C of i as a u64 followed by bytes 0-19
//
// Segment files are not preallocated: each holds at least the entries
// below length, and a store always has 0.tab and 0.chunk. A record is
// stored raw when phys_length == logic_length and encoded by the store's
// codec when phys_length < logic_length; a larger phys_length, a chunk_id
// past tail_chunk, bytes past the end of the chunk file (for a read-only
// Open or a version-3 store, past tail_offset in the tail chunk), a
// logic_length above MaxRecordSize, an encoded record in a raw store, or a
// narrowed size that fits no width (below) is damage, which the first call
// to use that entry reports (Open of a version-1 or 3 store, which has no
// checksums, reports the first such entry of its table).
//
// A record lives in one chunk and never straddles two; offsets are 32-bit,
// so a chunk holds less than 4 GiB and a record is at most 2 GiB
// (MaxRecordSize). tail_chunk and tail_offset mark the write frontier:
// nothing at or past it belongs to a record, and a writable Open leaves
// exactly the chunk files 0..tail_chunk (it cuts the tail chunk back to
// the frontier and removes the files past it). A record whose encoding
// would not be smaller than itself is stored raw. A stored frame is an
// ordinary single zstd frame without a content checksum; which of the
// format's literal kinds it uses is the writer's choice and readers need
// not know it (this writer stores the literals of a record of at most 4
// KiB plain, not Huffman-coded, when that frame is at most a quarter
// larger than the Huffman-coded one, and such a record raw when the record
// itself is within that quarter and its plain frame would not be smaller
// than it: see plainLiteralsSlack in codec.go). The table grows one
// segment at a time, so there is no fixed record count.
//
// Version 5 is version 4 with the narrow codec: each record is an array of
// integers of the header's element type, of size es bytes, and is stored
// either raw (phys_length == logic_length) or narrowed (phys_length <
// logic_length), as
//
//	byte 0            width code w (u8): 0, 1, 2 or 4, less than es
//	bytes 1..es       base: the record's smallest value, an es-byte element
//	                  (two's complement when signed)
//	then count*w      for each of the count = logic_length/es values, the
//	                  value minus base modulo 2^(8*es), as a w-byte unsigned
//	                  integer; with w == 0 every value equals base
//
// so phys_length is exactly 1 + es + count*w. The writer picks, per record,
// the smallest w that holds the record's largest value minus its smallest;
// a record whose length is not a multiple of es, or that would not shrink
// (phys_length would reach logic_length), is stored raw. data_crc covers
// the narrowed bytes as it covers a frame, and a table entry whose
// phys_length fits no width is damage. A narrow store has its own version
// number so that readers written before the codec (which know versions 1,
// 3 and 4) refuse it with their version error instead of returning the
// narrowed bytes as records; stores of the other codecs stay version 4.
// A reader that meets a version above all it knows reports that the store
// was written by a newer loaderx, and the versions it reads; versions 0
// and 2 were never written, and are refused as such (both ErrVersion).
//
// Every byte a read depends on is covered by a checksum, so that damage is
// reported instead of returned. The hash/crc32 package computes CRC-32C
// with the CPU's CRC instruction on amd64 and arm64. The header's checksum
// fits in its formerly reserved bytes, so meta.zr stays one 32-byte write,
// which is what publishes every change.
// The per-record checksum lives in the table entry rather than in a
// parallel file or in the zstd frame: an entry is read anyway before its
// record, a parallel file would be a second table to keep in step through
// crashes, and a frame checksum would cover neither raw records nor the
// entry's own offset and lengths. Because the data checksum is taken over
// the stored bytes, a wrong offset, length or chunk id in an entry makes
// the read fail the check instead of returning a neighbour's bytes; and
// because the entry checksum takes in the index, an entry written into the
// wrong slot fails too. A 24-byte entry makes 2^28 entries 6 GiB, so a
// segment holds 2^27 (3 GiB) and is still mapped in one piece. The new
// segments are called .tab, not .loc, so that Upgrade can write a whole
// new table beside the old one and switch to it with the single header
// write, without a journal.
//
// On read, the header is checked at Open, with the dictionary; every table
// entry is checked whenever a Gather, GatherPacked, GatherRagged, Sizes,
// Spans, Delete or Compact uses it, and Stats checks every entry the first
// time it sums the table. Open does not read the table of a version-4 or 5
// store: it reads the header, maps the files and, when writable, recovers
// what the header and the journals say (the tail chunk, an interrupted
// Delete or Compact), so its cost and the memory it touches do not grow
// with the record count. The header's frontier is exact (the header is one
// checksummed write), and an entry damaged on disk fails its own checksum
// at the read that uses it, with the same error an Open would give. A compressed or narrowed
// record's stored bytes are checked before every decode (a zstd decode
// costs far more than the check; a widening reads half the bytes or
// fewer), and a widening that would not give exactly the logical size is
// ErrDecode naming the record. A raw record's are checked too, by default,
// on every gather, the raw records of a zstd or narrow store included: the
// checksum is computed from the registers the copy passes the bytes
// through, so the bytes are read once (see defaultVerifyRaw for what it
// costs). A raw record read from a chunk that is not mapped is checked in
// a second pass after the read. WithVerify(false) or SetVerify(false)
// turns the raw check off. Verify scans everything regardless.
//
// Older formats still open and read, without verification (Stats reports
// Version and Checksummed): version 1, this package's first, has the
// layout above without the checksums (zero bytes 22-31 in the header,
// 16-byte entries, the first 16 bytes of the entry above, in .loc segments
// of 2^28); version 3, written by the original loaderx 1.5.2, has the same
// layout, except that every record of a compressed store is a zstd frame,
// even one that is not smaller than its record, and that its files are
// preallocated sparse 4 GiB (files cut to the part in use read as well).
// Neither has the narrow codec. A writable Open leaves a version-3 store's
// files as they are. Upgrade rewrites an old store to version 4 (a
// version-5 store is current), and any write (Append, Delete, Compact)
// upgrades it first; a version-3 frame that is not smaller than its record
// becomes a raw record then, since version 4 reads phys_length ==
// logic_length as raw.
//
// Two more files exist only between an operation and the next sync (see
// Durability for when each is written, synced and removed). delete.intent
// is a log of Delete records back to back, each
//
//	0-3    "ZDEL"
//	4      journal version (u8): 2 in a store of version 4 or 5 (earlier
//	       releases wrote 1 in a store of version 1); then 3 zero bytes
//	8-15   the length before the Delete (u64)
//	16-23  tail_chunk and tail_offset (u32 each), which Delete leaves alone
//	24-31  the length after the Delete (u64)
//	32-39  the number n of entry writes (u64)
//	40-    n writes: the index (u64) and the entry's bytes 0-19 (journal
//	       version 2) or 0-15 (version 1); entry_crc follows from the index
//	end    CRC-32C of the record's bytes before it (u32)
//
// each starting from the state the one before it left; a reader takes the
// longest prefix of whole, matching, consecutive records, so a torn or
// damaged one ends the log. compact.journal is one record:
//
//	0-3    "ZCMR"
//	4      journal version (u8) 4, then 3 zero bytes
//	8-15   the length (u64), which Compact leaves alone
//	16-23  the frontier before: chunk and offset (u32 each)
//	24-31  the frontier after
//	32-39  the first hole: chunk and offset
//	40-43  the number d of destination chunks (u32)
//	44-47  the number m of moves (u32)
//	48-    d destination chunk ids (u32 each), then m moves: the index
//	       (u64), the entry before and the entry after (bytes 0-19 each)
//	end    CRC-32C of everything before it (u32)
//
// and is ignored when that checksum fails. Journals of the earlier in-place
// compaction (journal versions 1 and 2, magic "ZCMP", with copies of the
// records a group overwrote) are still finished by a writable Open.
//
// Beside the store, the loaderx layer keeps schema.msgpack (written by
// capi/schemafile.go, as a WithFile file at Create and replaced later by
// writing .schema.msgpack.*.tmp, fsyncing it, renaming it over and fsyncing
// the directory): a
// MessagePack map with the string keys "version" (1), "kind" ("dense" or
// "ragged"), "dtype" (numpy.dtype.str, such as "<f4", or an ml_dtypes name
// such as "bfloat16"), "shape" (an array of integers: the shape of one
// record, or of one row of a ragged record), "crc32c" (the CRC-32C of the
// decimal version, kind, dtype and each dimension as text, each followed
// by a zero byte) and optionally "codec_choice" (a map of how the
// converter chose the codec, outside the checksum). Readers ignore keys
// they do not know, refuse a version other than 1 and a crc32c that does not
// match, and read a file without crc32c (written before it existed)
// unchecked. The original loaderx 1.5.2's schema (keys "format" =
// "loaderx-zrecord", "version" 1, "kind", "dtype", "codec", and
// "item_shape" or, ragged, a per-record "shapes") is read too.
//
// # Concurrency
//
// A Store is safe for use by many goroutines. Gather, GatherPacked,
// GatherRagged, Sizes, Stats and Append share the store; Delete, Compact and Close wait for them
// to finish and then run alone, so no reader ever sees a half-applied swap
// or a record in motion.
//
// Readers take no lock against appends. Chunk files and table segments are
// mapped read-only and shared at a span sized to the file (the next power
// of two at or above its size, at least 64 MiB, at most the file's whole
// range of 4 GiB for a chunk or 3 GiB for a table segment), so a handle
// reserves address space in proportion to the store. A read-only handle,
// which never sees a file grow, maps each file at exactly the bytes it
// reads, and once its files are mapped it closes them (WithReleaseFiles,
// default on): it holds one mapping per chunk file and table segment and
// no file descriptor. (On Windows nothing
// is mapped and every read is positional: a mapping there could neither
// reach past the file's end nor let the file be cut back.) The lists of files
// are replaced (never changed in place) when a file is added. When a
// writer needs bytes past a file's span it maps the file again, twice as
// large, before writing them, and publishes the new mapping with atomic
// stores; readers load it after the length, so it covers every committed
// byte they may touch. A reader may still hold the shorter mapping, so it
// stays mapped until Close (or until a Compact or Upgrade, which run
// alone, drops the file); the retired mappings of a file add up to less
// than its current span. An Append
// compresses its records first, concurrently with everything else, then,
// under a lock shared only with other Appends, places them, writes their
// bytes and their table entries with positional writes, writes the header,
// and only then publishes the new length with an atomic store. A reader
// loads the length first and touches nothing at or beyond it, so it never
// sees a torn or premature record.
//
// Large batches fan out over Threads() goroutines (see SetThreads); a
// gather is cut into a few contiguous blocks per goroutine, which the
// goroutines claim in turn. A batch under about 512 KiB of work per goroutine
// (a decoded byte counting as several copied ones) runs on the caller
// alone, because waking a goroutine costs more than the copy it would take
// over. The exception is a batch of small raw records of 32 KiB to 256
// KiB, whose cost is a cache miss or two a record rather than the copy:
// outside a data loader's slots (GatherSlot), the caller and one helper
// each locate and copy half of it. Every goroutine that reads a mapping runs with
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
// # Sets
//
// A Set reads several stores as one index space, as a sharded dataset lays
// out its shards (set.go). NewSet makes an eager set of open stores. OpenSet
// makes a lazy one from the shards' directories and lengths and an Opener:
// it opens a store at the first call that needs it, checks that the store
// is read-only and holds the length it was given, and keeps at most a capped
// number open, closing the least recently used (clock algorithm) when it
// needs room; a call pins the stores it reads, so none is closed under it,
// and an evicted store keeps its room until it is closed. The cap is the
// process-wide DefaultMaxOpen, shared by every lazy set made without
// WithMaxOpen (a fifth of vm.max_map_count: 13,106 stores at Linux's
// default), or WithMaxOpen's for a set of its own. An open read-only store
// holds its mappings (one per chunk file and table segment) and no file
// descriptor. A store opened again must show the identity it had the first
// time (meta.zr's device and inode, the header's fields), else the call is
// ErrCorrupt naming it. Running out of
// descriptors (EMFILE, ENFILE) or of mappings (ENOMEM from mmap) while a
// store opens is an error naming the limit (RLIMIT_NOFILE, vm.max_map_count)
// and the cap, the cause kept in the chain. Each call costs in proportion to
// its batch: only the stores it touches are opened, pinned and read, through
// a copy of what the reads need of each (setview.go); a batch that touches
// more stores than the cap is located and checked in rounds of the cap, then
// copied in rounds, so that every index and size is still checked before a
// byte is written. A lazy set's residency maps and verification setting are
// kept per position and given to a store whenever it opens.
//
// # Residency
//
// A reader that keeps a store's files elsewhere and brings them in page by
// page, into sparse files whose missing bytes read as zeros (the
// object-storage cache of loaderx's store layer), gives the store a
// residency map (SetResidency, residency.go): one byte per page of every
// chunk file and table segment, page p of a file cut into pages of P bytes
// being bytes [p*P, (p+1)*P). A zero entry or record would fail its
// checksum like a damaged one, so the map keeps every call to what is
// there: a call that reads table entries (the gathers, Sizes, Spans,
// CheckBytes) refuses with ErrNotResident before it reads an entry whose
// table page, or one of the two an entry crossing a page boundary spans, is
// not held; a gather refuses before it reads a record any of whose chunk
// pages is not held; Stats' first sums and Verify refuse unless every page
// they read is held. Nothing is written before a refusal, and the warm path
// stays one call: the check is a few loads per record. Through the map, a
// store checks every record it reads against its checksum, raw ones
// included, whatever SetVerify says: bytes brought in from elsewhere are
// trusted only through their checksums, and a page lost in a crash reads
// back as zeros that fail them. CheckBytes and CheckTable check record and
// table bytes fetched from elsewhere before the reader marks their pages
// held. A set made to require maps (Set.RequireResidency) refuses a store
// whose position has none before it opens it, so a reader gives each shard
// its map when it first reads it, and a shard's files need not be there
// until then.
//
// # Durability
//
// This section is the one full description of how the store survives the
// death of the process and the loss of power; the methods refer to it.
// There is one policy for every operation:
//
//   - If the process dies at any point (SIGKILL included), the store
//     reopens with every operation that returned, and the one that was
//     running either whole or absent; never a torn or duplicated record.
//     This needs no fsync: what a process wrote is in the page cache.
//   - If the power fails, the store reopens to a state at or after the last
//     Sync (or Close) that returned: what followed it may be lost, but the
//     records the Sync made durable are not, and the store is consistent
//     (the checksums catch torn data; where an Append's header reached the
//     disk before its records, Open reports ErrCorrupt naming them).
//   - Append, Delete and Compact sync nothing unless they are about to
//     overwrite the last durable copy of something; Sync and Close make
//     everything durable. Each case where one does sync is below: the log
//     of pending Deletes before the table takes them, compact.journal, an
//     Append, Delete or Compact that would replace what an unsynced
//     Compact still needs, and the Upgrade any write of an old store
//     starts with.
//
// Create never lets the path hold a store in the making. It builds the
// store in a hidden directory of the path's own, .NAME.zrecord-stage
// beside it (a NAME longer than 200 bytes is cut to at most 183, at a
// character boundary, and "-" and the 16 hex digits of its 64-bit FNV-1a
// hash appended), in a directory of its own there, create- followed by 16
// lowercase hex digits. It makes that directory's meta.zr first, empty,
// and holds the lock on it from then on; then it writes the dictionary,
// the first chunk and table segment (both empty) and the WithFile files,
// each fsynced, then the header, fsynced, then fsyncs that directory.
// One rename then puts it at the path, and the parent directory is
// fsynced, then .NAME.zrecord-stage; appends go to the path from then on.
// Killed before the rename, a Create leaves the path as it was, and its
// directory in .NAME.zrecord-stage, which the next Create of the path
// removes once it can take that lock (so never one of a Create still
// running); killed after it, the store is there, empty, and later kills
// leave a prefix of its records as below. A Create that is done removes
// .NAME.zrecord-stage when that is left empty. A Create lists no
// directory but .NAME.zrecord-stage and the path itself, so its cost does
// not grow with the number of entries beside the path; only where the
// parent holds at most 128 entries (which it learns by reading at most
// 129) does it also clear, by the same rules, the staging directories
// that earlier releases left straight beside the path (.NAME.zrecord-
// create- or .NAME.zrecord-trash- and 16 hex digits); in a larger parent
// those stay. With WithReplace the previous store keeps the
// path, and its writer lock, until the new one is complete; then
// renameat2(RENAME_EXCHANGE) swaps the two in one step where the system
// has it (Linux), and the previous store is removed from the hidden name.
// Elsewhere the swap is two renames (the previous store to trash- with
// the same digits in .NAME.zrecord-stage, the new one onto the path), and
// a kill between them leaves no store at the path. A power failure before
// the parent's fsync may undo the rename, which leaves the same states.
// Where a rename cannot work or would change what the caller made (on
// Windows; a path that is a symbolic link, the root, "." or ".."; an
// existing empty directory that is a mount point; a parent directory
// Create may not write), Create builds in the directory itself, header
// last (WithReplace then removes the previous store first, its meta.zr
// last): a directory whose meta.zr lacks the header is not a store, and
// the next Create recognises such a directory (store files only, no
// header) and clears it, as it does those that Creates of earlier
// versions left.
//
// Append writes record bytes, then table entries, then the header, and
// syncs nothing. If the process dies at any point, the store reopens with a
// prefix of its batches, never a torn record: a writable Open cuts the tail
// chunk back to the frontier recorded in meta.zr (raising the frontier to
// the end of the last record if the header was torn below it) and removes
// chunk files past it. Sync fsyncs the chunk files written since the last
// Sync, then the table segments, then the directory if files were created
// or removed, then meta.zr, so the header that makes records visible
// reaches the disk after the records.
//
// Delete overwrites nothing. It works out the entry writes that fill its
// holes (reading through the Deletes still pending), appends them as one
// CRC-sealed record to delete.intent (created by the first Delete after the
// table was last brought up to date), and publishes them to readers from
// memory, with the new length. Killed afterwards, or after a power failure
// that kept the record, the store reopens with the Delete; a power failure
// that lost the record (or tore it) leaves the store as before it, since the
// table and the header were not touched. The table takes the pending Deletes
// at the next Sync or Close, before the next Append (whose entries go where
// the last records were) or Verify, in the next Compact (below), or once the
// log passes 64 MiB: the store is synced, then the log, which is the one
// fsync a Delete costs and which it defers to that point, then the entries
// and the header with the new length are written and synced, and the log is
// removed. A writable Open that finds the log while the header shows the
// length before its first record or after its last applies it again (the
// writes are idempotent), syncs, and removes it. A read-only Open takes a
// live log's entries into its view, as the writer does.
//
// Compact overwrites no live byte. It keeps the records before the first
// hole (in physical order) in place and copies every live record after it
// into chunks that hold nothing: chunk files left empty by an earlier
// compaction, or new ones past the frontier. Then it writes
// compact.journal, with every moved record's entry before and after, and
// fsyncs it and the directory: the table entries are about to be
// overwritten, and the journal is then the only record of the old ones.
// Then it writes the entries and the header with the new frontier. The old copies (the rest
// of the hole's chunk, and chunks that held only moved records) stay on
// disk until the next Sync or Close: after it has synced the new copies,
// the table and the header, it cuts the hole's chunk back to the hole,
// empties or removes the chunks that held only old copies, and removes the
// journal. An Append that would reuse such a chunk file past the new
// frontier syncs first, and so does a Compact that finds the old copies
// of the previous one still on disk, since its journal would replace the
// one that describes them. A writable Open that finds the journal while the
// moved entries are each old, new or torn between the two checks the new
// copies against their checksums: if all are intact it completes the
// switch (entries, header) and cuts off the old copies; if a power failure
// lost some, it switches the entries and the header back to the old
// copies, which nothing overwrote, and cuts off the new ones. Until that
// sync, compacting needs the disk space of the moved records twice.
//
// A Compact that finds Deletes pending takes them in: it syncs the store
// and their log (before the copies, so the copies stay unsynced), writes
// their entry writes into the table with its own, and leaves the log with
// the journal for the next sync; the journal builds on the log (its
// frontier and length are the log's end state), and a writable Open that
// finds both applies the log's writes before it judges the journal. A
// Delete made before that sync syncs first, so that the log is not
// replaced while the journal refers to it. A Compact that has nothing to
// move but the frontier writes pending Deletes into the table the ordinary
// way first.
//
// Upgrade syncs the store, writes the new table's .tab segments (and the
// raw copies of oversized version-3 frames, past the frontier), syncs them,
// the chunks and the directory, then switches by writing and syncing the
// version-4 header, and only then removes the .loc segments and cuts the
// chunks back to the bytes in use: a crash before the switch leaves the
// old store (the unused .tab files beside it are removed by a version-1
// store's writable Open, and rewritten by the next Upgrade of a version-3
// store, whose files a writable Open leaves alone), and one after it the
// new store, whose writable Open removes leftover .loc files.
//
// The power-failure reasoning assumes what journaling file systems (ext4,
// XFS) provide: a file's unsynced writes may reach the disk in any subset,
// while directory changes (a file created, renamed or removed) reach it in
// the order they were made.
//
// A read-only Open does no repair: it refuses a store whose compact.journal
// shows an interrupted Compact (ErrCorrupt; open it writable once).
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
// dst. Open validates the header and the dictionary (and the whole table of
// a version-1 or 3 store) and reports damage as ErrCorrupt (ErrVersion,
// ErrMissingDict where they apply); a damaged table entry of a current
// store is ErrCorrupt from the call that uses it, never wrong bytes. A checksum that does
// not match is ErrCorrupt naming the file, the record index and both
// values, for example "record 17 in /data/s/0.chunk: stored bytes checksum
// 0x1234abcd, table says 0x9e3779b9". Verify (or VerifyDir, for a store
// that does not open) lists every fault of a store instead of stopping at
// the first.
//
// If a write fails part way in a way the handle cannot undo (for instance
// the disk fails while the table is being rewritten), the handle refuses
// further writes, and reads too if the table may be inconsistent, with an
// error wrapping the original failure. Reopening the store recovers it.
package zrecord
