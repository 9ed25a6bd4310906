package zrecord

import (
	"bytes"
	"fmt"
	"testing"
)

// TestSumIntoIsDataSum checks sumInto against dataSum both ways it can
// go, at lengths on either side of sumFoldMin and of copyCRC's pieces,
// and with a destination too short to copy into.
func TestSumIntoIsDataSum(t *testing.T) {
	saved := foldSums
	t.Cleanup(func() { foldSums = saved })
	for _, fold := range []bool{false, true} {
		foldSums = func() bool { return fold }
		for _, n := range []int{0, 1, 255, sumFoldMin, 257, 4101, copyCRCPiece + 3, 200_000} {
			for _, short := range []bool{false, true} {
				t.Run(fmt.Sprintf("fold=%v/n=%d/short=%v", fold, n, short), func(t *testing.T) {
					src := make([]byte, n)
					for i := range src {
						src[i] = byte(i*131 + i>>8)
					}
					dst := make([]byte, n+7)
					if short && n > 0 {
						dst = dst[:n-1]
					}
					if got, want := sumInto(dst, src), dataSum(src); got != want {
						t.Fatalf("sumInto = %#x, dataSum = %#x", got, want)
					}
					if fold && !short && n >= sumFoldMin {
						if !bytes.Equal(dst[:n], src) {
							t.Fatal("the checksum went through dst, which does not hold src")
						}
					} else if bytes.ContainsFunc(dst, func(r rune) bool { return r != 0 }) {
						t.Fatal("dst was written, with the checksum taken in place")
					}
				})
			}
		}
	}
}
