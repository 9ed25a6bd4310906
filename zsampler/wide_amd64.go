//go:build amd64

package zsampler

import "golang.org/x/sys/cpu"

// hasWideKernel reports whether permWide runs the AVX2 kernel.
var hasWideKernel = cpu.X86.HasAVX2

// permWideAVX2 writes forward(x0+i) of a four-round mum network to dst[i]
// for every i; len(dst) is a multiple of 4. k and m are the network's keys
// and multipliers, wb the width of its low part, ma and mb its masks.
//
//go:noescape
func permWideAVX2(dst []int64, x0 uint64, k *[maxRounds]uint64, m *[4]uint64, wb, ma, mb uint64)

// permWide applies f, a four-round mum network, to x0, x0+1, ... over as
// long a prefix of dst as the vector kernel covers (four indices a step) and
// returns the length of that prefix: 0 without AVX2.
func permWide(dst []int64, x0 uint64, f *feistel) int {
	n := len(dst) &^ 3
	if !hasWideKernel || n == 0 {
		return 0
	}
	permWideAVX2(dst[:n], x0, &f.k, &f.m, uint64(f.wb), f.ma, f.mb)
	return n
}
