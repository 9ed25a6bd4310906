package zrecord

import "path"

// MaxChunkCapacity is the largest chunk file: offsets in the record table are
// 32-bit, so a chunk ends at or below 2^32 - 1.
const MaxChunkCapacity int64 = 1<<32 - 1

// MaxRecordSize is the largest record, in bytes (2 GiB).
const MaxRecordSize = 1 << 31

// Option configures Create and Open.
type Option func(*options)

type options struct {
	codec    Codec
	dict     []byte
	tier     DictTier
	capacity int64
	fs       FS
	readOnly bool
	files    []companionFile // WithFile, in order
	replace  bool            // WithReplace
	keep     []string        // WithReplace's patterns
	// verifyRaw: gathers check raw records against their checksums.
	verifyRaw bool
	// elem is the element type of a Narrow store (WithElement); elemSet
	// says WithElement was given.
	elem    Element
	elemSet bool
	// releaseFiles: a read-only handle closes the files it has mapped
	// (WithReleaseFiles).
	releaseFiles bool
}

// companionFile is a file Create writes beside the store (WithFile).
type companionFile struct {
	name string
	data []byte
}

func defaultOptions() options {
	return options{
		codec:        Raw,
		tier:         TierBalanced,
		capacity:     MaxChunkCapacity,
		fs:           OSFS,
		verifyRaw:    defaultVerifyRaw,
		elem:         DefaultElement,
		releaseFiles: true,
	}
}

func buildOptions(opts []Option) options {
	o := defaultOptions()
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	if o.fs == nil {
		o.fs = OSFS
	}
	return o
}

// WithCodec selects the store's codec. It applies to Create only (Open reads
// the codec from meta.zr and ignores this option). Default Raw.
func WithCodec(c Codec) Option {
	return func(o *options) { o.codec = c }
}

// WithDict supplies the zstd dictionary of a ZstdDict store, typically the
// output of TrainDict. Create writes it to dict.zr; Open ignores it (the
// dictionary always comes from dict.zr). No default: Create with ZstdDict and
// no dictionary fails with ErrMissingDict.
func WithDict(dict []byte) Option {
	return func(o *options) { o.dict = dict }
}

// WithDictTier sets the encoder level used to compress records of a ZstdDict
// store: TierFast → zstd SpeedDefault, TierBalanced → SpeedBetterCompression,
// TierMax → SpeedBestCompression. It is a property of the handle, not of the
// store, so it may be given to Open as well. Default TierBalanced.
func WithDictTier(t DictTier) Option {
	return func(o *options) { o.tier = t }
}

// WithChunkCapacity sets how many bytes a chunk file may hold before appends
// roll over to the next one (a record larger than the capacity gets a chunk of
// its own). It is a property of the handle and is used by Append and Compact.
// Default and maximum MaxChunkCapacity; small values are meant for tests.
func WithChunkCapacity(n int64) Option {
	return func(o *options) { o.capacity = n }
}

// defaultVerifyRaw is whether Gather checks raw records by default: yes,
// since the check rides on the copy. copyCRC computes a record's CRC-32C
// from the registers it copies the record through, so a verified gather
// reads the mapped bytes once, as an unverified one does; the check used
// to be a second pass over the copy and cost 0.61-0.69x of unverified
// throughput. Measured side by side on the 2-core development machine (an
// AMD EPYC of the Zen 3 generation, shared: a load average of 2-14 during
// the runs, so single figures swing 2x), BenchmarkGatherVerified with
// LOADERX_BENCH_ROUNDS=5, the medians over the rounds of the throughput
// with the check over the throughput without (wall time, then CPU time),
// on the default path (avx2-vpclmul), for batches of 256 random and of 256
// consecutive records:
//
//	          random       consecutive
//	  2 KiB   0.93  0.83   1.02  0.94
//	 12 KiB   0.73  0.83   0.67  0.77
//	147 KiB   1.35  1.39   1.25  0.94
//	256 KiB   1.32  1.25   0.69  0.79
//
// An earlier run of the same (before copyChecked prefetched whole small
// records) gave 0.92-1.06 for random 2 KiB and 12 KiB records and 0.83-0.97
// for consecutive ones from 12 KiB up. In those runs, batches of more than
// 8 MiB a goroutine wrote their checked copies with streaming stores and
// their unchecked ones without, which is why large random batches ran
// faster checked than not; both now stream from streamMin a call. The checked copy falls short where the
// unchecked loop copies whole runs of consecutive records in one piece
// (REP MOVS, which neither reads the destination first nor pays a call per
// record) and on mid-sized records, where the copy is bound by the
// multiplier (a 256-bit VPCLMULQDQ every other cycle, about 8 bytes a
// cycle) and its profile shows the loop waiting on its loads, which the
// multiplications keep it from running far enough ahead of. The sse42 path
// measured 0.38-0.93, the generic one 0.40-0.85.
const defaultVerifyRaw = true

// WithVerify sets whether Gather, GatherPacked and GatherRagged check raw
// records of a version-4 or -5 store against their checksums, computed as the
// records are copied (copyCRC); a mismatch is ErrCorrupt naming the chunk
// file, the record and both checksums. Compressed records are always
// checked before they are decoded, and the table entries a call touches
// always are, whatever this option says. It is a property of the handle
// (see also SetVerify). Default on; WithVerify(false) is the opt-out, for
// a caller that checks the bytes itself (see defaultVerifyRaw for what
// the check costs).
func WithVerify(on bool) Option {
	return func(o *options) { o.verifyRaw = on }
}

// WithFS routes every file operation of the store through fs (for example a
// fault-injecting file layer). Default OSFS.
func WithFS(fs FS) Option {
	return func(o *options) { o.fs = fs }
}

// WithReadOnly opens the store for reading only: no writes, no recovery and
// no lock, so any number of read-only handles may coexist with one writer
// that only appends. Open only; Create rejects it.
func WithReadOnly() Option {
	return func(o *options) { o.readOnly = true }
}

// WithReleaseFiles sets whether a read-only handle closes its files once it
// has opened the store: meta.zr, and every chunk file and table segment it
// has mapped, which it reads through the mappings alone from then on (on
// unix a mapping stays valid after its descriptor is closed). Such a handle
// holds no file descriptor, only one mapping per chunk file and table
// segment, so that a process can keep thousands of stores open under the
// common limit of 1024 descriptors, as a Set does. A file that is not
// mapped (every file on Windows, and those of an FS whose files have no
// descriptor) stays open, since it is read with ReadAt. Writable handles
// keep their files whatever this says: their writes and their lock go
// through them. Open only. Default on.
func WithReleaseFiles(on bool) Option {
	return func(o *options) { o.releaseFiles = on }
}

// WithFile makes Create write data as the file name in the store's
// directory, fsynced, before the header that publishes the store: whoever
// opens the store finds the file too, and a Create cut short leaves neither.
// It is for what a caller keeps beside the records (a schema, say); the
// store never reads, changes or removes the file afterwards, except that
// WithReplace counts it as part of a store to replace. name must be a plain
// file name that is not one of the store's own files. Create only; it may be
// given more than once, for different names.
func WithFile(name string, data []byte) Option {
	return func(o *options) { o.files = append(o.files, companionFile{name, data}) }
}

// WithReplace lets Create replace a previous store in its directory instead
// of failing with ErrExists. The directory must then hold a meta.zr and
// nothing else but regular files that are either the store's own or named by
// WithFile or matched by one of the keep patterns (path.Match syntax): the
// files a caller keeps beside its stores. Anything else, or no meta.zr, fails
// with ErrExists naming it, and nothing is removed; a previous store that a
// writable handle holds fails with ErrLocked. The previous store stays at
// the path, readable, and locked against writers, until the new one is
// complete and takes its place (see Durability in the package
// documentation); a Create that fails leaves it as it was. An empty or
// missing directory is simply created into. Create only.
func WithReplace(keep ...string) Option {
	return func(o *options) {
		o.replace = true
		o.keep = append(o.keep, keep...)
	}
}

// validateCreate checks the options that only Create takes.
func (o *options) validateCreate(dir string) error {
	seen := make(map[string]bool, len(o.files))
	for _, f := range o.files {
		if !isCompanionName(f.name) {
			return errf(ErrInvalidArgument, "create %s: WithFile(%q): want a plain file name that is not one of the store's", dir, f.name)
		}
		if seen[f.name] {
			return errf(ErrInvalidArgument, "create %s: WithFile(%q) given twice", dir, f.name)
		}
		seen[f.name] = true
	}
	for _, p := range o.keep {
		if _, err := path.Match(p, ""); err != nil {
			return errf(ErrInvalidArgument, "create %s: WithReplace pattern %q: %v", dir, p, err)
		}
	}
	return nil
}

func (o *options) validateCommon() error {
	if o.capacity <= 0 || o.capacity > MaxChunkCapacity {
		return errf(ErrInvalidArgument, "chunk capacity %d not in [1, %d]", o.capacity, MaxChunkCapacity)
	}
	if o.tier > TierMax {
		return errf(ErrInvalidArgument, "dictionary tier %d", uint8(o.tier))
	}
	return nil
}
