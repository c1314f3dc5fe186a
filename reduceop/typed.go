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
	int8 | uint8 | int16 | uint16 | int32 | uint32 | int64 | uint64
}

// Complex is the set of complex element types.
type Complex interface {
	complex64 | complex128
}

// Number is the set of real number element types: those with Sum, Prod,
// Min and Max.
type Number interface {
	Float | Integer
}

// Scalar is the set of element types with Sum and Prod: Number and
// Complex.
type Scalar interface {
	Number | Complex
}

// Logical is the set of element types with BAnd, BOr and BXor: Integer
// and bool.
type Logical interface {
	Integer | bool
}

// Element is the set of every element type; DTypeOf maps each to its
// DType.
type Element interface {
	Number | Complex | bool
}

// DTypeOf returns the DType of T (Float32 for float32, Float16 for F16, ...).
func DTypeOf[T Element]() DType {
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
	case uint16:
		return Uint16
	case uint32:
		return Uint32
	case uint64:
		return Uint64
	case int16:
		return Int16
	case bool:
		return Bool
	case complex64:
		return Complex64
	case complex128:
		return Complex128
	}
	panic("unreachable")
}

// Reduce computes dst[i] = dst[i] op src[i] on typed slices. It returns the
// errors Apply returns (Check fails, or the lengths differ).
func Reduce[T Element](op Op, dst, src []T) error {
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
func into[T Element](op Op, dst, src []T) {
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
func SumInto[T Scalar](dst, src []T) { into(Sum, dst, src) }

// ProdInto multiplies dst by src element-wise. It panics if the lengths
// differ.
//
//	for i := range src {
//		dst[i] *= src[i]
//	}
//
// Integers wrap around (two's complement), as Go's * does.
func ProdInto[T Scalar](dst, src []T) { into(Prod, dst, src) }

// MinInto keeps the smaller of dst[i] and src[i] in dst[i]. It panics if
// the lengths differ.
//
//	for i := range src {
//		dst[i] = min(dst[i], src[i])
//	}
//
// As Go's builtin min: if either float is NaN the result is NaN, and -0 is
// smaller than +0. On bool, false is smaller than true: Min is logical and.
func MinInto[T Number | bool](dst, src []T) { into(Min, dst, src) }

// MaxInto keeps the larger of dst[i] and src[i] in dst[i]. It panics if the
// lengths differ.
//
//	for i := range src {
//		dst[i] = max(dst[i], src[i])
//	}
//
// As Go's builtin max: if either float is NaN the result is NaN, and +0 is
// larger than -0. On bool, Max is logical or.
func MaxInto[T Number | bool](dst, src []T) { into(Max, dst, src) }

// BAndInto computes dst[i] &= src[i] (on bool, dst[i] = dst[i] && src[i]).
// It panics if the lengths differ.
func BAndInto[T Logical](dst, src []T) { into(BAnd, dst, src) }

// BOrInto computes dst[i] |= src[i] (on bool, dst[i] = dst[i] || src[i]).
// It panics if the lengths differ.
func BOrInto[T Logical](dst, src []T) { into(BOr, dst, src) }

// BXorInto computes dst[i] ^= src[i] (on bool, dst[i] = dst[i] != src[i]).
// It panics if the lengths differ.
func BXorInto[T Logical](dst, src []T) { into(BXor, dst, src) }

// ScaleSlice divides every element of dst by n, the last step of Avg. It
// panics if n <= 0. F16 and BF16 divide in float32 and round once; a
// complex element has each part divided by n (see Scale).
//
//	for i := range dst {
//		dst[i] /= T(n)
//	}
func ScaleSlice[T Float | Complex](dst []T, n int) {
	if n <= 0 {
		panic(fmt.Sprintf("reduceop: scale by %d: divisor must be positive", n))
	}
	if len(dst) > 0 && n > 1 {
		scale(DTypeOf[T](), unsafe.Pointer(unsafe.SliceData(dst)), len(dst), n)
	}
}
