package zrecord_test

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/loaderx/loaderx/zrecord"
	"github.com/loaderx/loaderx/zrecord/internal/faultfs"
)

// A real SIGKILL of a process that keeps replacing a store, which the
// tests of staging_test.go simulate at every step.

const createKillEnv = "ZRECORD_CREATE_KILL_HELPER" // mode:dir

// TestCreateKillHelper is the subprocess of TestCreateKill: it replaces the
// store at its path again and again, each time with a schema naming the
// round and a few records, and reports each round done.
func TestCreateKillHelper(t *testing.T) {
	spec := os.Getenv(createKillEnv)
	if spec == "" {
		t.Skip("subprocess of TestCreateKill")
	}
	mode, dir, _ := strings.Cut(spec, ":")
	out := os.NewFile(3, "progress")
	var fs zrecord.FS = zrecord.OSFS
	if mode == "two-renames" {
		ffs := faultfs.New(zrecord.OSFS)
		ffs.NoExchange(true)
		fs = ffs
	}
	fmt.Fprintln(out, "ready")
	for round := 0; ; round++ {
		s, err := zrecord.Create(dir, zrecord.WithFS(fs), zrecord.WithReplace(), zrecord.WithCodec(zrecord.Zstd),
			zrecord.WithFile("schema.bin", killSchema(round)))
		if err != nil {
			fmt.Fprintf(out, "error create %d: %v\n", round, err)
			os.Exit(3)
		}
		if _, err := s.Append(killRecords(round)); err != nil {
			fmt.Fprintf(out, "error append %d: %v\n", round, err)
			os.Exit(3)
		}
		if err := s.Close(); err != nil {
			fmt.Fprintf(out, "error close %d: %v\n", round, err)
			os.Exit(3)
		}
		fmt.Fprintf(out, "done %d\n", round)
	}
}

func killSchema(round int) []byte {
	return append([]byte(fmt.Sprintf("round %d\n", round)), bytes.Repeat([]byte{byte(round)}, 64<<10)...)
}

func killRecords(round int) [][]byte {
	recs := make([][]byte, 8)
	for i := range recs {
		recs[i] = ztRecord(round*100+i, 4<<10)
	}
	return recs
}

// TestCreateKill SIGKILLs a process that keeps replacing a store, at random
// moments: the path holds a store of the round that was running or the one
// before (with a prefix of its records), or (for the two-rename swap, or
// the first round) nothing; the next Create clears every leftover, also in
// a parent crowded past the size at which a Create looks at its entries.
func TestCreateKill(t *testing.T) {
	if raceEnabled {
		t.Skip("the kills are timed; run them without -race")
	}
	kills := 24
	if testing.Short() {
		kills = 8
	}
	rng, _ := seeded(t)
	for _, mode := range []string{"exchange", "two-renames", "crowded"} {
		t.Run(mode, func(t *testing.T) {
			outcome := map[string]int{}
			for n := range kills {
				parent := t.TempDir()
				if mode == "crowded" {
					writeNeighbours(t, parent, zrecord.OldScanLimit+8)
				}
				dir := filepath.Join(parent, "s")
				delay := time.Duration(rng.Int64N(int64(40 * time.Millisecond)))
				done := runCreateKill(t, mode, dir, delay)
				what := fmt.Sprintf("kill %d, %v after ready, %d rounds done", n, delay, done)
				names := besidePath(parent)
				if len(names) > 1 || len(names) == 1 && names[0] != "s" {
					outcome["left a leftover beside the path"]++
				}
				state := "nothing"
				if _, err := os.Stat(dir); err == nil {
					s, err := zrecord.Open(dir)
					if err != nil {
						t.Fatalf("%s: the path holds something that does not open: %v (%v)", what, err, names)
					}
					schema, _ := os.ReadFile(filepath.Join(dir, "schema.bin"))
					round := -1
					fmt.Sscanf(string(schema), "round %d\n", &round)
					if round < 0 || !bytes.Equal(schema, killSchema(round)) || round < done-1 || round > done {
						t.Fatalf("%s: the store's schema is of round %d (%d bytes)", what, round, len(schema))
					}
					recs := killRecords(round)
					got, err := gatherPacked(s, seq(s.Len()))
					if err != nil || len(got) > len(recs) || !slices.EqualFunc(got, recs[:len(got)], bytes.Equal) {
						t.Fatalf("%s: the store of round %d holds %d records (%v), not a prefix of its 8", what, round, len(got), err)
					}
					if round < done && len(got) != len(recs) {
						t.Fatalf("%s: the store of round %d, which was closed, holds %d of its records", what, round, len(got))
					}
					s.Close()
					state = "store"
					if round == done {
						state = "store of the round killed"
					}
				} else if done > 0 && mode != "two-renames" {
					t.Fatalf("%s: the path holds no store after a replace was killed", what)
				}
				outcome[state]++
				createAfter(t, parent, map[bool]string{true: "old", false: "nothing"}[state != "nothing"], what)
			}
			t.Logf("%d kills: %v", kills, outcome)
			if outcome["left a leftover beside the path"] == 0 {
				t.Errorf("no kill landed inside a Create (%v): the test does not test it", outcome)
			}
		})
	}
}

func seq(n int64) []int64 {
	idx := make([]int64, n)
	for i := range idx {
		idx[i] = int64(i)
	}
	return idx
}

// runCreateKill runs the helper on dir and kills it delay after it reports
// ready; it returns how many rounds the helper reported done.
func runCreateKill(t *testing.T, mode, dir string, delay time.Duration) int {
	t.Helper()
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	cmd := exec.Command(os.Args[0], "-test.run=^TestCreateKillHelper$", "-test.count=1", "-test.timeout=60s")
	cmd.Env = append(os.Environ(), createKillEnv+"="+mode+":"+dir)
	cmd.ExtraFiles = []*os.File{pw}
	var output strings.Builder
	cmd.Stdout, cmd.Stderr = &output, &output
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	sc := bufio.NewScanner(pr)
	if !sc.Scan() || sc.Text() != "ready" {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("helper did not start: %s", output.String())
	}
	timer := time.AfterFunc(delay, func() { cmd.Process.Signal(syscall.SIGKILL) })
	defer timer.Stop()
	done := 0
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "error") {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("helper: %s\n%s", line, output.String())
		}
		if n, ok := strings.CutPrefix(line, "done "); ok {
			done, _ = strconv.Atoi(n)
			done++
		}
	}
	cmd.Wait()
	return done
}
