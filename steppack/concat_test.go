package steppack

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/loaderx/loaderx/steppipe"
)

// tokens of record i of the fake store: (i*7)%13 (0 for every 13th), and
// a long one every 50th; its byte j is byteAt(i, j).
func recLen(i int64) int64 {
	if i%50 == 7 {
		return 300
	}
	return (i * 7) % 13
}

func byteAt(i int64, j int) byte { return byte(i*31 + int64(j)*7 + 1) }

type fakeRagged struct {
	rowBytes int64
	lie      int64 // a record whose size is one row more than recLen says (-1: none)
	fail     int64 // a record whose gather fails (-1: none)
}

var errDamaged = errors.New("damaged")

func (f fakeRagged) size(i int64) int64 {
	n := recLen(i) * f.rowBytes
	if i == f.lie {
		n += f.rowBytes
	}
	return n
}

func (f fakeRagged) GatherRagged(idx, sizes []int64, dst []byte) (int64, error) {
	var total int64
	for k, i := range idx {
		if i == f.fail {
			return 0, fmt.Errorf("record %d: %w", i, errDamaged)
		}
		sizes[k] = f.size(i)
		total += sizes[k]
	}
	if total > int64(len(dst)) {
		return total, nil
	}
	at := 0
	for _, i := range idx {
		for j := range int(f.size(i)) {
			dst[at] = byteAt(i, j)
			at++
		}
	}
	return total, nil
}

// order is the record stream: sampler step s's records are a permutation.
func order(n int) ([]int64, []int64) {
	idx, lens := make([]int64, n), make([]int64, n)
	for k := range n {
		idx[k] = int64((k*37 + 11) % n)
		lens[k] = recLen(idx[k])
	}
	return idx, lens
}

// expected is the packing of step by the definition, token by token: the
// stream of (record, offset) pairs cut at the step's first token.
type expected struct {
	data                []byte
	seg, pos, nseg, src []int32
	cu, rec, at         []int64
}

func reference(c *Concat, idx, lens []int64, base, step int64) expected {
	var e expected
	t := c.Rows * c.Length
	first := c.First(step)
	type tok struct{ rec, off int64 }
	var stream []tok
	at := base
	for k, i := range idx {
		for o := range lens[k] {
			if at >= first && at < first+t {
				stream = append(stream, tok{i, o})
			}
			at++
		}
	}
	var id int32
	for p, x := range stream {
		col := int64(p) % c.Length
		if col == 0 {
			id = 0
		}
		if col == 0 || x.off == 0 {
			id++
			e.cu = append(e.cu, int64(p))
			e.rec = append(e.rec, x.rec)
			e.at = append(e.at, x.off)
			e.src = append(e.src, c.source(x.rec))
		}
		e.seg = append(e.seg, id)
		e.pos = append(e.pos, int32(int64(p)-e.cu[len(e.cu)-1]))
		if col == c.Length-1 {
			e.nseg = append(e.nseg, id)
		}
		for j := range c.RowBytes {
			e.data = append(e.data, byteAt(x.rec, int(x.off*c.RowBytes+j)))
		}
	}
	e.cu = append(e.cu, t)
	return e
}

type slot struct {
	b    steppipe.Buffers
	meta []int64
}

func newSlot(c *Concat, data, recs, segs int) slot {
	t := int(c.Rows * c.Length)
	cu := 8 * (segs + 1)
	if !c.WideOffsets {
		cu = 4 * (segs + 1)
	}
	sizes := []int{8 * recs, 4 * t, 4 * t, cu, 4 * int(c.Rows), 8 * segs, 8 * segs, 4 * segs, 8 * MetaLen}
	b := steppipe.Buffers{Data: make([]byte, data), Sizes: make([]int64, recs)}
	for _, n := range sizes {
		b.Aux = append(b.Aux, make([]byte, (n+7)/8*8)[:n]) // 8-byte aligned, as a NumPy array is
	}
	meta, _ := int64s(b.Aux[AuxMeta], "")
	return slot{b: b, meta: meta}
}

func check(t *testing.T, c *Concat, s slot, e expected, what string) {
	t.Helper()
	v, err := c.views(s.b)
	if err != nil {
		t.Fatal(err)
	}
	n := c.Rows * c.Length
	skip := s.meta[MetaSkip]
	data := s.b.Data[skip*c.RowBytes : (skip+n)*c.RowBytes]
	if string(data) != string(e.data) {
		t.Fatalf("%s: the rows' bytes differ", what)
	}
	segs := s.meta[MetaSegments]
	if segs != int64(len(e.rec)) {
		t.Fatalf("%s: %d segments, want %d", what, segs, len(e.rec))
	}
	cu := make([]int64, segs+1)
	for k := range cu {
		if c.WideOffsets {
			cu[k] = v.cu64[k]
		} else {
			cu[k] = int64(v.cu32[k])
		}
	}
	for _, x := range []struct {
		name      string
		got, want any
	}{
		{"segment ids", v.seg[:n], e.seg}, {"positions", v.pos[:n], e.pos}, {"segment counts", v.nseg[:c.Rows], e.nseg},
		{"cu_seqlens", cu, e.cu}, {"records", v.rec[:segs], e.rec}, {"starts", v.at[:segs], e.at}, {"sources", v.src[:segs], e.src},
	} {
		if fmt.Sprint(x.got) != fmt.Sprint(x.want) {
			t.Fatalf("%s: %s = %v, want %v", what, x.name, x.got, x.want)
		}
	}
}

func TestConcatStepsMatchTheDefinition(t *testing.T) {
	idx, lens := order(2000)
	for _, tc := range []struct {
		name               string
		rows, length, rb   int64
		rank, world, chunk int
		wide               bool
		starts             []int64
	}{
		{"one row", 1, 16, 4, 0, 1, 97, false, nil},
		{"rows, int64 offsets", 4, 32, 4, 0, 1, 500, true, nil},
		{"3-byte tokens, one chunk", 3, 20, 3, 0, 1, 2000, false, nil},
		{"rank 1 of 3", 2, 24, 4, 1, 3, 64, false, nil},
		{"mixture sources", 2, 40, 4, 0, 2, 333, false, []int64{0, 700, 1500}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			plan, _ := NewPlan(0, 0)
			for a := 0; a < len(idx); a += tc.chunk {
				b := min(a+tc.chunk, len(idx))
				if err := plan.Append(int64(a), int64(b-a), idx[a:b], lens[a:b]); err != nil {
					t.Fatal(err)
				}
			}
			c := &Concat{Source: fakeRagged{rowBytes: tc.rb, lie: -1, fail: -1}, Plan: plan, Rows: tc.rows,
				Length: tc.length, RowBytes: tc.rb, Rank: int64(tc.rank), World: int64(tc.world),
				WideOffsets: tc.wide, SourceStarts: tc.starts}
			if err := c.Validate(); err != nil {
				t.Fatal(err)
			}
			limit := c.Limit()
			if limit <= 10 || c.First(limit)+c.Rows*c.Length <= plan.End()-c.World*c.Rows*c.Length {
				t.Fatalf("limit %d for a plan of %d tokens", limit, plan.End())
			}
			s := newSlot(c, 1<<16, 1024, 1024)
			for step := range limit {
				if _, err := c.MakeStep(step, s.b); err != nil {
					t.Fatalf("step %d: %v", step, err)
				}
				check(t, c, s, reference(c, idx, lens, 0, step), fmt.Sprintf("step %d", step))
			}
			if _, err := c.MakeStep(limit, s.b); !errors.Is(err, ErrUnplanned) {
				t.Fatalf("step %d past the limit: %v", limit, err)
			}
		})
	}
}

func TestConcatCountsWhatDoesNotFit(t *testing.T) {
	idx, lens := order(600)
	plan, _ := NewPlan(0, 0)
	_ = plan.Append(0, int64(len(idx)), idx, lens)
	c := &Concat{Source: fakeRagged{rowBytes: 4, lie: -1, fail: -1}, Plan: plan, Rows: 4, Length: 64, RowBytes: 4, World: 1}
	big := newSlot(c, 1<<16, 1024, 1024)
	if _, err := c.MakeStep(3, big.b); err != nil {
		t.Fatal(err)
	}
	recs, segs := big.meta[MetaRecords], big.meta[MetaSegments]
	few := newSlot(c, 1<<16, int(recs-1), 1024)
	if _, err := c.MakeStep(3, few.b); err != nil || few.meta[MetaRecords] != recs || few.meta[MetaSegments] != 0 {
		t.Fatalf("records past the room: %v, meta %v, want %d records", err, few.meta, recs)
	}
	short := newSlot(c, 8, 1024, 1024)
	needed, err := c.MakeStep(3, short.b)
	if err != nil || needed <= 8 {
		t.Fatalf("data past the room: needed %d, %v", needed, err)
	}
	tight := newSlot(c, 1<<16, 1024, int(segs-1))
	if _, err := c.MakeStep(3, tight.b); err != nil || tight.meta[MetaSegments] != segs {
		t.Fatalf("segments past the room: %v, meta %v, want %d segments", err, tight.meta, segs)
	}
}

func TestConcatRefusesARecordOfAnotherSizeAndPassesAGatherErrorOn(t *testing.T) {
	idx, lens := order(400)
	plan, _ := NewPlan(0, 0)
	_ = plan.Append(0, int64(len(idx)), idx, lens)
	for _, src := range []fakeRagged{{rowBytes: 4, lie: idx[5], fail: -1}, {rowBytes: 4, lie: -1, fail: idx[5]}} {
		c := &Concat{Source: src, Plan: plan, Rows: 1, Length: 64, RowBytes: 4, World: 1}
		s := newSlot(c, 1<<16, 256, 256)
		_, err := c.MakeStep(0, s.b)
		want := errDamaged
		if src.lie >= 0 {
			want = ErrChanged
		}
		if !errors.Is(err, want) {
			t.Fatalf("%+v: %v, want %v", src, err, want)
		}
	}
}

func TestPlanPrunesAndRefusesWhatItDoesNotHold(t *testing.T) {
	plan, _ := NewPlan(100, 7)
	if err := plan.Append(7, 1, []int64{1, 2}, []int64{5}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("mismatched lengths: %v", err)
	}
	if err := plan.Append(7, 1, []int64{1}, []int64{-1}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("negative length: %v", err)
	}
	if err := plan.Append(8, 1, []int64{1}, []int64{1}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("a gap: %v", err)
	}
	for k := range int64(10) {
		if err := plan.Append(7+k, 1, []int64{k, k + 100}, []int64{10, 0}); err != nil {
			t.Fatal(err)
		}
		if err := plan.Append(7+k, 1, []int64{k, k + 100}, []int64{10, 0}); err != nil { // again: passed over
			t.Fatal(err)
		}
	}
	if plan.Start() != 100 || plan.End() != 200 || plan.Step() != 17 {
		t.Fatalf("plan [%d, %d) going on at step %d", plan.Start(), plan.End(), plan.Step())
	}
	idx, lens := make([]int64, 8), make([]int64, 8)
	n, skip, err := plan.Records(115, 10, idx, lens)
	// tokens 115..124: record 1 (tokens 110..119), record 101 (none), record 2 (120..129)
	if err != nil || n != 3 || skip != 5 || idx[0] != 1 || idx[1] != 101 || idx[2] != 2 {
		t.Fatalf("records %v %v, n %d skip %d: %v", idx[:n], lens[:n], n, skip, err)
	}
	plan.Prune(135)
	if plan.Start() != 130 {
		t.Fatalf("pruned to %d, want 130", plan.Start())
	}
	if _, _, err := plan.Records(125, 10, idx, lens); !errors.Is(err, ErrUnplanned) {
		t.Fatalf("pruned tokens: %v", err)
	}
	if _, _, err := plan.Records(195, 10, idx, lens); !errors.Is(err, ErrUnplanned) {
		t.Fatalf("tokens past the end: %v", err)
	}
	plan.Prune(1 << 40)
	if plan.Start() != 190 || plan.End() != 200 {
		t.Fatalf("the last chunk stays: [%d, %d)", plan.Start(), plan.End())
	}
}

// The pipeline makes packed steps as far as the plan goes, says so at its
// limit, and goes on once the plan grows; the steps do not depend on the
// number of workers.
func TestConcatOnThePipeline(t *testing.T) {
	idx, lens := order(3000)
	for _, workers := range []int{1, 3} {
		plan, _ := NewPlan(0, 0)
		_ = plan.Append(0, 1000, idx[:1000], lens[:1000])
		c := &Concat{Source: fakeRagged{rowBytes: 4, lie: -1, fail: -1}, Plan: plan, Rows: 2, Length: 48, RowBytes: 4, World: 1}
		var slots []steppipe.Slot
		var metas [][]int64
		for range 6 {
			s := newSlot(c, 1<<15, 512, 512)
			slots = append(slots, steppipe.Slot{Indices: make([]int64, 4), Streams: []steppipe.Buffers{s.b}})
			metas = append(metas, s.meta)
		}
		p, err := steppipe.New(steppipe.Config{Batch: 4, Streams: []steppipe.Stream{{Name: "tokens", Packed: c}},
			Slots: slots, Workers: workers, Prefetch: 3, End: -1, Limited: true, Limit: c.Limit()})
		if err != nil {
			t.Fatal(err)
		}
		p.Start()
		var release []int
		step := int64(0)
		for round := range 3 {
			for limit := c.Limit(); step < limit; step++ {
				b, err := p.Next(5*time.Second, release)
				if err != nil || b.Step != step {
					t.Fatalf("workers %d, step %d: %v %v", workers, step, b, err)
				}
				check(t, c, slot{b: slots[b.Slot].Streams[0], meta: metas[b.Slot]}, reference(c, idx, lens, 0, step), fmt.Sprint(step))
				release = []int{b.Slot}
			}
			if _, err := p.Next(5*time.Second, release); !errors.Is(err, steppipe.ErrUnplanned) {
				t.Fatalf("workers %d, round %d, step %d at the limit: %v", workers, round, step, err)
			}
			release = nil
			a := 1000 * (round + 1)
			if round < 2 {
				_ = plan.Append(int64(a), 1000, idx[a:a+1000], lens[a:a+1000])
				_ = plan.Append(int64(a), 1000, idx[a:a+1000], lens[a:a+1000]) // again: passed over
				plan.Prune(c.First(step))
				p.SetLimit(c.Limit())
			}
		}
		if step < 50 {
			t.Fatalf("only %d steps", step)
		}
		p.Close()
	}
}
