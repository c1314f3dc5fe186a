package reduceop

import (
	"math"
	"strconv"
)

// F16 is an IEEE 754 binary16 ("half", torch.float16) value, stored as its
// bit pattern: 1 sign bit, 5 exponent bits (bias 15), 10 fraction bits.
type F16 uint16

// BF16 is a bfloat16 (torch.bfloat16) value, stored as its bit pattern: the
// upper 16 bits of a float32 (1 sign bit, 8 exponent bits, 7 fraction bits).
type BF16 uint16

// Float32 returns h as a float32. Every F16 value, subnormals included, is
// exactly representable as a float32, so the conversion is exact; NaN
// payloads are kept.
func (h F16) Float32() float32 {
	// Normal numbers, the common case, inline: move the exponent and
	// fraction up 13 bits and rebias the exponent from 15 to 127.
	if h.isNormal() {
		return h.normalFloat32()
	}
	return h.float32Special()
}

func (h F16) isNormal() bool { e := h & 0x7c00; return e != 0 && e != 0x7c00 }

func (h F16) normalFloat32() float32 {
	return math.Float32frombits(uint32(h&0x8000)<<16 | (uint32(h&0x7fff)<<13 + (127-15)<<23))
}

// float32Special converts zeros, subnormals, infinities and NaNs.
//
//go:noinline
func (h F16) float32Special() float32 {
	sign := uint32(h&0x8000) << 16
	frac := uint32(h) & 0x3ff
	if h&0x7c00 == 0x7c00 { // Inf or NaN
		return math.Float32frombits(sign | 0x7f800000 | frac<<13)
	}
	// Zero or subnormal: frac * 2^-24, exact in float32.
	f := float32(frac) * (1.0 / (1 << 24))
	return math.Float32frombits(sign | math.Float32bits(f))
}

// F16FromFloat32 returns the F16 nearest to f, ties to even (IEEE 754
// round-to-nearest-even). Values at or above 65520 in magnitude become
// ±Inf, values at or below 2^-25 become ±0, NaN stays NaN (quiet, with
// the top payload bits kept).
func F16FromFloat32(f float32) F16 {
	b := math.Float32bits(f)
	// Inputs in [2^-14, 2^16), the normal binary16 range, inline: rebias
	// the exponent, round the 13 dropped bits to nearest even (a carry may
	// reach the exponent, up to Inf, which is the right answer).
	if f16NormalInput(b) {
		return f16FromNormalBits(b)
	}
	return f16FromBits(b)
}

func f16NormalInput(b uint32) bool { return b&0x7fffffff-0x38800000 < 0x47800000-0x38800000 }

func f16FromNormalBits(b uint32) F16 {
	r := b&0x7fffffff - (127-15)<<23
	r += 0xfff + (r>>13)&1
	return F16(b>>16)&0x8000 | F16(r>>13)
}

// f16FromBits is F16FromFloat32 for every input, written out case by case.
//
//go:noinline
func f16FromBits(b uint32) F16 {
	sign := F16(b>>16) & 0x8000
	exp := int32(b>>23) & 0xff
	frac := b & 0x7fffff
	if exp == 0xff {
		if frac == 0 {
			return sign | 0x7c00
		}
		return sign | 0x7e00 | F16(frac>>13)
	}
	e := exp - 127 + 15 // biased binary16 exponent
	if e >= 0x1f {
		return sign | 0x7c00
	}
	if e <= 0 {
		// Subnormal (or zero) in binary16: count units of 2^-24.
		if e < -10 {
			return sign
		}
		m := frac | 0x800000
		shift := uint32(14 - e)
		q := m >> shift
		r := m & (1<<shift - 1)
		half := uint32(1) << (shift - 1)
		if r > half || (r == half && q&1 == 1) {
			q++ // may carry into the smallest normal: still the right encoding
		}
		return sign | F16(q)
	}
	q := uint32(e)<<10 | frac>>13
	r := frac & 0x1fff
	if r > 0x1000 || (r == 0x1000 && q&1 == 1) {
		q++ // may carry into the exponent, up to Inf: correct
	}
	return sign | F16(q)
}

// Float32 returns h as a float32; the conversion is exact.
func (h BF16) Float32() float32 { return math.Float32frombits(uint32(h) << 16) }

// BF16FromFloat32 returns the BF16 nearest to f, ties to even. Values that
// round past the largest finite bfloat16 become ±Inf; NaN stays NaN (quiet).
func BF16FromFloat32(f float32) BF16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 {
		return BF16(b>>16) | 0x40
	}
	b += 0x7fff + (b>>16)&1
	return BF16(b >> 16)
}

// String formats h as its float32 value.
func (h F16) String() string { return formatFloat32(h.Float32()) }

// String formats h as its float32 value.
func (h BF16) String() string { return formatFloat32(h.Float32()) }

// decodeF16 sets dst[i] = src[i].Float32(); len(dst) >= len(src).
func decodeF16(dst []float32, src []F16) {
	dst = dst[:len(src)]
	for i, h := range src {
		if h.isNormal() {
			dst[i] = h.normalFloat32()
		} else {
			dst[i] = h.float32Special()
		}
	}
}

// encodeF16 sets dst[i] = F16FromFloat32(src[i]); len(src) >= len(dst).
func encodeF16(dst []F16, src []float32) {
	src = src[:len(dst)]
	for i, f := range src {
		if b := math.Float32bits(f); f16NormalInput(b) {
			dst[i] = f16FromNormalBits(b)
		} else {
			dst[i] = f16FromBits(b)
		}
	}
}

func decodeBF16(dst []float32, src []BF16) {
	dst = dst[:len(src)]
	for i, h := range src {
		dst[i] = h.Float32()
	}
}

func encodeBF16(dst []BF16, src []float32) {
	src = src[:len(dst)]
	for i, f := range src {
		dst[i] = BF16FromFloat32(f)
	}
}

func formatFloat32(f float32) string { return strconv.FormatFloat(float64(f), 'g', -1, 32) }
