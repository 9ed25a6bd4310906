//go:build !race

package zrecord_test

const raceEnabled = false
