//go:build cuda

package cuda

/*
#cgo LDFLAGS: -lcuda
#include <cuda.h>

// gorgonia.org/cu v0.9.6 does not wrap cuMemHostAlloc.
static CUresult goccl_host_alloc(void **p, size_t n) {
	return cuMemHostAlloc(p, n, CU_MEMHOSTALLOC_PORTABLE);
}
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
	"unsafe"

	"gorgonia.org/cu"

	"github.com/goccl/goccl/kernels"
	"github.com/goccl/goccl/reduceop"
)

// ErrNotBuilt is returned by every constructor of the stub package built
// without the cuda tag. With the tag it is never returned.
var ErrNotBuilt = errors.New("goccl: built without the cuda tag")

// blocksPerSM blocks of kernels.BlockSize threads fill a multiprocessor
// (2048 resident threads on sm_70 through sm_90).
const blocksPerSM = 8

// Context is a CUDA context on one device with goccl's kernels loaded.
type Context struct {
	dev     cu.Device
	ordinal int
	ctx     *cu.Ctx
	sms     int
	maxGrid int
	mod     cu.Module
	fns     map[string]cu.Function

	mu      sync.Mutex // guards closed and the scratch below
	closed  bool
	scratch cu.DevicePtr // maxGrid float64 partials, then ss float64, then scale float32
	kernel  *Kernel
}

// OpenLocal opens a Context on LocalDevice().
func OpenLocal() (*Context, error) { return Open(LocalDevice()) }

// Open creates a context on device ordinal and loads kernels.PTX() into it
// (the driver JIT-compiles it for the device).
func Open(ordinal int) (c *Context, err error) {
	n, err := cu.NumDevices()
	if err != nil {
		return nil, fmt.Errorf("goccl: cuda: count devices: %w", err)
	}
	if ordinal < 0 || ordinal >= n {
		return nil, fmt.Errorf("goccl: cuda: device %d out of range [0, %d)", ordinal, n)
	}
	dev, err := cu.GetDevice(ordinal)
	if err != nil {
		return nil, fmt.Errorf("goccl: cuda: device %d: %w", ordinal, err)
	}
	sms, err := dev.Attribute(cu.MultiprocessorCount)
	if err != nil {
		return nil, fmt.Errorf("goccl: cuda: device %d: multiprocessor count: %w", ordinal, err)
	}
	c = &Context{dev: dev, ordinal: ordinal, sms: sms, maxGrid: sms * blocksPerSM, fns: map[string]cu.Function{}}
	// cu.NewContext panics when cuCtxCreate fails.
	func() {
		defer func() {
			if r := recover(); r != nil {
				err = fmt.Errorf("goccl: cuda: create context on device %d: %v", ordinal, r)
			}
		}()
		c.ctx = cu.NewContext(dev, cu.SchedBlockingSync)
	}()
	if err != nil {
		return nil, err
	}
	err = c.ctx.Do(func() error {
		mod, err := cu.LoadData(string(kernels.PTX()))
		if err != nil {
			return fmt.Errorf("load PTX: %w", err)
		}
		c.mod = mod
		for _, name := range kernels.EntryPoints() {
			fn, err := mod.Function(name)
			if err != nil {
				return fmt.Errorf("kernel %s: %w", name, err)
			}
			c.fns[name] = fn
		}
		c.scratch, err = cu.MemAlloc(int64(8*c.maxGrid + 16))
		return err
	})
	if err != nil {
		c.ctx.Close()
		return nil, fmt.Errorf("goccl: cuda: device %d: %w", ordinal, err)
	}
	c.kernel = &Kernel{c: c}
	return c, nil
}

// Close frees the context and everything allocated in it. Buffers, streams
// and events from it must not be used afterwards.
func (c *Context) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	return c.ctx.Close() // destroys the module and all allocations with it
}

// do runs f on the context's OS thread.
func (c *Context) do(op string, f func() error) error {
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	if closed {
		return fmt.Errorf("goccl: cuda: %s: context closed", op)
	}
	if err := c.ctx.Do(f); err != nil {
		return fmt.Errorf("goccl: cuda: %s on device %d: %w", op, c.ordinal, err)
	}
	return nil
}

// Device returns the device ordinal.
func (c *Context) Device() int { return c.ordinal }

// MultiprocessorCount returns the number of multiprocessors of the device.
func (c *Context) MultiprocessorCount() int { return c.sms }

// Synchronize waits for all work submitted to the context.
func (c *Context) Synchronize() error {
	return c.do("synchronize", cu.Synchronize)
}

// grid returns the number of blocks for work items handled one per thread:
// enough to cover them, at most blocksPerSM per multiprocessor (the kernels
// loop over the rest), at least 1.
func (c *Context) grid(items int) int {
	g := (items + kernels.BlockSize - 1) / kernels.BlockSize
	return max(1, min(g, c.maxGrid))
}

// launch starts kernel name with grid blocks on stream s; each argument is
// passed as 8 bytes (gorgonia's Launch copies 8 bytes per parameter; a
// 32-bit parameter is read from the low half, little-endian). Call inside do.
func (c *Context) launch(s cu.Stream, name string, grid int, args ...uint64) error {
	fn, ok := c.fns[name]
	if !ok {
		return fmt.Errorf("no kernel %s", name)
	}
	params := make([]unsafe.Pointer, len(args))
	for i := range args {
		params[i] = unsafe.Pointer(&args[i])
	}
	if err := fn.Launch(grid, 1, 1, kernels.BlockSize, 1, 1, 0, s, params); err != nil {
		return fmt.Errorf("launch %s: %w", name, err)
	}
	return nil
}

// Buffer is device memory holding Len elements of DType. It implements
// goccl.DeviceBuffer.
type Buffer struct {
	c   *Context
	ptr cu.DevicePtr
	dt  reduceop.DType
	n   int
	own bool
}

// Alloc allocates a device buffer of n elements of dt (contents undefined).
func (c *Context) Alloc(dt reduceop.DType, n int) (*Buffer, error) {
	if !dt.Valid() || n < 0 {
		return nil, fmt.Errorf("goccl: cuda: alloc %d x %v: invalid size or dtype", n, dt)
	}
	b := &Buffer{c: c, dt: dt, n: n, own: true}
	if n == 0 {
		return b, nil
	}
	err := c.do("alloc", func() (err error) {
		b.ptr, err = cu.MemAlloc(int64(n * dt.Size()))
		return err
	})
	if err != nil {
		return nil, err
	}
	return b, nil
}

// DType returns the element type.
func (b *Buffer) DType() reduceop.DType { return b.dt }

// Len returns the number of elements.
func (b *Buffer) Len() int { return b.n }

// Ptr returns the device address of element 0.
func (b *Buffer) Ptr() uintptr { return uintptr(b.ptr) }

// Slice returns a view of elements [lo, hi) sharing b's memory; Free on it
// does nothing.
func (b *Buffer) Slice(lo, hi int) *Buffer {
	if lo < 0 || hi < lo || hi > b.n {
		panic(fmt.Sprintf("goccl: cuda: slice [%d:%d] of buffer of %d", lo, hi, b.n))
	}
	return &Buffer{c: b.c, ptr: b.ptr + cu.DevicePtr(lo*b.dt.Size()), dt: b.dt, n: hi - lo}
}

// Free releases the memory of a buffer made by Alloc.
func (b *Buffer) Free() error {
	if !b.own || b.ptr == 0 {
		return nil
	}
	p := b.ptr
	b.ptr = 0
	return b.c.do("free", func() error { return cu.MemFree(p) })
}

func (b *Buffer) span(op string, off, n int) error {
	if off < 0 || n < 0 || off+n > b.n*b.dt.Size() {
		return fmt.Errorf("goccl: cuda: %s of %d bytes at offset %d: buffer has %d bytes", op, n, off, b.n*b.dt.Size())
	}
	return nil
}

// CopyToHost copies len(dst) bytes starting at byte offset off to dst.
func (b *Buffer) CopyToHost(ctx context.Context, dst []byte, off int) error {
	if err := b.span("copy to host", off, len(dst)); err != nil || len(dst) == 0 {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return b.c.do("copy to host", func() error {
		return cu.MemcpyDtoH(unsafe.Pointer(&dst[0]), b.ptr+cu.DevicePtr(off), int64(len(dst)))
	})
}

// CopyFromHost copies src to the buffer starting at byte offset off.
func (b *Buffer) CopyFromHost(ctx context.Context, off int, src []byte) error {
	if err := b.span("copy from host", off, len(src)); err != nil || len(src) == 0 {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return b.c.do("copy from host", func() error {
		return cu.MemcpyHtoD(b.ptr+cu.DevicePtr(off), unsafe.Pointer(&src[0]), int64(len(src)))
	})
}

// Kernel returns the context's Kernel, which reduces staged chunks on the
// device.
func (b *Buffer) Kernel() reduceop.Kernel { return b.c.kernel }

// HostBuffer is page-locked host memory (cuMemHostAlloc, portable to every
// context), which the driver copies from and to at full bus speed and
// asynchronously.
type HostBuffer struct {
	c *Context
	p unsafe.Pointer
	n int
}

// AllocHost allocates n bytes of pinned host memory.
func (c *Context) AllocHost(n int) (*HostBuffer, error) {
	h := &HostBuffer{c: c, n: n}
	if n <= 0 {
		return h, nil
	}
	err := c.do("alloc host", func() error {
		var p unsafe.Pointer
		if r := C.goccl_host_alloc(&p, C.size_t(n)); r != C.CUDA_SUCCESS {
			return fmt.Errorf("cuMemHostAlloc(%d): CUresult %d", n, int(r))
		}
		h.p = p
		return nil
	})
	if err != nil {
		return nil, err
	}
	return h, nil
}

// Bytes returns the memory as a byte slice, valid until Free.
func (h *HostBuffer) Bytes() []byte {
	if h.p == nil {
		return nil
	}
	return unsafe.Slice((*byte)(h.p), h.n)
}

// Free releases the memory.
func (h *HostBuffer) Free() error {
	if h.p == nil {
		return nil
	}
	p := h.p
	h.p = nil
	return h.c.do("free host", func() error { return cu.MemFreeHost(p) })
}

// Stream is a CUDA stream of the context.
type Stream struct {
	c *Context
	s cu.Stream
}

// NewStream creates a stream that does not synchronize with the null stream.
func (c *Context) NewStream() (*Stream, error) {
	s := &Stream{c: c}
	err := c.do("create stream", func() (err error) {
		s.s, err = cu.MakeStream(cu.NonBlocking)
		return err
	})
	if err != nil {
		return nil, err
	}
	return s, nil
}

// Synchronize waits for the work queued on s.
func (s *Stream) Synchronize() error { return s.c.do("synchronize stream", s.s.Synchronize) }

// Destroy releases the stream.
func (s *Stream) Destroy() error { return s.c.do("destroy stream", s.s.Destroy) }

// Event is a CUDA event, for timing and ordering work on streams.
type Event struct {
	c *Context
	e cu.Event
}

// NewEvent creates an event that records timing.
func (c *Context) NewEvent() (*Event, error) {
	e := &Event{c: c}
	err := c.do("create event", func() (err error) {
		e.e, err = cu.MakeEvent(cu.DefaultEvent)
		return err
	})
	if err != nil {
		return nil, err
	}
	return e, nil
}

// Record records e on s (nil: the null stream).
func (e *Event) Record(s *Stream) error {
	var st cu.Stream
	if s != nil {
		st = s.s
	}
	return e.c.do("record event", func() error { return e.e.Record(st) })
}

// Synchronize waits for the work before e's last Record.
func (e *Event) Synchronize() error { return e.c.do("synchronize event", e.e.Synchronize) }

// Destroy releases the event.
func (e *Event) Destroy() error {
	return e.c.do("destroy event", func() error { return cu.DestroyEvent(&e.e) })
}

// Elapsed returns the device time between two recorded, completed events.
func Elapsed(start, end *Event) (time.Duration, error) {
	var ms float64
	err := start.c.do("elapsed", func() (err error) {
		ms, err = start.e.Elapsed(end.e)
		return err
	})
	return time.Duration(ms * float64(time.Millisecond)), err
}
