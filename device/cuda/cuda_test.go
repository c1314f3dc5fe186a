//go:build cuda

package cuda_test

// Run on a GPU machine (see gpubench/run.sh). Every kernel is checked
// against the host reference on fresh random data, with the outputs
// poisoned with NaN first so that an element the kernel skips cannot pass.

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"
	"unsafe"

	"github.com/goccl/goccl"
	"github.com/goccl/goccl/device"
	"github.com/goccl/goccl/device/cuda"
	"github.com/goccl/goccl/device/devicetest"
	"github.com/goccl/goccl/kernels"
	"github.com/goccl/goccl/onebit"
	"github.com/goccl/goccl/reduceop"
)

var (
	_ goccl.DeviceBuffer  = (*cuda.Buffer)(nil)
	_ device.Device       = (*cuda.Context)(nil)
	_ device.Slicer       = (*cuda.Buffer)(nil)
	_ device.Stream       = (*cuda.Stream)(nil)
	_ device.Event        = (*cuda.Event)(nil)
	_ device.Host         = (*cuda.Host)(nil)
	_ reduceop.Kernel     = (*cuda.Kernel)(nil)
	_ onebit.Kernel       = (*cuda.Kernel)(nil)
	_ onebit.DeviceKernel = (*cuda.Kernel)(nil)
)

func TestConformance(t *testing.T) {
	c := open(t)
	devicetest.Run(t, c)
	devicetest.RunMisuse(t, c)
}

// newBuffer allocates n elements of dt, freed when t ends.
func newBuffer(t testing.TB, c *cuda.Context, dt reduceop.DType, n int) *cuda.Buffer {
	t.Helper()
	b, err := c.NewBuffer(dt, n)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Free() })
	return b
}

// newStream creates a stream, destroyed when t ends.
func newStream(t testing.TB, c *cuda.Context) *cuda.Stream {
	t.Helper()
	s, err := c.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Destroy() })
	return s.(*cuda.Stream)
}

func drain(t testing.TB, s device.Stream) {
	t.Helper()
	if err := s.Synchronize(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func open(t testing.TB) *cuda.Context {
	t.Helper()
	c, err := cuda.OpenLocal()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// randBytes fills n elements of dt with random values: floats in [-2, 2)
// (so products stay finite), integers over their whole range.
func randBytes(r *rand.Rand, dt reduceop.DType, n int) []byte {
	b := make([]byte, n*dt.Size())
	switch dt {
	case reduceop.Float32:
		s := unsafe.Slice((*float32)(unsafe.Pointer(unsafe.SliceData(b))), n)
		for i := range s {
			s[i] = float32(r.Float64()*4 - 2)
		}
	case reduceop.Float64:
		s := unsafe.Slice((*float64)(unsafe.Pointer(unsafe.SliceData(b))), n)
		for i := range s {
			s[i] = r.Float64()*4 - 2
		}
	case reduceop.Float16:
		s := unsafe.Slice((*reduceop.F16)(unsafe.Pointer(unsafe.SliceData(b))), n)
		for i := range s {
			s[i] = reduceop.F16FromFloat32(float32(r.Float64()*4 - 2))
		}
	case reduceop.BFloat16:
		s := unsafe.Slice((*reduceop.BF16)(unsafe.Pointer(unsafe.SliceData(b))), n)
		for i := range s {
			s[i] = reduceop.BF16FromFloat32(float32(r.Float64()*4 - 2))
		}
	default:
		for i := range b {
			b[i] = byte(r.Uint32())
		}
	}
	return b
}

var sizes = []int{0, 1, 2, 3, 7, 8, 9, 15, 16, 17, 31, 33, 127, 1000, 4099, 65537, 1<<20 + 3}

// TestReduceMatchesApply runs every (dtype, op) on host-staged bytes and on
// device buffers at offsets that break 16-byte alignment, and wants the same
// bits as reduceop.Apply (the kernels do the same IEEE operations in the
// same precision, so equality is exact).
func TestReduceMatchesApply(t *testing.T) {
	c := open(t)
	k := c.Kernel()
	s := newStream(t, c)
	r := rand.New(rand.NewPCG(1, 2))
	ctx := context.Background()
	for _, dt := range reduceop.DTypes {
		for _, op := range reduceop.Ops {
			if device.CheckReduce(op, dt) != nil {
				// No kernel for dt: the device refuses it.
				if err := k.Reduce(dt, op, make([]byte, 4*dt.Size()), make([]byte, 4*dt.Size())); err == nil {
					t.Errorf("Kernel.Reduce(%v, %v): no error, but there is no kernel for %v", dt, op, dt)
				}
				continue
			}
			for _, n := range sizes {
				a, b := randBytes(r, dt, n), randBytes(r, dt, n)
				want := append([]byte(nil), a...)
				if err := reduceop.Apply(dt, op, want, b); err != nil {
					t.Fatal(err)
				}
				got := append([]byte(nil), a...)
				if err := k.Reduce(dt, op, got, b); err != nil {
					t.Fatalf("Reduce(%v, %v, n=%d): %v", dt, op, n, err)
				}
				if string(got) != string(want) {
					t.Errorf("Reduce(%v, %v, n=%d): differs from reduceop.Apply", dt, op, n)
				}
				// Device-resident, at element offset 1 (unaligned path).
				for _, off := range []int{0, 1} {
					if n < off {
						continue
					}
					db, _ := c.NewBuffer(dt, n+1)
					sb, _ := c.NewBuffer(dt, n+1)
					poison := make([]byte, (n+1)*dt.Size())
					for i := range poison {
						poison[i] = 0xff // NaN in every float dtype
					}
					db.CopyFromHost(ctx, 0, poison)
					db.CopyFromHost(ctx, off*dt.Size(), a)
					sb.CopyFromHost(ctx, off*dt.Size(), b)
					if err := s.Reduce(op, db.Slice(off, off+n), 0, sb.Slice(off, off+n), 0, n); err != nil {
						t.Fatal(err)
					}
					drain(t, s)
					out := make([]byte, n*dt.Size())
					db.CopyToHost(ctx, out, off*dt.Size())
					if string(out) != string(want) {
						t.Errorf("Stream.Reduce(%v, %v, n=%d, off=%d): differs from reduceop.Apply", dt, op, n, off)
					}
					db.Free()
					sb.Free()
				}
			}
		}
	}
}

func TestScaleMatchesHost(t *testing.T) {
	k := open(t).Kernel()
	r := rand.New(rand.NewPCG(3, 4))
	for _, dt := range kernels.DTypes { // reduceop.Scale also takes complex, which has no kernel
		for _, div := range []int{1, 2, 3, 7, 1000} {
			for _, n := range sizes {
				a := randBytes(r, dt, n)
				want := append([]byte(nil), a...)
				wantErr := reduceop.Scale(dt, want, div)
				got := append([]byte(nil), a...)
				err := k.Scale(dt, got, div)
				if (err != nil) != (wantErr != nil) {
					t.Fatalf("Scale(%v, n=%d, %d) error %v, host %v", dt, n, div, err, wantErr)
				}
				if string(got) != string(want) {
					t.Errorf("Scale(%v, n=%d, %d): differs from reduceop.Scale", dt, n, div)
				}
			}
		}
	}
}

func randF32(r *rand.Rand, n int) []float32 {
	s := make([]float32, n)
	for i := range s {
		s[i] = float32(r.NormFloat64())
	}
	return s
}

// TestOneBitMatchesHost checks the 1-bit steps against onebit.HostKernel:
// signs and packed bytes bit for bit, errors and unpacked values exactly
// (same float32 operations), the sum of squares to 1e-12 relative (the
// summation order differs), never NaN.
func TestOneBitMatchesHost(t *testing.T) {
	k := open(t).Kernel()
	h := onebit.HostKernel{}
	r := rand.New(rand.NewPCG(5, 6))
	for _, n := range sizes {
		for _, nx := range []int{n, n / 2} {
			e0, x := randF32(r, n), randF32(r, nx)
			eh, ed := append([]float32(nil), e0...), append([]float32(nil), e0...)
			ssh, ssd := h.CompensateNorm(eh, x), k.CompensateNorm(ed, x)
			if math.IsNaN(ssd) || math.Abs(ssd-ssh) > 1e-12*math.Abs(ssh) {
				t.Errorf("CompensateNorm n=%d nx=%d: %v, host %v", n, nx, ssd, ssh)
			}
			if !sameF32(eh, ed) {
				t.Errorf("CompensateNorm n=%d nx=%d: compensated values differ", n, nx)
			}
			scale := float32(math.Sqrt(ssh)) / float32(math.Sqrt(float64(max(n, 1))))
			bh, bd := make([]uint8, (n+7)/8), make([]uint8, (n+7)/8)
			for i := range bd {
				bd[i] = 0xa5 // poison
			}
			h.PackUpdate(bh, eh, scale)
			k.PackUpdate(bd, ed, scale)
			if string(bh) != string(bd) {
				t.Errorf("PackUpdate n=%d: bits differ", n)
			}
			if !sameF32(eh, ed) {
				t.Errorf("PackUpdate n=%d: errors differ", n)
			}
			yh, yd := randF32(r, n), make([]float32, n)
			copy(yd, yh)
			h.AccumulateSigns(yh, bh, scale)
			k.AccumulateSigns(yd, bh, scale)
			if !sameF32(yh, yd) {
				t.Errorf("AccumulateSigns n=%d: differ", n)
			}
			for i := range yd {
				yd[i] = float32(math.NaN())
			}
			h.Decompress(yh, bh, scale)
			k.Decompress(yd, bh, scale)
			if !sameF32(yh, yd) {
				t.Errorf("Decompress n=%d: differ", n)
			}
		}
	}
}

// sameF32 compares bit patterns; NaN never passes.
func sameF32(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.IsNaN(float64(b[i])) || math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false
		}
	}
	return true
}

// BenchmarkReduceDevice measures device-resident float32 sum on a stream,
// 256 MiB per buffer; bytes per op count the 3 passes over the buffer
// (read dst, read src, write dst).
func BenchmarkReduceDevice(b *testing.B) {
	c := open(b)
	const n = 64 << 20
	dst := newBuffer(b, c, reduceop.Float32, n)
	src := newBuffer(b, c, reduceop.Float32, n)
	s := newStream(b, c)
	b.SetBytes(3 * 4 * n)
	for b.Loop() {
		if err := s.Reduce(reduceop.Sum, dst, 0, src, 0, n); err != nil {
			b.Fatal(err)
		}
		drain(b, s)
	}
}

// BenchmarkPackUpdateDevice measures the fused sign pack + error update on
// 256 MiB of float32 (reads and writes err, writes n/8 bytes), the scale
// read from device memory.
func BenchmarkPackUpdateDevice(b *testing.B) {
	c := open(b)
	const n = 64 << 20
	e := newBuffer(b, c, reduceop.Float32, n)
	bits := newBuffer(b, c, reduceop.Uint8, n/8)
	scale := newBuffer(b, c, reduceop.Float32, 1)
	s := newStream(b, c)
	b.SetBytes(2*4*n + n/8)
	for b.Loop() {
		if err := c.Kernel().PackUpdateOn(s, bits, e, scale); err != nil {
			b.Fatal(err)
		}
		drain(b, s)
	}
}
