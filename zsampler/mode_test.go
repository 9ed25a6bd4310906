package zsampler

import (
	"errors"
	"strconv"
	"strings"
	"testing"
)

func TestParseMode(t *testing.T) {
	for _, m := range []Mode{Sequential, IID, Cyclic} {
		got, err := ParseMode(m.String())
		if err != nil || got != m {
			t.Errorf("ParseMode(%q) = %v, %v; want %v", m.String(), got, err, m)
		}
	}
	for _, tt := range []struct {
		in   string
		want Mode
	}{{"sequential", Sequential}, {"iid", IID}, {"cyclic", Cyclic}} {
		if got, err := ParseMode(tt.in); err != nil || got != tt.want {
			t.Errorf("ParseMode(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
		}
	}
	for _, bad := range []string{"", "IID", "Cyclic", " iid", "random", "shuffle\x00"} {
		_, err := ParseMode(bad)
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("ParseMode(%q) error = %v, want one wrapping ErrInvalid", bad, err)
			continue
		}
		if q := strconv.Quote(bad); !strings.Contains(err.Error(), q) {
			t.Errorf("ParseMode(%q) error %q does not quote the value as %s", bad, err, q)
		}
	}
}

func TestModeString(t *testing.T) {
	for m, want := range map[Mode]string{
		Sequential: "sequential",
		IID:        "iid",
		Cyclic:     "cyclic",
		3:          "Mode(3)",
		255:        "Mode(255)",
	} {
		if got := m.String(); got != want {
			t.Errorf("Mode(%d).String() = %q, want %q", uint8(m), got, want)
		}
	}
	// The numbering is part of the C ABI.
	if Sequential != 0 || IID != 1 || Cyclic != 2 {
		t.Errorf("modes numbered %d, %d, %d; want 0, 1, 2", Sequential, IID, Cyclic)
	}
}
