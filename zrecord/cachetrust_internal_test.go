package zrecord

import (
	"runtime"
	"testing"
)

// TestCacheTrust counts the probes a chunk's trust lets through: every run
// is probed until trustCached probes in a row found runs cached, then one
// run in trustSample; a probe that finds a run not cached ends the trust,
// and every run is probed again until the streak is rebuilt.
func TestCacheTrust(t *testing.T) {
	for _, c := range []struct {
		name   string
		runs   int
		cached func(probe int) bool // the answer of the probe-th probe
		probes int
		notYet int // runs reported not cached
	}{
		{"cached: probed until trusted, then sampled", trustCached + 10*trustSample, func(int) bool { return true }, trustCached + 10, 0},
		{"never cached: every run probed", 500, func(int) bool { return false }, 500, 500},
		{"cached but for one probe early on: the streak starts over", trustCached + 10*trustSample, func(p int) bool { return p != 5 },
			trustCached + 6 + (10*trustSample-6)/trustSample, 1},
		// Two sampled probes find runs cached, the third does not (the
		// trustSample-1 runs before it were taken as cached), and the 4
		// runs after it are each probed.
		{"evicted after the trust: the next sampled probe ends it", trustCached + 3*trustSample + 4,
			func(p int) bool { return p < trustCached+2 }, trustCached + 3 + 4, 1 + 4},
	} {
		t.Run(c.name, func(t *testing.T) {
			var tr cacheTrust
			probes, notYet := 0, 0
			for range c.runs {
				if !tr.cached(func() bool { p := probes; probes++; return c.cached(p) }) {
					notYet++
				}
			}
			if probes != c.probes || notYet != c.notYet {
				t.Fatalf("%d runs: %d probes and %d runs not cached, want %d and %d", c.runs, probes, notYet, c.probes, c.notYet)
			}
		})
	}
}

// TestGatherTrustsACachedChunk checks that gathers of long runs go through
// the chunk's trust: after enough gathers of 256 KiB records, just written
// and so in the page cache, the chunk has it.
func TestGatherTrustsACachedChunk(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the page cache is probed on Linux only (pageCached)")
	}
	s, err := Create(t.TempDir(), WithCodec(Raw))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const size, count = adviseRunMin, 16
	recs := make([][]byte, count)
	for i := range recs {
		recs[i] = make([]byte, size)
		recs[i][7] = byte(i)
	}
	if _, err := s.Append(recs); err != nil {
		t.Fatal(err)
	}
	dst := make([]byte, 2*size)
	for k := range trustCached {
		// records 2k and 2k+3 mod count: apart, so each is a run of its own
		idx := []int64{int64(2 * k % count), int64((2*k + 3) % count)}
		if err := s.Gather(idx, dst, size); err != nil {
			t.Fatal(err)
		}
		if dst[7] != byte(idx[0]) || dst[size+7] != byte(idx[1]) {
			t.Fatalf("gather %v read records %d and %d", idx, dst[7], dst[size+7])
		}
	}
	chunks := *s.chunks.Load()
	if !chunks[0].random {
		t.Skip("the chunk is not advised random here: gathers do not probe it")
	}
	if got := chunks[0].trust.streak.Load(); got != trustCached {
		t.Fatalf("after %d gathers of 2 cached runs the chunk's streak is %d, want %d", trustCached, got, trustCached)
	}
}
