//go:build !amd64

package zrecord

// useWidenSIMD is false: there are no widening kernels for this
// architecture, and widen runs in Go.
const useWidenSIMD = false

func widenSIMD(out, packed []byte, es, w int, base uint64, stream bool) int { return 0 }
