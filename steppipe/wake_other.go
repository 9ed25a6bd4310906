//go:build !unix

package steppipe

import "errors"

var errNoWake = errors.New("steppipe: no wake pipe on this platform")

func readWake(int, []byte) (int, error) { return 0, errNoWake }

func writeWake(int) {}

func retryable(error) bool { return false }
