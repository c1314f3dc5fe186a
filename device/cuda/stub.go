//go:build !cuda

package cuda

import (
	"context"
	"errors"
	"time"

	"github.com/goccl/goccl/reduceop"
)

// This file is the package without the cuda build tag: the same exported API
// as cuda.go, kernel.go and onebit.go, where every constructor returns
// ErrNotBuilt, so no value of these types can exist and the methods (which
// also return ErrNotBuilt, or panic where the signature has no error) are
// never reached. TestStubMatchesCUDA keeps the two APIs identical.

// ErrNotBuilt is returned by every constructor of the stub package built
// without the cuda tag. With the tag it is never returned.
var ErrNotBuilt = errors.New("goccl: built without the cuda tag")

// Context is a CUDA context on one device with goccl's kernels loaded.
type Context struct{}

// OpenLocal opens a Context on LocalDevice(). Without the cuda tag it returns ErrNotBuilt.
func OpenLocal() (*Context, error) { return nil, ErrNotBuilt }

// Open creates a context on device ordinal. Without the cuda tag it returns ErrNotBuilt.
func Open(ordinal int) (*Context, error) { return nil, ErrNotBuilt }

// Close frees the context.
func (c *Context) Close() error { return ErrNotBuilt }

// Device returns the device ordinal.
func (c *Context) Device() int { return -1 }

// MultiprocessorCount returns the number of multiprocessors of the device.
func (c *Context) MultiprocessorCount() int { return 0 }

// Synchronize waits for all work submitted to the context.
func (c *Context) Synchronize() error { return ErrNotBuilt }

// Alloc allocates a device buffer.
func (c *Context) Alloc(dt reduceop.DType, n int) (*Buffer, error) { return nil, ErrNotBuilt }

// AllocHost allocates pinned host memory.
func (c *Context) AllocHost(n int) (*HostBuffer, error) { return nil, ErrNotBuilt }

// NewStream creates a stream.
func (c *Context) NewStream() (*Stream, error) { return nil, ErrNotBuilt }

// NewEvent creates an event.
func (c *Context) NewEvent() (*Event, error) { return nil, ErrNotBuilt }

// Kernel returns the context's Kernel.
func (c *Context) Kernel() *Kernel { return nil }

// Buffer is device memory holding Len elements of DType.
type Buffer struct{}

// DType returns the element type.
func (b *Buffer) DType() reduceop.DType { return 0 }

// Len returns the number of elements.
func (b *Buffer) Len() int { return 0 }

// Ptr returns the device address of element 0.
func (b *Buffer) Ptr() uintptr { return 0 }

// Slice returns a view of elements [lo, hi).
func (b *Buffer) Slice(lo, hi int) *Buffer { panic(ErrNotBuilt) }

// Free releases the memory.
func (b *Buffer) Free() error { return ErrNotBuilt }

// CopyToHost copies len(dst) bytes starting at byte offset off to dst.
func (b *Buffer) CopyToHost(ctx context.Context, dst []byte, off int) error { return ErrNotBuilt }

// CopyFromHost copies src to the buffer starting at byte offset off.
func (b *Buffer) CopyFromHost(ctx context.Context, off int, src []byte) error { return ErrNotBuilt }

// Kernel returns the context's Kernel.
func (b *Buffer) Kernel() reduceop.Kernel { return nil }

// HostBuffer is page-locked host memory.
type HostBuffer struct{}

// Bytes returns the memory as a byte slice.
func (h *HostBuffer) Bytes() []byte { return nil }

// Free releases the memory.
func (h *HostBuffer) Free() error { return ErrNotBuilt }

// Stream is a CUDA stream.
type Stream struct{}

// Synchronize waits for the work queued on s.
func (s *Stream) Synchronize() error { return ErrNotBuilt }

// Destroy releases the stream.
func (s *Stream) Destroy() error { return ErrNotBuilt }

// Event is a CUDA event.
type Event struct{}

// Record records e on s.
func (e *Event) Record(s *Stream) error { return ErrNotBuilt }

// Synchronize waits for the work before e's last Record.
func (e *Event) Synchronize() error { return ErrNotBuilt }

// Destroy releases the event.
func (e *Event) Destroy() error { return ErrNotBuilt }

// Elapsed returns the device time between two events.
func Elapsed(start, end *Event) (time.Duration, error) { return 0, ErrNotBuilt }

// Kernel runs goccl's kernels on a Context.
type Kernel struct{}

var _ reduceop.Kernel = (*Kernel)(nil)

// Reduce computes dst[i] = dst[i] op src[i] on the device.
func (k *Kernel) Reduce(dt reduceop.DType, op reduceop.Op, dst, src []byte) error {
	return ErrNotBuilt
}

// Scale divides every element of dst by n on the device.
func (k *Kernel) Scale(dt reduceop.DType, dst []byte, n int) error { return ErrNotBuilt }

// ReduceDevice computes dst[i] = dst[i] op src[i] on device buffers.
func (k *Kernel) ReduceDevice(op reduceop.Op, dst, src *Buffer) error { return ErrNotBuilt }

// ScaleDevice divides every element of a device buffer by n.
func (k *Kernel) ScaleDevice(x *Buffer, n int) error { return ErrNotBuilt }

// CompensateNorm adds x into err and returns the sum of squares of err.
func (k *Kernel) CompensateNorm(err, x []float32) float64 { panic(ErrNotBuilt) }

// PackUpdate packs the signs of err into bits and subtracts scale*(±1).
func (k *Kernel) PackUpdate(bits []uint8, err []float32, scale float32) { panic(ErrNotBuilt) }

// AccumulateSigns adds ±scale into dst from the packed bits.
func (k *Kernel) AccumulateSigns(dst []float32, bits []uint8, scale float32) { panic(ErrNotBuilt) }

// Decompress writes ±scale into dst from the packed bits.
func (k *Kernel) Decompress(dst []float32, bits []uint8, scale float32) { panic(ErrNotBuilt) }

// CompensateNormDevice is CompensateNorm on device buffers.
func (k *Kernel) CompensateNormDevice(err, x *Buffer) (float64, error) { return 0, ErrNotBuilt }

// PackUpdateDevice is PackUpdate on device buffers.
func (k *Kernel) PackUpdateDevice(bits, err *Buffer, scale float32) error { return ErrNotBuilt }

// AccumulateSignsDevice is AccumulateSigns on device buffers.
func (k *Kernel) AccumulateSignsDevice(dst, bits *Buffer, scale float32) error { return ErrNotBuilt }

// DecompressDevice is Decompress on device buffers.
func (k *Kernel) DecompressDevice(dst, bits *Buffer, scale float32) error { return ErrNotBuilt }
