//go:build !amd64 || purego

package reduceop

// haveSIMD is false: this build has only the pure-Go loops.
const haveSIMD = false

func sumFloat32SIMD(dst, src []float32) int { return 0 }

func sumFloat64SIMD(dst, src []float64) int { return 0 }
