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

// copyCheckedSmall is copyChecked for the records locs of a batch that
// gatherSmall checked.
func copyCheckedSmall(dst []byte, srcs []uintptr, locs []entry, chunks []*chunk, stride int, g *gatherScratch) (int, uint32, bool) {
	return copyChecked(false, locs, chunks, dst, stride, 0, len(locs), 0, false)
}

// collectSrcs says whether gatherSmall collects the address of each
// record: never here.
func collectSrcs(checked bool, stride int) bool { return false }
