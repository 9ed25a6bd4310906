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
	// verifyRaw: Gather checks raw records against their checksums.
	verifyRaw bool
}

// companionFile is a file Create writes beside the store (WithFile).
type companionFile struct {
	name string
	data []byte
}

func defaultOptions() options {
	return options{
		codec:     Raw,
		tier:      TierBalanced,
		capacity:  MaxChunkCapacity,
		fs:        OSFS,
		verifyRaw: defaultVerifyRaw,
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

// defaultVerifyRaw is whether Gather checks raw records by default: no,
// because it costs more than a tenth of raw gather throughput. Measured on
// the 2-core development machine (shared, so noisy) with
//
//	for i in 1 2 3; do go test -run XXX -bench 'BenchmarkGather$/raw|BenchmarkGatherRawVerify' -benchtime 2s ./zrecord/; done
//
// the throughput with verification over the throughput without, per run:
// 12 KiB records 1.26, 0.63, 0.73; 256 KiB records 0.62, 0.30, 0.91 (an
// earlier set of three: 0.29, 0.68, 0.42 and 0.59, 0.44, 1.03). CRC-32C runs
// at 13-17 GB/s on one core here, against about 10 GB/s for the gather's
// copy over two, so the checksum pass adds roughly half the copy's time.
const defaultVerifyRaw = false

// WithVerify sets whether Gather and GatherPacked check raw records of a
// version-4 store against their checksums (on the destination, right after
// the copy, while the bytes are in the cache); a mismatch is ErrCorrupt
// naming the chunk file and the record. Compressed records are always
// checked before they are decoded, and the table entries a call touches
// always are, whatever this option says. It is a property of the handle
// (see also SetVerify). Default off: see defaultVerifyRaw for the cost.
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
