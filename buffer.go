package goccl

import (
	"fmt"
	"reflect"
	"unsafe"

	"github.com/goccl/goccl/device"
	"github.com/goccl/goccl/reduceop"
)

// A buffer argument of a collective is a typed Go slice of one of the
// fixed-size element types below, a Typed view made by As, or a
// DeviceBuffer:
//
//	[]float32 []float64 []reduceop.F16 []reduceop.BF16
//	[]int8 []int16 []int32 []int64 []uint8 []uint16 []uint32 []uint64
//	[]bool []complex64 []complex128
//
// Every collective moves any of them; a reduction takes the ops
// reduceop.Check allows for the dtype (integers wrap; bool has Min and
// BAnd as and, Max and BOr as or, BXor as xor; complex has Sum, Prod and
// Avg). A slice of a named type is taken by its underlying type: a
// []MyFloat with type MyFloat float32 is a []float32. A 16-bit float whose
// Go type cannot say its format, a named uint16 such as a framework's
// bfloat16, is taken as a uint16, never guessed as a float; As(buf,
// reduceop.BFloat16) says what it is. int, uint and uintptr, whose size
// depends on the platform, are refused.
//
// Buffers are passed as `any` so that one method serves every type, as
// encoding/binary does; the type is checked before anything is sent. The
// unnamed slice types above resolve with a plain type switch, without
// reflection or allocation; a named type goes through reflect.

// DeviceBuffer is memory that Go code cannot address, such as GPU memory:
// a device.Buffer (package device/cuda provides one, over memory it
// allocated or memory a framework owns; package device/hostsim a fake one
// for tests). A collective on a DeviceBuffer runs the same algorithm as on a
// host slice, chunk by chunk, with the bytes moved through pinned host
// memory and the reductions run by the device (device_path.go). Every rank of
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
	case []uint16:
		v.dt, v.n, v.b = reduceop.Uint16, len(s), asBytes(s)
	case []uint32:
		v.dt, v.n, v.b = reduceop.Uint32, len(s), asBytes(s)
	case []uint64:
		v.dt, v.n, v.b = reduceop.Uint64, len(s), asBytes(s)
	case []int16:
		v.dt, v.n, v.b = reduceop.Int16, len(s), asBytes(s)
	case []bool:
		v.dt, v.n, v.b = reduceop.Bool, len(s), asBytes(s)
	case []complex64:
		v.dt, v.n, v.b = reduceop.Complex64, len(s), asBytes(s)
	case []complex128:
		v.dt, v.n, v.b = reduceop.Complex128, len(s), asBytes(s)
	case Typed:
		if s.err != nil {
			return s.err
		}
		*v = s.v
	case DeviceBuffer:
		if s == nil {
			return fmt.Errorf("nil DeviceBuffer")
		}
		v.dt, v.n, v.dev = s.DType(), s.Len(), s
	case nil:
		return fmt.Errorf("nil buffer")
	default:
		return v.ofNamed(buf)
	}
	return nil
}

var (
	f16Type  = reflect.TypeFor[reduceop.F16]()
	bf16Type = reflect.TypeFor[reduceop.BF16]()
)

// ofNamed is of's slow path: a slice whose type the switch does not name,
// taken by its element's underlying type (reduceop.F16 and BF16 elements,
// in a named slice type, keep their float dtypes).
func (v *view) ofNamed(buf any) error {
	rv := reflect.ValueOf(buf)
	if rv.Kind() != reflect.Slice {
		return fmt.Errorf("unsupported buffer type %T", buf)
	}
	et := rv.Type().Elem()
	dt, ok := kindDTypes[et.Kind()]
	switch {
	case et.Kind() == reflect.Uint16 && et == f16Type:
		dt = reduceop.Float16
	case et.Kind() == reflect.Uint16 && et == bf16Type:
		dt = reduceop.BFloat16
	case et.Kind() == reflect.Int || et.Kind() == reflect.Uint || et.Kind() == reflect.Uintptr:
		return fmt.Errorf("unsupported buffer type %T: %v has a platform-dependent size; use a sized type such as int64", buf, et)
	case !ok:
		return fmt.Errorf("unsupported buffer type %T", buf)
	}
	v.dt, v.n, v.dev = dt, rv.Len(), nil
	if v.n == 0 {
		v.b = []byte{}
	} else {
		v.b = unsafe.Slice((*byte)(rv.UnsafePointer()), v.n*dt.Size())
	}
	return nil
}

// kindDTypes is the dtype of each kind of element a named slice type may
// have. A named uint16 is a uint16: it may be a 16-bit float, which As
// says (reduceop's own F16 and BF16 aside).
var kindDTypes = map[reflect.Kind]reduceop.DType{
	reflect.Float32: reduceop.Float32, reflect.Float64: reduceop.Float64,
	reflect.Int8: reduceop.Int8, reflect.Int16: reduceop.Int16, reflect.Int32: reduceop.Int32, reflect.Int64: reduceop.Int64,
	reflect.Uint8: reduceop.Uint8, reflect.Uint16: reduceop.Uint16, reflect.Uint32: reduceop.Uint32, reflect.Uint64: reduceop.Uint64,
	reflect.Bool: reduceop.Bool, reflect.Complex64: reduceop.Complex64, reflect.Complex128: reduceop.Complex128,
}

// Typed is a host buffer with an explicit dtype: the value As returns, which
// every collective accepts as a buffer of that dtype over the memory of the
// slice it was made from.
type Typed struct {
	v   view
	err error
}

// As returns buf, a host buffer (a slice of an element type listed above,
// of a named type, or a Typed), as a buffer of dtype dt over the same
// memory. Its use is a 16-bit float held in a type that cannot say its
// format: a framework's bfloat16 or float16 is often a named uint16, which
// a collective takes as a uint16 (reducing it as integers, and refusing
// Avg); As(buf, reduceop.BFloat16) makes it reduce as bfloat16.
//
// The element size of buf must be dt's size. As does not fail: a bad
// argument (a DeviceBuffer, which has its own dtype, an unsupported type,
// a size mismatch) makes a Typed that every collective refuses with
// ErrInvalid, naming the problem, before anything is sent; Err reports it
// at once.
func As(buf any, dt reduceop.DType) Typed {
	if !dt.Valid() {
		return Typed{err: fmt.Errorf("As(%T, %v): invalid dtype", buf, dt)}
	}
	v, err := viewOf(buf)
	switch {
	case err != nil:
		return Typed{err: fmt.Errorf("As(%T, %v): %v", buf, dt, err)}
	case v.dev != nil:
		return Typed{err: fmt.Errorf("As(%T, %v): a DeviceBuffer has its own dtype (%v)", buf, dt, v.dt)}
	case v.dt.Size() != dt.Size():
		return Typed{err: fmt.Errorf("As(%T, %v): elements of %d bytes are not %v (%d bytes)", buf, dt, v.dt.Size(), dt, dt.Size())}
	}
	v.dt = dt
	return Typed{v: v}
}

// DType returns the dtype t was made with.
func (t Typed) DType() reduceop.DType { return t.v.dt }

// Len returns the number of elements of t, or 0 if As failed.
func (t Typed) Len() int { return t.v.n }

// Err returns why As could not make t, or nil.
func (t Typed) Err() error { return t.err }

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
