package zrecord

import (
	"slices"
	"testing"
)

// rawParts keeps every part within the step unless it is a single record
// larger than the step, never leaves a part empty, and covers the batch in
// order.
func TestRawParts(t *testing.T) {
	rec := func(n int) []byte { return make([]byte, n) }
	cases := []struct {
		sizes []int
		step  int64
		want  []int
	}{
		{[]int{4, 4, 4, 4}, 8, []int{0, 2, 4}},
		{[]int{4, 4, 4}, 8, []int{0, 2, 3}},
		{[]int{3, 20, 3, 3}, 8, []int{0, 1, 2, 4}},                     // the large record is a part alone
		{[]int{20, 20}, 8, []int{0, 1, 2}},                             // two large ones
		{[]int{0, 0, 8, 0, 1}, 8, []int{0, 4, 5}},                      // empty records ride along
		{[]int{9}, 8, []int{0, 1}},                                     // a single record
		{[]int{8, 8, 8}, 8, []int{0, 1, 2, 3}},                         // exactly the step
		{[]int{1, 2, 3, 4, 5, 6, 7}, 10, []int{0, 4, 5, 6, 7}},         // 1+2+3+4 fills the step; 5+6 and 6+7 do not fit
		{[]int{512 << 10, 1, 512 << 10}, 512 << 10, []int{0, 1, 2, 3}}, // the step of a real append
	}
	for _, c := range cases {
		recs := make([][]byte, len(c.sizes))
		for i, n := range c.sizes {
			recs[i] = rec(n)
		}
		got := rawParts(recs, c.step)
		if !slices.Equal(got, c.want) {
			t.Errorf("rawParts(%v, %d) = %v, want %v", c.sizes, c.step, got, c.want)
		}
	}
}
