//go:build cuda

package cuda

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"unsafe"

	"gorgonia.org/cu"

	"github.com/goccl/goccl/device"

	"github.com/goccl/goccl/kernels"
	"github.com/goccl/goccl/reduceop"
)

// Kernel runs goccl's kernels on a Context. On host slices it implements
// reduceop.Kernel and onebit.Kernel by staging them through device memory
// on a stream of its own (copy in, launch, copy back, then wait for an
// event recorded after the last copy); those calls are serialized. The
// 1-bit steps on device Buffers (the methods ending in On) enqueue on the
// caller's Stream and never wait; for reductions on device Buffers use
// Stream.Reduce and Stream.Scale.
type Kernel struct {
	c  *Context
	mu sync.Mutex // serializes the host-slice methods; guards the fields below

	s    *Stream      // the staging stream, made on first use
	done *Event       // recorded after each staged call's last copy
	a, b cu.DevicePtr // staging buffers of nb bytes each
	nb   int
	one  cu.DevicePtr // 16 bytes: the 1-bit sum of squares (float64), then scale (float32)
}

var _ reduceop.Kernel = (*Kernel)(nil)

// Kernel returns the context's Kernel.
func (c *Context) Kernel() *Kernel { return c.kernel }

// staged runs enqueue, which enqueues a staged call on k.s with staging
// buffers of at least nb bytes, then records k.done and waits for it. Call
// with k.mu held.
func (k *Kernel) staged(op string, nb int, enqueue func() error) error {
	if k.s == nil {
		s, err := k.c.newStream()
		if err != nil {
			return err
		}
		e, err := k.c.newEvent()
		if err != nil {
			s.Destroy()
			return err
		}
		k.s, k.done = s, e
	}
	err := k.c.do(op, func() error {
		if err := k.stage(nb); err != nil {
			return err
		}
		if err := enqueue(); err != nil {
			return err
		}
		return k.done.e.Record(k.s.s)
	})
	if err != nil {
		return err
	}
	return k.done.Wait(context.Background())
}

// stage makes sure the staging buffers hold n bytes each and the 1-bit
// scalars exist. Call inside do with k.mu held.
func (k *Kernel) stage(n int) error {
	if k.one == 0 {
		p, err := cu.MemAlloc(16)
		if err != nil {
			return err
		}
		k.one = p
	}
	if n <= k.nb {
		return nil
	}
	if k.nb > 0 {
		// The previous call's work has completed (staged waits for it).
		cu.MemFree(k.a)
		cu.MemFree(k.b)
		k.nb = 0
	}
	var err error
	if k.a, err = cu.MemAlloc(int64(n)); err != nil {
		return err
	}
	if k.b, err = cu.MemAlloc(int64(n)); err != nil {
		cu.MemFree(k.a)
		return err
	}
	k.nb = n
	return nil
}

// free releases the staging state. Close calls it inside onThread after the
// device has finished.
func (k *Kernel) free() error {
	var errs []error
	if k.nb > 0 {
		errs = append(errs, cu.MemFree(k.a), cu.MemFree(k.b))
		k.nb = 0
	}
	if k.one != 0 {
		errs = append(errs, cu.MemFree(k.one))
		k.one = 0
	}
	if k.s != nil {
		if k.s.scratch != 0 {
			errs = append(errs, cu.MemFree(k.s.scratch))
		}
		errs = append(errs, k.s.s.Destroy(), cu.DestroyEvent(&k.done.e))
		k.s, k.done = nil, nil
	}
	return errors.Join(errs...)
}

func checkBytes(op string, dt reduceop.DType, dst, src []byte) error {
	if len(dst) != len(src) {
		return invalid(op, "%v: dst has %d bytes, src has %d", dt, len(dst), len(src))
	}
	if len(dst)%dt.Size() != 0 {
		return invalid(op, "%v: %d bytes is not a whole number of elements", dt, len(dst))
	}
	return nil
}

// Reduce computes dst[i] = dst[i] op src[i] over the elements of dt in the
// host buffers dst and src, on the device, with the same results as
// reduceop.Apply:
//
//	for i := range n { dst[i] = op(dst[i], src[i]) }
func (k *Kernel) Reduce(dt reduceop.DType, op reduceop.Op, dst, src []byte) error {
	name, err := kernels.ReduceKernelName(dt, op)
	if err != nil {
		return err
	}
	if err := checkBytes("reduce", dt, dst, src); err != nil || len(dst) == 0 {
		return err
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	n := len(dst) / dt.Size()
	return k.staged("reduce", len(dst), func() error {
		s := k.s.s
		if err := cu.MemcpyHtoDAsync(k.a, unsafe.Pointer(&dst[0]), int64(len(dst)), s); err != nil {
			return err
		}
		if err := cu.MemcpyHtoDAsync(k.b, unsafe.Pointer(&src[0]), int64(len(src)), s); err != nil {
			return err
		}
		if err := k.c.launch(s, name, vectors(dt, n), uint64(k.a), uint64(k.b), uint64(n)); err != nil {
			return err
		}
		return cu.MemcpyDtoHAsync(unsafe.Pointer(&dst[0]), k.a, int64(len(dst)), s)
	})
}

// Scale divides every element of dt in the host buffer dst by n, the last
// step of Avg, as reduceop.Scale does:
//
//	for i := range dst { dst[i] = T(C(dst[i]) / C(n)) } // C: float32, or float64 for float64
func (k *Kernel) Scale(dt reduceop.DType, dst []byte, n int) error {
	name, err := kernels.ScaleKernelName(dt)
	if err != nil {
		return err
	}
	if err := checkDivisor("scale", dt, n); err != nil {
		return err
	}
	if len(dst)%dt.Size() != 0 {
		return invalid("scale", "%v: %d bytes is not a whole number of elements", dt, len(dst))
	}
	if len(dst) == 0 || n == 1 {
		return nil
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	count := len(dst) / dt.Size()
	return k.staged("scale", len(dst), func() error {
		s := k.s.s
		if err := cu.MemcpyHtoDAsync(k.a, unsafe.Pointer(&dst[0]), int64(len(dst)), s); err != nil {
			return err
		}
		if err := k.c.launch(s, name, vectors(dt, count), uint64(k.a), uint64(count), uint64(n)); err != nil {
			return err
		}
		return cu.MemcpyDtoHAsync(unsafe.Pointer(&dst[0]), k.a, int64(len(dst)), s)
	})
}

// vectors returns the number of 16-byte vectors (plus one for a tail) that n
// elements of dt span: the work items of the elementwise kernels.
func vectors(dt reduceop.DType, n int) int {
	return (n*dt.Size() + 15) / 16
}

// stream returns x as a Stream of c, or an error wrapping ErrInvalid.
func (c *Context) stream(op string, x device.Stream) (*Stream, error) {
	s, ok := x.(*Stream)
	switch {
	case x == nil || (ok && s == nil):
		return nil, invalid(op, "stream is nil")
	case !ok:
		return nil, invalid(op, "stream is a %T, not a stream of %v", x, c)
	case s.c.cuctx != c.cuctx:
		return nil, invalid(op, "stream of CUDA context %#x, not %#x (%v)", s.c.Handle(), c.Handle(), c)
	}
	return s, nil
}

func must(op string, err error) {
	if err != nil {
		panic(fmt.Sprintf("goccl: cuda: onebit %s: %v", op, err))
	}
}
