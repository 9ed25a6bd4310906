package zrecord_test

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"

	"github.com/loaderx/loaderx/zrecord"
)

func BenchmarkScratchAppendSmallNarrow(b *testing.B) {
	const n = 1 << 22
	data := make([]byte, n*16)
	for i := 0; i < n*4; i++ {
		binary.LittleEndian.PutUint32(data[4*i:], uint32(i))
	}
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		dir := filepath.Join(b.TempDir(), "s")
		s, _ := zrecord.Create(dir, zrecord.WithCodec(zrecord.Narrow))
		recs := make([][]byte, n)
		for i := range recs {
			recs[i] = data[i*16 : i*16+16]
		}
		b.StartTimer()
		if _, err := s.Append(recs); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		s.CloseUnsynced()
		os.RemoveAll(dir)
		b.StartTimer()
	}
	b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds()/1e6, "Mrec/s")
}
