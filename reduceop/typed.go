package reduceop

import (
	"fmt"
	"unsafe"
)

// Float is the set of floating-point element types.
type Float interface {
	float32 | float64 | F16 | BF16
}

// Integer is the set of integer element types.
type Integer interface {
	int8 | uint8 | int32 | int64
}

// Number is the set of every element type goccl reduces; DTypeOf maps each
// to its DType.
type Number interface {
	Float | Integer
}

// DTypeOf returns the DType of T (Float32 for float32, Float16 for F16, ...).
func DTypeOf[T Number]() DType {
	var z T
	switch any(z).(type) {
	case float32:
		return Float32
	case float64:
		return Float64
	case F16:
		return Float16
	case BF16:
		return BFloat16
	case int8:
		return Int8
	case uint8:
		return Uint8
	case int32:
		return Int32
	case int64:
		return Int64
	}
	panic("unreachable")
}

// Reduce computes dst[i] = dst[i] op src[i] on typed slices. It returns the
// errors Apply returns (Check fails, or the lengths differ).
func Reduce[T Number](op Op, dst, src []T) error {
	dt := DTypeOf[T]()
	if err := Check(op, dt); err != nil {
		return err
	}
	if len(dst) != len(src) {
		return fmt.Errorf("reduceop: %v %v: dst has %d elements, src has %d", op, dt, len(dst), len(src))
	}
	if len(src) > 0 {
		dispatch(dt, op, unsafe.Pointer(unsafe.SliceData(dst)), unsafe.Pointer(unsafe.SliceData(src)), len(src))
	}
	return nil
}

// into is Reduce for ops valid on every T of its constraint: a length
// mismatch is a programming error and panics, as an index out of range does.
func into[T Number](op Op, dst, src []T) {
	if len(dst) != len(src) {
		panic(fmt.Sprintf("reduceop: %v: len(dst) = %d, len(src) = %d", op, len(dst), len(src)))
	}
	if len(src) > 0 {
		dispatch(DTypeOf[T](), op, unsafe.Pointer(unsafe.SliceData(dst)), unsafe.Pointer(unsafe.SliceData(src)), len(src))
	}
}

// SumInto adds src into dst element-wise. It panics if the lengths differ.
//
//	for i := range src {
//		dst[i] += src[i]
//	}
//
// Integers wrap around (two's complement), as Go's + does. F16 and BF16 add
// in float32 and round once.
func SumInto[T Number](dst, src []T) { into(Sum, dst, src) }

// ProdInto multiplies dst by src element-wise. It panics if the lengths
// differ.
//
//	for i := range src {
//		dst[i] *= src[i]
//	}
//
// Integers wrap around (two's complement), as Go's * does.
func ProdInto[T Number](dst, src []T) { into(Prod, dst, src) }

// MinInto keeps the smaller of dst[i] and src[i] in dst[i]. It panics if
// the lengths differ.
//
//	for i := range src {
//		dst[i] = min(dst[i], src[i])
//	}
//
// As Go's builtin min: if either float is NaN the result is NaN, and -0 is
// smaller than +0.
func MinInto[T Number](dst, src []T) { into(Min, dst, src) }

// MaxInto keeps the larger of dst[i] and src[i] in dst[i]. It panics if the
// lengths differ.
//
//	for i := range src {
//		dst[i] = max(dst[i], src[i])
//	}
//
// As Go's builtin max: if either float is NaN the result is NaN, and +0 is
// larger than -0.
func MaxInto[T Number](dst, src []T) { into(Max, dst, src) }

// BAndInto computes dst[i] &= src[i]. It panics if the lengths differ.
func BAndInto[T Integer](dst, src []T) { into(BAnd, dst, src) }

// BOrInto computes dst[i] |= src[i]. It panics if the lengths differ.
func BOrInto[T Integer](dst, src []T) { into(BOr, dst, src) }

// BXorInto computes dst[i] ^= src[i]. It panics if the lengths differ.
func BXorInto[T Integer](dst, src []T) { into(BXor, dst, src) }

// ScaleSlice divides every element of dst by n, the last step of Avg. It
// panics if n <= 0. F16 and BF16 divide in float32 and round once.
//
//	for i := range dst {
//		dst[i] /= T(n)
//	}
func ScaleSlice[T Float](dst []T, n int) {
	if n <= 0 {
		panic(fmt.Sprintf("reduceop: scale by %d: divisor must be positive", n))
	}
	if len(dst) > 0 && n > 1 {
		scale(DTypeOf[T](), unsafe.Pointer(unsafe.SliceData(dst)), len(dst), n)
	}
}
