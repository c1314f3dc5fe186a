package reduceop

import (
	"fmt"
	"unsafe"
)

// Apply computes dst[i] = dst[i] op src[i] for every element of dt held in
// the raw buffers dst and src, in place in dst. The bytes are the elements
// in the machine's native (little-endian on every goccl platform) layout;
// Apply reinterprets them without copying, so buffers should be aligned to
// dt.Size(), as any Go or device allocation is. Avg sums here; Scale
// finishes it.
//
// Apply returns an error, and leaves dst untouched, when Check(op, dt)
// fails, when len(dst) != len(src), or when the length is not a multiple of
// dt.Size(). dst and src must not overlap unless they are the same buffer.
func Apply(dt DType, op Op, dst, src []byte) error {
	if err := Check(op, dt); err != nil {
		return err
	}
	if len(dst) != len(src) {
		return fmt.Errorf("reduceop: %v %v: dst has %d bytes, src has %d", op, dt, len(dst), len(src))
	}
	if len(dst)%dt.Size() != 0 {
		return fmt.Errorf("reduceop: %v %v: %d bytes is not a whole number of %d-byte elements", op, dt, len(dst), dt.Size())
	}
	if len(dst) == 0 {
		return nil
	}
	dispatch(dt, op, unsafe.Pointer(unsafe.SliceData(dst)), unsafe.Pointer(unsafe.SliceData(src)), len(dst)/dt.Size())
	return nil
}

// Scale divides every element of dt in dst by n: the last step of Avg,
// with n the group size. It is defined for floating-point and complex
// types only; F16 and BF16 divide in float32 and round once, and a complex
// element has each part divided: complex(real(x)/n, imag(x)/n). n must be positive (n is
// converted to the element type, exactly for n up to 2^24).
func Scale(dt DType, dst []byte, n int) error {
	if err := Check(Avg, dt); err != nil {
		return fmt.Errorf("reduceop: scale: %w", err)
	}
	if n <= 0 {
		return fmt.Errorf("reduceop: scale %v by %d: divisor must be positive", dt, n)
	}
	if len(dst)%dt.Size() != 0 {
		return fmt.Errorf("reduceop: scale %v: %d bytes is not a whole number of %d-byte elements", dt, len(dst), dt.Size())
	}
	if len(dst) == 0 || n == 1 {
		return nil
	}
	scale(dt, unsafe.Pointer(unsafe.SliceData(dst)), len(dst)/dt.Size(), n)
	return nil
}

// view reinterprets n elements of T at p.
func view[T any](p unsafe.Pointer, n int) []T { return unsafe.Slice((*T)(p), n) }

// dispatch picks the typed loop once per call. op and dt have been checked;
// n > 0.
func dispatch(dt DType, op Op, d, s unsafe.Pointer, n int) {
	switch dt {
	case Float32:
		float32Op(op, view[float32](d, n), view[float32](s, n))
	case Float64:
		float64Op(op, view[float64](d, n), view[float64](s, n))
	case Float16:
		halfOp(op, view[F16](d, n), view[F16](s, n), decodeF16, encodeF16)
	case BFloat16:
		halfOp(op, view[BF16](d, n), view[BF16](s, n), decodeBF16, encodeBF16)
	case Int8:
		intOp(op, view[int8](d, n), view[int8](s, n))
	case Uint8:
		intOp(op, view[uint8](d, n), view[uint8](s, n))
	case Int32:
		intOp(op, view[int32](d, n), view[int32](s, n))
	case Int64:
		intOp(op, view[int64](d, n), view[int64](s, n))
	case Uint16:
		intOp(op, view[uint16](d, n), view[uint16](s, n))
	case Uint32:
		intOp(op, view[uint32](d, n), view[uint32](s, n))
	case Uint64:
		intOp(op, view[uint64](d, n), view[uint64](s, n))
	case Int16:
		intOp(op, view[int16](d, n), view[int16](s, n))
	case Bool:
		boolOp(op, view[uint8](d, n), view[uint8](s, n))
	case Complex64:
		// Complex addition adds the parts: Sum (and Avg's sum) is the
		// float32 sum, SIMD path included, over the 2n parts.
		if op == Prod {
			prodLoop(view[complex64](d, n), view[complex64](s, n))
		} else {
			float32Op(op, view[float32](d, 2*n), view[float32](s, 2*n))
		}
	case Complex128:
		if op == Prod {
			prodLoop(view[complex128](d, n), view[complex128](s, n))
		} else {
			float64Op(op, view[float64](d, 2*n), view[float64](s, 2*n))
		}
	}
}

// scale divides n elements at d by k; dt is a float or complex type, n > 0,
// k > 1. A complex element is divided part by part, (re/k, im/k), which is
// exact scaling; Go's complex division by complex(k, 0) is not (it turns
// -0 parts into +0 and an infinite part into NaN).
func scale(dt DType, d unsafe.Pointer, n, k int) {
	switch dt {
	case Float32:
		divLoop(view[float32](d, n), float32(k))
	case Float64:
		divLoop(view[float64](d, n), float64(k))
	case Float16:
		halfScale(view[F16](d, n), k, decodeF16, encodeF16)
	case BFloat16:
		halfScale(view[BF16](d, n), k, decodeBF16, encodeBF16)
	case Complex64:
		divLoop(view[float32](d, 2*n), float32(k))
	case Complex128:
		divLoop(view[float64](d, 2*n), float64(k))
	}
}

// Host is the Kernel that reduces on the CPU, in the calling goroutine,
// with Apply and Scale. Its zero value is ready to use and it is safe for
// concurrent use on disjoint buffers.
type Host struct{}

var _ Kernel = Host{}

// Reduce computes dst[i] = dst[i] op src[i]; see Apply.
func (Host) Reduce(dt DType, op Op, dst, src []byte) error { return Apply(dt, op, dst, src) }

// Scale divides every element of dst by n; see Scale.
func (Host) Scale(dt DType, dst []byte, n int) error { return Scale(dt, dst, n) }

// HostFunc returns Apply for dt and op as a function of the two buffers,
// made once for every valid DType and Op (a caller on the latency path
// allocates none), or nil for a dtype or op that is not one.
func HostFunc(dt DType, op Op) func(dst, src []byte) error {
	if int(dt) >= len(hostFuncs) || int(op) >= len(hostFuncs[dt]) {
		return nil
	}
	return hostFuncs[dt][op]
}

var hostFuncs = func() (t [lastDType + 1][BXor + 1]func(dst, src []byte) error) {
	for _, dt := range DTypes {
		for _, op := range Ops {
			t[dt][op] = func(dst, src []byte) error { return Apply(dt, op, dst, src) }
		}
	}
	return t
}()
