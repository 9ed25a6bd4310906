package steppipe

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/loaderx/loaderx/zsampler"
)

// fakeStore holds n records; record i is size(i) bytes, byte j of it
// byteAt(i, j). It can fail or panic at one record and be slow.
type fakeStore struct {
	n       int64
	stride  int // dense record size; 0: ragged, record i is 1 + i%5 bytes
	failAt  int64
	panicAt int64
	delay   time.Duration
	mu      sync.Mutex
	calls   int
}

var errDamaged = errors.New("record damaged")

func byteAt(i int64, j int) byte { return byte(i*31 + int64(j)*7 + 1) }

func (f *fakeStore) size(i int64) int {
	if f.stride > 0 {
		return f.stride
	}
	return 1 + int(i%5)
}

func (f *fakeStore) before(indices []int64) error {
	f.mu.Lock()
	f.calls++
	f.mu.Unlock()
	if f.delay > 0 {
		time.Sleep(f.delay)
	}
	for _, i := range indices {
		if i < 0 || i >= f.n {
			return fmt.Errorf("index %d out of range", i)
		}
		if i == f.failAt {
			return fmt.Errorf("record %d: %w", i, errDamaged)
		}
		if i == f.panicAt {
			panic(fmt.Sprintf("boom at %d", i))
		}
	}
	return nil
}

func (f *fakeStore) Gather(indices []int64, dst []byte, stride int) error {
	if err := f.before(indices); err != nil {
		return err
	}
	for k, i := range indices {
		for j := range stride {
			dst[k*stride+j] = byteAt(i, j)
		}
	}
	return nil
}

func (f *fakeStore) GatherRagged(indices []int64, sizes []int64, dst []byte) (int64, error) {
	if err := f.before(indices); err != nil {
		return 0, err
	}
	var total int64
	for k, i := range indices {
		sizes[k] = int64(f.size(i))
		total += sizes[k]
	}
	if total > int64(len(dst)) {
		return total, nil
	}
	at := 0
	for _, i := range indices {
		for j := range f.size(i) {
			dst[at] = byteAt(i, j)
			at++
		}
	}
	return total, nil
}

func noFault() *fakeStore { return &fakeStore{n: 1000, stride: 4, failAt: -1, panicAt: -1} }

// slots makes n slots for streams of the given strides (0: ragged, with
// ragged bytes for each).
func slots(n, batch int, strides []int, ragged int) []Slot {
	out := make([]Slot, n)
	for k := range out {
		s := Slot{Indices: make([]int64, batch)}
		for _, st := range strides {
			if st > 0 {
				s.Streams = append(s.Streams, Buffers{Data: make([]byte, batch*st)})
			} else {
				s.Streams = append(s.Streams, Buffers{Data: make([]byte, ragged), Sizes: make([]int64, batch)})
			}
		}
		out[k] = s
	}
	return out
}

func cyclic(n, batch int64) Sampler {
	return Sampler{Spec: zsampler.Spec{Mode: zsampler.Cyclic, N: n, BatchSize: batch, Seed: 7, Shard: zsampler.NoShard}}
}

// checkDense checks that slot's stream i holds the records of idx.
func checkDense(t *testing.T, b []byte, idx []int64, stride int) {
	t.Helper()
	for k, i := range idx {
		for j := range stride {
			if got, want := b[k*stride+j], byteAt(i, j); got != want {
				t.Fatalf("record %d (index %d) byte %d: %d, want %d", k, i, j, got, want)
			}
		}
	}
}

func waitLive(t *testing.T, want int64) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for Live() != want {
		if time.Now().After(deadline) {
			t.Fatalf("%d workers still live, want %d", Live(), want)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestOrderAndContentWhateverTheWorkers(t *testing.T) {
	const batch = 16
	base := Live()
	for _, tc := range []struct {
		workers, prefetch, slots int
		start                    int64
	}{
		{1, 1, 2, 0}, {2, 4, 8, 0}, {4, 8, 12, 5}, {8, 2, 3, 100}, {3, 16, 20, 62},
	} {
		for _, help := range []bool{false, true} {
			t.Run(fmt.Sprintf("w%d-p%d-s%d-help=%v", tc.workers, tc.prefetch, tc.slots, help), func(t *testing.T) {
				store := noFault()
				draw := cyclic(store.n, batch)
				p, err := New(Config{Draw: draw, Batch: batch, Workers: tc.workers, Prefetch: tc.prefetch,
					Start: tc.start, End: tc.start + 150, Slots: slots(tc.slots, batch, []int{4}, 0),
					Streams: []Stream{{Name: "x", Dense: store, Stride: 4}}, Help: help})
				if err != nil {
					t.Fatal(err)
				}
				p.Start()
				defer p.Close()
				want := make([]int64, batch)
				var release []int
				for s := tc.start; s < tc.start+150; s++ {
					b, err := p.Next(time.Second, release)
					if err != nil {
						t.Fatalf("step %d: %v", s, err)
					}
					if b.Step != s || b.Rows != batch {
						t.Fatalf("got step %d (%d rows), want %d", b.Step, b.Rows, s)
					}
					if _, err := draw.Draw(s, want); err != nil {
						t.Fatal(err)
					}
					slot := p.cfg.Slots[b.Slot]
					for k := range want {
						if slot.Indices[k] != want[k] {
							t.Fatalf("step %d: indices %v, want %v", s, slot.Indices, want)
						}
					}
					checkDense(t, slot.Streams[0].Data, want, 4)
					release = []int{b.Slot}
				}
				if _, err := p.Next(time.Second, release); !errors.Is(err, ErrEnd) {
					t.Fatalf("past the end: %v, want ErrEnd", err)
				}
			})
		}
	}
	waitLive(t, base)
}

func TestEpochShortLastStep(t *testing.T) {
	for _, tc := range []struct {
		n, batch, rank, world int64
		order                 bool
	}{
		{10, 4, 0, 1, false}, {10, 4, 1, 2, true}, {7, 3, 2, 3, true}, {8, 4, 0, 1, true},
	} {
		t.Run(fmt.Sprintf("%+v", tc), func(t *testing.T) {
			e := Epoch{N: tc.n, Batch: tc.batch, Rank: tc.rank, World: tc.world}
			if tc.order {
				e.Order = make([]int64, tc.n)
				for i := range e.Order {
					e.Order[i] = tc.n - 1 - int64(i)
				}
			}
			if err := e.Validate(); err != nil {
				t.Fatal(err)
			}
			store := &fakeStore{n: tc.n, stride: 2, failAt: -1, panicAt: -1}
			steps := e.Steps(false)
			p, err := New(Config{Draw: e, Batch: int(tc.batch), Workers: 2, Prefetch: 2, End: steps,
				Slots: slots(4, int(tc.batch), []int{2}, 0), Streams: []Stream{{Name: "x", Dense: store, Stride: 2}}})
			if err != nil {
				t.Fatal(err)
			}
			p.Start()
			defer p.Close()
			seen := 0
			var release []int
			for s := range steps {
				b, err := p.Next(time.Second, release)
				if err != nil {
					t.Fatal(err)
				}
				g := tc.batch * tc.world
				m := min(g, tc.n-s*g)
				if want := int((tc.rank+1)*m/tc.world - tc.rank*m/tc.world); b.Rows != want {
					t.Fatalf("step %d: %d rows, want %d", s, b.Rows, want)
				}
				seen += b.Rows
				slot := p.cfg.Slots[b.Slot]
				checkDense(t, slot.Streams[0].Data, slot.Indices[:b.Rows], 2)
				release = []int{b.Slot}
			}
			if _, err := p.Next(time.Second, release); !errors.Is(err, ErrEnd) {
				t.Fatalf("past the end: %v", err)
			}
			if tc.world == 1 && seen != int(tc.n) {
				t.Fatalf("the pass gave %d records of %d", seen, tc.n)
			}
		})
	}
}

func TestFaultsNameStepAndStreamAndTheRunGoesOn(t *testing.T) {
	const batch = 8
	for _, tc := range []struct {
		name    string
		bad     func(f *fakeStore, i int64)
		wantErr error
	}{
		{"error", func(f *fakeStore, i int64) { f.failAt = i }, errDamaged},
		{"panic", func(f *fakeStore, i int64) { f.panicAt = i }, nil},
		{"error, consumer helping", func(f *fakeStore, i int64) { f.failAt = i }, errDamaged},
		{"panic, consumer helping", func(f *fakeStore, i int64) { f.panicAt = i }, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			help := strings.HasSuffix(tc.name, "helping")
			good := noFault()
			bad := noFault()
			draw := cyclic(good.n, batch)
			idx := make([]int64, batch)
			if _, err := draw.Draw(3, idx); err != nil {
				t.Fatal(err)
			}
			tc.bad(bad, idx[5]) // a record of step 3
			p, err := New(Config{Draw: draw, Batch: batch, Workers: 3, Prefetch: 4, End: 10,
				Slots:   slots(6, batch, []int{4, 4}, 0),
				Streams: []Stream{{Name: "ok", Dense: good, Stride: 4}, {Name: "image", Dense: bad, Stride: 4}},
				Help:    help})
			if err != nil {
				t.Fatal(err)
			}
			p.Start()
			defer p.Close()
			var release []int
			for s := int64(0); s < 10; s++ {
				b, err := p.Next(time.Second, release)
				release = nil
				if s == 3 {
					var se *StepError
					if !errors.As(err, &se) || se.Step != 3 || se.Stream != 1 || se.Name != "image" {
						t.Fatalf("step 3: %v, want a StepError of step 3, stream image", err)
					}
					if tc.wantErr != nil && !errors.Is(err, tc.wantErr) {
						t.Fatalf("step 3: %v does not wrap %v", err, tc.wantErr)
					}
					if want := fmt.Sprintf("step 3, stream %q: ", "image"); len(err.Error()) < len(want) || err.Error()[:len(want)] != want {
						t.Fatalf("message %q", err)
					}
					continue
				}
				if err != nil || b.Step != s {
					t.Fatalf("step %d: %v (got step %d)", s, err, b.Step)
				}
				release = []int{b.Slot}
			}
		})
	}
}

func TestCloseIsPromptAndLeavesNoWorker(t *testing.T) {
	base := Live()
	for _, tc := range []struct {
		name  string
		delay time.Duration
		wait  bool // a consumer blocked in Next when Close comes
	}{
		{"idle", 0, false}, {"gathering", 20 * time.Millisecond, false}, {"consumer waiting", 50 * time.Millisecond, true},
		{"consumer helping", 50 * time.Millisecond, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store := noFault()
			store.delay = tc.delay
			p, err := New(Config{Draw: cyclic(store.n, 4), Batch: 4, Workers: 4, Prefetch: 8, End: -1,
				Slots: slots(12, 4, []int{4}, 0), Streams: []Stream{{Name: "x", Dense: store, Stride: 4}},
				Help: tc.name == "consumer helping"})
			if err != nil {
				t.Fatal(err)
			}
			p.Start()
			if Live() < base+4 {
				t.Fatalf("%d workers live after Start, want at least %d", Live(), base+4)
			}
			got := make(chan error, 1)
			if tc.wait {
				go func() {
					_, err := p.Next(10*time.Second, nil)
					for err == nil {
						_, err = p.Next(10*time.Second, nil)
					}
					got <- err
				}()
				time.Sleep(5 * time.Millisecond)
			} else {
				time.Sleep(5 * time.Millisecond)
			}
			t0 := time.Now()
			p.Close()
			if took := time.Since(t0); took > 500*time.Millisecond {
				t.Fatalf("Close took %v", took)
			}
			if Live() != base {
				t.Fatalf("%d workers live after Close, want %d", Live(), base)
			}
			if tc.wait {
				select {
				case err := <-got:
					if !errors.Is(err, ErrClosed) && !errors.Is(err, ErrStarved) {
						t.Fatalf("the waiting Next returned %v", err)
					}
				case <-time.After(time.Second):
					t.Fatal("the waiting Next did not return after Close")
				}
			}
			if _, err := p.Next(time.Second, nil); !errors.Is(err, ErrClosed) {
				t.Fatalf("Next after Close: %v", err)
			}
			p.Close() // twice is fine
			store.mu.Lock()
			calls := store.calls
			store.mu.Unlock()
			time.Sleep(3 * tc.delay)
			store.mu.Lock()
			defer store.mu.Unlock()
			if store.calls != calls {
				t.Fatalf("the store was read after Close (%d calls, then %d)", calls, store.calls)
			}
		})
	}
}

func TestHeldSlotsAreNeverOverwritten(t *testing.T) {
	for _, help := range []bool{false, true} {
		t.Run(fmt.Sprintf("help=%v", help), func(t *testing.T) { testHeldSlots(t, help) })
	}
}

func testHeldSlots(t *testing.T, help bool) {
	const batch = 4
	store := noFault()
	draw := cyclic(store.n, batch)
	p, err := New(Config{Draw: draw, Batch: batch, Workers: 2, Prefetch: 2, End: -1,
		Slots: slots(4, batch, []int{4}, 0), Streams: []Stream{{Name: "x", Dense: store, Stride: 4}}, Help: help})
	if err != nil {
		t.Fatal(err)
	}
	p.Start()
	defer p.Close()
	type held struct {
		step int64
		slot int
		copy []byte
	}
	var hold []held
	for s := int64(0); ; s++ {
		b, err := p.Next(time.Second, nil)
		if errors.Is(err, ErrStarved) {
			if s != 4 {
				t.Fatalf("starved at step %d, with 4 slots", s)
			}
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		data := p.cfg.Slots[b.Slot].Streams[0].Data
		hold = append(hold, held{b.Step, b.Slot, append([]byte(nil), data...)})
	}
	time.Sleep(10 * time.Millisecond)
	for _, h := range hold {
		if string(p.cfg.Slots[h.slot].Streams[0].Data) != string(h.copy) {
			t.Fatalf("slot %d of step %d was overwritten while held", h.slot, h.step)
		}
	}
	// a replaced slot goes on with its new memory; the old one stays as it was
	old := p.cfg.Slots[hold[0].slot]
	if err := p.Replace(hold[0].slot, slots(1, batch, []int{4}, 0)[0]); err != nil {
		t.Fatal(err)
	}
	if err := p.Replace(hold[0].slot, old); err == nil {
		t.Fatal("a second Replace of a slot no longer held succeeded")
	}
	b, err := p.Next(time.Second, nil)
	if err != nil || b.Step != 4 || b.Slot != hold[0].slot {
		t.Fatalf("after Replace: %+v, %v", b, err)
	}
	if string(old.Streams[0].Data) != string(hold[0].copy) {
		t.Fatal("the replaced buffers were written")
	}
	if _, err := p.Next(time.Second, []int{b.Slot, b.Slot}); err != nil {
		t.Fatalf("releasing a slot twice: %v", err)
	}
	if _, err := p.Next(time.Second, []int{len(p.state)}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("releasing slot %d of %d: %v", len(p.state), len(p.state), err)
	}
}

func TestPendingAndMadeHere(t *testing.T) {
	store := noFault()
	store.delay = 200 * time.Millisecond
	p, err := New(Config{Draw: cyclic(store.n, 4), Batch: 4, Workers: 1, Prefetch: 1, End: -1,
		Slots: slots(2, 4, []int{4}, 0), Streams: []Stream{{Name: "x", Dense: store, Stride: 4}}})
	if err != nil {
		t.Fatal(err)
	}
	p.Start()
	t0 := time.Now()
	if _, err := p.Next(10*time.Millisecond, nil); !errors.Is(err, ErrPending) {
		t.Fatalf("a slow step: %v, want ErrPending", err)
	}
	if took := time.Since(t0); took > 150*time.Millisecond {
		t.Fatalf("a 10 ms wait took %v", took)
	}
	if b, err := p.Next(2*time.Second, nil); err != nil || b.Step != 0 {
		t.Fatalf("then: %+v %v", b, err)
	}
	p.Close()

	// not started: made in the caller
	store.delay = 0
	q, err := New(Config{Draw: cyclic(store.n, 4), Batch: 4, Workers: 1, Prefetch: 1, End: 2, Start: 1,
		Slots: slots(1, 4, []int{4}, 0), Streams: []Stream{{Name: "x", Dense: store, Stride: 4}}})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	b, err := q.Next(0, nil)
	if err != nil || b.Step != 1 {
		t.Fatalf("made here: %+v %v", b, err)
	}
	checkDense(t, q.cfg.Slots[0].Streams[0].Data, q.cfg.Slots[0].Indices, 4)
	if _, err := q.Next(0, []int{b.Slot}); !errors.Is(err, ErrEnd) {
		t.Fatalf("end: %v", err)
	}
}

func TestRaggedNeeded(t *testing.T) {
	const batch = 6
	store := &fakeStore{n: 100, failAt: -1, panicAt: -1}
	draw := cyclic(store.n, batch)
	for _, room := range []int{64, 3} {
		t.Run(fmt.Sprint(room), func(t *testing.T) {
			p, err := New(Config{Draw: draw, Batch: batch, Workers: 2, Prefetch: 2, End: 20,
				Slots: slots(4, batch, []int{0}, room), Streams: []Stream{{Name: "tokens", Ragged: store}}})
			if err != nil {
				t.Fatal(err)
			}
			p.Start()
			defer p.Close()
			var release []int
			for s := int64(0); s < 20; s++ {
				b, err := p.Next(time.Second, release)
				if err != nil {
					t.Fatal(err)
				}
				slot := p.cfg.Slots[b.Slot]
				var total int64
				for k, i := range slot.Indices[:b.Rows] {
					if slot.Streams[0].Sizes[k] != int64(store.size(i)) {
						t.Fatalf("size of record %d: %d", i, slot.Streams[0].Sizes[k])
					}
					total += int64(store.size(i))
				}
				if b.Needed[0] != total {
					t.Fatalf("needed %d, want %d", b.Needed[0], total)
				}
				if total <= int64(room) {
					at := 0
					for _, i := range slot.Indices[:b.Rows] {
						for j := range store.size(i) {
							if slot.Streams[0].Data[at] != byteAt(i, j) {
								t.Fatalf("step %d: byte %d of record %d", s, j, i)
							}
							at++
						}
					}
				}
				release = []int{b.Slot}
			}
		})
	}
}

func TestBadConfigs(t *testing.T) {
	store := noFault()
	good := func() Config {
		return Config{Draw: cyclic(store.n, 4), Batch: 4, Workers: 1, Prefetch: 1, End: -1,
			Slots: slots(2, 4, []int{4}, 0), Streams: []Stream{{Name: "x", Dense: store, Stride: 4}}}
	}
	for _, tc := range []struct {
		name string
		edit func(c *Config)
	}{
		{"no draw", func(c *Config) { c.Draw = nil }},
		{"no workers", func(c *Config) { c.Workers = 0 }},
		{"no prefetch", func(c *Config) { c.Prefetch = 0 }},
		{"no slots", func(c *Config) { c.Slots = nil }},
		{"negative start", func(c *Config) { c.Start = -1 }},
		{"short data", func(c *Config) { c.Slots[1].Streams[0].Data = make([]byte, 15) }},
		{"short indices", func(c *Config) { c.Slots[0].Indices = make([]int64, 3) }},
		{"missing stream buffers", func(c *Config) { c.Slots[0].Streams = nil }},
		{"two sources", func(c *Config) { c.Streams[0].Ragged = store }},
		{"ragged without sizes", func(c *Config) { c.Streams[0] = Stream{Name: "r", Ragged: store} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := good()
			tc.edit(&c)
			if _, err := New(c); !errors.Is(err, ErrInvalid) {
				t.Fatalf("New: %v, want ErrInvalid", err)
			}
		})
	}
	for _, e := range []Epoch{{N: 0, Batch: 1, World: 1}, {N: 5, Batch: 1, World: 1, Rank: 1}, {N: 5, Batch: 2, World: 1, Order: []int64{1}}} {
		if err := e.Validate(); !errors.Is(err, ErrInvalid) {
			t.Fatalf("%+v: %v", e, err)
		}
	}
}

// heldStore is a dense source whose gather of the batch holding index stuck
// closes in and then waits until free is closed.
type heldStore struct {
	*fakeStore
	stuck    int64
	in, free chan struct{}
}

func (h *heldStore) Gather(indices []int64, dst []byte, stride int) error {
	for _, i := range indices {
		if i == h.stuck {
			close(h.in)
			<-h.free
		}
	}
	return h.fakeStore.Gather(indices, dst, stride)
}

// With Help, a consumer whose step is not ready makes the next steps itself:
// here the only worker is stuck in step 0, and the steps after it are made
// all the same, by the consumer waiting for step 0; every step then comes
// out in order with its own records. Without Help they wait for the worker.
func TestConsumerHelps(t *testing.T) {
	const batch, prefetch = 4, 4
	for _, help := range []bool{false, true} {
		t.Run(fmt.Sprintf("help=%v", help), func(t *testing.T) {
			base := noFault()
			draw := cyclic(base.n, batch)
			first := make([]int64, batch)
			if _, err := draw.Draw(0, first); err != nil {
				t.Fatal(err)
			}
			store := &heldStore{fakeStore: base, stuck: first[0], in: make(chan struct{}), free: make(chan struct{})}
			p, err := New(Config{Draw: draw, Batch: batch, Workers: 1, Prefetch: prefetch, End: 20,
				Slots: slots(prefetch+2, batch, []int{4}, 0), Streams: []Stream{{Name: "x", Dense: store, Stride: 4}},
				Help: help})
			if err != nil {
				t.Fatal(err)
			}
			p.Start()
			defer p.Close()
			<-store.in // the worker is in step 0
			if _, err := p.Next(50*time.Millisecond, nil); !errors.Is(err, ErrPending) {
				t.Fatalf("step 0 with its worker stuck: %v, want ErrPending", err)
			}
			base.mu.Lock()
			calls := base.calls // gathers past the stuck one: steps 1.. made by someone else
			base.mu.Unlock()
			if want := map[bool]int{false: 0, true: prefetch - 1}[help]; calls != want {
				t.Fatalf("%d steps made while the worker was stuck, want %d", calls, want)
			}
			close(store.free)
			var release []int
			for s := int64(0); s < 20; s++ {
				b, err := p.Next(time.Second, release)
				if err != nil || b.Step != s {
					t.Fatalf("step %d: %+v %v", s, b, err)
				}
				slot := p.cfg.Slots[b.Slot]
				want := make([]int64, batch)
				if _, err := draw.Draw(s, want); err != nil {
					t.Fatal(err)
				}
				checkDense(t, slot.Streams[0].Data, want, 4)
				release = []int{b.Slot}
			}
		})
	}
}

// TestWorkersWokenOncePerFewSteps counts the wake-ups of waiting workers
// by a consumer slower than they are, which gives its last slot back at
// every step to a pipeline with slots to spare: about one for every half
// window of steps taken, not one a step. The consumer is made slower by
// waiting, before each step, until the workers have nothing left to do, so
// that the count does not hang on how the machine shares its cores.
func TestWorkersWokenOncePerFewSteps(t *testing.T) {
	const batch, prefetch, workers, steps = 1, 16, 2, 2000
	for _, help := range []bool{false, true} {
		t.Run(fmt.Sprintf("help=%v", help), func(t *testing.T) {
			p, err := New(Config{Draw: cyclic(1000, batch), Batch: batch, Workers: workers, Prefetch: prefetch,
				End: steps, Slots: slots(prefetch+workers+4, batch, []int{4}, 0),
				Streams: []Stream{{Name: "x", Dense: noFault(), Stride: 4}}, Help: help})
			if err != nil {
				t.Fatal(err)
			}
			p.Start()
			defer p.Close()
			var release []int
			for s := int64(0); s < steps; s++ {
				b, err := p.Next(time.Second, release)
				if err != nil || b.Step != s {
					t.Fatalf("step %d: %+v %v", s, b, err)
				}
				release = []int{b.Slot}
				waitIdle(t, p)
			}
			// One a step would be 2000; one a half window, 250.
			if wakes := p.room.wakes.Load(); wakes > steps/4 {
				t.Fatalf("the workers were woken %d times in %d steps, want at most %d", wakes, steps, steps/4)
			}
		})
	}
}

// waitIdle waits until every step claimed is made: no worker is making
// one, and each waits for the gate or is about to look again.
func waitIdle(t *testing.T, p *Pipeline) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; {
		p.mu.Lock()
		idle := int64(len(p.results)) == p.nextClaim-p.nextOut
		p.mu.Unlock()
		if idle {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the workers did not finish their steps in 10 s")
		}
		runtime.Gosched()
	}
}
