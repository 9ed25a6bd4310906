package zsampler

import "strconv"

// Mode selects how a sampler draws indices; see the package documentation.
type Mode uint8

const (
	// Sequential walks the index space in order, wrapping around at N.
	Sequential Mode = 0
	// IID draws uniformly at random with replacement.
	IID Mode = 1
	// Cyclic draws without replacement, one fresh permutation per cycle.
	Cyclic Mode = 2
)

var modeNames = [...]string{
	Sequential: "sequential",
	IID:        "iid",
	Cyclic:     "cyclic",
}

// ParseMode returns the Mode named by s, one of "sequential", "iid" and
// "cyclic" (exactly, in lower case). Any other string gives an error that
// wraps ErrInvalid and quotes s.
func ParseMode(s string) (Mode, error) {
	for m, name := range modeNames {
		if s == name {
			return Mode(m), nil
		}
	}
	return 0, invalidf("mode %q: want \"sequential\", \"iid\" or \"cyclic\"", s)
}

// String returns the name that ParseMode accepts, or "Mode(v)" for a value
// that is not a defined mode.
func (m Mode) String() string {
	if m.valid() {
		return modeNames[m]
	}
	return "Mode(" + strconv.Itoa(int(m)) + ")"
}

func (m Mode) valid() bool { return int(m) < len(modeNames) }
