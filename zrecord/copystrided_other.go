//go:build !amd64

package zrecord

import "unsafe"

// copyCRCStridedMax is the largest record copySrcs hands to
// copyCRCStrided.
const copyCRCStridedMax = 2 << 10

// copyStrided reports false: copySrcs copies one record at a time here.
func copyStrided(dst []byte, srcs []unsafe.Pointer, stride int) bool { return false }

// copyCRCStrided does nothing here: copySrcs checks one record at a time.
func copyCRCStrided(dst []byte, srcs []unsafe.Pointer, sums []uint32, stride int) int { return 0 }
