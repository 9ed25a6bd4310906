package zrecord_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/loaderx/loaderx/zrecord"
)

// BenchmarkCreateManyInOneDir creates stores of one record each, one after
// another, in one directory, as the shards of a dataset are written, and
// reports the mean time of a Create (with its Append and Close) over the
// first and over the last 1,000 of them: the two match when the cost of a
// Create does not grow with the number of its neighbours. It makes 20,000
// stores (ZRECORD_CREATE_SCALE sets another count), so run it once:
//
//	go test -run XXX -bench CreateManyInOneDir -benchtime 1x ./zrecord/
func BenchmarkCreateManyInOneDir(b *testing.B) {
	n := 20000
	if v := os.Getenv("ZRECORD_CREATE_SCALE"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 2000 {
			b.Fatalf("ZRECORD_CREATE_SCALE=%q: want a count of at least 2000", v)
		}
	}
	const window = 1000
	rec := [][]byte{[]byte("one record")}
	for range b.N {
		b.StopTimer()
		parent := b.TempDir()
		b.StartTimer()
		took := make([]time.Duration, n)
		for i := range n {
			start := time.Now()
			s, err := zrecord.Create(filepath.Join(parent, fmt.Sprintf("shard-%06d", i)))
			if err != nil {
				b.Fatal(err)
			}
			if _, err := s.Append(rec); err != nil {
				b.Fatal(err)
			}
			if err := s.Close(); err != nil {
				b.Fatal(err)
			}
			took[i] = time.Since(start)
		}
		mean := func(ds []time.Duration) float64 {
			var sum time.Duration
			for _, d := range ds {
				sum += d
			}
			return sum.Seconds() * 1e3 / float64(len(ds))
		}
		b.ReportMetric(mean(took[:window]), "first1k-ms/create")
		b.ReportMetric(mean(took[n-window:]), "last1k-ms/create")
		b.ReportMetric(mean(took), "all-ms/create")
	}
}
