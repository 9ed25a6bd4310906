package zsampler

import (
	"errors"
	"fmt"
)

// ErrInvalid is wrapped by every error the package returns: each names the
// field at fault and its value. Test for it with errors.Is.
var ErrInvalid = errors.New("zsampler: invalid argument")

// invalidError is a validation failure; it unwraps to ErrInvalid.
type invalidError struct{ msg string }

func (e *invalidError) Error() string { return "zsampler: invalid " + e.msg }

func (e *invalidError) Unwrap() error { return ErrInvalid }

// invalidf builds an error wrapping ErrInvalid. The message should start with
// the field name and its value, as in invalidf("n %d: must be positive", n).
func invalidf(format string, args ...any) error {
	return &invalidError{msg: fmt.Sprintf(format, args...)}
}
