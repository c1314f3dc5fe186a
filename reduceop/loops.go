package reduceop

// The element loops. Each op has one generic source, instantiated by the
// compiler once per element type (every arith type has its own GC shape, so
// each instantiation is fully specialised: no dictionary calls, no interface
// calls). The loops are unrolled by 8; testing both lengths in the loop
// condition and taking 8-element windows lets the compiler drop every bounds
// check in the unrolled body, and re-slicing dst to len(src) drops them from
// the tail (verify with go build -gcflags=-d=ssa/check_bce).
//
// Every loop's doc comment is the plain loop it computes. Callers guarantee
// len(dst) == len(src).

// arith is the set of ordered Go types with native arithmetic that the
// loops run on. F16 and BF16 are widened to float32 and run through the
// float32 loops; Bool runs on its bytes (boolOp).
type arith interface {
	float32 | float64 | int8 | uint8 | int16 | uint16 | int32 | uint32 | int64 | uint64
}

// ring is arith and the complex types: what has + and * but, for
// complex, no order.
type ring interface {
	arith | complex64 | complex128
}

// bits is the subset of arith that has bitwise operators.
type bits interface {
	int8 | uint8 | int16 | uint16 | int32 | uint32 | int64 | uint64
}

// sumLoop: for i := range src { dst[i] += src[i] }
func sumLoop[T ring](dst, src []T) {
	for len(src) >= 8 && len(dst) >= 8 {
		d, s := dst[:8], src[:8]
		d[0] += s[0]
		d[1] += s[1]
		d[2] += s[2]
		d[3] += s[3]
		d[4] += s[4]
		d[5] += s[5]
		d[6] += s[6]
		d[7] += s[7]
		dst, src = dst[8:], src[8:]
	}
	dst = dst[:len(src)]
	for i, s := range src {
		dst[i] += s
	}
}

// prodLoop: for i := range src { dst[i] *= src[i] }
func prodLoop[T ring](dst, src []T) {
	for len(src) >= 8 && len(dst) >= 8 {
		d, s := dst[:8], src[:8]
		d[0] *= s[0]
		d[1] *= s[1]
		d[2] *= s[2]
		d[3] *= s[3]
		d[4] *= s[4]
		d[5] *= s[5]
		d[6] *= s[6]
		d[7] *= s[7]
		dst, src = dst[8:], src[8:]
	}
	dst = dst[:len(src)]
	for i, s := range src {
		dst[i] *= s
	}
}

// minLoop: for i := range src { dst[i] = min(dst[i], src[i]) }
//
// The builtin min propagates NaN and orders -0 below +0.
func minLoop[T arith](dst, src []T) {
	for len(src) >= 8 && len(dst) >= 8 {
		d, s := dst[:8], src[:8]
		d[0] = min(d[0], s[0])
		d[1] = min(d[1], s[1])
		d[2] = min(d[2], s[2])
		d[3] = min(d[3], s[3])
		d[4] = min(d[4], s[4])
		d[5] = min(d[5], s[5])
		d[6] = min(d[6], s[6])
		d[7] = min(d[7], s[7])
		dst, src = dst[8:], src[8:]
	}
	dst = dst[:len(src)]
	for i, s := range src {
		dst[i] = min(dst[i], s)
	}
}

// maxLoop: for i := range src { dst[i] = max(dst[i], src[i]) }
//
// The builtin max propagates NaN and orders -0 below +0.
func maxLoop[T arith](dst, src []T) {
	for len(src) >= 8 && len(dst) >= 8 {
		d, s := dst[:8], src[:8]
		d[0] = max(d[0], s[0])
		d[1] = max(d[1], s[1])
		d[2] = max(d[2], s[2])
		d[3] = max(d[3], s[3])
		d[4] = max(d[4], s[4])
		d[5] = max(d[5], s[5])
		d[6] = max(d[6], s[6])
		d[7] = max(d[7], s[7])
		dst, src = dst[8:], src[8:]
	}
	dst = dst[:len(src)]
	for i, s := range src {
		dst[i] = max(dst[i], s)
	}
}

// andLoop: for i := range src { dst[i] &= src[i] }
func andLoop[T bits](dst, src []T) {
	for len(src) >= 8 && len(dst) >= 8 {
		d, s := dst[:8], src[:8]
		d[0] &= s[0]
		d[1] &= s[1]
		d[2] &= s[2]
		d[3] &= s[3]
		d[4] &= s[4]
		d[5] &= s[5]
		d[6] &= s[6]
		d[7] &= s[7]
		dst, src = dst[8:], src[8:]
	}
	dst = dst[:len(src)]
	for i, s := range src {
		dst[i] &= s
	}
}

// orLoop: for i := range src { dst[i] |= src[i] }
func orLoop[T bits](dst, src []T) {
	for len(src) >= 8 && len(dst) >= 8 {
		d, s := dst[:8], src[:8]
		d[0] |= s[0]
		d[1] |= s[1]
		d[2] |= s[2]
		d[3] |= s[3]
		d[4] |= s[4]
		d[5] |= s[5]
		d[6] |= s[6]
		d[7] |= s[7]
		dst, src = dst[8:], src[8:]
	}
	dst = dst[:len(src)]
	for i, s := range src {
		dst[i] |= s
	}
}

// xorLoop: for i := range src { dst[i] ^= src[i] }
func xorLoop[T bits](dst, src []T) {
	for len(src) >= 8 && len(dst) >= 8 {
		d, s := dst[:8], src[:8]
		d[0] ^= s[0]
		d[1] ^= s[1]
		d[2] ^= s[2]
		d[3] ^= s[3]
		d[4] ^= s[4]
		d[5] ^= s[5]
		d[6] ^= s[6]
		d[7] ^= s[7]
		dst, src = dst[8:], src[8:]
	}
	dst = dst[:len(src)]
	for i, s := range src {
		dst[i] ^= s
	}
}

// divLoop: for i := range dst { dst[i] /= d }
func divLoop[T float32 | float64](dst []T, d T) {
	for len(dst) >= 8 {
		x := dst[:8]
		x[0] /= d
		x[1] /= d
		x[2] /= d
		x[3] /= d
		x[4] /= d
		x[5] /= d
		x[6] /= d
		x[7] /= d
		dst = dst[8:]
	}
	for i := range dst {
		dst[i] /= d
	}
}

// arithOp runs the loop of op (Sum, Prod, Min, Max, or Avg, which sums) on
// dst and src. The caller has checked op.
func arithOp[T arith](op Op, dst, src []T) {
	switch op {
	case Sum, Avg:
		sumLoop(dst, src)
	case Prod:
		prodLoop(dst, src)
	case Min:
		minLoop(dst, src)
	case Max:
		maxLoop(dst, src)
	}
}

// intOp runs the loop of any integer op. The caller has checked op.
func intOp[T bits](op Op, dst, src []T) {
	switch op {
	case BAnd:
		andLoop(dst, src)
	case BOr:
		orLoop(dst, src)
	case BXor:
		xorLoop(dst, src)
	default:
		arithOp(op, dst, src)
	}
}

// boolOp runs the loop of op on bools held as bytes: BAnd and Min are
// logical and, BOr and Max logical or, BXor exclusive or. The caller has
// checked op. Any nonzero byte counts as true (a Go bool holds 0 or 1, but
// a byte from a peer is whatever the peer sent), and every result is 0 or 1.
func boolOp(op Op, dst, src []uint8) {
	dst = dst[:len(src)]
	switch op {
	case BAnd, Min:
		for i, s := range src {
			dst[i] = truth(dst[i]) & truth(s)
		}
	case BOr, Max:
		for i, s := range src {
			dst[i] = truth(dst[i] | s)
		}
	case BXor:
		for i, s := range src {
			dst[i] = truth(dst[i]) ^ truth(s)
		}
	}
}

// truth is 1 if x != 0, else 0, without a branch: x|-x has its top bit set
// exactly when x is not zero.
func truth(x uint8) uint8 { return (x | -x) >> 7 }

// halfBlock is how many 16-bit elements are widened to float32 at a time:
// two 2 KiB stack buffers, well inside L1.
const halfBlock = 512

// halfOp reduces 16-bit floats by widening a block of dst and of src to
// float32 (exact), running the float32 loop, and rounding the block back
// (once per element, to nearest even). Since float32 carries more than
// twice the bits of either format plus two, the result is the correctly
// rounded result of the op in the narrow format.
func halfOp[H F16 | BF16](op Op, dst, src []H, dec func([]float32, []H), enc func([]H, []float32)) {
	var a, b [halfBlock]float32
	for len(src) > 0 {
		n := min(len(src), halfBlock)
		dec(a[:], dst[:n])
		dec(b[:], src[:n])
		float32Op(op, a[:n], b[:n])
		enc(dst[:n], a[:])
		dst, src = dst[n:], src[n:]
	}
}

// halfScale divides 16-bit floats by n in float32, rounding once.
func halfScale[H F16 | BF16](dst []H, n int, dec func([]float32, []H), enc func([]H, []float32)) {
	var a [halfBlock]float32
	d := float32(n)
	for len(dst) > 0 {
		k := min(len(dst), halfBlock)
		dec(a[:], dst[:k])
		divLoop(a[:k], d)
		enc(dst[:k], a[:])
		dst = dst[k:]
	}
}
