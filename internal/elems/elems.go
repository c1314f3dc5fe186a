// Package elems makes and reads typed buffers by DType, for code that
// handles every element type at once: the bench command's checks and the
// tests' sequential references. It is not on any hot path.
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
	}
	return make([]int64, n)
}

// Set stores v, converted to the slice's element type, at index i.
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
	default:
		panic("elems: not a buffer slice")
	}
}

// Get returns element i as a float64 (exact for every type but int64 above
// 2^53).
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
	}
	panic("elems: not a buffer slice")
}
