// Package elems makes and reads typed buffers by DType, for code that
// handles every element type at once: the bench command's checks and the
// tests' sequential references. It is not on any hot path.
//
// Values go in and come out as float64. For bool, Set stores v != 0 and
// Get returns 0 or 1. For complex types, Set stores complex(v, 2v) and Get
// returns (real + imag/2) / 2: Get(Set(v)) is v, sums and averages of such
// values read back as the sums and averages of the v, and a result with
// its parts swapped or one part lost reads back differently, so that a
// test comparing Get with a reference computed the same way checks both
// parts.
package elems

import "github.com/goccl/goccl/reduceop"

// Make returns a zeroed slice of n elements of dt ([]float32, ...).
func Make(dt reduceop.DType, n int) any {
	switch dt {
	case reduceop.Float32:
		return make([]float32, n)
	case reduceop.Float64:
		return make([]float64, n)
	case reduceop.Float16:
		return make([]reduceop.F16, n)
	case reduceop.BFloat16:
		return make([]reduceop.BF16, n)
	case reduceop.Int8:
		return make([]int8, n)
	case reduceop.Uint8:
		return make([]uint8, n)
	case reduceop.Int32:
		return make([]int32, n)
	case reduceop.Int64:
		return make([]int64, n)
	case reduceop.Uint16:
		return make([]uint16, n)
	case reduceop.Uint32:
		return make([]uint32, n)
	case reduceop.Uint64:
		return make([]uint64, n)
	case reduceop.Int16:
		return make([]int16, n)
	case reduceop.Bool:
		return make([]bool, n)
	case reduceop.Complex64:
		return make([]complex64, n)
	case reduceop.Complex128:
		return make([]complex128, n)
	}
	panic("elems: invalid dtype " + dt.String())
}

// Set stores v, converted to the slice's element type, at index i.
// Integers convert through int64, so a negative v wraps in an unsigned
// type.
func Set(buf any, i int, v float64) {
	switch s := buf.(type) {
	case []float32:
		s[i] = float32(v)
	case []float64:
		s[i] = v
	case []reduceop.F16:
		s[i] = reduceop.F16FromFloat32(float32(v))
	case []reduceop.BF16:
		s[i] = reduceop.BF16FromFloat32(float32(v))
	case []int8:
		s[i] = int8(v)
	case []uint8:
		s[i] = uint8(v)
	case []int32:
		s[i] = int32(v)
	case []int64:
		s[i] = int64(v)
	case []uint16:
		s[i] = uint16(int64(v))
	case []uint32:
		s[i] = uint32(int64(v))
	case []uint64:
		s[i] = uint64(int64(v))
	case []int16:
		s[i] = int16(v)
	case []bool:
		s[i] = v != 0
	case []complex64:
		s[i] = complex(float32(v), float32(2*v))
	case []complex128:
		s[i] = complex(v, 2*v)
	default:
		panic("elems: not a buffer slice")
	}
}

// Get returns element i as a float64 (exact for every type but 64-bit
// integers above 2^53).
func Get(buf any, i int) float64 {
	switch s := buf.(type) {
	case []float32:
		return float64(s[i])
	case []float64:
		return s[i]
	case []reduceop.F16:
		return float64(s[i].Float32())
	case []reduceop.BF16:
		return float64(s[i].Float32())
	case []int8:
		return float64(s[i])
	case []uint8:
		return float64(s[i])
	case []int32:
		return float64(s[i])
	case []int64:
		return float64(s[i])
	case []uint16:
		return float64(s[i])
	case []uint32:
		return float64(s[i])
	case []uint64:
		return float64(s[i])
	case []int16:
		return float64(s[i])
	case []bool:
		if s[i] {
			return 1
		}
		return 0
	case []complex64:
		return (float64(real(s[i])) + float64(imag(s[i]))/2) / 2
	case []complex128:
		return (real(s[i]) + imag(s[i])/2) / 2
	}
	panic("elems: not a buffer slice")
}
