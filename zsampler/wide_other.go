//go:build !amd64

package zsampler

// hasWideKernel reports whether permWide runs a vector kernel: not on this
// architecture.
const hasWideKernel = false

// permWide covers no prefix of dst on this architecture: the scalar loop
// does all of it.
func permWide(dst []int64, x0 uint64, f *feistel) int { return 0 }
