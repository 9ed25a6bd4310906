package zrecord

import (
	"slices"
	"testing"
)

// rawParts ends parts at the step's multiples of the chunk where records
// allow, keeps a record larger than the step alone, starts a part at a
// change of chunk, never leaves a part empty, and covers the batch in
// order.
func TestRawParts(t *testing.T) {
	cases := []struct {
		sizes []int
		start int    // the chunk offset of the first record
		roll  []bool // roll[k]: record k starts the next chunk, at offset 0
		step  int64
		want  []int
	}{
		{[]int{4, 4, 4, 4}, 0, nil, 8, []int{0, 2, 4}},
		{[]int{4, 4, 4}, 0, nil, 8, []int{0, 2, 3}},
		{[]int{3, 20, 3, 3}, 0, nil, 8, []int{0, 1, 2, 4}},                                        // the large record is a part alone
		{[]int{20, 20}, 0, nil, 8, []int{0, 1, 2}},                                                // two large ones
		{[]int{0, 0, 8, 0, 1}, 0, nil, 8, []int{0, 4, 5}},                                         // empty records ride along
		{[]int{9}, 0, nil, 8, []int{0, 1}},                                                        // a single record
		{[]int{8, 8, 8}, 0, nil, 8, []int{0, 1, 2, 3}},                                            // exactly the step
		{[]int{1, 2, 3, 4, 5, 6, 7}, 0, nil, 10, []int{0, 4, 5, 7}},                               // 1+2+3+4 fills the step; 5 ends at 15, 6 at 21 past 20, 7 by 30
		{[]int{4, 4, 4, 4, 4}, 4, nil, 8, []int{0, 1, 3, 5}},                                      // from 4: the first part ends at 8, then 8 to 16
		{[]int{4, 4, 4}, 6, nil, 8, []int{0, 2, 3}},                                               // 6-10 crosses 8, so the part may run to 16
		{[]int{3, 3, 3}, 0, []bool{false, true, false}, 8, []int{0, 1, 3}},                        // the second starts the next chunk
		{[]int{20, 1, 1}, 0, nil, 8, []int{0, 1, 3}},                                              // a record after a large one starts a part
		{[]int{512 << 10, 1, 512 << 10}, 0, nil, 512 << 10, []int{0, 1, 2, 3}},                    // a step of 512 KiB
		{[]int{64 << 10, 64 << 10, 64 << 10}, 2<<20 - 128<<10, nil, rawPartBytes, []int{0, 2, 3}}, // a 2 MiB boundary after two
	}
	for _, c := range cases {
		ents := make([]entry, len(c.sizes))
		off, chunk := c.start, uint32(0)
		for i, n := range c.sizes {
			if c.roll != nil && c.roll[i] {
				off, chunk = 0, chunk+1
			}
			ents[i] = entry{off: uint32(off), phys: uint32(n), logic: uint32(n), chunk: chunk}
			off += n
		}
		got := rawParts(ents, c.step)
		if !slices.Equal(got, c.want) {
			t.Errorf("rawParts(%v from %d, step %d) = %v, want %v", c.sizes, c.start, c.step, got, c.want)
		}
	}
}
