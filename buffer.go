package goccl

import (
	"fmt"
	"unsafe"

	"github.com/goccl/goccl/device"
	"github.com/goccl/goccl/reduceop"
)

// A buffer argument of a collective is a typed Go slice of one of the
// element types below, or a DeviceBuffer:
//
//	[]float32 []float64 []reduceop.F16 []reduceop.BF16 []int8 []uint8 []int32 []int64
//
// Buffers are passed as `any` so that one method serves every type, as
// encoding/binary does; the type is checked before anything is sent.

// DeviceBuffer is memory that Go code cannot address, such as GPU memory:
// a device.Buffer (package device/cuda provides one, over memory it
// allocated or memory a framework owns; package device/hostsim a fake one
// for tests). A collective on a DeviceBuffer runs the same algorithm as on a
// host slice, chunk by chunk, with the bytes moved through pinned host
// memory and the reductions run by the device (devpath.go). Every rank of
// one call must pass the same kind of buffer: a host slice on one rank and
// a device buffer on another is ErrMismatch.
type DeviceBuffer = device.Buffer

// view is a buffer argument resolved to its dtype, element count and bytes.
// For a DeviceBuffer, b is nil and dev is set.
type view struct {
	dt  reduceop.DType
	n   int // elements
	b   []byte
	dev DeviceBuffer
}

func (v view) bytes() int { return v.n * v.dt.Size() }

func asBytes[T any](s []T) []byte {
	if len(s) == 0 {
		return []byte{}
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), len(s)*int(unsafe.Sizeof(s[0])))
}

// viewOf resolves a buffer argument. A nil slice of a known type is a valid
// empty buffer; a nil interface is not.
func viewOf(buf any) (view, error) {
	var v view
	err := v.of(buf)
	return v, err
}

// of makes v the view of buf, in place.
func (v *view) of(buf any) error {
	switch s := buf.(type) {
	case []float32:
		v.dt, v.n, v.b = reduceop.Float32, len(s), asBytes(s)
	case []float64:
		v.dt, v.n, v.b = reduceop.Float64, len(s), asBytes(s)
	case []reduceop.F16:
		v.dt, v.n, v.b = reduceop.Float16, len(s), asBytes(s)
	case []reduceop.BF16:
		v.dt, v.n, v.b = reduceop.BFloat16, len(s), asBytes(s)
	case []int8:
		v.dt, v.n, v.b = reduceop.Int8, len(s), asBytes(s)
	case []uint8:
		v.dt, v.n, v.b = reduceop.Uint8, len(s), asBytes(s)
	case []int32:
		v.dt, v.n, v.b = reduceop.Int32, len(s), asBytes(s)
	case []int64:
		v.dt, v.n, v.b = reduceop.Int64, len(s), asBytes(s)
	case DeviceBuffer:
		if s == nil {
			return fmt.Errorf("nil DeviceBuffer")
		}
		v.dt, v.n, v.dev = s.DType(), s.Len(), s
	case nil:
		return fmt.Errorf("nil buffer")
	default:
		return fmt.Errorf("unsupported buffer type %T", buf)
	}
	return nil
}

// BufferLen returns the number of elements of a buffer argument, or an
// error if buf is not one.
func BufferLen(buf any) (int, error) {
	v, err := viewOf(buf)
	return v.n, err
}

// Bytes returns the bytes of a host buffer argument (a typed slice), for
// passing to reduceop's byte-level functions; nil for anything else.
func Bytes(buf any) []byte {
	v, err := viewOf(buf)
	if err != nil {
		return nil
	}
	return v.b
}
