package reduceop

// useSIMD switches the assembly fast paths on (where haveSIMD). It is set
// once, here, and flipped only by tests, which run every path and compare
// it with the pure-Go loops (the reference for the assembly).
var useSIMD = haveSIMD

// simdMin is the shortest buffer, in elements, worth a trip into assembly.
const simdMin = 64

// sumFloat32: for i := range src { dst[i] += src[i] }, with AVX when on.
func sumFloat32(dst, src []float32) {
	if useSIMD && len(src) >= simdMin && len(dst) == len(src) {
		n := sumFloat32SIMD(dst, src)
		dst, src = dst[n:], src[n:]
	}
	sumLoop(dst, src)
}

// sumFloat64: for i := range src { dst[i] += src[i] }, with AVX when on.
func sumFloat64(dst, src []float64) {
	if useSIMD && len(src) >= simdMin && len(dst) == len(src) {
		n := sumFloat64SIMD(dst, src)
		dst, src = dst[n:], src[n:]
	}
	sumLoop(dst, src)
}

// float32Op is arithOp for float32, taking the fast Sum where there is one.
func float32Op(op Op, dst, src []float32) {
	if op == Sum || op == Avg {
		sumFloat32(dst, src)
		return
	}
	arithOp(op, dst, src)
}

// float64Op is arithOp for float64, taking the fast Sum where there is one.
func float64Op(op Op, dst, src []float64) {
	if op == Sum || op == Avg {
		sumFloat64(dst, src)
		return
	}
	arithOp(op, dst, src)
}
