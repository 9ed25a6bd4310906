//go:build !amd64

package zrecord

// useCopyStrided says gatherSmall collects the records' addresses for
// copySmall: not here, where copySmall is copyPlain.
const useCopyStrided = false

// copySmall copies the raw records locs, checked by gatherSmall, into dst
// at a fixed stride, and returns how many it copied (see copyPlain).
func copySmall(dst []byte, srcs []uintptr, locs []entry, chunks []*chunk, stride int) int {
	return copyPlain(false, false, locs, chunks, dst, stride, 0, len(locs), 0)
}
