//go:build cuda

package cuda

import (
	"unsafe"

	"gorgonia.org/cu"

	"github.com/goccl/goccl/device"

	"github.com/goccl/goccl/kernels"
	"github.com/goccl/goccl/reduceop"
)

// The 1-bit steps. The methods on host slices (CompensateNorm, PackUpdate,
// AccumulateSigns, Decompress) are those of onebit.Kernel, with its doc
// comments' loops as their contract; like that interface they return no
// error, so they panic if the device fails. The methods ending in On work
// on device-resident Buffers, enqueued on a Stream: the scale stays on the
// device, in a float32 Buffer that CompensateNormOn writes and the other
// steps read, so a whole compression runs without the host:
//
//	k.CompensateNormOn(s, errBuf, grad, nil, scale) // errBuf += grad; scale = rms(errBuf)
//	k.PackUpdateOn(s, bits, errBuf, scale)          // bits = signs; errBuf -= ±scale
//	... exchange bits and scale ...
//	k.AccumulateSignsOn(s, out, bits, scale)        // out += ±scale

// scratchMem returns the stream's 1-bit scratch memory: the partial sums of
// CompensateNormOn's first kernel, one float64 per block of the largest
// grid it launches, then one float64 for a sum of squares nobody asked for.
// Work on one stream runs in order, so one scratch per stream suffices.
// Call inside do.
func (s *Stream) scratchMem() (partials, ss cu.DevicePtr, err error) {
	parts := s.c.maxParts()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.scratch == 0 {
		if s.scratch, err = cu.MemAlloc(int64(8*parts + 8)); err != nil {
			return 0, 0, err
		}
	}
	return s.scratch, s.scratch + cu.DevicePtr(8*parts), nil
}

// maxParts is the largest grid CompensateNorm's first kernel is launched
// with.
func (c *Context) maxParts() int {
	return gridSize(1<<62, c.sms, c.active[kernels.OneBitCompensateSumSq])
}

// compensateNorm enqueues on s: err[:nx] += x[:nx], *ss = sum(err[:n]^2),
// *scale = float32(sqrt(*ss)) / float32(sqrt(n)); ss 0 means the stream's
// scratch. n > 0. Call inside do.
func (c *Context) compensateNorm(s *Stream, err, x cu.DevicePtr, nx, n int, ss, scale cu.DevicePtr) error {
	partials, scratchSS, e := s.scratchMem()
	if e != nil {
		return e
	}
	if ss == 0 {
		ss = scratchSS
	}
	g := c.grid(kernels.OneBitCompensateSumSq, (n+3)/4)
	if e := c.launchGrid(s.s, kernels.OneBitCompensateSumSq, g, uint64(err), uint64(x), uint64(nx), uint64(n), uint64(partials)); e != nil {
		return e
	}
	return c.launchGrid(s.s, kernels.OneBitFinish, 1, uint64(partials), uint64(g), uint64(n), uint64(ss), uint64(scale))
}

// CompensateNorm adds x into err and returns the sum of squares of err:
//
//	for i := range x { err[i] += x[i] }
//	for i := range err { ss += float64(err[i]) * float64(err[i]) }
//	return ss
func (k *Kernel) CompensateNorm(err, x []float32) float64 {
	if len(x) > len(err) {
		panic("goccl: cuda: CompensateNorm: x longer than err")
	}
	if len(err) == 0 {
		return 0
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	var ss float64
	nb := 4 * len(err)
	must("compensate", k.staged("onebit compensate", nb, func() error {
		s := k.s.s
		if e := cu.MemcpyHtoDAsync(k.a, unsafe.Pointer(&err[0]), int64(nb), s); e != nil {
			return e
		}
		if len(x) > 0 {
			if e := cu.MemcpyHtoDAsync(k.b, unsafe.Pointer(&x[0]), int64(4*len(x)), s); e != nil {
				return e
			}
		}
		if e := k.c.compensateNorm(k.s, k.a, k.b, len(x), len(err), k.one, k.one+8); e != nil {
			return e
		}
		if e := cu.MemcpyDtoHAsync(unsafe.Pointer(&err[0]), k.a, int64(nb), s); e != nil {
			return e
		}
		return cu.MemcpyDtoHAsync(unsafe.Pointer(&ss), k.one, 8, s)
	}))
	return ss
}

// PackUpdate packs the signs of err into bits, most significant bit first,
// and subtracts scale*(±1) from err:
//
//	for i := range err {
//		if !(err[i] < 0) { bits[i/8] |= 1 << (7 - i%8); err[i] -= scale } else { err[i] -= -scale }
//	}
func (k *Kernel) PackUpdate(bits []uint8, err []float32, scale float32) {
	nb := (len(err) + 7) / 8
	if len(bits) < nb {
		panic("goccl: cuda: PackUpdate: bits too short")
	}
	if len(err) == 0 {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	must("pack", k.staged("onebit pack", 4*len(err), func() error {
		s := k.s.s
		if e := cu.MemcpyHtoDAsync(k.one+8, unsafe.Pointer(&scale), 4, s); e != nil {
			return e
		}
		if e := cu.MemcpyHtoDAsync(k.a, unsafe.Pointer(&err[0]), int64(4*len(err)), s); e != nil {
			return e
		}
		if e := k.c.launch(s, kernels.OneBitPackUpdate, nb, uint64(k.b), uint64(k.a), uint64(len(err)), uint64(k.one+8)); e != nil {
			return e
		}
		if e := cu.MemcpyDtoHAsync(unsafe.Pointer(&err[0]), k.a, int64(4*len(err)), s); e != nil {
			return e
		}
		return cu.MemcpyDtoHAsync(unsafe.Pointer(&bits[0]), k.b, int64(nb), s)
	}))
}

// AccumulateSigns adds ±scale into dst from the packed bits:
//
//	for i := range dst { if bits[i/8]>>(7-i%8)&1 == 1 { dst[i] += scale } else { dst[i] += -scale } }
func (k *Kernel) AccumulateSigns(dst []float32, bits []uint8, scale float32) {
	k.unpackHost("accumulate signs", kernels.OneBitAccumulateSigns, dst, bits, scale, true)
}

// Decompress writes ±scale into dst from the packed bits:
//
//	for i := range dst { if bits[i/8]>>(7-i%8)&1 == 1 { dst[i] = scale } else { dst[i] = -scale } }
func (k *Kernel) Decompress(dst []float32, bits []uint8, scale float32) {
	k.unpackHost("decompress", kernels.OneBitDecompress, dst, bits, scale, false)
}

func (k *Kernel) unpackHost(op, name string, dst []float32, bits []uint8, scale float32, load bool) {
	nb := (len(dst) + 7) / 8
	if len(bits) < nb {
		panic("goccl: cuda: " + op + ": bits too short")
	}
	if len(dst) == 0 {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	must(op, k.staged("onebit "+op, 4*len(dst), func() error {
		s := k.s.s
		if e := cu.MemcpyHtoDAsync(k.one+8, unsafe.Pointer(&scale), 4, s); e != nil {
			return e
		}
		if load {
			if e := cu.MemcpyHtoDAsync(k.a, unsafe.Pointer(&dst[0]), int64(4*len(dst)), s); e != nil {
				return e
			}
		}
		if e := cu.MemcpyHtoDAsync(k.b, unsafe.Pointer(&bits[0]), int64(nb), s); e != nil {
			return e
		}
		if e := k.c.launch(s, name, nb, uint64(k.a), uint64(k.b), uint64(len(dst)), uint64(k.one+8)); e != nil {
			return e
		}
		return cu.MemcpyDtoHAsync(unsafe.Pointer(&dst[0]), k.a, int64(4*len(dst)), s)
	}))
}

// oneBit is the checked arguments of a 1-bit step on a stream.
type oneBit struct {
	s                *Stream
	f32, bits, scale *Buffer
}

// oneBitArgs checks the arguments of a 1-bit step on a stream: s a stream
// of k's context, f32 a float32 Buffer of it, bits (when wantBits) a uint8
// Buffer of it with a bit for each element of f32, and scale a float32
// Buffer of it with at least one element (the scale is element 0).
func (k *Kernel) oneBitArgs(op string, s device.Stream, f32 device.Buffer, what string, bits device.Buffer, wantBits bool, scale device.Buffer) (a oneBit, err error) {
	c := k.c
	if a.s, err = c.stream(op, s); err != nil {
		return a, err
	}
	if a.f32, err = c.buffer(op, what, f32); err != nil {
		return a, err
	}
	bitsDT, bitsLen := reduceop.Uint8, -1
	if wantBits {
		if a.bits, err = c.buffer(op, "bits", bits); err != nil {
			return a, err
		}
		bitsDT, bitsLen = a.bits.dt, a.bits.n
	}
	if err := checkOneBit(op, what, a.f32.dt, bitsDT, bitsLen, a.f32.n); err != nil {
		return a, err
	}
	if a.scale, err = c.buffer(op, "scale", scale); err != nil {
		return a, err
	}
	if a.scale.dt != reduceop.Float32 || a.scale.n < 1 {
		return a, invalid(op, "scale is %d x %v, want at least 1 x float32", a.scale.n, a.scale.dt)
	}
	return a, nil
}

// CompensateNormOn enqueues on s, for err and x float32 Buffers (x may be
// shorter than err, or absent: nil), ss a float64 Buffer or nil, and scale
// a float32 Buffer:
//
//	for i := range x { err[i] += x[i] }
//	for i := range err { ss[0] += float64(err[i]) * float64(err[i]) } // ss[0] starts at 0
//	scale[0] = float32(math.Sqrt(ss[0])) / float32(math.Sqrt(float64(len(err))))
//
// With err empty nothing is enqueued.
func (k *Kernel) CompensateNormOn(s device.Stream, err, x, ss, scale device.Buffer) error {
	const op = "onebit compensate"
	a, e := k.oneBitArgs(op, s, err, "err", nil, false, scale)
	if e != nil {
		return e
	}
	var xp cu.DevicePtr
	nx := 0
	if !absent(x) {
		xb, e := k.c.buffer(op, "x", x)
		if e != nil {
			return e
		}
		if e := checkOneBit(op, "x", xb.dt, 0, -1, xb.n); e != nil {
			return e
		}
		if xb.n > a.f32.n {
			return invalid(op, "x has %d elements, err %d", xb.n, a.f32.n)
		}
		xp, nx = xb.ptr, xb.n
	}
	var ssp cu.DevicePtr
	if !absent(ss) {
		sb, e := k.c.buffer(op, "ss", ss)
		if e != nil {
			return e
		}
		if sb.dt != reduceop.Float64 || sb.n < 1 {
			return invalid(op, "ss is %d x %v, want at least 1 x float64", sb.n, sb.dt)
		}
		ssp = sb.ptr
	}
	if a.f32.n == 0 {
		return nil
	}
	return a.s.enqueue(op, func() error {
		return k.c.compensateNorm(a.s, a.f32.ptr, xp, nx, a.f32.n, ssp, a.scale.ptr)
	})
}

// absent reports whether an optional Buffer argument is left out: nil, or
// a nil *Buffer.
func absent(x device.Buffer) bool {
	b, ok := x.(*Buffer)
	return x == nil || (ok && b == nil)
}

// PackUpdateOn enqueues PackUpdate on s for device Buffers: bits (uint8,
// at least (len(err)+7)/8 bytes, all of which are written), err (float32)
// and the scale in scale[0] (float32).
func (k *Kernel) PackUpdateOn(s device.Stream, bits, err, scale device.Buffer) error {
	const op = "onebit pack"
	a, e := k.oneBitArgs(op, s, err, "err", bits, true, scale)
	if e != nil || a.f32.n == 0 {
		return e
	}
	n := a.f32.n
	return a.s.enqueue(op, func() error {
		return k.c.launch(a.s.s, kernels.OneBitPackUpdate, (n+7)/8, uint64(a.bits.ptr), uint64(a.f32.ptr), uint64(n), uint64(a.scale.ptr))
	})
}

// AccumulateSignsOn enqueues AccumulateSigns on s for device Buffers: dst
// (float32), bits (uint8) and the scale in scale[0] (float32).
func (k *Kernel) AccumulateSignsOn(s device.Stream, dst, bits, scale device.Buffer) error {
	return k.unpackOn("onebit accumulate signs", kernels.OneBitAccumulateSigns, s, dst, bits, scale)
}

// DecompressOn enqueues Decompress on s for device Buffers: dst (float32),
// bits (uint8) and the scale in scale[0] (float32).
func (k *Kernel) DecompressOn(s device.Stream, dst, bits, scale device.Buffer) error {
	return k.unpackOn("onebit decompress", kernels.OneBitDecompress, s, dst, bits, scale)
}

func (k *Kernel) unpackOn(op, name string, s device.Stream, dst, bits, scale device.Buffer) error {
	a, e := k.oneBitArgs(op, s, dst, "dst", bits, true, scale)
	if e != nil || a.f32.n == 0 {
		return e
	}
	n := a.f32.n
	return a.s.enqueue(op, func() error {
		return k.c.launch(a.s.s, name, (n+7)/8, uint64(a.f32.ptr), uint64(a.bits.ptr), uint64(n), uint64(a.scale.ptr))
	})
}
