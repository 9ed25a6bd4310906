//go:build unix

package steppipe

import (
	"errors"
	"syscall"
)

func readWake(fd int, buf []byte) (int, error) { return syscall.Read(fd, buf) }

func writeWake(fd int) { _, _ = syscall.Write(fd, []byte{1}) }

func retryable(err error) bool {
	return errors.Is(err, syscall.EINTR) || errors.Is(err, syscall.EAGAIN)
}
