//go:build cuda

package cuda

import (
	"fmt"
	"unsafe"

	"gorgonia.org/cu"

	"github.com/goccl/goccl/kernels"
	"github.com/goccl/goccl/reduceop"
)

// The 1-bit steps. The methods on host slices (CompensateNorm, PackUpdate,
// AccumulateSigns, Decompress) are those of onebit.Kernel, with its doc
// comments' loops as their contract; like that interface they return no
// error, so they panic if the device fails. The *Device variants work on
// device-resident float32 (and uint8 for bits) Buffers and return errors.

// scratch addresses: g float64 partials, the float64 sum of squares, the
// float32 scale.
func (c *Context) partials() cu.DevicePtr { return c.scratch }
func (c *Context) ssPtr() cu.DevicePtr    { return c.scratch + cu.DevicePtr(8*c.maxGrid) }
func (c *Context) scalePtr() cu.DevicePtr { return c.scratch + cu.DevicePtr(8*c.maxGrid+8) }

// compensateNorm runs err[:nx] += x[:nx] and returns sum(err[:n]^2). Call
// inside do with k.mu held.
func (k *Kernel) compensateNorm(err, x cu.DevicePtr, nx, n int) (float64, error) {
	c := k.c
	g := c.grid((n + 3) / 4)
	if e := c.launch(cu.Stream{}, kernels.OneBitCompensateSumSq, g, uint64(err), uint64(x), uint64(nx), uint64(n), uint64(c.partials())); e != nil {
		return 0, e
	}
	if e := c.launch(cu.Stream{}, kernels.OneBitFinish, 1, uint64(c.partials()), uint64(g), uint64(n), uint64(c.ssPtr()), uint64(c.scalePtr())); e != nil {
		return 0, e
	}
	var ss float64
	e := cu.MemcpyDtoH(unsafe.Pointer(&ss), c.ssPtr(), 8)
	return ss, e
}

// signs launches one of the kernels taking (dst-ish, bits, n, scale) after
// storing scale on the device. Call inside do with k.mu held.
func (k *Kernel) signs(name string, first, second cu.DevicePtr, n int, scale float32) error {
	if err := cu.MemcpyHtoD(k.c.scalePtr(), unsafe.Pointer(&scale), 4); err != nil {
		return err
	}
	return k.c.launch(cu.Stream{}, name, k.c.grid((n+7)/8), uint64(first), uint64(second), uint64(n), uint64(k.c.scalePtr()))
}

func must(op string, err error) {
	if err != nil {
		panic(fmt.Sprintf("goccl: cuda: onebit %s: %v", op, err))
	}
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
	must("compensate", k.c.do("onebit compensate", func() error {
		nb := 4 * len(err)
		if e := k.stage(nb); e != nil {
			return e
		}
		if e := cu.MemcpyHtoD(k.a, unsafe.Pointer(&err[0]), int64(nb)); e != nil {
			return e
		}
		if len(x) > 0 {
			if e := cu.MemcpyHtoD(k.b, unsafe.Pointer(&x[0]), int64(4*len(x))); e != nil {
				return e
			}
		}
		var e error
		if ss, e = k.compensateNorm(k.a, k.b, len(x), len(err)); e != nil {
			return e
		}
		return cu.MemcpyDtoH(unsafe.Pointer(&err[0]), k.a, int64(nb))
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
	must("pack", k.c.do("onebit pack", func() error {
		if e := k.stage(4 * len(err)); e != nil {
			return e
		}
		if e := cu.MemcpyHtoD(k.a, unsafe.Pointer(&err[0]), int64(4*len(err))); e != nil {
			return e
		}
		if e := k.signs(kernels.OneBitPackUpdate, k.b, k.a, len(err), scale); e != nil {
			return e
		}
		if e := cu.MemcpyDtoH(unsafe.Pointer(&err[0]), k.a, int64(4*len(err))); e != nil {
			return e
		}
		return cu.MemcpyDtoH(unsafe.Pointer(&bits[0]), k.b, int64(nb))
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
	must(op, k.c.do("onebit "+op, func() error {
		if e := k.stage(4 * len(dst)); e != nil {
			return e
		}
		if load {
			if e := cu.MemcpyHtoD(k.a, unsafe.Pointer(&dst[0]), int64(4*len(dst))); e != nil {
				return e
			}
		}
		if e := cu.MemcpyHtoD(k.b, unsafe.Pointer(&bits[0]), int64(nb)); e != nil {
			return e
		}
		if e := k.signs(name, k.a, k.b, len(dst), scale); e != nil {
			return e
		}
		return cu.MemcpyDtoH(unsafe.Pointer(&dst[0]), k.a, int64(4*len(dst)))
	}))
}

func checkOneBit(op string, f32 *Buffer, bits *Buffer) error {
	if f32.dt != reduceop.Float32 {
		return fmt.Errorf("goccl: cuda: onebit %s: buffer is %v, want float32", op, f32.dt)
	}
	if bits != nil && (bits.dt != reduceop.Uint8 || bits.n < (f32.n+7)/8) {
		return fmt.Errorf("goccl: cuda: onebit %s: bits is %d x %v, want at least %d x uint8", op, bits.n, bits.dt, (f32.n+7)/8)
	}
	return nil
}

// CompensateNormDevice is CompensateNorm on device buffers (x may be shorter
// than err, or nil).
func (k *Kernel) CompensateNormDevice(err, x *Buffer) (float64, error) {
	if e := checkOneBit("compensate", err, nil); e != nil {
		return 0, e
	}
	var xp cu.DevicePtr
	nx := 0
	if x != nil {
		if e := checkOneBit("compensate", x, nil); e != nil {
			return 0, e
		}
		if x.n > err.n {
			return 0, fmt.Errorf("goccl: cuda: onebit compensate: x has %d elements, err %d", x.n, err.n)
		}
		xp, nx = x.ptr, x.n
	}
	if err.n == 0 {
		return 0, nil
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	var ss float64
	e := k.c.do("onebit compensate", func() (e error) {
		ss, e = k.compensateNorm(err.ptr, xp, nx, err.n)
		return e
	})
	return ss, e
}

// PackUpdateDevice is PackUpdate on device buffers.
func (k *Kernel) PackUpdateDevice(bits, err *Buffer, scale float32) error {
	return k.signsDevice("pack", kernels.OneBitPackUpdate, bits, err, scale, true)
}

// AccumulateSignsDevice is AccumulateSigns on device buffers.
func (k *Kernel) AccumulateSignsDevice(dst, bits *Buffer, scale float32) error {
	return k.signsDevice("accumulate signs", kernels.OneBitAccumulateSigns, bits, dst, scale, false)
}

// DecompressDevice is Decompress on device buffers.
func (k *Kernel) DecompressDevice(dst, bits *Buffer, scale float32) error {
	return k.signsDevice("decompress", kernels.OneBitDecompress, bits, dst, scale, false)
}

func (k *Kernel) signsDevice(op, name string, bits, f32 *Buffer, scale float32, bitsFirst bool) error {
	if e := checkOneBit(op, f32, bits); e != nil {
		return e
	}
	if f32.n == 0 {
		return nil
	}
	first, second := f32.ptr, bits.ptr
	if bitsFirst {
		first, second = bits.ptr, f32.ptr
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.c.do("onebit "+op, func() error {
		if e := k.signs(name, first, second, f32.n, scale); e != nil {
			return e
		}
		return cu.Synchronize()
	})
}
