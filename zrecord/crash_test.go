package zrecord_test

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/loaderx/loaderx/zrecord"
)

// The crash tests run a writer in a subprocess (this test binary, re-executed
// into TestCrashHelper), kill it with SIGKILL at a random moment, and check
// that the store it leaves behind reopens to the state before or after the
// operation that was running, byte-exact.

const crashEnv = "ZRECORD_CRASH_HELPER" // role:seed:dir

type crashOp struct {
	kind string // "append", "delete", "compact", "sync", "upgrade"
	recs [][]byte
	idx  []int64
	// pipeStep, when set, is the part size per thread an append of a
	// compressed store is pipelined at (zrecord.SetPipeStepPerThread), so
	// that a small batch is written in several parts.
	pipeStep int64
	// aside: the batch's table is written aside as its parts are written
	// (zrecord.SetTableAsideEntries(1)), as a batch of many small records'
	// is.
	aside bool
}

func (op crashOp) String() string {
	switch op.kind {
	case "append":
		return fmt.Sprintf("append %d records (%d bytes)", len(op.recs), model(op.recs).logicalBytes())
	case "delete":
		return fmt.Sprintf("delete %v", op.idx)
	}
	return op.kind
}

func (op crashOp) apply(s *zrecord.Store) error {
	switch op.kind {
	case "append":
		if op.pipeStep > 0 {
			defer zrecord.SetPipeStepPerThread(zrecord.SetPipeStepPerThread(op.pipeStep))
		}
		if op.aside {
			defer zrecord.SetTableAsideEntries(zrecord.SetTableAsideEntries(1))
		}
		_, err := s.Append(op.recs)
		return err
	case "delete":
		return s.Delete(op.idx)
	case "compact":
		return s.Compact()
	case "sync":
		return s.Sync()
	case "upgrade":
		return s.Upgrade()
	}
	return fmt.Errorf("unknown op %q", op.kind)
}

func (op crashOp) model(m model) model {
	switch op.kind {
	case "append":
		return m.appended(op.recs)
	case "delete":
		return m.deleted(op.idx)
	}
	return m
}

// crashPlan is a deterministic operation sequence; ops before ready are
// setup, the kill lands in ops from ready on.
type crashPlan struct {
	codec    zrecord.Codec
	capacity int64
	ops      []crashOp
	ready    int
	// oldVersion, when set, makes the helper start from a store of that
	// format version holding initial (zrecord.WriteOldStore) instead of
	// creating an empty one.
	oldVersion uint8
	initial    model
}

// states[k] is the model after the first k operations.
func (p *crashPlan) states() []model {
	st := []model{p.initial}
	for _, op := range p.ops {
		st = append(st, op.model(st[len(st)-1]))
	}
	return st
}

func buildCrashPlan(role string, seed int64) *crashPlan {
	rng := newRand(seed)
	p := &crashPlan{codec: zrecord.Raw}
	if rng.IntN(2) == 1 {
		p.codec = zrecord.Zstd
	}
	n := 0
	add := func(op crashOp) {
		p.ops = append(p.ops, op)
		switch op.kind {
		case "append":
			n += len(op.recs)
		case "delete":
			n -= len(op.idx)
		}
	}
	switch role {
	case "append":
		p.capacity = 256 << 10
		// Odd seeds write compressed batches in pipelined parts of about
		// 16 KiB per thread, several parts per batch.
		var step int64
		if seed%2 != 0 {
			step = 16 << 10
		}
		for range 40 {
			add(crashOp{kind: "append", recs: genBatch(rng, 1+rng.IntN(8), 48<<10), pipeStep: step})
		}
	case "delete":
		p.capacity = 256 << 10
		for range 4 {
			add(crashOp{kind: "append", recs: genBatch(rng, 100, 6<<10)})
		}
		p.ready = len(p.ops)
		for range 40 {
			if rng.IntN(5) == 0 {
				add(crashOp{kind: "append", recs: genBatch(rng, 1+rng.IntN(8), 6<<10)})
			} else {
				add(crashOp{kind: "delete", idx: pickDelete(rng, n, 24)})
			}
		}
	case "compact":
		// Large incompressible records after small ones that get deleted:
		// compaction then moves each large record down by less than its own
		// length, so every move overlaps its source.
		p.capacity = 4 << 20
		for range 5 {
			var recs [][]byte
			for range 8 {
				size := 1<<10 + rng.IntN(15<<10)
				if rng.IntN(2) == 0 {
					size = 200<<10 + rng.IntN(400<<10)
				}
				b := make([]byte, size)
				fillRandom(rng, b)
				recs = append(recs, b)
			}
			add(crashOp{kind: "append", recs: recs})
		}
		// Delete a few small records near the front; the tail fills each hole.
		var small []int64
		for i, r := range p.states()[len(p.ops)] {
			if len(r) < 16<<10 && i < 20 && i < n-1 {
				small = append(small, int64(i))
			}
		}
		rng.Shuffle(len(small), func(a, b int) { small[a], small[b] = small[b], small[a] })
		if len(small) > 4 {
			small = small[:2+rng.IntN(3)]
		}
		if len(small) > 0 {
			add(crashOp{kind: "delete", idx: small})
		}
		p.ready = len(p.ops)
		add(crashOp{kind: "compact"})
		add(crashOp{kind: "append", recs: genBatch(rng, 3, 64<<10)})
		add(crashOp{kind: "delete", idx: pickDelete(rng, n, 3)})
		add(crashOp{kind: "compact"})
	case "upgrade":
		// An old store, mostly of incompressible records: in version 3
		// each is a frame larger than itself, which the upgrade decodes
		// and stores raw past the frontier.
		p.capacity = 2 << 20
		p.oldVersion = 1
		if rng.IntN(2) == 1 {
			p.oldVersion = 3
			p.codec = zrecord.Zstd
		}
		for range 240 {
			b := make([]byte, 1+rng.IntN(96<<10))
			if rng.IntN(4) == 0 {
				for k := range b {
					b[k] = byte(k / 512)
				}
			} else {
				fillRandom(rng, b)
			}
			p.initial = append(p.initial, b)
		}
		add(crashOp{kind: "upgrade"})
		add(crashOp{kind: "append", recs: genBatch(rng, 3, 32<<10)})
	default:
		panic("unknown crash role " + role)
	}
	return p
}

// TestCrashHelper is the subprocess side; it does nothing in a normal run.
func TestCrashHelper(t *testing.T) {
	spec := os.Getenv(crashEnv)
	if spec == "" {
		t.Skip("subprocess of the crash tests")
	}
	parts := strings.SplitN(spec, ":", 3)
	seed, _ := strconv.ParseInt(parts[1], 10, 64)
	out := os.NewFile(3, "progress")
	report := func(format string, args ...any) {
		fmt.Fprintf(out, format+"\n", args...)
	}
	p := buildCrashPlan(parts[0], seed)
	var s *zrecord.Store
	var err error
	if p.oldVersion != 0 {
		err = zrecord.WriteOldStore(parts[2], p.oldVersion, p.codec, nil, p.initial, p.capacity)
		if err == nil {
			s, err = zrecord.Open(parts[2], zrecord.WithChunkCapacity(p.capacity))
		}
	} else {
		s, err = zrecord.Create(parts[2], zrecord.WithCodec(p.codec), zrecord.WithChunkCapacity(p.capacity))
	}
	if err != nil {
		report("error Create: %v", err)
		os.Exit(3)
	}
	for k, op := range p.ops {
		if k == p.ready {
			report("ready")
		}
		if err := op.apply(s); err != nil {
			report("error op %d (%s): %v", k, op, err)
			os.Exit(3)
		}
		report("done %d", k+1)
	}
	if err := s.Close(); err != nil {
		report("error Close: %v", err)
		os.Exit(3)
	}
	report("end")
	os.Exit(0)
}

type crashRun struct {
	done      int  // operations reported finished
	ended     bool // the helper finished everything
	readyAt   time.Time
	exitedAt  time.Time
	errorLine string
}

// runHelper starts the helper and kills it delay after it reports ready
// (delay < 0: never). It returns what the helper reported.
func runHelper(t *testing.T, role string, seed int64, dir string, delay time.Duration) crashRun {
	t.Helper()
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashHelper$", "-test.count=1", "-test.timeout=120s")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s:%d:%s", crashEnv, role, seed, dir))
	cmd.ExtraFiles = []*os.File{pw}
	var stderr strings.Builder
	cmd.Stdout = &stderr
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	lines := make(chan string, 256)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	var run crashRun
	timeout := time.After(90 * time.Second)
	var kill <-chan time.Time
	killed := false
	handle := func(line string) {
		switch {
		case line == "ready":
			run.readyAt = time.Now()
			if delay >= 0 {
				kill = time.After(delay)
			}
		case line == "end":
			run.ended = true
		case strings.HasPrefix(line, "done "):
			run.done, _ = strconv.Atoi(line[5:])
		case strings.HasPrefix(line, "error"):
			run.errorLine = line
		}
	}
loop:
	for {
		select {
		case line, ok := <-lines:
			if !ok {
				break loop
			}
			handle(line)
		case <-kill:
			cmd.Process.Signal(syscall.SIGKILL)
			kill = nil
			killed = true
		case <-timeout:
			cmd.Process.Signal(syscall.SIGKILL)
			t.Errorf("helper %s seed %d timed out", role, seed)
		}
	}
	werr := cmd.Wait()
	run.exitedAt = time.Now()
	if run.errorLine != "" {
		t.Fatalf("helper %s seed %d: %s\n%s", role, seed, run.errorLine, stderr.String())
	}
	if run.ended && werr != nil && !killed { // a kill may land after "end"
		t.Fatalf("helper %s seed %d: %v\n%s", role, seed, werr, stderr.String())
	}
	if !run.ended && delay < 0 {
		t.Fatalf("helper %s seed %d did not finish: %v\n%s", role, seed, werr, stderr.String())
	}
	return run
}

func TestCrashKill(t *testing.T) {
	if raceEnabled {
		t.Skip("crash kills are timed; run them without -race")
	}
	kills := 30
	if testing.Short() {
		kills = 8
	}
	if v := os.Getenv("ZRECORD_CRASH_KILLS"); v != "" {
		kills, _ = strconv.Atoi(v)
	}
	for _, role := range []string{"append", "delete", "compact", "upgrade"} {
		t.Run(role, func(t *testing.T) {
			rng, _ := seeded(t)
			// Calibrate: how long the part after "ready" takes here and now.
			calSeed := rng.Int64()
			dir := filepath.Join(t.TempDir(), "cal")
			run := runHelper(t, role, calSeed, dir, -1)
			window := run.exitedAt.Sub(run.readyAt)
			p := buildCrashPlan(role, calSeed)
			verifyCrash(t, p, dir, len(p.ops), rng)
			t.Logf("%s: %d ops, %v after ready", role, len(p.ops), window)

			deadline := time.Now().Add(25 * time.Second)
			interrupted, attempts := 0, 0
			outcome := map[string]int{}
			for interrupted < kills && time.Now().Before(deadline) {
				attempts++
				seed := rng.Int64()
				delay := time.Duration(rng.Int64N(int64(window) + 1))
				dir := filepath.Join(t.TempDir(), fmt.Sprintf("k%d", attempts))
				run := runHelper(t, role, seed, dir, delay)
				if !run.ended {
					interrupted++
				}
				p := buildCrashPlan(role, seed)
				if meta, err := os.ReadFile(filepath.Join(dir, "meta.zr")); err == nil && len(meta) > 4 && p.oldVersion != 0 && run.done == 0 {
					outcome[fmt.Sprintf("left at version %d", meta[4])]++
				}
				which := verifyCrash(t, p, dir, run.done, rng)
				if t.Failed() {
					t.Fatalf("kill %d: seed %d, killed %v after ready, %d ops reported done", attempts, seed, delay, run.done)
				}
				if run.ended {
					outcome["finished"]++
					window = window * 8 / 10 // this run was quicker than the calibration
				} else if which == 0 {
					outcome["before"]++
				} else {
					outcome["after"]++
				}
			}
			t.Logf("%d runs, %d killed mid-sequence; interrupted op found: %v", attempts, interrupted, outcome)
			if interrupted < min(kills, 10) {
				t.Errorf("only %d of %d runs were killed before finishing", interrupted, attempts)
			}
		})
	}
}

// verifyCrash reopens the store a killed helper left and checks it holds the
// state after op done or after op done+1; then that it still works. It
// returns 0 for the former, 1 for the latter.
func verifyCrash(t *testing.T, p *crashPlan, dir string, done int, rng *rand.Rand) int {
	t.Helper()
	states := p.states()
	cands := []model{states[done]}
	if done+1 < len(states) {
		cands = append(cands, states[done+1])
	}
	interrupted := "none"
	if done < len(p.ops) {
		interrupted = p.ops[done].String()
	}
	s, err := zrecord.Open(dir, zrecord.WithChunkCapacity(p.capacity))
	if err != nil {
		t.Errorf("reopen after the kill (interrupted op %d: %s): %v", done, interrupted, err)
		return -1
	}
	defer func() { s.Close() }()
	if st, err := s.Stats(); err != nil || (st.Version != 4 && st.Version != int(p.oldVersion)) {
		t.Errorf("after a kill during op %d (%s): format version %d (%v)", done, interrupted, st.Version, err)
	}
	which, err := matchAny(s, rng, cands...)
	if err != nil {
		t.Errorf("after a kill during op %d (%s) the store matches neither the before nor the after state: %v", done, interrupted, err)
		return -1
	}
	m := cands[which]
	// The store must go on working.
	recs := genBatch(rng, 4, 32<<10)
	if _, err := s.Append(recs); err != nil {
		t.Errorf("Append after recovery: %v", err)
		return which
	}
	m = m.appended(recs)
	idx := pickDelete(rng, len(m), 4)
	if err := s.Delete(idx); err != nil {
		t.Errorf("Delete after recovery: %v", err)
		return which
	}
	m = m.deleted(idx)
	for pass := range 2 {
		if err := s.Compact(); err != nil {
			t.Errorf("Compact %d after recovery: %v", pass+1, err)
			return which
		}
		if err := diffStore(s, m, rng); err != nil {
			t.Errorf("after Compact %d following recovery: %v", pass+1, err)
			return which
		}
		if err := checkCompacted(s, m); err != nil {
			t.Errorf("%v", err)
			return which
		}
	}
	if err := s.Close(); err != nil {
		t.Errorf("Close after recovery: %v", err)
		return which
	}
	s, err = zrecord.Open(dir, zrecord.WithReadOnly())
	if err != nil {
		t.Errorf("read-only reopen after recovery: %v", err)
		return which
	}
	if err := diffStore(s, m, rng); err != nil {
		t.Errorf("read-only reopen after recovery: %v", err)
	}
	return which
}
