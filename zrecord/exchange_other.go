//go:build !linux

package zrecord

import (
	"errors"
	"os"
)

// exchangePaths has no one-step form outside Linux (macOS's renamex_np
// with RENAME_SWAP is not used): Create swaps with two renames there.
func exchangePaths(a, b string) error {
	return &os.LinkError{Op: "exchange", Old: a, New: b, Err: errors.ErrUnsupported}
}
