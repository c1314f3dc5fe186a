package onebit

import (
	"encoding/binary"
	"math"
	"unsafe"
)

// The packing loops read two float32 at a time as one uint64 and test both
// sign rules in it at once (SIMD within a register). That needs the first
// float32 of a pair in the low half, so it is used on little-endian
// machines only; elsewhere the per-element posBit loop runs.
var littleEndian = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

// words returns the first 2*(len(f)/2) float32 of f as uint64 pairs.
func words(f []float32) []uint64 {
	if len(f) < 2 {
		return nil
	}
	return unsafe.Slice((*uint64)(unsafe.Pointer(unsafe.SliceData(f))), len(f)/2)
}

// negPair returns w with bit 31 set when its low float32 is < 0 and bit 63
// set when its high float32 is < 0, every other bit clear. A lane is
// negative when its sign bit is set and its magnitude m is neither zero
// (-0) nor a NaN (m > 0x7f800000); m+0x7fffffff and m+0x007fffff carry into
// the lane's top bit exactly when m > 0 and m > 0x7f800000, and never into
// the next lane.
func negPair(w uint64) uint64 {
	const (
		mag  = 0x7fffffff_7fffffff
		nan  = 0x007fffff_007fffff
		tops = 0x80000000_80000000
	)
	m := w & mag
	return w & (m + mag) &^ (m + nan) & tops
}

// negByte gathers the sign tests of four pairs, eight float32 in order,
// into one byte, most significant bit first: bit 7-i is set when float i is
// negative.
func negByte(n0, n1, n2, n3 uint64) uint8 {
	z := n0 | n1>>2 | n2>>4 | n3>>6 // floats 0,2,4,6 at bits 31,29,27,25; 1,3,5,7 at 63,61,59,57
	return uint8(z>>25)<<1 | uint8(z>>57)
}

// packWords is Pack's loop over whole bytes on a little-endian machine.
func packWords(dst []uint8, src []float32) {
	w := words(src)
	for k := range len(src) / 8 {
		q := w[4*k : 4*k+4 : 4*k+4]
		dst[k] = ^negByte(negPair(q[0]), negPair(q[1]), negPair(q[2]), negPair(q[3]))
	}
}

// packUpdateWords is PackUpdate's loop over whole bytes on a little-endian
// machine: the packed bit as in packWords, and err -= ±scale by flipping the
// sign bit of scale with the lane's negative bit.
func packUpdateWords(bits []uint8, err []float32, scale float32) {
	w := words(err)
	sb := uint64(math.Float32bits(scale))
	sb |= sb << 32
	for k := range len(err) / 8 {
		q := w[4*k : 4*k+4 : 4*k+4]
		e := err[8*k : 8*k+8 : 8*k+8]
		n0, n1, n2, n3 := negPair(q[0]), negPair(q[1]), negPair(q[2]), negPair(q[3])
		bits[k] = ^negByte(n0, n1, n2, n3)
		// pos lanes subtract +scale, negative lanes -scale.
		s0, s1, s2, s3 := sb^n0, sb^n1, sb^n2, sb^n3
		e[0] -= math.Float32frombits(uint32(s0))
		e[1] -= math.Float32frombits(uint32(s0 >> 32))
		e[2] -= math.Float32frombits(uint32(s1))
		e[3] -= math.Float32frombits(uint32(s1 >> 32))
		e[4] -= math.Float32frombits(uint32(s2))
		e[5] -= math.Float32frombits(uint32(s2 >> 32))
		e[6] -= math.Float32frombits(uint32(s3))
		e[7] -= math.Float32frombits(uint32(s3 >> 32))
	}
}
