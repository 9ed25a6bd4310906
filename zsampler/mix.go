package zsampler

// golden is 2^64 divided by the golden ratio, rounded to odd: the increment
// of the SplitMix64 generator, which visits every 64-bit value once.
const golden = 0x9e3779b97f4a7c15

// Domain constants (hexadecimal digits of pi) keep the streams of different
// purposes apart even when they share a seed.
const (
	iidDomain     = 0x243f6a8885a308d3
	attemptDomain = 0x13198a2e03707344
	cyclicDomain  = 0xa4093822299f31d0
)

// mix64 is the SplitMix64 output function (Stafford's variant 13): a
// bijection on 64-bit words in which every output bit depends on every input
// bit. Applied to a keyed counter it is a counter-based generator, so any
// word of a stream is computed directly.
func mix64(z uint64) uint64 {
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}
