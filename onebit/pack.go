package onebit

import (
	"math"
	"math/bits"
)

// PackedLen returns the number of bytes that hold n sign bits: ceil(n/8).
func PackedLen(n int) int { return (n + 7) / 8 }

// posBit returns 1 when x counts as positive for 1-bit compression and 0
// when it is negative. The rule is DeepSpeed's `x.sign().add_(1).bool()`:
// only values that compare less than zero give 0, so +0, -0 and NaN give 1.
// (This is not numpy.signbit, which calls -0 negative.)
//
// It is branch-free: the sign bit is set and the magnitude bits are neither
// zero (that is -0) nor above the infinity pattern (that is a NaN).
func posBit(x float32) uint32 {
	u := math.Float32bits(x)
	v := u << 1                                             // magnitude, shifted out the sign
	neg := (u >> 31) & uint32((uint64(v-1)-0xff000000)>>63) // 0 < v <= inf
	return neg ^ 1
}

// Pack writes the sign bits of src into dst, eight to a byte, most
// significant bit first (numpy.packbits' default order): element i goes to
// bit 7-i%8 of dst[i/8]. A bit is 1 unless src[i] < 0, so zero, negative zero
// and NaN pack as 1. Unused low bits of the last byte are written as 0.
// dst must hold PackedLen(len(src)) bytes; extra bytes are left alone.
//
// The equivalent loop:
//
//	for i := range dst[:PackedLen(len(src))] { dst[i] = 0 }
//	for i, x := range src {
//		if !(x < 0) { dst[i/8] |= 1 << (7 - i%8) }
//	}
func Pack(dst []uint8, src []float32) {
	if len(dst) < PackedLen(len(src)) {
		panic("onebit: Pack: dst too short")
	}
	full := len(src) / 8
	switch {
	case usePackAVX && full > 0:
		packAVX(&dst[0], &src[0], full)
	case littleEndian:
		packWords(dst, src)
	}
	for k := 0; k < full && !littleEndian && !usePackAVX; k++ {
		x := src[8*k : 8*k+8 : 8*k+8]
		dst[k] = uint8(posBit(x[0])<<7 | posBit(x[1])<<6 | posBit(x[2])<<5 | posBit(x[3])<<4 |
			posBit(x[4])<<3 | posBit(x[5])<<2 | posBit(x[6])<<1 | posBit(x[7]))
	}
	if rest := src[8*full:]; len(rest) > 0 {
		var b uint32
		for j, x := range rest {
			b |= posBit(x) << (7 - j)
		}
		dst[full] = uint8(b)
	}
}

// usePackAVX switches Pack's AVX path on where the CPU has it; tests flip
// it to run every path against the plain loop.
var usePackAVX = haveAVX

// packTable maps a vmovmskps mask (bit i set when element i < 0) to the
// packed byte: element 0 in the most significant bit, 1 meaning "not
// negative".
var packTable = func() (t [256]uint8) {
	for m := range t {
		t[m] = ^bits.Reverse8(uint8(m))
	}
	return t
}()

// Unpack writes +1 or -1 into each element of dst from the bits of src,
// most significant bit first: dst[i] = +1 when bit 7-i%8 of src[i/8] is 1.
// src must hold PackedLen(len(dst)) bytes.
func Unpack(dst []float32, src []uint8) {
	HostKernel{}.Decompress(dst, src, 1)
}
