package zrecord

// Stats describes a store's size.
type Stats struct {
	// Length is the number of records.
	Length int64
	// LiveBytes is the stored size of the live records (after compression).
	LiveBytes int64
	// ChunkBytes is what the chunk files hold up to the write frontier,
	// live records and garbage alike. ChunkBytes - LiveBytes bounds what
	// Compact can reclaim; up to one record per chunk of it is slack that
	// stays, since records never straddle chunks.
	ChunkBytes int64
	// LogicalBytes is the size of the live records as Gather returns them.
	LogicalBytes int64
	// Codec is the store's codec.
	Codec Codec
	// Element is the element type of a Narrow store's records; its Size
	// is zero for the other codecs.
	Element Element
	// DictBytes is the size of the dictionary (ZstdDict stores), else 0.
	DictBytes int64
	// Chunks is the number of chunk files.
	Chunks int64
	// Version is the store's format version: 4 for stores this package
	// writes (5 for Narrow stores), 1 or 3 for older ones until they are
	// upgraded (see Upgrade).
	Version int
	// Checksummed reports whether the format carries checksums (version
	// 4 or 5). Records of an older store are read unverified.
	Checksummed bool
	// Verified reports whether the gathers check every record they
	// return against its checksum: for a store of version 4 or 5 unless
	// raw verification was turned off (WithVerify(false), SetVerify(false)),
	// which leaves raw records, those of a compressed or narrow store that
	// did not shrink included, unchecked (frames and narrowed records are
	// checked always).
	Verified bool
}

// Stats returns the store's current figures. LiveBytes and LogicalBytes
// are sums over the record table, which Open does not read: the first Stats
// of a handle walks the table once (checking every entry, as a gather
// would), and the sums are kept up to date in memory from then on, so later
// calls are cheap. A store with a residency map (SetResidency) refuses that
// first call with ErrNotResident unless every page of its table is held.
func (s *Store) Stats() (st Stats, err error) {
	defer recoverTo(&err, "stats")
	s.mu.RLock()
	defer s.mu.RUnlock()
	if err := s.checkRead("stats"); err != nil {
		return Stats{}, err
	}
	s.appendMu.Lock()
	defer s.appendMu.Unlock()
	if !s.totalsKnown {
		if err := s.wholeResident("stats", false); err != nil {
			return Stats{}, err
		}
	}
	if err := s.sumTotals(); err != nil {
		return Stats{}, err
	}
	chunks := *s.chunks.Load()
	var bytes int64
	for _, c := range chunks[:s.tail.chunk+1] {
		bytes += c.end.Load()
	}
	return Stats{
		Length:       s.length.Load(),
		LiveBytes:    s.live,
		ChunkBytes:   bytes,
		LogicalBytes: s.logical,
		Codec:        s.codec,
		Element:      s.elem,
		DictBytes:    int64(len(s.dict)),
		Chunks:       int64(s.tail.chunk) + 1,
		Version:      int(s.lay.version),
		Checksummed:  s.lay.checksummed(),
		Verified:     s.checkRaws(),
	}, nil
}

// SetVerify turns the checking of raw records on gathers on (the default)
// or off for this handle, from the next call on (see WithVerify). It may
// be called at any time, concurrently with reads.
func (s *Store) SetVerify(on bool) { s.verifyRaw.Store(on) }
