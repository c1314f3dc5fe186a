package reduceop

// Kernel reduces raw element buffers. The host implementation is Host; device
// code (package device/cuda) supplies its own so that reductions run where
// the bytes live.
//
// Reduce computes dst[i] = dst[i] op src[i] for every element, where dst and
// src hold len(dst)/dt.Size() elements of dt and have equal lengths. For Avg
// it sums; Scale divides by n at the end (n is the group size).
type Kernel interface {
	Reduce(dt DType, op Op, dst, src []byte) error
	Scale(dt DType, dst []byte, n int) error
}
