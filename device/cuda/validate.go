package cuda

import (
	"fmt"
	"math"

	"github.com/goccl/goccl/reduceop"
)

// The checks below are plain functions of numbers, shared by the cuda build
// and its tests, so that they are tested on machines without a GPU too.
// Every error they return wraps ErrInvalid.

// invalid returns an error wrapping ErrInvalid for operation op.
func invalid(op, format string, args ...any) error {
	return fmt.Errorf("goccl: cuda: %s: %s: %w", op, fmt.Sprintf(format, args...), ErrInvalid)
}

// checkSpan checks that n bytes at byte offset off lie inside a buffer of
// size bytes, what naming the buffer.
func checkSpan(op, what string, size, off, n int) error {
	if off < 0 || n < 0 || off > size || n > size-off {
		return invalid(op, "%d bytes at offset %d outside the %s's %d bytes", n, off, what, size)
	}
	return nil
}

// checkElems checks that count elements of dt at byte offset off lie inside
// a buffer of size bytes and that off is a multiple of the element size (a
// kernel reads whole, aligned elements).
func checkElems(op, what string, dt reduceop.DType, size, off, count int) error {
	if off%dt.Size() != 0 {
		return invalid(op, "offset %d into the %s is not a multiple of %v's %d bytes", off, what, dt, dt.Size())
	}
	if count < 0 || count > math.MaxInt/dt.Size() {
		return invalid(op, "%d elements of %v", count, dt)
	}
	return checkSpan(op, what, size, off, count*dt.Size())
}

// overlapping reports whether the byte ranges [a, a+n) and [b, b+n) share a
// byte without being the same range, which a device copy leaves undefined.
func overlapping(a, b uintptr, n int) bool {
	return n > 0 && a != b && a < b+uintptr(n) && b < a+uintptr(n)
}

// checkDivisor checks Scale's divisor: the kernels take it as a uint32.
func checkDivisor(op string, dt reduceop.DType, div int) error {
	if div <= 0 || uint64(div) > math.MaxUint32 {
		return invalid(op, "divide %v by %d: divisor out of range [1, 2^32)", dt, div)
	}
	return nil
}

// checkOneBit checks the float32 buffer of a 1-bit step and, when
// bitsLen >= 0, the packed bits buffer that goes with it: n elements of
// float32 need (n+7)/8 bytes of uint8.
func checkOneBit(op, what string, dt reduceop.DType, bitsDT reduceop.DType, bitsLen, n int) error {
	if dt != reduceop.Float32 {
		return invalid(op, "%s is %v, want float32", what, dt)
	}
	if bitsLen >= 0 && (bitsDT != reduceop.Uint8 || bitsLen < (n+7)/8) {
		return invalid(op, "bits is %d x %v, want at least %d x uint8 for %d values", bitsLen, bitsDT, (n+7)/8, n)
	}
	return nil
}

// ptrInfo is what the driver says about a device pointer
// (cuPointerGetAttributes): what Wrap checks.
type ptrInfo struct {
	device     bool    // CU_POINTER_ATTRIBUTE_MEMORY_TYPE is device memory
	ordinal    int     // CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL
	start      uintptr // CU_POINTER_ATTRIBUTE_RANGE_START_ADDR
	size       uintptr // CU_POINTER_ATTRIBUTE_RANGE_SIZE
	sameOrNone bool    // CU_POINTER_ATTRIBUTE_CONTEXT is this context, or none (VMM memory)
}

// checkWrap checks that n elements of dt at ptr lie inside one allocation of
// device memory on device ordinal, as info describes it.
func checkWrap(ordinal int, ptr uintptr, dt reduceop.DType, n int, info ptrInfo) error {
	const op = "wrap"
	if !dt.Valid() {
		return invalid(op, "dtype %v", dt)
	}
	if n < 0 || n > math.MaxInt/dt.Size() {
		return invalid(op, "%d elements of %v", n, dt)
	}
	end := ptr + uintptr(n*dt.Size())
	rng := fmt.Sprintf("[%#x, %#x) (%d x %v)", ptr, end, n, dt)
	switch {
	case ptr%uintptr(dt.Size()) != 0:
		return invalid(op, "%s: pointer not aligned to %v", rng, dt)
	case !info.device:
		return invalid(op, "%s: not device memory", rng)
	case info.ordinal != ordinal:
		return invalid(op, "%s: memory of device %d, not %d", rng, info.ordinal, ordinal)
	case !info.sameOrNone:
		return invalid(op, "%s: memory of another CUDA context on device %d", rng, ordinal)
	case end < ptr || ptr < info.start || end > info.start+info.size:
		return invalid(op, "%s: outside its allocation [%#x, %#x)", rng, info.start, info.start+info.size)
	}
	return nil
}
