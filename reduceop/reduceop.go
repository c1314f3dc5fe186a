package reduceop

import (
	"errors"
	"fmt"
	"strings"
)

// DType names the element type of a buffer.
type DType uint8

// The element types goccl moves and reduces. Float16 and BFloat16 are
// stored as the uint16-backed Go types F16 and BF16; Bool as Go's bool, one
// byte holding 0 or 1; Complex64 and Complex128 as Go's complex64 and
// complex128 (real part first).
//
// The numeric values travel in fingerprints and point-to-point headers, so
// a new DType is only ever appended: the first eight keep their values.
const (
	Float32 DType = iota + 1
	Float64
	Float16
	BFloat16
	Int8
	Uint8
	Int32
	Int64
	Uint16
	Uint32
	Uint64
	Int16
	Bool
	Complex64
	Complex128
)

// lastDType is the last declared DType.
const lastDType = Complex128

// DTypes lists every DType, in declaration order. Code that needs a
// device kernel for each dtype must not range over it: the kernels
// (package kernels) cover the first eight only.
var DTypes = []DType{Float32, Float64, Float16, BFloat16, Int8, Uint8, Int32, Int64,
	Uint16, Uint32, Uint64, Int16, Bool, Complex64, Complex128}

var dtypeNames = [...]string{"", "float32", "float64", "float16", "bfloat16", "int8", "uint8", "int32", "int64",
	"uint16", "uint32", "uint64", "int16", "bool", "complex64", "complex128"}
var dtypeSizes = [...]int{0, 4, 8, 2, 2, 1, 1, 4, 8, 2, 4, 8, 2, 1, 8, 16}

// String returns the lower-case name of d, as torch spells it ("float32").
func (d DType) String() string {
	if d.Valid() {
		return dtypeNames[d]
	}
	return fmt.Sprintf("DType(%d)", uint8(d))
}

// Valid reports whether d is one of the declared DTypes.
func (d DType) Valid() bool { return d >= Float32 && d <= lastDType }

// Size returns the number of bytes of one element of d, or 0 if d is not valid.
func (d DType) Size() int {
	if d.Valid() {
		return dtypeSizes[d]
	}
	return 0
}

// IsFloat reports whether d is a real floating-point type (Float32,
// Float64, Float16, BFloat16); complex types are not.
func (d DType) IsFloat() bool { return d >= Float32 && d <= BFloat16 }

// IsComplex reports whether d is Complex64 or Complex128.
func (d DType) IsComplex() bool { return d == Complex64 || d == Complex128 }

// IsInteger reports whether d is a signed or unsigned integer type. Bool
// is not.
func (d DType) IsInteger() bool {
	switch d {
	case Int8, Uint8, Int16, Uint16, Int32, Uint32, Int64, Uint64:
		return true
	}
	return false
}

// IsUnsigned reports whether d is an unsigned integer type (Uint8,
// Uint16, Uint32, Uint64).
func (d DType) IsUnsigned() bool {
	switch d {
	case Uint8, Uint16, Uint32, Uint64:
		return true
	}
	return false
}

// ParseDType returns the DType named s ("float32", "fp16", "bf16", "int8", ...).
func ParseDType(s string) (DType, error) {
	switch strings.ToLower(s) {
	case "float", "fp32", "f32":
		return Float32, nil
	case "double", "fp64", "f64":
		return Float64, nil
	case "half", "fp16", "f16":
		return Float16, nil
	case "bf16":
		return BFloat16, nil
	}
	for d := Float32; d <= lastDType; d++ {
		if strings.EqualFold(s, dtypeNames[d]) {
			return d, nil
		}
	}
	return 0, fmt.Errorf("reduceop: unknown dtype %q", s)
}

// Op names a reduction.
type Op uint8

// The reductions. Avg sums and then divides by the group size once, at the
// end; it is defined for floating-point and complex types only. BAnd, BOr
// and BXor are defined for integer types and Bool. On Bool, Min is logical
// and, Max logical or, and Sum, Prod and Avg are not defined. Complex types
// take Sum, Prod and Avg only. See Check.
const (
	Sum Op = iota + 1
	Prod
	Min
	Max
	Avg
	BAnd
	BOr
	BXor
)

// Ops lists every Op, in declaration order.
var Ops = []Op{Sum, Prod, Min, Max, Avg, BAnd, BOr, BXor}

var opNames = [...]string{"", "sum", "prod", "min", "max", "avg", "band", "bor", "bxor"}

// String returns the lower-case name of o ("sum").
func (o Op) String() string {
	if o >= Sum && o <= BXor {
		return opNames[o]
	}
	return fmt.Sprintf("Op(%d)", uint8(o))
}

// ParseOp returns the Op named s.
func ParseOp(s string) (Op, error) {
	for o := Sum; o <= BXor; o++ {
		if strings.EqualFold(s, opNames[o]) {
			return o, nil
		}
	}
	return 0, fmt.Errorf("reduceop: unknown op %q", s)
}

// ErrUnsupported is returned (wrapped) when an Op cannot be applied to a DType.
var ErrUnsupported = errors.New("reduceop: op not defined for dtype")

// Check reports whether op can be applied to elements of dt:
//
//	              Sum Prod  Min Max  Avg  BAnd BOr BXor
//	floats         x   x     x   x    x
//	integers       x   x     x   x         x    x   x
//	bool                     x   x         x    x   x
//	complex        x   x              x
//
// Otherwise it returns an error wrapping ErrUnsupported (Avg on integers,
// bitwise ops on floats, Sum on bool, Min on complex, ...); goccl never
// casts silently.
func Check(op Op, dt DType) error {
	if !dt.Valid() {
		return fmt.Errorf("reduceop: invalid dtype %v", dt)
	}
	switch op {
	case Sum, Prod:
		if dt != Bool {
			return nil
		}
	case Min, Max:
		if !dt.IsComplex() {
			return nil
		}
	case Avg:
		if dt.IsFloat() || dt.IsComplex() {
			return nil
		}
	case BAnd, BOr, BXor:
		if dt.IsInteger() || dt == Bool {
			return nil
		}
	default:
		return fmt.Errorf("reduceop: invalid op %v", op)
	}
	return fmt.Errorf("%w: %v on %v", ErrUnsupported, op, dt)
}
