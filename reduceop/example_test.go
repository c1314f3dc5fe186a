package reduceop_test

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/goccl/goccl/reduceop"
)

func ExampleSumInto() {
	dst := []float32{1, 2, 3}
	reduceop.SumInto(dst, []float32{10, 20, 30})
	fmt.Println(dst)

	h := []reduceop.F16{reduceop.F16FromFloat32(0.5)}
	reduceop.SumInto(h, []reduceop.F16{reduceop.F16FromFloat32(0.25)})
	fmt.Println(h)
	// Output:
	// [11 22 33]
	// [0.75]
}

func ExampleApply() {
	// Two ranks' contributions as the raw little-endian bytes a transport
	// delivers.
	le := binary.LittleEndian
	dst := le.AppendUint32(le.AppendUint32(nil, math.Float32bits(1.5)), math.Float32bits(-2))
	src := le.AppendUint32(le.AppendUint32(nil, math.Float32bits(2.5)), math.Float32bits(7))

	if err := reduceop.Apply(reduceop.Float32, reduceop.Max, dst, src); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(math.Float32frombits(le.Uint32(dst)), math.Float32frombits(le.Uint32(dst[4:])))

	// An op the dtype cannot take is an error, not a silent cast.
	fmt.Println(reduceop.Apply(reduceop.Float32, reduceop.BXor, dst, src))
	// Output:
	// 2.5 7
	// reduceop: op not defined for dtype: bxor on float32
}

func ExampleScale() {
	// Avg over a group of 4: every rank's values are summed, then the sum
	// is divided by the group size once.
	sum := []float64{4, 10, 1}
	le := binary.LittleEndian
	var buf []byte
	for _, v := range sum {
		buf = le.AppendUint64(buf, math.Float64bits(v))
	}
	if err := reduceop.Scale(reduceop.Float64, buf, 4); err != nil {
		fmt.Println(err)
		return
	}
	for i := range sum {
		fmt.Print(math.Float64frombits(le.Uint64(buf[8*i:])), " ")
	}
	fmt.Println()
	// Output:
	// 1 2.5 0.25
}

func ExampleBF16FromFloat32() {
	// bfloat16 keeps 8 significant bits: 1 + 2^-8 is a tie and rounds to
	// even (1), 1 + 3*2^-8 rounds up to 1 + 2^-6.
	fmt.Println(reduceop.BF16FromFloat32(1+1.0/256), reduceop.BF16FromFloat32(1+3.0/256))
	fmt.Println(reduceop.F16FromFloat32(70000), reduceop.F16FromFloat32(1e-8))
	// Output:
	// 1 1.015625
	// +Inf 0
}
