package reduceop

import (
	"fmt"
	"testing"
)

// The benchmarks put the float32 Sum beside Go's copy on the same machine,
// in the same run. Bytes per second count memory traffic: copy reads n and
// writes n bytes (SetBytes(2n)); Sum reads dst and src and writes dst
// (SetBytes(3n)). The goal is Sum reaching 80% of copy's figure at 64 MiB.

const (
	kib = 1 << 10
	mib = 1 << 20
)

func benchCopy(b *testing.B, n int) {
	dst, src := make([]byte, n), make([]byte, n)
	for i := range src {
		src[i] = byte(i)
	}
	b.SetBytes(int64(2 * n))
	b.ResetTimer()
	for b.Loop() {
		copy(dst, src)
	}
}

func benchApply(b *testing.B, dt DType, op Op, n int) {
	dst, src := make([]byte, n), make([]byte, n)
	// Small values: float sums stay finite, no subnormal slow paths.
	for i := range src {
		src[i] = byte(i%7) + 1
		dst[i] = byte(i%5) + 1
	}
	if dt.IsFloat() || dt.IsComplex() {
		fillFloat(dt, dst, 1)
		fillFloat(dt, src, 1)
	}
	b.SetBytes(int64(3 * n))
	b.ResetTimer()
	for b.Loop() {
		if err := Apply(dt, op, dst, src); err != nil {
			b.Fatal(err)
		}
	}
}

// fillFloat fills buf with v as dt. Benchmarks keep values ordinary
// (normal, finite), so that no subnormal slow path is timed.
func fillFloat(dt DType, buf []byte, v float32) {
	switch dt {
	case Float32, Complex64:
		fillAll(bytesAs[float32](buf), v)
	case Float64, Complex128:
		fillAll(bytesAs[float64](buf), float64(v))
	case Float16:
		fillAll(bytesAs[F16](buf), F16FromFloat32(v))
	case BFloat16:
		fillAll(bytesAs[BF16](buf), BF16FromFloat32(v))
	}
}

func fillAll[T any](s []T, v T) {
	for i := range s {
		s[i] = v
	}
}

func BenchmarkCopy4KiB(b *testing.B)  { benchCopy(b, 4*kib) }
func BenchmarkCopy1MiB(b *testing.B)  { benchCopy(b, mib) }
func BenchmarkCopy64MiB(b *testing.B) { benchCopy(b, 64*mib) }

func BenchmarkSumFloat32_4KiB(b *testing.B)  { benchApply(b, Float32, Sum, 4*kib) }
func BenchmarkSumFloat32_1MiB(b *testing.B)  { benchApply(b, Float32, Sum, mib) }
func BenchmarkSumFloat32_64MiB(b *testing.B) { benchApply(b, Float32, Sum, 64*mib) }

// BenchmarkSum1MiB runs Sum on 1 MiB buffers of every dtype (BOr on
// Bool, which has no Sum).
func BenchmarkSum1MiB(b *testing.B) {
	for _, dt := range DTypes {
		op := Sum
		if dt == Bool {
			op = BOr
		}
		b.Run(dt.String(), func(b *testing.B) { benchApply(b, dt, op, mib) })
	}
}

// BenchmarkOps1MiB runs every valid op on 1 MiB of float32 and of int32.
func BenchmarkOps1MiB(b *testing.B) {
	for _, dt := range []DType{Float32, Int32} {
		for _, op := range Ops {
			if Check(op, dt) != nil {
				continue
			}
			b.Run(fmt.Sprintf("%v/%v", op, dt), func(b *testing.B) { benchApply(b, dt, op, mib) })
		}
	}
}

// BenchmarkScale1MiB runs Scale (Avg's last step) on 1 MiB of each float
// and complex type.
func BenchmarkScale1MiB(b *testing.B) {
	for _, dt := range DTypes {
		if Check(Avg, dt) != nil {
			continue
		}
		b.Run(dt.String(), func(b *testing.B) {
			buf := make([]byte, mib)
			b.SetBytes(2 * mib)
			i := 0
			for b.Loop() {
				if i%8 == 0 {
					fillFloat(dt, buf, 6561) // 3^8: eight divisions by 3 stay normal
				}
				i++
				if err := Scale(dt, buf, 3); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
