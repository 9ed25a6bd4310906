package zrecord

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
}

func defaultOptions() options {
	return options{
		codec:    Raw,
		tier:     TierBalanced,
		capacity: MaxChunkCapacity,
		fs:       OSFS,
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

func (o *options) validateCommon() error {
	if o.capacity <= 0 || o.capacity > MaxChunkCapacity {
		return errf(ErrInvalidArgument, "chunk capacity %d not in [1, %d]", o.capacity, MaxChunkCapacity)
	}
	if o.tier > TierMax {
		return errf(ErrInvalidArgument, "dictionary tier %d", uint8(o.tier))
	}
	return nil
}
