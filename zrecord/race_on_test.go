//go:build race

package zrecord_test

// raceEnabled reports whether the race detector is on: it slows the
// subprocess writers of the crash tests past their kill windows while
// adding nothing to them (the kills are checked without -race).
const raceEnabled = true
