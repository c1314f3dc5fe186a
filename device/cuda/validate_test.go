//go:build !(386 || arm || mips || mipsle)

// The cases use 64-bit sizes.

package cuda

import (
	"errors"
	"strings"
	"testing"

	"github.com/goccl/goccl/reduceop"
)

func TestCheckSpan(t *testing.T) {
	tests := []struct {
		size, off, n int
		ok           bool
	}{
		{16, 0, 16, true},
		{16, 16, 0, true},
		{16, 8, 8, true},
		{0, 0, 0, true},
		{16, 8, 9, false},
		{16, 17, 0, false},
		{16, -1, 1, false},
		{16, 0, -1, false},
		{16, 1, 1<<63 - 1, false}, // off+n overflows
	}
	for _, tt := range tests {
		err := checkSpan("op", "buffer", tt.size, tt.off, tt.n)
		if (err == nil) != tt.ok || (err != nil && !errors.Is(err, ErrInvalid)) {
			t.Errorf("checkSpan(size %d, off %d, n %d) = %v, want ok %v", tt.size, tt.off, tt.n, err, tt.ok)
		}
	}
}

func TestCheckElems(t *testing.T) {
	tests := []struct {
		dt           reduceop.DType
		size, off, n int
		ok           bool
	}{
		{reduceop.Float32, 16, 0, 4, true},
		{reduceop.Float32, 16, 4, 3, true},
		{reduceop.Float32, 16, 4, 4, false},
		{reduceop.Float32, 16, 2, 1, false}, // misaligned
		{reduceop.Float64, 16, 8, 1, true},
		{reduceop.Float16, 16, 2, 7, true},
		{reduceop.Int64, 16, 0, 1 << 61, false}, // n*size overflows
		{reduceop.Uint8, 16, 3, 13, true},
	}
	for _, tt := range tests {
		err := checkElems("op", "buffer", tt.dt, tt.size, tt.off, tt.n)
		if (err == nil) != tt.ok || (err != nil && !errors.Is(err, ErrInvalid)) {
			t.Errorf("checkElems(%v, size %d, off %d, n %d) = %v, want ok %v", tt.dt, tt.size, tt.off, tt.n, err, tt.ok)
		}
	}
}

func TestOverlapping(t *testing.T) {
	tests := []struct {
		a, b uintptr
		n    int
		want bool
	}{
		{100, 100, 8, false}, // the same range: in place
		{100, 104, 8, true},
		{104, 100, 8, true},
		{100, 108, 8, false},
		{108, 100, 8, false},
		{100, 101, 0, false},
	}
	for _, tt := range tests {
		if got := overlapping(tt.a, tt.b, tt.n); got != tt.want {
			t.Errorf("overlapping(%d, %d, %d) = %v, want %v", tt.a, tt.b, tt.n, got, tt.want)
		}
	}
}

func TestCheckDivisor(t *testing.T) {
	for _, div := range []int{0, -1, 1 << 32} {
		if err := checkDivisor("scale", reduceop.Float32, div); !errors.Is(err, ErrInvalid) {
			t.Errorf("checkDivisor(%d) = %v, want ErrInvalid", div, err)
		}
	}
	for _, div := range []int{1, 2, 1<<32 - 1} {
		if err := checkDivisor("scale", reduceop.Float32, div); err != nil {
			t.Errorf("checkDivisor(%d) = %v", div, err)
		}
	}
}

func TestCheckOneBit(t *testing.T) {
	tests := []struct {
		name    string
		dt      reduceop.DType
		bitsDT  reduceop.DType
		bitsLen int
		n       int
		ok      bool
	}{
		{"no bits", reduceop.Float32, 0, -1, 10, true},
		{"exact bits", reduceop.Float32, reduceop.Uint8, 2, 9, true},
		{"one byte short", reduceop.Float32, reduceop.Uint8, 1, 9, false},
		{"empty", reduceop.Float32, reduceop.Uint8, 0, 0, true},
		{"float64 values", reduceop.Float64, reduceop.Uint8, 2, 9, false},
		{"int8 bits", reduceop.Float32, reduceop.Int8, 2, 9, false},
	}
	for _, tt := range tests {
		err := checkOneBit("pack", "err", tt.dt, tt.bitsDT, tt.bitsLen, tt.n)
		if (err == nil) != tt.ok || (err != nil && !errors.Is(err, ErrInvalid)) {
			t.Errorf("%s: checkOneBit = %v, want ok %v", tt.name, err, tt.ok)
		}
	}
}

func TestCheckWrap(t *testing.T) {
	good := ptrInfo{device: true, ordinal: 1, start: 0x1000, size: 0x100, sameOrNone: true}
	tests := []struct {
		name string
		ptr  uintptr
		dt   reduceop.DType
		n    int
		info func(ptrInfo) ptrInfo
		ok   bool
		says string
	}{
		{"whole", 0x1000, reduceop.Float32, 64, nil, true, ""},
		{"tail", 0x1080, reduceop.Float64, 16, nil, true, ""},
		{"one past", 0x1080, reduceop.Float64, 17, nil, false, "outside its allocation [0x1000, 0x1100)"},
		{"before", 0xff0, reduceop.Uint8, 8, func(i ptrInfo) ptrInfo { i.start, i.size = 0x1000, 0x100; return i }, false, "outside"},
		{"misaligned", 0x1002, reduceop.Float32, 1, nil, false, "not aligned"},
		{"host", 0x1000, reduceop.Uint8, 1, func(i ptrInfo) ptrInfo { i.device = false; return i }, false, "not device memory"},
		{"unknown", 0x10, reduceop.Uint8, 1, func(ptrInfo) ptrInfo { return ptrInfo{ordinal: -1} }, false, "not device memory"},
		{"other device", 0x1000, reduceop.Uint8, 1, func(i ptrInfo) ptrInfo { i.ordinal = 0; return i }, false, "device 0, not 1"},
		{"other context", 0x1000, reduceop.Uint8, 1, func(i ptrInfo) ptrInfo { i.sameOrNone = false; return i }, false, "another CUDA context"},
		{"bad dtype", 0x1000, reduceop.DType(200), 1, nil, false, "dtype"},
		{"negative", 0x1000, reduceop.Uint8, -1, nil, false, "-1 elements"},
		{"wraps around", ^uintptr(0) - 3, reduceop.Uint8, 8, nil, false, "outside"},
	}
	for _, tt := range tests {
		info := good
		if tt.info != nil {
			info = tt.info(info)
		}
		err := checkWrap(1, tt.ptr, tt.dt, tt.n, info)
		if (err == nil) != tt.ok || (err != nil && !errors.Is(err, ErrInvalid)) {
			t.Errorf("%s: checkWrap = %v, want ok %v", tt.name, err, tt.ok)
			continue
		}
		if err != nil && !strings.Contains(err.Error(), tt.says) {
			t.Errorf("%s: checkWrap = %q, want it to say %q", tt.name, err, tt.says)
		}
	}
}
