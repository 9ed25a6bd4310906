package zsampler_test

import (
	"fmt"

	"github.com/loaderx/loaderx/zsampler"
)

func Example() {
	// Two ranks share the index space [0, 10) in cyclic mode: each rank
	// draws 2 indices a step, so a global batch has 4 and a cycle has 2
	// steps; the 2 indices a cycle does not reach are dropped.
	for step := int64(0); step < 4; step++ {
		fmt.Printf("step %d:", step)
		for rank := int64(0); rank < 2; rank++ {
			s := zsampler.Spec{
				Mode:      zsampler.Cyclic,
				N:         10,
				BatchSize: 2,
				Seed:      2024,
				Shard:     zsampler.Shard{Rank: rank, World: 2},
			}
			batch := make([]int64, s.BatchSize)
			if err := s.Fill(step, batch); err != nil {
				fmt.Println(err)
				return
			}
			fmt.Printf(" rank %d %v", rank, batch)
		}
		fmt.Println()
	}
	// Output:
	// step 0: rank 0 [3 0] rank 1 [1 9]
	// step 1: rank 0 [7 4] rank 1 [8 5]
	// step 2: rank 0 [2 7] rank 1 [4 3]
	// step 3: rank 0 [1 8] rank 1 [9 0]
}

func ExampleSpec_Fill() {
	s := zsampler.Spec{Mode: zsampler.Sequential, N: 10, BatchSize: 4, Shard: zsampler.NoShard}
	batch := make([]int64, s.BatchSize)
	for _, step := range []int64{0, 2, 1_000_000} {
		if err := s.Fill(step, batch); err != nil {
			fmt.Println(err)
			return
		}
		fmt.Println(step, batch)
	}
	// Output:
	// 0 [0 1 2 3]
	// 2 [8 9 0 1]
	// 1000000 [0 1 2 3]
}

func ExampleParseMode() {
	m, err := zsampler.ParseMode("iid")
	fmt.Println(m == zsampler.IID, err)
	_, err = zsampler.ParseMode("shuffle")
	fmt.Println(err)
	// Output:
	// true <nil>
	// zsampler: invalid mode "shuffle": want "sequential", "iid" or "cyclic"
}

func ExampleFill() {
	// The flat form, as a C ABI calls it: one call per batch.
	dst := make([]int64, 3)
	err := zsampler.Fill(zsampler.Cyclic, 5, 3, 1, 0, 0, 2, dst)
	fmt.Println(err)
	// Output:
	// zsampler: invalid global batch 6 (batch size 3 * world 2): cyclic mode needs it at most n = 5
}
