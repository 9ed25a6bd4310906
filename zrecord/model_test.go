package zrecord_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/loaderx/loaderx/zrecord"
	"github.com/loaderx/loaderx/zrecord/internal/faultfs"
)

// Randomized tests log their seed; replay one with
//
//	ZRECORD_SEED=<seed> go test -run <Test> ./zrecord/
//
// or with -args -zrecord.seed=<seed>.
var (
	flagSeed = flag.Int64("zrecord.seed", 0, "seed for the randomized zrecord tests (0: ZRECORD_SEED or the clock)")
	flagOps  = flag.Int("zrecord.ops", 0, "operations per randomized model run (0: default)")
)

func baseSeed(t testing.TB) int64 {
	if *flagSeed != 0 {
		return *flagSeed
	}
	if v := os.Getenv("ZRECORD_SEED"); v != "" {
		n, err := strconv.ParseInt(v, 0, 64)
		if err != nil {
			t.Fatalf("ZRECORD_SEED=%q: %v", v, err)
		}
		return n
	}
	return time.Now().UnixNano()
}

// seeded returns a generator for t and logs how to replay it.
func seeded(t testing.TB) (*rand.Rand, int64) {
	seed := baseSeed(t)
	t.Logf("seed %d (replay: ZRECORD_SEED=%d go test -run '^%s$' ./zrecord/)", seed, seed, t.Name())
	return newRand(seed), seed
}

func newRand(seed int64) *rand.Rand {
	return rand.New(rand.NewPCG(uint64(seed), 0x7a7265636f7264))
}

// ---------------------------------------------------------------------------
// The reference model: a slice of records with the store's delete semantics.

type model [][]byte

// deleted returns m with idx removed the way the store removes them: in
// descending order, each hole filled by the current last record.
func (m model) deleted(idx []int64) model {
	out := slices.Clone(m)
	desc := slices.Clone(idx)
	slices.Sort(desc)
	slices.Reverse(desc)
	for _, i := range desc {
		last := len(out) - 1
		out[i] = out[last]
		out = out[:last]
	}
	return out
}

func (m model) appended(recs [][]byte) model {
	out := slices.Clone(m)
	return append(out, recs...)
}

func (m model) logicalBytes() int64 {
	var n int64
	for _, r := range m {
		n += int64(len(r))
	}
	return n
}

func (m model) maxSize() int64 {
	var n int64
	for _, r := range m {
		n = max(n, int64(len(r)))
	}
	return n
}

// ---------------------------------------------------------------------------
// Record generation.

var vocabulary = func() [][]byte {
	rng := newRand(1)
	words := make([][]byte, 64)
	for i := range words {
		w := make([]byte, 3+rng.IntN(12))
		for j := range w {
			w[j] = byte('a' + rng.IntN(26))
		}
		words[i] = w
	}
	return words
}()

// genPayload fills size bytes with one of several kinds of content, from
// incompressible to highly compressible.
func genPayload(rng *rand.Rand, size int) []byte {
	b := make([]byte, size)
	switch rng.IntN(6) {
	case 0: // random
		fillRandom(rng, b)
	case 1: // zeros
	case 2: // a short phrase repeated with rare mutations
		phrase := make([]byte, 1+rng.IntN(64))
		fillRandom(rng, phrase)
		for i := range b {
			b[i] = phrase[i%len(phrase)]
			if rng.IntN(100) == 0 {
				b[i] = byte(rng.Uint32())
			}
		}
	case 3: // smooth ramps, like image rows
		k := byte(rng.IntN(7))
		for i := range b {
			b[i] = byte(i)*k + byte(i>>8)
		}
	case 4: // text from a shared vocabulary (what a dictionary learns)
		fillWords(rng, b)
	default: // half random, half text
		fillRandom(rng, b[:size/2])
		fillWords(rng, b[size/2:])
	}
	return b
}

func fillRandom(rng *rand.Rand, b []byte) {
	for i := 0; i < len(b); i += 8 {
		var w [8]byte
		binary.LittleEndian.PutUint64(w[:], rng.Uint64())
		copy(b[i:], w[:])
	}
}

func fillWords(rng *rand.Rand, b []byte) {
	for i := 0; i < len(b); {
		w := vocabulary[rng.IntN(len(vocabulary))]
		i += copy(b[i:], w)
		if i < len(b) {
			b[i] = ' '
			i++
		}
	}
}

// genSize draws a record size in [0, maxSize], with extra weight on empty,
// tiny and near-maximal records.
func genSize(rng *rand.Rand, maxSize int) int {
	switch r := rng.IntN(10); {
	case r == 0:
		return 0
	case r < 3:
		return rng.IntN(min(65, maxSize+1))
	case r < 8:
		return rng.IntN(maxSize + 1)
	default:
		return maxSize - rng.IntN(maxSize/4+1)
	}
}

func genBatch(rng *rand.Rand, n, maxSize int) [][]byte {
	recs := make([][]byte, n)
	for i := range recs {
		recs[i] = genPayload(rng, genSize(rng, maxSize))
	}
	return recs
}

// Self-checking records: "ZRT1", tag u64, length u32, crc32c of the rest.
const selfHeader = 20

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func selfRecord(rng *rand.Rand, tag uint64, size int) []byte {
	size = max(size, selfHeader)
	b := make([]byte, size)
	copy(b, "ZRT1")
	binary.LittleEndian.PutUint64(b[4:], tag)
	binary.LittleEndian.PutUint32(b[12:], uint32(size))
	copy(b[selfHeader:], genPayload(rng, size-selfHeader))
	binary.LittleEndian.PutUint32(b[16:], selfCRC(b))
	return b
}

func selfCRC(b []byte) uint32 {
	c := crc32.Update(0, castagnoli, b[4:16])
	return crc32.Update(c, castagnoli, b[selfHeader:])
}

const anyTag = ^uint64(0)

// checkSelf verifies a self-checking record and, unless tag is anyTag, that
// it carries tag.
func checkSelf(b []byte, tag uint64) error {
	if len(b) < selfHeader || string(b[:4]) != "ZRT1" {
		return fmt.Errorf("not a test record (%d bytes, starts %x)", len(b), b[:min(len(b), 8)])
	}
	if got := binary.LittleEndian.Uint32(b[12:]); int(got) != len(b) {
		return fmt.Errorf("record says %d bytes, got %d", got, len(b))
	}
	if got, want := binary.LittleEndian.Uint32(b[16:]), selfCRC(b); got != want {
		return fmt.Errorf("checksum %08x, want %08x (torn record)", got, want)
	}
	if got := binary.LittleEndian.Uint64(b[4:]); tag != anyTag && got != tag {
		return fmt.Errorf("record is tagged %d, want %d", got, tag)
	}
	return nil
}

// testDict trains a dictionary on generated text-like samples, once.
var testDict = sync.OnceValues(func() ([]byte, error) {
	rng := newRand(2)
	samples := make([][]byte, 256)
	for i := range samples {
		b := make([]byte, 512+rng.IntN(4096))
		fillWords(rng, b)
		samples[i] = b
	}
	return zrecord.TrainDict(samples, zrecord.TierFast, 16<<10)
})

func mustDict(t testing.TB) []byte {
	t.Helper()
	d, err := testDict()
	if err != nil {
		t.Fatalf("TrainDict: %v", err)
	}
	if len(d) == 0 {
		t.Fatal("TrainDict returned an empty dictionary")
	}
	return d
}

// ---------------------------------------------------------------------------
// Comparing a store with a model.

const guardByte = 0xEE

// guarded returns a slice of length n whose spare capacity is filled with
// guard bytes, and a check that the guard is intact.
func guarded(n int) ([]byte, func() error) {
	buf := make([]byte, n+64)
	for i := range buf {
		buf[i] = guardByte
	}
	dst := buf[:n]
	return dst, func() error {
		for i, c := range buf[n:] {
			if c != guardByte {
				return fmt.Errorf("wrote past the end of dst (byte %d past len %d)", i, n)
			}
		}
		return nil
	}
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

func recordMismatch(i int64, got, want []byte) error {
	d := firstDiff(got, want)
	return fmt.Errorf("record %d: got %d bytes, want %d; first difference at byte %d (got %x, want %x)",
		i, len(got), len(want), d, got[d:min(len(got), d+8)], want[d:min(len(want), d+8)])
}

// gatherPacked reads indices with Sizes and GatherPacked into fresh buffers.
func gatherPacked(s *zrecord.Store, indices []int64) ([][]byte, error) {
	sizes := make([]int64, len(indices))
	if err := s.Sizes(indices, sizes); err != nil {
		return nil, fmt.Errorf("Sizes: %w", err)
	}
	offsets := make([]int64, len(indices)+1)
	for i, sz := range sizes {
		offsets[i+1] = offsets[i] + sz
	}
	dst, guard := guarded(int(offsets[len(indices)]))
	if err := s.GatherPacked(indices, dst, offsets); err != nil {
		return nil, fmt.Errorf("GatherPacked: %w", err)
	}
	if err := guard(); err != nil {
		return nil, fmt.Errorf("GatherPacked: %w", err)
	}
	out := make([][]byte, len(indices))
	for i := range indices {
		out[i] = dst[offsets[i]:offsets[i+1]]
	}
	return out, nil
}

// diffStore compares s with m byte-exact: Len, Sizes, GatherPacked over a
// shuffled order (with repeats) in random batches, Gather for a few sizes, and
// the Stats invariants. It returns the first discrepancy.
func diffStore(s *zrecord.Store, m model, rng *rand.Rand) error {
	n := int64(len(m))
	if got := s.Len(); got != n {
		return fmt.Errorf("Len() = %d, want %d", got, n)
	}
	all := make([]int64, n)
	for i := range all {
		all[i] = int64(i)
	}
	sizes := make([]int64, n)
	if err := s.Sizes(all, sizes); err != nil {
		return fmt.Errorf("Sizes(all %d): %w", n, err)
	}
	for i, sz := range sizes {
		if sz != int64(len(m[i])) {
			return fmt.Errorf("Sizes: record %d has size %d, want %d", i, sz, len(m[i]))
		}
	}
	order := slices.Clone(all)
	rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	if n > 0 {
		for range 1 + n/16 { // repeats are legal
			order = append(order, order[rng.IntN(len(order))])
		}
	}
	for len(order) > 0 {
		k := min(len(order), 1+rng.IntN(300))
		batch := order[:k]
		order = order[k:]
		got, err := gatherPacked(s, batch)
		if err != nil {
			return err
		}
		for j, i := range batch {
			if !bytes.Equal(got[j], m[i]) {
				return recordMismatch(i, got[j], m[i])
			}
		}
	}
	// Empty batch.
	if err := s.GatherPacked(nil, nil, []int64{0}); err != nil {
		return fmt.Errorf("GatherPacked(empty): %w", err)
	}
	// Dense gathers over a few sizes that occur.
	bySize := map[int][]int64{}
	for i, r := range m {
		if len(r) > 0 {
			bySize[len(r)] = append(bySize[len(r)], int64(i))
		}
	}
	for tries := 0; tries < 3 && len(bySize) > 0; tries++ {
		i := rng.IntN(len(m))
		stride := len(m[i])
		idx := bySize[stride]
		if len(idx) == 0 {
			continue
		}
		idx = append(slices.Clone(idx), idx[rng.IntN(len(idx))])
		rng.Shuffle(len(idx), func(a, b int) { idx[a], idx[b] = idx[b], idx[a] })
		dst, guard := guarded(len(idx) * stride)
		if err := s.Gather(idx, dst, stride); err != nil {
			return fmt.Errorf("Gather(%d records, stride %d): %w", len(idx), stride, err)
		}
		if err := guard(); err != nil {
			return fmt.Errorf("Gather: %w", err)
		}
		for j, i := range idx {
			if got := dst[j*stride : (j+1)*stride]; !bytes.Equal(got, m[i]) {
				return fmt.Errorf("Gather: %w", recordMismatch(i, got, m[i]))
			}
		}
	}
	return checkStats(s, m)
}

func checkStats(s *zrecord.Store, m model) error {
	st, err := s.Stats()
	if err != nil {
		return fmt.Errorf("Stats: %w", err)
	}
	if int64(st.Length) != int64(len(m)) {
		return fmt.Errorf("Stats.Length = %d, want %d", st.Length, len(m))
	}
	if int64(st.LogicalBytes) != m.logicalBytes() {
		return fmt.Errorf("Stats.LogicalBytes = %d, want %d", st.LogicalBytes, m.logicalBytes())
	}
	if int64(st.LiveBytes) > int64(st.ChunkBytes) {
		return fmt.Errorf("Stats.LiveBytes %d > ChunkBytes %d", st.LiveBytes, st.ChunkBytes)
	}
	if int64(st.LiveBytes) > int64(st.LogicalBytes) {
		return fmt.Errorf("Stats.LiveBytes %d > LogicalBytes %d (a record stored larger than it is)", st.LiveBytes, st.LogicalBytes)
	}
	if st.Codec != s.Codec() {
		return fmt.Errorf("Stats.Codec = %v, Codec() = %v", st.Codec, s.Codec())
	}
	if st.Codec == zrecord.Raw && int64(st.LiveBytes) != int64(st.LogicalBytes) {
		return fmt.Errorf("raw store: Stats.LiveBytes %d != LogicalBytes %d", st.LiveBytes, st.LogicalBytes)
	}
	if (st.Codec == zrecord.ZstdDict) != (int64(st.DictBytes) > 0) {
		return fmt.Errorf("Stats.DictBytes = %d for codec %v", st.DictBytes, st.Codec)
	}
	if int64(st.Chunks) < 1 && len(m) > 0 {
		return fmt.Errorf("Stats.Chunks = %d with %d records", st.Chunks, len(m))
	}
	return nil
}

// checkCompacted checks that after a compaction the only garbage left is
// chunk-boundary slack: less than one record per chunk.
func checkCompacted(s *zrecord.Store, m model) error {
	st, err := s.Stats()
	if err != nil {
		return fmt.Errorf("Stats: %w", err)
	}
	slack := int64(st.ChunkBytes) - int64(st.LiveBytes)
	bound := int64(st.Chunks) * m.maxSize()
	if slack < 0 || slack > bound {
		return fmt.Errorf("after Compact: ChunkBytes %d - LiveBytes %d = %d, want within [0, %d] (%d chunks × largest record %d)",
			st.ChunkBytes, st.LiveBytes, slack, bound, st.Chunks, m.maxSize())
	}
	return nil
}

// matchAny reports which of the candidate states s holds, or why none.
func matchAny(s *zrecord.Store, rng *rand.Rand, states ...model) (int, error) {
	var errs []string
	for k, m := range states {
		err := diffStore(s, m, rng)
		if err == nil {
			return k, nil
		}
		errs = append(errs, fmt.Sprintf("state %d (%d records): %v", k, len(m), err))
	}
	return -1, errors.New(strings.Join(errs, "; "))
}

// ---------------------------------------------------------------------------
// TestModel: random operation sequences against the model.

type modelRun struct {
	t     *testing.T
	rng   *rand.Rand
	dir   string
	opts  []zrecord.Option // for Open
	s     *zrecord.Store
	m     model
	codec zrecord.Codec
	hist  []string
}

func (r *modelRun) fatalf(format string, args ...any) {
	r.t.Helper()
	h := r.hist
	if len(h) > 12 {
		h = h[len(h)-12:]
	}
	r.t.Fatalf("%s\nrecent operations:\n  %s", fmt.Sprintf(format, args...), strings.Join(h, "\n  "))
}

func (r *modelRun) check(what string) {
	r.t.Helper()
	if err := diffStore(r.s, r.m, r.rng); err != nil {
		r.fatalf("after %s: %v", what, err)
	}
}

func (r *modelRun) open(extra ...zrecord.Option) {
	r.t.Helper()
	s, err := zrecord.Open(r.dir, append(slices.Clone(r.opts), extra...)...)
	if err != nil {
		r.fatalf("Open: %v", err)
	}
	r.s = s
}

func (r *modelRun) closeStore() {
	r.t.Helper()
	if err := r.s.Close(); err != nil {
		r.fatalf("Close: %v", err)
	}
}

// pickDelete draws a set of distinct live indices, often including 0 and
// the tail.
func pickDelete(rng *rand.Rand, n, maxK int) []int64 {
	if n == 0 {
		return nil
	}
	k := 1 + rng.IntN(min(n, maxK))
	set := map[int64]bool{}
	if rng.IntN(3) == 0 {
		set[0] = true
	}
	if rng.IntN(3) == 0 {
		set[int64(n-1)] = true
	}
	for len(set) < k {
		set[rng.Int64N(int64(n))] = true
	}
	idx := make([]int64, 0, len(set))
	for i := range set {
		idx = append(idx, i)
	}
	slices.Sort(idx)
	rng.Shuffle(len(idx), func(a, b int) { idx[a], idx[b] = idx[b], idx[a] })
	return idx
}

func (r *modelRun) step() {
	rng := r.rng
	n := len(r.m)
	big := r.m.logicalBytes() > 3<<20
	switch p := rng.IntN(100); {
	case n < 4 || (p < 40 && !big):
		recs := genBatch(rng, 1+rng.IntN(20), 40<<10)
		r.hist = append(r.hist, fmt.Sprintf("Append %d records (%d bytes) at %d", len(recs), model(recs).logicalBytes(), n))
		first, err := r.s.Append(recs)
		if err != nil {
			r.fatalf("Append: %v", err)
		}
		if first != int64(n) {
			r.fatalf("Append returned first=%d, want %d", first, n)
		}
		r.m = r.m.appended(recs)
		r.check("Append")
	case p < 65 || big:
		maxK := 20
		if big {
			maxK = n / 2
		}
		if rng.IntN(25) == 0 {
			maxK = n // sometimes empty the store
		}
		idx := pickDelete(rng, n, maxK)
		r.hist = append(r.hist, fmt.Sprintf("Delete %v of %d", idx, n))
		if err := r.s.Delete(idx); err != nil {
			r.fatalf("Delete(%v): %v", idx, err)
		}
		r.m = r.m.deleted(idx)
		r.check("Delete")
	case p < 71:
		r.rejects()
	case p < 80:
		r.hist = append(r.hist, "Compact")
		if err := r.s.Compact(); err != nil {
			r.fatalf("Compact: %v", err)
		}
		r.check("Compact")
		if err := checkCompacted(r.s, r.m); err != nil {
			r.fatalf("%v", err)
		}
	case p < 89:
		r.hist = append(r.hist, "Close+Open")
		r.closeStore()
		if _, err := r.s.Append([][]byte{{1}}); !errors.Is(err, zrecord.ErrClosed) {
			r.fatalf("Append after Close: %v, want ErrClosed", err)
		}
		if err := r.s.GatherPacked([]int64{0}, make([]byte, 64), []int64{0, 0}); !errors.Is(err, zrecord.ErrClosed) {
			r.fatalf("GatherPacked after Close: %v, want ErrClosed", err)
		}
		r.open()
		r.check("reopen")
	case p < 95:
		r.hist = append(r.hist, "Close+Open read-only")
		r.closeStore()
		r.open(zrecord.WithReadOnly())
		r.check("read-only reopen")
		if _, err := r.s.Append([][]byte{{1}}); !errors.Is(err, zrecord.ErrReadOnly) {
			r.fatalf("Append on a read-only store: %v, want ErrReadOnly", err)
		}
		if err := r.s.Delete([]int64{0}); !errors.Is(err, zrecord.ErrReadOnly) {
			r.fatalf("Delete on a read-only store: %v, want ErrReadOnly", err)
		}
		if err := r.s.Compact(); !errors.Is(err, zrecord.ErrReadOnly) {
			r.fatalf("Compact on a read-only store: %v, want ErrReadOnly", err)
		}
		r.check("rejected writes on a read-only store")
		r.closeStore()
		r.open()
	default:
		r.hist = append(r.hist, "Sync")
		if err := r.s.Sync(); err != nil {
			r.fatalf("Sync: %v", err)
		}
	}
}

// rejects issues invalid calls that must fail without changing anything.
func (r *modelRun) rejects() {
	rng, s := r.rng, r.s
	n := int64(len(r.m))
	r.hist = append(r.hist, "invalid calls")
	valid := pickDelete(rng, int(n), 5)
	dup := append(slices.Clone(valid), valid[rng.IntN(len(valid))])
	if err := s.Delete(dup); !errors.Is(err, zrecord.ErrDuplicateIndex) {
		r.fatalf("Delete(%v) with a duplicate: %v, want ErrDuplicateIndex", dup, err)
	}
	for _, bad := range []int64{n, n + 1000, -1} {
		idx := append(slices.Clone(valid), bad)
		rng.Shuffle(len(idx), func(a, b int) { idx[a], idx[b] = idx[b], idx[a] })
		if err := s.Delete(idx); !errors.Is(err, zrecord.ErrIndexOutOfRange) {
			r.fatalf("Delete(%v) with index %d of %d: %v, want ErrIndexOutOfRange", idx, bad, n, err)
		}
		sizes := make([]int64, 2)
		if err := s.Sizes([]int64{0, bad}, sizes); !errors.Is(err, zrecord.ErrIndexOutOfRange) {
			r.fatalf("Sizes with index %d of %d: %v, want ErrIndexOutOfRange", bad, n, err)
		}
		if err := s.GatherPacked([]int64{bad}, make([]byte, 1<<16), []int64{0, 1 << 16}); !errors.Is(err, zrecord.ErrIndexOutOfRange) {
			r.fatalf("GatherPacked with index %d of %d: %v, want ErrIndexOutOfRange", bad, n, err)
		}
	}
	r.check("rejected deletes")
	// A dense gather over records of different sizes.
	var a, b int64 = -1, -1
	for i := range n {
		if a < 0 {
			a = i
		} else if len(r.m[i]) != len(r.m[a]) {
			b = i
			break
		}
	}
	if b >= 0 {
		stride := len(r.m[a])
		if err := s.Gather([]int64{a, b}, make([]byte, 2*max(stride, len(r.m[b]))), stride); !errors.Is(err, zrecord.ErrSizeMismatch) {
			r.fatalf("Gather of sizes %d and %d at stride %d: %v, want ErrSizeMismatch", stride, len(r.m[b]), stride, err)
		}
	}
	// A packed gather into too small a buffer.
	if sz := len(r.m[a]); sz > 0 {
		if err := s.GatherPacked([]int64{a}, make([]byte, sz-1), []int64{0, int64(sz)}); err == nil {
			r.fatalf("GatherPacked of %d bytes into %d: no error", sz, sz-1)
		}
		if err := s.Gather([]int64{a}, make([]byte, sz-1), sz); err == nil {
			r.fatalf("Gather of %d bytes into %d: no error", sz, sz-1)
		}
	}
	if err := s.GatherPacked([]int64{a}, make([]byte, 1<<16), []int64{0}); err == nil {
		r.fatal("GatherPacked with len(offsets) != len(indices)+1: no error")
	}
	r.check("rejected gathers")
}

func (r *modelRun) fatal(msg string) {
	r.t.Helper()
	r.fatalf("%s", msg)
}

type codecCase struct {
	name  string
	codec zrecord.Codec
	dict  bool
}

var codecCases = []codecCase{
	{"raw", zrecord.Raw, false},
	{"zstd", zrecord.Zstd, false},
	{"zstddict", zrecord.ZstdDict, true},
}

func createOpts(t testing.TB, c codecCase, capacity int64) []zrecord.Option {
	opts := []zrecord.Option{zrecord.WithCodec(c.codec), zrecord.WithChunkCapacity(capacity)}
	if c.dict {
		opts = append(opts, zrecord.WithDict(mustDict(t)))
	}
	return opts
}

func TestModel(t *testing.T) {
	ops := 150
	if testing.Short() {
		ops = 50
	}
	if *flagOps > 0 {
		ops = *flagOps
	}
	cases := []struct {
		codecCase
		pread bool // read through ReadAt instead of mappings
	}{{codecCases[0], false}, {codecCases[1], false}, {codecCases[2], false}, {codecCases[2], true}}
	for _, c := range cases {
		name := c.name
		if c.pread {
			name += "-pread"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			rng, _ := seeded(t)
			const capacity = 64 << 10
			dir := filepath.Join(t.TempDir(), "store")
			opts := []zrecord.Option{zrecord.WithChunkCapacity(capacity)}
			if c.pread {
				fs := faultfs.New(zrecord.OSFS)
				fs.HideFd(true)
				opts = append(opts, zrecord.WithFS(fs))
			}
			s, err := zrecord.Create(dir, append(createOpts(t, c.codecCase, capacity), opts...)...)
			if err != nil {
				t.Fatalf("Create: %v", err)
			}
			r := &modelRun{t: t, rng: rng, dir: dir, s: s, codec: c.codec, opts: opts}
			defer func() { r.s.Close() }()
			if r.s.Codec() != c.codec {
				t.Fatalf("Codec() = %v, want %v", r.s.Codec(), c.codec)
			}
			r.check("Create")
			for i := range ops {
				r.hist = append(r.hist, fmt.Sprintf("-- op %d", i))
				r.step()
			}
			// The end state survives a last reopen.
			r.closeStore()
			r.open(zrecord.WithReadOnly())
			r.check("final read-only reopen")
			if r.s.Codec() != c.codec {
				t.Fatalf("Codec() after reopen = %v, want %v", r.s.Codec(), c.codec)
			}
		})
	}
}

// ---------------------------------------------------------------------------
// Concurrency: readers gather below Len() while appends run.

func TestConcurrentGatherAppend(t *testing.T) {
	cases := []struct {
		name    string
		codec   zrecord.Codec
		dense   int // record size for Gather; 0: variable sizes, GatherPacked
		writers int
		pread   bool
	}{
		{"packed-zstd", zrecord.Zstd, 0, 1, false},
		{"packed-raw", zrecord.Raw, 0, 1, false},
		{"packed-raw-pread", zrecord.Raw, 0, 1, true},
		{"dense-zstd", zrecord.Zstd, 512, 1, false},
		{"two-appenders-zstd", zrecord.Zstd, 0, 2, false},
	}
	const readers = 3
	total := 1200
	if testing.Short() {
		total = 300
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rng, seed := seeded(t)
			dir := filepath.Join(t.TempDir(), "store")
			opts := []zrecord.Option{zrecord.WithCodec(tc.codec), zrecord.WithChunkCapacity(64 << 10)}
			if tc.pread {
				fs := faultfs.New(zrecord.OSFS)
				fs.HideFd(true)
				opts = append(opts, zrecord.WithFS(fs))
			}
			s, err := zrecord.Create(dir, opts...)
			if err != nil {
				t.Fatalf("Create: %v", err)
			}
			defer s.Close()

			var (
				done     atomic.Bool
				failures atomic.Int32
				gathers  atomic.Int64
				wg       sync.WaitGroup
			)
			fail := func(format string, args ...any) {
				if failures.Add(1) <= 5 {
					t.Errorf(format, args...)
				}
			}
			size := func(r *rand.Rand) int {
				if tc.dense > 0 {
					return tc.dense
				}
				return selfHeader + genSize(r, 6<<10)
			}
			// Records written by each writer, by index, for the final check.
			type placed struct {
				first int64
				recs  [][]byte
			}
			results := make([][]placed, tc.writers)
			for w := range tc.writers {
				wrng := newRand(seed + int64(w) + 1)
				wg.Add(1)
				go func() {
					defer wg.Done()
					seq := uint64(0)
					for written := 0; written < total/tc.writers && failures.Load() == 0; {
						k := 1 + wrng.IntN(20)
						recs := make([][]byte, k)
						next := s.Len()
						for j := range recs {
							tag := uint64(next) + uint64(j)
							if tc.writers > 1 {
								tag = uint64(w)<<32 | seq
								seq++
							}
							recs[j] = selfRecord(wrng, tag, size(wrng))
						}
						first, err := s.Append(recs)
						if err != nil {
							fail("Append: %v", err)
							return
						}
						if tc.writers == 1 && first != next {
							fail("Append returned first=%d, want %d", first, next)
							return
						}
						results[w] = append(results[w], placed{first, recs})
						written += k
					}
				}()
			}
			var rwg sync.WaitGroup
			for rd := range readers {
				rrng := newRand(seed + 100 + int64(rd))
				rwg.Add(1)
				go func() {
					defer rwg.Done()
					last := int64(0)
					for failures.Load() == 0 {
						finished := done.Load()
						n := s.Len()
						if n < last {
							fail("Len() went back from %d to %d", last, n)
							return
						}
						last = n
						if n > 0 {
							idx := make([]int64, 1+rrng.IntN(48))
							for j := range idx {
								if rrng.IntN(4) == 0 {
									idx[j] = n - 1 - rrng.Int64N(min(n, 8)) // the newest records
								} else {
									idx[j] = rrng.Int64N(n)
								}
							}
							var got [][]byte
							if tc.dense > 0 {
								dst, guard := guarded(len(idx) * tc.dense)
								if err := s.Gather(idx, dst, tc.dense); err != nil {
									fail("Gather below Len()=%d: %v", n, err)
									return
								}
								if err := guard(); err != nil {
									fail("Gather: %v", err)
									return
								}
								for j := range idx {
									got = append(got, dst[j*tc.dense:(j+1)*tc.dense])
								}
							} else {
								var err error
								if got, err = gatherPacked(s, idx); err != nil {
									fail("gather below Len()=%d: %v", n, err)
									return
								}
							}
							for j, i := range idx {
								tag := uint64(i)
								if tc.writers > 1 {
									tag = anyTag
								}
								if err := checkSelf(got[j], tag); err != nil {
									fail("record %d read while Len()=%d: %v", i, n, err)
									return
								}
							}
							gathers.Add(1)
						}
						if finished {
							return
						}
					}
				}()
			}
			wg.Wait()
			done.Store(true)
			rwg.Wait()
			if failures.Load() > 0 {
				return
			}
			t.Logf("%d records, %d concurrent gathers", s.Len(), gathers.Load())
			// Every appended record sits where Append said it would.
			m := make(model, s.Len())
			for _, ps := range results {
				for _, p := range ps {
					for j, rec := range p.recs {
						i := p.first + int64(j)
						if i >= int64(len(m)) || m[i] != nil {
							t.Fatalf("Append placed two batches over index %d (or past Len)", i)
						}
						m[i] = rec
					}
				}
			}
			for i, rec := range m {
				if rec == nil {
					t.Fatalf("index %d below Len() was never returned by Append", i)
				}
			}
			if err := diffStore(s, m, rng); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestConcurrentReadersDuringDeleteCompact runs dense gathers while one
// writer appends, deletes and compacts. Each Gather is one snapshot: its
// records must be whole, and distinct indices must hold distinct records (a
// half-applied swap would show one record twice).
func TestConcurrentReadersDuringDeleteCompact(t *testing.T) {
	rng, seed := seeded(t)
	const size = 256
	dir := filepath.Join(t.TempDir(), "store")
	s, err := zrecord.Create(dir, zrecord.WithCodec(zrecord.Zstd), zrecord.WithChunkCapacity(32<<10))
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	defer s.Close()
	var (
		done     atomic.Bool
		failures atomic.Int32
		gathers  atomic.Int64
		rwg      sync.WaitGroup
	)
	fail := func(format string, args ...any) {
		if failures.Add(1) <= 5 {
			t.Errorf(format, args...)
		}
	}
	for rd := range 3 {
		rrng := newRand(seed + 100 + int64(rd))
		rwg.Add(1)
		go func() {
			defer rwg.Done()
			for !done.Load() && failures.Load() == 0 {
				n := s.Len()
				if n == 0 {
					continue
				}
				k := min(n, 1+rrng.Int64N(32))
				picked := map[int64]bool{}
				var idx []int64
				for int64(len(idx)) < k {
					i := rrng.Int64N(n)
					if !picked[i] {
						picked[i] = true
						idx = append(idx, i)
					}
				}
				dst := make([]byte, len(idx)*size)
				if err := s.Gather(idx, dst, size); err != nil {
					if !errors.Is(err, zrecord.ErrIndexOutOfRange) { // Len fell since
						fail("Gather: %v", err)
					}
					continue
				}
				tags := map[uint64]int64{}
				for j, i := range idx {
					rec := dst[j*size : (j+1)*size]
					if err := checkSelf(rec, anyTag); err != nil {
						fail("record %d: %v", i, err)
						return
					}
					tag := binary.LittleEndian.Uint64(rec[4:])
					if other, dup := tags[tag]; dup {
						fail("one Gather returned record %d at both index %d and %d", tag, other, i)
						return
					}
					tags[tag] = i
				}
				gathers.Add(1)
			}
		}()
	}
	var m model
	next := uint64(0)
	rounds := 60
	if testing.Short() {
		rounds = 20
	}
	for round := 0; round < rounds && failures.Load() == 0; round++ {
		recs := make([][]byte, 1+rng.IntN(30))
		for j := range recs {
			recs[j] = selfRecord(rng, next, size)
			next++
		}
		if _, err := s.Append(recs); err != nil {
			t.Fatalf("Append: %v", err)
		}
		m = m.appended(recs)
		idx := pickDelete(rng, len(m), 12)
		if err := s.Delete(idx); err != nil {
			t.Fatalf("Delete: %v", err)
		}
		m = m.deleted(idx)
		if round%5 == 4 {
			if err := s.Compact(); err != nil {
				t.Fatalf("Compact: %v", err)
			}
		}
	}
	done.Store(true)
	rwg.Wait()
	t.Logf("%d records, %d concurrent gathers", len(m), gathers.Load())
	if err := diffStore(s, m, rng); err != nil {
		t.Fatal(err)
	}
}
