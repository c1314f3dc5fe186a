//go:build !cuda

package cuda

import (
	"context"
	"errors"
	"time"

	"github.com/goccl/goccl/device"
	"github.com/goccl/goccl/reduceop"
)

// This file is the package without the cuda build tag: the same exported API
// as cuda.go, stream.go, kernel.go and onebit.go, where every constructor
// returns ErrNotBuilt, so no value of these types can exist and the methods
// (which also return ErrNotBuilt, or panic where the signature has no error)
// are never reached. TestStubMatchesCUDA keeps the two APIs identical.

// ErrNotBuilt is returned by every constructor of the stub package built
// without the cuda tag. With the tag it is never returned.
var ErrNotBuilt = errors.New("goccl: built without the cuda tag")

var (
	_ device.Device = (*Context)(nil)
	_ device.Slicer = (*Buffer)(nil)
	_ device.Host   = (*Host)(nil)
	_ device.Stream = (*Stream)(nil)
	_ device.Event  = (*Event)(nil)
)

// Context is goccl's state on one device. It implements device.Device.
type Context struct{}

// OpenLocal opens a Context on LocalDevice(). Without the cuda tag it returns ErrNotBuilt.
func OpenLocal() (*Context, error) { return nil, ErrNotBuilt }

// Open opens a Context in the device's primary context. Without the cuda tag it returns ErrNotBuilt.
func Open(ordinal int) (*Context, error) { return nil, ErrNotBuilt }

// OpenPrivate opens a Context in a CUDA context of its own. Without the cuda tag it returns ErrNotBuilt.
func OpenPrivate(ordinal int) (*Context, error) { return nil, ErrNotBuilt }

// Close gives the context back.
func (c *Context) Close() error { return ErrNotBuilt }

// String names the device.
func (c *Context) String() string { return "cuda (not built)" }

// Ordinal returns the device ordinal.
func (c *Context) Ordinal() int { return -1 }

// MultiprocessorCount returns the number of multiprocessors of the device.
func (c *Context) MultiprocessorCount() int { return 0 }

// Handle returns the CUcontext.
func (c *Context) Handle() uintptr { return 0 }

// Alloc allocates a device buffer.
func (c *Context) Alloc(dt reduceop.DType, n int) (device.Buffer, error) { return nil, ErrNotBuilt }

// NewBuffer is Alloc with the concrete type.
func (c *Context) NewBuffer(dt reduceop.DType, n int) (*Buffer, error) { return nil, ErrNotBuilt }

// Wrap returns a Buffer over device memory the caller owns.
func (c *Context) Wrap(ptr uintptr, dt reduceop.DType, n int) (*Buffer, error) {
	return nil, ErrNotBuilt
}

// AllocHost allocates page-locked host memory.
func (c *Context) AllocHost(n int) (device.Host, error) { return nil, ErrNotBuilt }

// NewStream creates a stream.
func (c *Context) NewStream() (device.Stream, error) { return nil, ErrNotBuilt }

// WrapStream returns a Stream over a CUstream the caller owns.
func (c *Context) WrapStream(s uintptr) (*Stream, error) { return nil, ErrNotBuilt }

// NewEvent creates an event.
func (c *Context) NewEvent() (device.Event, error) { return nil, ErrNotBuilt }

// Kernel returns the context's Kernel.
func (c *Context) Kernel() *Kernel { return nil }

// Buffer is device memory holding Len elements of DType.
type Buffer struct{}

// DType returns the element type.
func (b *Buffer) DType() reduceop.DType { return 0 }

// Len returns the number of elements.
func (b *Buffer) Len() int { return 0 }

// Device returns the Context the buffer belongs to.
func (b *Buffer) Device() device.Device { return nil }

// Ptr returns the device address of element 0.
func (b *Buffer) Ptr() uintptr { return 0 }

// Slice returns a view of elements [lo, hi).
func (b *Buffer) Slice(lo, hi int) *Buffer { panic(ErrNotBuilt) }

// Sub returns a view of elements [lo, hi).
func (b *Buffer) Sub(lo, hi int) (device.Buffer, error) { return nil, ErrNotBuilt }

// Free releases the memory.
func (b *Buffer) Free() error { return ErrNotBuilt }

// CopyToHost copies len(dst) bytes starting at byte offset off to dst.
func (b *Buffer) CopyToHost(ctx context.Context, dst []byte, off int) error { return ErrNotBuilt }

// CopyFromHost copies src to the buffer starting at byte offset off.
func (b *Buffer) CopyFromHost(ctx context.Context, off int, src []byte) error { return ErrNotBuilt }

// Kernel returns the context's Kernel.
func (b *Buffer) Kernel() reduceop.Kernel { return nil }

// Host is page-locked host memory.
type Host struct{}

// Bytes returns the memory as a byte slice.
func (h *Host) Bytes() []byte { return nil }

// Free releases the memory.
func (h *Host) Free() error { return ErrNotBuilt }

// Stream is a CUDA stream.
type Stream struct{}

// Handle returns the CUstream.
func (s *Stream) Handle() uintptr { return 0 }

// CopyToHost enqueues a copy to page-locked host memory.
func (s *Stream) CopyToHost(dst []byte, src device.Buffer, off int) error { return ErrNotBuilt }

// CopyFromHost enqueues a copy from page-locked host memory.
func (s *Stream) CopyFromHost(dst device.Buffer, off int, src []byte) error { return ErrNotBuilt }

// Copy enqueues a copy on the device.
func (s *Stream) Copy(dst device.Buffer, doff int, src device.Buffer, soff int, n int) error {
	return ErrNotBuilt
}

// Reduce enqueues dst[i] = dst[i] op src[i].
func (s *Stream) Reduce(op reduceop.Op, dst device.Buffer, doff int, src device.Buffer, soff int, n int) error {
	return ErrNotBuilt
}

// Scale enqueues the division of n elements by div.
func (s *Stream) Scale(dst device.Buffer, off int, n int, div int) error { return ErrNotBuilt }

// Record records e at the end of the stream.
func (s *Stream) Record(e device.Event) error { return ErrNotBuilt }

// WaitEvent makes later work wait for e.
func (s *Stream) WaitEvent(e device.Event) error { return ErrNotBuilt }

// Hold makes later work wait until the Hold is released.
func (s *Stream) Hold() (device.Hold, error) { return nil, ErrNotBuilt }

// Synchronize waits for the work enqueued so far.
func (s *Stream) Synchronize(ctx context.Context) error { return ErrNotBuilt }

// Destroy releases the stream.
func (s *Stream) Destroy() error { return ErrNotBuilt }

// Event is a CUDA event.
type Event struct{}

// Wait blocks until the work before e's last Record has run.
func (e *Event) Wait(ctx context.Context) error { return ErrNotBuilt }

// Done reports whether the work before e's last Record has run.
func (e *Event) Done() (bool, error) { return false, ErrNotBuilt }

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

// CompensateNorm adds x into err and returns the sum of squares of err.
func (k *Kernel) CompensateNorm(err, x []float32) float64 { panic(ErrNotBuilt) }

// PackUpdate packs the signs of err into bits and subtracts scale*(±1).
func (k *Kernel) PackUpdate(bits []uint8, err []float32, scale float32) { panic(ErrNotBuilt) }

// AccumulateSigns adds ±scale into dst from the packed bits.
func (k *Kernel) AccumulateSigns(dst []float32, bits []uint8, scale float32) { panic(ErrNotBuilt) }

// Decompress writes ±scale into dst from the packed bits.
func (k *Kernel) Decompress(dst []float32, bits []uint8, scale float32) { panic(ErrNotBuilt) }

// CompensateNormOn enqueues CompensateNorm on device buffers.
func (k *Kernel) CompensateNormOn(s device.Stream, err, x, ss, scale device.Buffer) error {
	return ErrNotBuilt
}

// PackUpdateOn enqueues PackUpdate on device buffers.
func (k *Kernel) PackUpdateOn(s device.Stream, bits, err, scale device.Buffer) error {
	return ErrNotBuilt
}

// AccumulateSignsOn enqueues AccumulateSigns on device buffers.
func (k *Kernel) AccumulateSignsOn(s device.Stream, dst, bits, scale device.Buffer) error {
	return ErrNotBuilt
}

// DecompressOn enqueues Decompress on device buffers.
func (k *Kernel) DecompressOn(s device.Stream, dst, bits, scale device.Buffer) error {
	return ErrNotBuilt
}

// IPCHandle names a Buffer's memory for another process on the same machine.
type IPCHandle struct {
	Mem    [64]byte // CUipcMemHandle of the allocation holding the buffer
	Offset int      // bytes from the allocation's start to element 0
	DType  reduceop.DType
	Len    int
}

// IPCHandle returns the handle another process passes to OpenIPC.
func (b *Buffer) IPCHandle() (IPCHandle, error) { return IPCHandle{}, ErrNotBuilt }

// OpenIPC maps the memory another process named with IPCHandle.
func (c *Context) OpenIPC(h IPCHandle) (*Buffer, error) { return nil, ErrNotBuilt }

// IPCExport returns b's IPCHandle as bytes, for device.IPC.
func (c *Context) IPCExport(b device.Buffer) ([]byte, error) { return nil, ErrNotBuilt }

// IPCImport opens a handle from IPCExport, for device.IPC.
func (c *Context) IPCImport(handle []byte) (device.Buffer, error) { return nil, ErrNotBuilt }
