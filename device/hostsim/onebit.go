package hostsim

import (
	"fmt"
	"math"
	"unsafe"

	"github.com/goccl/goccl/device"
	"github.com/goccl/goccl/onebit"
	"github.com/goccl/goccl/reduceop"
)

// OneBitKernel runs the steps of onebit's compressed allreduce on hostsim
// Buffers, enqueued on a hostsim Stream as kernels: the same methods, with
// the same arguments and checks, as device/cuda's Kernel, computed by
// onebit.HostKernel's loops, so a run on hostsim is bit for bit the host
// algorithm's. The zero value is ready to use. It implements
// onebit.DeviceKernel.
type OneBitKernel struct{}

var _ onebit.DeviceKernel = OneBitKernel{}

// CompensateNormOn enqueues on s, for err and x float32 Buffers (x may be
// shorter than err, or nil), ss a float64 Buffer or nil, and scale a
// float32 Buffer:
//
//	for i := range x { err[i] += x[i] }
//	for i := range err { ss[0] += float64(err[i]) * float64(err[i]) } // ss[0] starts at 0
//	scale[0] = float32(math.Sqrt(ss[0])) / float32(math.Sqrt(float64(len(err))))
//
// With err empty nothing is enqueued.
func (OneBitKernel) CompensateNormOn(s device.Stream, err, x, ss, scale device.Buffer) error {
	const op = "onebit compensate"
	hs, e := stream(op, s)
	if e != nil {
		return e
	}
	eb, e := hs.typed(op, "err", err, reduceop.Float32, 0)
	if e != nil {
		return e
	}
	sc, e := hs.typed(op, "scale", scale, reduceop.Float32, 1)
	if e != nil {
		return e
	}
	var xb, sb *Buffer
	if x != nil {
		if xb, e = hs.typed(op, "x", x, reduceop.Float32, 0); e != nil {
			return e
		}
		if xb.n > eb.n {
			return hs.errorf(op, "x has %d elements, err %d: %w", xb.n, eb.n, ErrRange)
		}
	}
	if ss != nil {
		if sb, e = hs.typed(op, "ss", ss, reduceop.Float64, 1); e != nil {
			return e
		}
	}
	if eb.n == 0 {
		return nil
	}
	return hs.kernel(op, []*Buffer{eb, xb, sb, sc}, func() {
		var xs []float32
		if xb != nil {
			xs = f32(xb)
		}
		sum := onebit.HostKernel{}.CompensateNorm(f32(eb), xs)
		if sb != nil {
			f64(sb)[0] = sum
		}
		f32(sc)[0] = float32(math.Sqrt(sum)) / float32(math.Sqrt(float64(eb.n)))
	})
}

// PackUpdateOn enqueues onebit.Kernel's PackUpdate on s: bits (uint8, at
// least (len(err)+7)/8 bytes, all of which are written), err (float32) and
// the scale in scale[0] (float32).
func (OneBitKernel) PackUpdateOn(s device.Stream, bits, err, scale device.Buffer) error {
	const op = "onebit pack"
	hs, eb, bb, sc, e := oneBitArgs(op, s, err, "err", bits, scale)
	if e != nil || eb.n == 0 {
		return e
	}
	return hs.kernel(op, []*Buffer{bb, eb, sc}, func() {
		nb := onebit.PackedLen(eb.n)
		clear(bb.mem[:nb])
		onebit.HostKernel{}.PackUpdate(bb.mem[:nb], f32(eb), f32(sc)[0])
	})
}

// AccumulateSignsOn enqueues onebit.Kernel's AccumulateSigns on s: dst
// (float32), bits (uint8) and the scale in scale[0] (float32).
func (OneBitKernel) AccumulateSignsOn(s device.Stream, dst, bits, scale device.Buffer) error {
	return unpackOn("onebit accumulate signs", s, dst, bits, scale, onebit.HostKernel{}.AccumulateSigns)
}

// DecompressOn enqueues onebit.Kernel's Decompress on s: dst (float32),
// bits (uint8) and the scale in scale[0] (float32).
func (OneBitKernel) DecompressOn(s device.Stream, dst, bits, scale device.Buffer) error {
	return unpackOn("onebit decompress", s, dst, bits, scale, onebit.HostKernel{}.Decompress)
}

// unpackOn enqueues step, one of HostKernel's unpacking loops, on dst from
// bits with the scale in scale[0].
func unpackOn(op string, s device.Stream, dst, bits, scale device.Buffer, step func([]float32, []uint8, float32)) error {
	hs, db, bb, sc, e := oneBitArgs(op, s, dst, "dst", bits, scale)
	if e != nil || db.n == 0 {
		return e
	}
	return hs.kernel(op, []*Buffer{db, bb, sc}, func() { step(f32(db), bb.mem, f32(sc)[0]) })
}

// oneBitArgs checks the arguments shared by the packing and unpacking
// steps: a float32 Buffer, a uint8 Buffer of at least one bit per element
// and a float32 scale.
func oneBitArgs(op string, s device.Stream, f device.Buffer, fname string, bits, scale device.Buffer) (*Stream, *Buffer, *Buffer, *Buffer, error) {
	hs, err := stream(op, s)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	fb, err := hs.typed(op, fname, f, reduceop.Float32, 0)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	bb, err := hs.typed(op, "bits", bits, reduceop.Uint8, onebit.PackedLen(fb.n))
	if err != nil {
		return nil, nil, nil, nil, err
	}
	sc, err := hs.typed(op, "scale", scale, reduceop.Float32, 1)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	return hs, fb, bb, sc, nil
}

// stream returns s as a hostsim Stream.
func stream(op string, s device.Stream) (*Stream, error) {
	hs, ok := s.(*Stream)
	if !ok || hs == nil {
		return nil, fmt.Errorf("hostsim: %s: stream %T: %w", op, s, ErrForeign)
	}
	return hs, nil
}

// typed returns b as this stream's device's Buffer of dtype dt with at
// least min elements.
func (s *Stream) typed(op, name string, b device.Buffer, dt reduceop.DType, min int) (*Buffer, error) {
	hb, err := s.buffer(op, name, b)
	if err != nil {
		return nil, err
	}
	if hb.dt != dt {
		return nil, s.errorf(op, "%s is %v, want %v", name, hb.dt, dt)
	}
	if hb.n < min {
		return nil, s.errorf(op, "%s has %d elements, want at least %d: %w", name, hb.n, min, ErrRange)
	}
	return hb, nil
}

// kernel enqueues run as a kernel that reads and writes bs (nil entries
// are left out of the freed check).
func (s *Stream) kernel(op string, bs []*Buffer, run func()) error {
	used := bs[:0:0]
	for _, b := range bs {
		if b != nil {
			used = append(used, b)
		}
	}
	return s.enqueue(op, &work{kind: KindLaunch, name: op, delay: s.d.lat.Kernel, check: freedCheck(used, nil), run: run})
}

// f32 and f64 view a Buffer's memory as its elements. Alloc aligns to 16
// bytes and Wrap and Slice keep element alignment.
func f32(b *Buffer) []float32 {
	if b.n == 0 {
		return nil
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(&b.mem[0])), b.n)
}

func f64(b *Buffer) []float64 {
	if b.n == 0 {
		return nil
	}
	return unsafe.Slice((*float64)(unsafe.Pointer(&b.mem[0])), b.n)
}
