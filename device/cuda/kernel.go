//go:build cuda

package cuda

import (
	"fmt"
	"math"
	"sync"
	"unsafe"

	"gorgonia.org/cu"

	"github.com/goccl/goccl/kernels"
	"github.com/goccl/goccl/reduceop"
)

// Kernel runs goccl's kernels on a Context. It implements reduceop.Kernel on
// host bytes by staging them through device memory (copy in, launch, copy
// back), and offers the same operations on device-resident Buffers, which is
// where it pays. It also has the methods of onebit.Kernel. It is safe for
// concurrent use; calls are serialized.
type Kernel struct {
	c  *Context
	mu sync.Mutex // guards the staging buffers
	a  cu.DevicePtr
	b  cu.DevicePtr
	nb int // bytes in each of a and b
}

var _ reduceop.Kernel = (*Kernel)(nil)

// Kernel returns the context's Kernel.
func (c *Context) Kernel() *Kernel { return c.kernel }

// stage makes sure the staging buffers hold n bytes each. Call inside do with
// k.mu held.
func (k *Kernel) stage(n int) error {
	if n <= k.nb {
		return nil
	}
	if k.nb > 0 {
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

func checkBytes(op string, dt reduceop.DType, dst, src []byte) error {
	if len(dst) != len(src) {
		return fmt.Errorf("goccl: cuda: %s %v: dst has %d bytes, src has %d", op, dt, len(dst), len(src))
	}
	if len(dst)%dt.Size() != 0 {
		return fmt.Errorf("goccl: cuda: %s %v: %d bytes is not a whole number of elements", op, dt, len(dst))
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
	return k.c.do("reduce", func() error {
		if err := k.stage(len(dst)); err != nil {
			return err
		}
		if err := cu.MemcpyHtoD(k.a, unsafe.Pointer(&dst[0]), int64(len(dst))); err != nil {
			return err
		}
		if err := cu.MemcpyHtoD(k.b, unsafe.Pointer(&src[0]), int64(len(src))); err != nil {
			return err
		}
		if err := k.c.launch(cu.Stream{}, name, k.c.grid(vectors(dt, n)), uint64(k.a), uint64(k.b), uint64(n)); err != nil {
			return err
		}
		return cu.MemcpyDtoH(unsafe.Pointer(&dst[0]), k.a, int64(len(dst)))
	})
}

// Scale divides every element of dt in the host buffer dst by n, the last
// step of Avg, as reduceop.Scale does:
//
//	for i := range dst { dst[i] = T(C(dst[i]) / C(n)) } // C: float32, or float64 for float64
func (k *Kernel) Scale(dt reduceop.DType, dst []byte, n int) error {
	name, err := scaleCheck(dt, len(dst), n)
	if err != nil || name == "" {
		return err
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	count := len(dst) / dt.Size()
	return k.c.do("scale", func() error {
		if err := k.stage(len(dst)); err != nil {
			return err
		}
		if err := cu.MemcpyHtoD(k.a, unsafe.Pointer(&dst[0]), int64(len(dst))); err != nil {
			return err
		}
		if err := k.c.launch(cu.Stream{}, name, k.c.grid(vectors(dt, count)), uint64(k.a), uint64(count), uint64(n)); err != nil {
			return err
		}
		return cu.MemcpyDtoH(unsafe.Pointer(&dst[0]), k.a, int64(len(dst)))
	})
}

// scaleCheck validates Scale's arguments as reduceop.Scale does; it returns
// "" and no error when there is nothing to do.
func scaleCheck(dt reduceop.DType, nbytes, n int) (string, error) {
	name, err := kernels.ScaleKernelName(dt)
	if err != nil {
		return "", err
	}
	if n <= 0 || n > math.MaxUint32 {
		return "", fmt.Errorf("goccl: cuda: scale %v by %d: divisor out of range", dt, n)
	}
	if nbytes%dt.Size() != 0 {
		return "", fmt.Errorf("goccl: cuda: scale %v: %d bytes is not a whole number of elements", dt, nbytes)
	}
	if nbytes == 0 || n == 1 {
		return "", nil
	}
	return name, nil
}

// vectors returns the number of 16-byte vectors (plus one for a tail) that n
// elements of dt span: the work items of the elementwise kernels.
func vectors(dt reduceop.DType, n int) int {
	return (n*dt.Size() + 15) / 16
}

// ReduceDevice computes dst[i] = dst[i] op src[i] on device buffers of the
// same dtype and length, on the null stream, and waits for it.
func (k *Kernel) ReduceDevice(op reduceop.Op, dst, src *Buffer) error {
	if dst.dt != src.dt || dst.n != src.n {
		return fmt.Errorf("goccl: cuda: reduce: dst is %d x %v, src is %d x %v", dst.n, dst.dt, src.n, src.dt)
	}
	name, err := kernels.ReduceKernelName(dst.dt, op)
	if err != nil || dst.n == 0 {
		return err
	}
	return k.c.do("reduce", func() error {
		if err := k.c.launch(cu.Stream{}, name, k.c.grid(vectors(dst.dt, dst.n)), uint64(dst.ptr), uint64(src.ptr), uint64(dst.n)); err != nil {
			return err
		}
		return cu.Synchronize()
	})
}

// ScaleDevice divides every element of a device buffer by n, and waits.
func (k *Kernel) ScaleDevice(x *Buffer, n int) error {
	name, err := scaleCheck(x.dt, x.n*x.dt.Size(), n)
	if err != nil || name == "" {
		return err
	}
	return k.c.do("scale", func() error {
		if err := k.c.launch(cu.Stream{}, name, k.c.grid(vectors(x.dt, x.n)), uint64(x.ptr), uint64(x.n), uint64(n)); err != nil {
			return err
		}
		return cu.Synchronize()
	})
}
