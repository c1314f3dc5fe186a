//go:build amd64 && !purego

package reduceop

import "golang.org/x/sys/cpu"

// haveSIMD reports whether this machine can run the AVX kernels in
// simd_amd64.s (the CPU has AVX and the OS saves the YMM registers).
var haveSIMD = cpu.X86.HasAVX

// addFloat32AVX computes, for n a multiple of 32:
//
//	for i := range n {
//		dst[i] += src[i]
//	}
//
//go:noescape
func addFloat32AVX(dst, src *float32, n int)

// addFloat64AVX computes, for n a multiple of 16:
//
//	for i := range n {
//		dst[i] += src[i]
//	}
//
//go:noescape
func addFloat64AVX(dst, src *float64, n int)

// sumFloat32SIMD adds src into dst in whole 32-element (128-byte) blocks
// and returns how many elements it did.
func sumFloat32SIMD(dst, src []float32) int {
	n := len(src) &^ 31
	if n > 0 {
		addFloat32AVX(&dst[0], &src[0], n)
	}
	return n
}

// sumFloat64SIMD adds src into dst in whole 16-element (128-byte) blocks
// and returns how many elements it did.
func sumFloat64SIMD(dst, src []float64) int {
	n := len(src) &^ 15
	if n > 0 {
		addFloat64AVX(&dst[0], &src[0], n)
	}
	return n
}
