package zrecord_test

import (
	"errors"
	"os"
)

var errNoSeekData = errors.New("no SEEK_DATA on windows")

// seekData fails on Windows, so copySparse copies the whole file.
func seekData(*os.File, int64) (int64, error) { return 0, errNoSeekData }

// seekHole fails on Windows (never reached: seekData fails first).
func seekHole(*os.File, int64) (int64, error) { return 0, errNoSeekData }

// onlyHoleLeft is false on Windows.
func onlyHoleLeft(error) bool { return false }
