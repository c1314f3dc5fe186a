package kernels

import (
	"bytes"
	_ "embed"
	"fmt"

	"github.com/goccl/goccl/reduceop"
)

//go:embed goccl.ptx
var ptx []byte

// BlockSize is the number of threads per block every kernel is compiled for
// (its .maxntid); launches must use exactly this many.
const BlockSize = 256

// PTX returns a copy of the PTX module holding every kernel (the text of
// goccl.ptx, without a terminating NUL).
func PTX() []byte { return bytes.Clone(ptx) }

// Names of the 1-bit kernels (package onebit's Kernel on the device), all on
// float32 buffers; pointers are device pointers, counts are elements, and
// sign(i) is !(err[i] < 0) when packing and bits[i/8]>>(7-i%8)&1 == 1 when
// reading, most significant bit first as numpy.packbits.
//
//	OneBitCompensateSumSq(err, x *float32, nx, n uint64, partial *float64)
//		for i := range nx { err[i] += x[i] }
//		partial[b] = sum of float64(err[i])^2 over block b's share of i < n
//		(any grid of g blocks; partial holds g float64s)
//	OneBitFinish(partial *float64, g uint32, n uint64, ss *float64, scale *float32)
//		*ss = sum(partial[:g])
//		*scale = float32(math.Sqrt(*ss)) / float32(math.Sqrt(float64(n)))
//		(one block)
//	OneBitPackUpdate(bits *uint8, err *float32, n uint64, scale *float32)
//		for i := range n { if sign(i) { set bit i; err[i] -= *scale } else { err[i] -= -*scale } }
//		(every byte of bits[:(n+7)/8] is written; bits past n are 0;
//		one thread per byte of bits: 8 floats read, one byte stored)
//	OneBitPackUpdateBallot(bits *uint8, err *float32, n uint64, scale *float32)
//		the same loop and results as OneBitPackUpdate, one thread per
//		element: each warp gathers 32 signs with one ballot and stores
//		them as one 4-byte word (byte by byte where bits is not 4-byte
//		aligned, and at the end). A grid of n threads covers it in one
//		step; any grid is correct.
//	OneBitAccumulateSigns(dst *float32, bits *uint8, n uint64, scale *float32)
//		for i := range n { dst[i] += sign(i) ? *scale : -*scale }
//	OneBitDecompress(dst *float32, bits *uint8, n uint64, scale *float32)
//		for i := range n { dst[i] = sign(i) ? *scale : -*scale }
const (
	OneBitCompensateSumSq  = "goccl_onebit_compensate_sumsq"
	OneBitFinish           = "goccl_onebit_finish"
	OneBitPackUpdate       = "goccl_onebit_pack_update"
	OneBitPackUpdateBallot = "goccl_onebit_pack_update_ballot"
	OneBitAccumulateSigns  = "goccl_onebit_accumulate_signs"
	OneBitDecompress       = "goccl_onebit_decompress"
)

// DTypes lists the dtypes the kernels cover, in the order of EntryPoints.
// It is fixed, not reduceop.DTypes: the dtypes reduceop added later
// (uint16, uint32, uint64, int16, bool, complex64, complex128) have no
// kernel, and a device reduction on them is refused before anything runs
// (device.CheckReduce). Adding a dtype here needs its kernels in *.cu and
// a regenerated goccl.ptx.
var DTypes = []reduceop.DType{
	reduceop.Float32, reduceop.Float64, reduceop.Float16, reduceop.BFloat16,
	reduceop.Int8, reduceop.Uint8, reduceop.Int32, reduceop.Int64,
}

var dtypeShort = map[reduceop.DType]string{
	reduceop.Float32:  "f32",
	reduceop.Float64:  "f64",
	reduceop.Float16:  "f16",
	reduceop.BFloat16: "bf16",
	reduceop.Int8:     "i8",
	reduceop.Uint8:    "u8",
	reduceop.Int32:    "i32",
	reduceop.Int64:    "i64",
}

// ReduceKernelName returns the entry point computing dst[i] = dst[i] op src[i]
// on elements of dt, with parameters (dst, src *T, n uint64):
//
//	for i := range n {
//		dst[i] = op(dst[i], src[i])
//	}
//
// Avg maps to the sum kernel (ScaleKernelName divides at the end). It returns
// an error wrapping reduceop.ErrUnsupported where reduceop.Check does, and
// for a dtype not in DTypes.
func ReduceKernelName(dt reduceop.DType, op reduceop.Op) (string, error) {
	if err := reduceop.Check(op, dt); err != nil {
		return "", fmt.Errorf("kernels: reduce: %w", err)
	}
	if err := hasKernel(op, dt); err != nil {
		return "", fmt.Errorf("kernels: reduce: %w", err)
	}
	if op == reduceop.Avg {
		op = reduceop.Sum
	}
	return "goccl_reduce_" + dtypeShort[dt] + "_" + op.String(), nil
}

// ScaleKernelName returns the entry point dividing each element of a float
// buffer by the group size, the last step of Avg, with parameters
// (x *T, count uint64, n uint32):
//
//	for i := range count {
//		x[i] = T(C(x[i]) / C(n)) // C: float32 for float32, float16, bfloat16; float64 for float64
//	}
//
// It returns an error wrapping reduceop.ErrUnsupported for integer dtypes
// and for a dtype not in DTypes.
func ScaleKernelName(dt reduceop.DType) (string, error) {
	if err := reduceop.Check(reduceop.Avg, dt); err != nil {
		return "", fmt.Errorf("kernels: scale: %w", err)
	}
	if err := hasKernel(reduceop.Avg, dt); err != nil {
		return "", fmt.Errorf("kernels: scale: %w", err)
	}
	return "goccl_scale_" + dtypeShort[dt], nil
}

// hasKernel returns an error wrapping reduceop.ErrUnsupported if dt is not
// in DTypes.
func hasKernel(op reduceop.Op, dt reduceop.DType) error {
	if _, ok := dtypeShort[dt]; !ok {
		return fmt.Errorf("%w: %v on %v: no device kernel for %v", reduceop.ErrUnsupported, op, dt, dt)
	}
	return nil
}

// EntryPoints lists every kernel in PTX(), reduce kernels first (in
// DTypes × reduceop.Ops order, skipping Avg and unsupported pairs),
// then scale, then 1-bit.
func EntryPoints() []string {
	var names []string
	for _, dt := range DTypes {
		for _, op := range reduceop.Ops {
			if op == reduceop.Avg {
				continue
			}
			if name, err := ReduceKernelName(dt, op); err == nil {
				names = append(names, name)
			}
		}
	}
	for _, dt := range DTypes {
		if name, err := ScaleKernelName(dt); err == nil {
			names = append(names, name)
		}
	}
	return append(names, OneBitCompensateSumSq, OneBitFinish, OneBitPackUpdate, OneBitPackUpdateBallot, OneBitAccumulateSigns, OneBitDecompress)
}
