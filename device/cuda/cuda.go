//go:build cuda

package cuda

/*
#cgo LDFLAGS: -lcuda
#include <cuda.h>

// gorgonia.org/cu v0.9.6 does not wrap cuMemHostAlloc with flags, mapped
// host memory, cuPointerGetAttributes or the v2 stream memory operations.
static CUresult goccl_host_alloc(void **p, size_t n, unsigned int flags) {
	return cuMemHostAlloc(p, n, flags);
}

static CUresult goccl_pointer_info(CUdeviceptr p, unsigned int *memType, int *ordinal,
		CUdeviceptr *start, size_t *size, CUcontext *ctx) {
	CUpointer_attribute attrs[5] = {
		CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
		CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
		CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
		CU_POINTER_ATTRIBUTE_RANGE_SIZE,
		CU_POINTER_ATTRIBUTE_CONTEXT,
	};
	void *data[5] = {memType, ordinal, start, size, ctx};
	*memType = 0;
	*ordinal = -1;
	*start = 0;
	*size = 0;
	*ctx = NULL;
	return cuPointerGetAttributes(5, attrs, data, p);
}

static int goccl_memtype_device(unsigned int t) { return t == CU_MEMORYTYPE_DEVICE; }
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"unsafe"

	"gorgonia.org/cu"

	"github.com/goccl/goccl/device"
	"github.com/goccl/goccl/kernels"
	"github.com/goccl/goccl/reduceop"
)

// ErrNotBuilt is returned by every constructor of the stub package built
// without the cuda tag. With the tag it is never returned.
var ErrNotBuilt = errors.New("goccl: built without the cuda tag")

var (
	_ device.Device = (*Context)(nil)
	_ device.Slicer = (*Buffer)(nil)
	_ device.Host   = (*Host)(nil)
)

// Context is goccl's state on one device: a CUDA context (the device's
// primary context unless opened with OpenPrivate) with goccl's kernels
// loaded. It implements device.Device. Its methods, and those of the
// buffers, streams and events made from it, are safe for concurrent use;
// Close waits for calls in flight.
type Context struct {
	dev     cu.Device
	ordinal int
	cuctx   cu.CUContext
	private bool
	sms     int
	mod     cu.Module
	fns     map[string]cu.Function
	active  map[string]int // blocks of each kernel that fit on one multiprocessor
	holdErr error          // why Stream.Hold cannot work here, or nil
	copies  cu.Stream      // the Buffer methods' copies

	// mu is read-held by every call into the driver (do) and write-held by
	// Close, so Close waits for calls in flight and no call starts after it.
	mu     sync.RWMutex
	closed bool

	hosts  hostRanges
	holds  holdPool
	kernel *Kernel

	retiredMu sync.Mutex
	retired   []retired // see retire
}

// OpenLocal opens a Context on LocalDevice().
func OpenLocal() (*Context, error) { return Open(LocalDevice()) }

// Open opens a Context in the primary context of device ordinal (retaining
// it, as the CUDA runtime does), and loads kernels.PTX() into it: memory,
// streams and events of the CUDA runtime, CuPy, PyTorch or gorgonia.org/cu
// in the same process are usable with it. The primary context keeps the
// flags its first user gave it.
func Open(ordinal int) (*Context, error) { return open(ordinal, false) }

// OpenPrivate opens a Context in a new CUDA context of its own on device
// ordinal, destroyed by Close. See the package documentation for when to
// prefer it over Open.
func OpenPrivate(ordinal int) (*Context, error) { return open(ordinal, true) }

func open(ordinal int, private bool) (*Context, error) {
	n, err := cu.NumDevices()
	if err != nil {
		return nil, fmt.Errorf("goccl: cuda: count devices: %w", err)
	}
	if ordinal < 0 || ordinal >= n {
		return nil, fmt.Errorf("goccl: cuda: open device %d: out of range [0, %d): %w", ordinal, n, ErrInvalid)
	}
	c := &Context{ordinal: ordinal, private: private, fns: map[string]cu.Function{}, active: map[string]int{}}
	if c.dev, err = cu.GetDevice(ordinal); err != nil {
		return nil, fmt.Errorf("goccl: cuda: open device %d: %w", ordinal, err)
	}
	if c.sms, err = c.dev.Attribute(cu.MultiprocessorCount); err != nil {
		return nil, fmt.Errorf("goccl: cuda: open device %d: multiprocessor count: %w", ordinal, err)
	}
	if private {
		err = c.createPrivate()
	} else {
		c.cuctx, err = c.dev.RetainPrimaryCtx()
	}
	if err != nil {
		return nil, fmt.Errorf("goccl: cuda: open device %d: context: %w", ordinal, err)
	}
	c.holdErr = holdSupport(c.dev)
	err = c.onThread(func() error {
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
			active, err := fn.MaxActiveBlocksPerMultiProcessor(kernels.BlockSize, 0)
			if err != nil {
				return fmt.Errorf("kernel %s: occupancy: %w", name, err)
			}
			c.fns[name], c.active[name] = fn, active
		}
		c.copies, err = cu.MakeStream(cu.NonBlocking)
		return err
	})
	if err != nil {
		if c.mod != (cu.Module{}) {
			c.onThread(c.mod.Unload)
		}
		c.release()
		return nil, fmt.Errorf("goccl: cuda: open device %d: %w", ordinal, err)
	}
	c.kernel = &Kernel{c: c}
	return c, nil
}

// createPrivate creates c's own context. cuCtxCreate makes the new context
// current on the calling thread; it is popped again so the thread is left
// as it was.
func (c *Context) createPrivate() (err error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if c.cuctx, err = c.dev.MakeContext(cu.SchedAuto); err != nil {
		return err
	}
	_, err = cu.PopCurrentCtx()
	return err
}

// release gives the CUDA context back: destroys a private one, releases
// the primary one.
func (c *Context) release() error {
	if c.private {
		return c.cuctx.Destroy()
	}
	return c.dev.ReleasePrimaryCtx()
}

// Close frees what goccl allocated for itself (its module, staging and
// scratch memory, hold words) and gives the CUDA context back: a private
// one is destroyed with everything in it; the primary one is released, and
// lives on while the framework or another Context retains it. Buffers, host
// memory, streams and events made from c should be freed or destroyed
// first. Close waits for calls in flight, releases every Hold, and waits for
// the device to finish the context's work (cuCtxSynchronize: kernels of the
// module or waits on hold words may still be queued, on goccl's streams or
// the framework's); every later call returns an error wrapping ErrClosed.
// Closing twice is a no-op.
func (c *Context) Close() error {
	// The Kernel's lock first, as its host-slice methods take it before
	// calling do: Close then waits for such a call to finish.
	c.kernel.mu.Lock()
	defer c.kernel.mu.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	c.holds.releaseAll()
	errs := []error{c.onThread(func() error {
		if err := cu.Synchronize(); err != nil {
			return err // memory the device may still use is not freed
		}
		return errors.Join(c.kernel.free(), c.holds.free(), c.sweep(true), c.copies.Destroy(), c.mod.Unload())
	})}
	errs = append(errs, c.release())
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("goccl: cuda: close %v: %w", c, err)
	}
	return nil
}

// do runs f with c's CUDA context current (see onThread), holding c open
// for the duration of the call.
func (c *Context) do(op string, f func() error) error {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.closed {
		return fmt.Errorf("goccl: cuda: %s on %v: %w", op, c, ErrClosed)
	}
	if err := c.onThread(f); err != nil {
		return fmt.Errorf("goccl: cuda: %s on %v: %w", op, c, err)
	}
	return nil
}

// onThread is the executor of every driver call. The driver keeps a
// current context per OS thread, and a goroutine may move between threads
// at any point, so it locks the calling goroutine to its thread, makes c's
// context current if another one is (cuCtxSetCurrent), runs f, and puts the
// thread's previous context back before unlocking. Calls thus run on the
// caller's goroutine, concurrently, and leave a thread that the framework
// uses as they found it; there is no goroutine of our own (gorgonia's
// cu.Ctx funnels calls through one, and its Close and finalizer destroy
// the context, which must not happen to the primary one).
func (c *Context) onThread(f func() error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	prev, err := cu.CurrentContext()
	if err != nil {
		return err
	}
	if prev != c.cuctx {
		if err := cu.SetCurrentContext(c.cuctx); err != nil {
			return err
		}
		defer cu.SetCurrentContext(prev)
	}
	return f()
}

// String names the device, for example "cuda:0".
func (c *Context) String() string { return fmt.Sprintf("cuda:%d", c.ordinal) }

// Ordinal returns the device ordinal.
func (c *Context) Ordinal() int { return c.ordinal }

// MultiprocessorCount returns the number of multiprocessors of the device.
func (c *Context) MultiprocessorCount() int { return c.sms }

// Handle returns the CUcontext, for code that calls the driver directly.
func (c *Context) Handle() uintptr { return *(*uintptr)(unsafe.Pointer(&c.cuctx)) }

// gorgonia's handle types are structs of one C pointer, the CUDA handle;
// Handle and the Stream conversions read and write them as such.
var (
	_ [unsafe.Sizeof(cu.CUContext{}) - unsafe.Sizeof(uintptr(0))]struct{}
	_ [unsafe.Sizeof(uintptr(0)) - unsafe.Sizeof(cu.CUContext{})]struct{}
	_ [unsafe.Sizeof(cu.Stream{}) - unsafe.Sizeof(uintptr(0))]struct{}
	_ [unsafe.Sizeof(uintptr(0)) - unsafe.Sizeof(cu.Stream{})]struct{}
)

// grid returns the grid for kernel name on items work items.
func (c *Context) grid(name string, items int) int { return gridSize(items, c.sms, c.active[name]) }

// launch enqueues kernel name on stream s with a grid for items work items.
// Call inside do.
func (c *Context) launch(s cu.Stream, name string, items int, args ...uint64) error {
	return c.launchGrid(s, name, c.grid(name, items), args...)
}

// launchGrid enqueues kernel name on stream s with grid blocks of
// kernels.BlockSize threads; each argument is passed as 8 bytes (gorgonia's
// Launch copies 8 bytes per parameter; a 32-bit parameter is read from the
// low half, little-endian). Call inside do.
func (c *Context) launchGrid(s cu.Stream, name string, grid int, args ...uint64) error {
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

// Buffer is device memory holding Len elements of DType: memory of its own
// (Alloc, NewBuffer), a view of another Buffer (Slice), or memory the caller
// owns (Wrap). It implements device.Buffer and goccl.DeviceBuffer.
type Buffer struct {
	c   *Context
	ptr cu.DevicePtr
	dt  reduceop.DType
	n   int
	own bool

	base  cu.DevicePtr // for memory from OpenIPC: the mapping, unmapped by Free
	freed atomic.Bool
}

// Alloc allocates n elements of dt (contents undefined); the Buffer is a
// *Buffer.
func (c *Context) Alloc(dt reduceop.DType, n int) (device.Buffer, error) {
	b, err := c.NewBuffer(dt, n)
	if err != nil {
		return nil, err
	}
	return b, nil
}

// NewBuffer is Alloc with the concrete type.
func (c *Context) NewBuffer(dt reduceop.DType, n int) (*Buffer, error) {
	if !dt.Valid() || n < 0 || n > (1<<62)/max(1, dt.Size()) {
		return nil, invalid("alloc", "%d x %v", n, dt)
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

// Wrap returns a Buffer over n elements of dt at ptr, device memory the
// caller owns (a torch.Tensor's data_ptr(), a CuPy array's data.ptr, a
// cudaMalloc result): Free does nothing, and the memory must outlive every
// use of the Buffer. The driver is asked first (cuPointerGetAttributes)
// whether [ptr, ptr+n*size) is device memory of this device, usable in
// this context, inside one allocation; if not, the error wraps ErrInvalid
// and names the pointer and range, rather than the kernel faulting later.
// n == 0 gives an empty Buffer whatever ptr is.
func (c *Context) Wrap(ptr uintptr, dt reduceop.DType, n int) (*Buffer, error) {
	if n == 0 && dt.Valid() {
		return &Buffer{c: c, ptr: cu.DevicePtr(ptr), dt: dt}, nil
	}
	var info ptrInfo
	if dt.Valid() && n > 0 {
		err := c.do("wrap", func() (err error) {
			info, err = c.pointerInfo(ptr)
			return err
		})
		if err != nil {
			return nil, err
		}
	}
	if err := checkWrap(c.ordinal, ptr, dt, n, info); err != nil {
		return nil, err
	}
	return &Buffer{c: c, ptr: cu.DevicePtr(ptr), dt: dt, n: n}, nil
}

// pointerInfo asks the driver what p is (cuPointerGetAttributes, which
// answers for any address: unknown ones are not device memory). Call
// inside do.
func (c *Context) pointerInfo(p uintptr) (ptrInfo, error) {
	var memType C.uint
	var ordinal C.int
	var start C.CUdeviceptr
	var size C.size_t
	var ctx C.CUcontext
	switch r := C.goccl_pointer_info(C.CUdeviceptr(p), &memType, &ordinal, &start, &size, &ctx); r {
	case C.CUDA_SUCCESS:
	case C.CUDA_ERROR_INVALID_VALUE: // an address the driver does not know
		return ptrInfo{ordinal: -1}, nil
	default:
		return ptrInfo{}, fmt.Errorf("cuPointerGetAttributes(%#x): CUresult %d", p, int(r))
	}
	return ptrInfo{
		device:     C.goccl_memtype_device(memType) != 0,
		ordinal:    int(ordinal),
		start:      uintptr(start),
		size:       uintptr(size),
		sameOrNone: ctx == nil || uintptr(unsafe.Pointer(ctx)) == c.Handle(),
	}, nil
}

// DType returns the element type.
func (b *Buffer) DType() reduceop.DType { return b.dt }

// Len returns the number of elements.
func (b *Buffer) Len() int { return b.n }

// Device returns the Context the buffer belongs to.
func (b *Buffer) Device() device.Device { return b.c }

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

// Sub is Slice for device.Slicer: a range outside b is an error wrapping
// ErrInvalid instead of a panic.
func (b *Buffer) Sub(lo, hi int) (device.Buffer, error) {
	if lo < 0 || hi < lo || hi > b.n {
		return nil, invalid("sub-range", "[%d,%d) of a buffer of %d elements", lo, hi, b.n)
	}
	return b.Slice(lo, hi), nil
}

// Free releases the memory of a buffer made by Alloc or NewBuffer, unmaps
// memory from OpenIPC, and does nothing more for a slice or wrapped memory
// than mark the Buffer unusable.
// Freeing twice is an error wrapping ErrInvalid.
func (b *Buffer) Free() error {
	if b.freed.Swap(true) {
		return invalid("free", "buffer freed twice")
	}
	switch {
	case b.base != 0:
		return b.c.do("free", func() error { return closeIPC(b.base) })
	case !b.own || b.ptr == 0:
		return nil
	}
	return b.c.do("free", func() error { return cu.MemFree(b.ptr) })
}

func (b *Buffer) bytes() int { return b.n * b.dt.Size() }

// CopyToHost copies len(dst) bytes starting at byte offset off to dst, any
// host memory, and returns when they are there, or when ctx ends (the copy
// may then still land in dst). It is not ordered with work on Streams:
// wait for such work first.
func (b *Buffer) CopyToHost(ctx context.Context, dst []byte, off int) error {
	const op = "copy to host"
	if err := checkSpan(op, "buffer", b.bytes(), off, len(dst)); err != nil || len(dst) == 0 {
		return err
	}
	return b.c.copy(ctx, op, func() error {
		return cu.MemcpyDtoHAsync(unsafe.Pointer(&dst[0]), b.ptr+cu.DevicePtr(off), int64(len(dst)), b.c.copies)
	})
}

// CopyFromHost copies src, any host memory, to the buffer starting at byte
// offset off, and returns when it is there, or when ctx ends (the copy may
// then still land; Go memory may be reused at once, memory from AllocHost
// only after the copy has landed). Like CopyToHost it is not ordered with
// work on Streams.
func (b *Buffer) CopyFromHost(ctx context.Context, off int, src []byte) error {
	const op = "copy from host"
	if err := checkSpan(op, "buffer", b.bytes(), off, len(src)); err != nil || len(src) == 0 {
		return err
	}
	return b.c.copy(ctx, op, func() error {
		return cu.MemcpyHtoDAsync(b.ptr+cu.DevicePtr(off), unsafe.Pointer(&src[0]), int64(len(src)), b.c.copies)
	})
}

// copy enqueues a copy on the Context's copy stream and waits for that
// stream. A cuMemcpyHtoD from pageable memory returns once the bytes are
// staged, before they reach the device, and only the null stream is
// ordered after it, which goccl's streams (and most of a framework's) are
// not; waiting for the copy stream makes the copy complete on return. The
// driver has read pageable memory by the time the call returns, so a
// cancelled wait leaves such memory free to reuse.
func (c *Context) copy(ctx context.Context, op string, enqueue func() error) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("goccl: cuda: %s: %w", op, err)
	}
	if err := c.do(op, enqueue); err != nil {
		return err
	}
	return c.poll(ctx, op, c.copies.Query)
}

// Kernel returns the context's Kernel, which reduces staged chunks on the
// device.
func (b *Buffer) Kernel() reduceop.Kernel { return b.c.kernel }

// buffer returns x as a Buffer usable with c, or an error wrapping
// ErrInvalid. Buffers, streams and events of two Contexts in the same CUDA
// context (two Opens share the primary one) are interchangeable.
func (c *Context) buffer(op, what string, x device.Buffer) (*Buffer, error) {
	b, ok := x.(*Buffer)
	switch {
	case x == nil || (ok && b == nil):
		return nil, invalid(op, "%s is nil", what)
	case !ok:
		return nil, invalid(op, "%s is a %T, not a buffer of %v", what, x, c)
	case b.c.cuctx != c.cuctx:
		return nil, invalid(op, "%s is a buffer of CUDA context %#x, not %#x (%v)", what, b.c.Handle(), c.Handle(), c)
	case b.freed.Load():
		return nil, invalid(op, "%s used after Free", what)
	}
	return b, nil
}

// Host is page-locked host memory from AllocHost (cuMemHostAlloc, portable
// to every context and mapped into the device's address space). It
// implements device.Host.
type Host struct {
	c *Context
	p unsafe.Pointer
	n int
}

// AllocHost allocates n bytes of page-locked host memory; the Host is a
// *Host. The asynchronous copies of a Stream accept only such memory.
func (c *Context) AllocHost(n int) (device.Host, error) {
	if n < 0 {
		return nil, invalid("alloc host", "%d bytes", n)
	}
	h := &Host{c: c, n: n}
	if n == 0 {
		return h, nil
	}
	err := c.do("alloc host", func() error {
		p, err := hostAlloc(n)
		h.p = p
		return err
	})
	if err != nil {
		return nil, err
	}
	c.hosts.add(uintptr(h.p), n)
	return h, nil
}

func hostAlloc(n int) (unsafe.Pointer, error) {
	var p unsafe.Pointer
	if r := C.goccl_host_alloc(&p, C.size_t(n), C.CU_MEMHOSTALLOC_PORTABLE|C.CU_MEMHOSTALLOC_DEVICEMAP); r != C.CUDA_SUCCESS {
		return nil, fmt.Errorf("cuMemHostAlloc(%d): CUresult %d", n, int(r))
	}
	return p, nil
}

// Bytes returns the memory as a byte slice, valid until Free.
func (h *Host) Bytes() []byte {
	if h.p == nil {
		return nil
	}
	return unsafe.Slice((*byte)(h.p), h.n)
}

// Free releases the memory.
func (h *Host) Free() error {
	if h.p == nil {
		return nil
	}
	p := h.p
	h.p = nil
	h.c.hosts.remove(uintptr(p))
	return h.c.do("free host", func() error { return cu.MemFreeHost(p) })
}

// hostRanges is the set of live AllocHost allocations, sorted by address.
type hostRanges struct {
	mu sync.Mutex
	r  []hostRange
}

type hostRange struct{ start, end uintptr }

func (s *hostRanges) add(p uintptr, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	i, _ := slices.BinarySearchFunc(s.r, p, func(r hostRange, p uintptr) int { return cmpAddr(r.start, p) })
	s.r = slices.Insert(s.r, i, hostRange{p, p + uintptr(n)})
}

func (s *hostRanges) remove(p uintptr) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if i, ok := slices.BinarySearchFunc(s.r, p, func(r hostRange, p uintptr) int { return cmpAddr(r.start, p) }); ok {
		s.r = slices.Delete(s.r, i, i+1)
	}
}

// check returns an error wrapping ErrInvalid unless b lies inside one live
// allocation. An empty b is always fine.
func (s *hostRanges) check(op string, b []byte) error {
	if len(b) == 0 {
		return nil
	}
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	s.mu.Lock()
	defer s.mu.Unlock()
	i, ok := slices.BinarySearchFunc(s.r, p, func(r hostRange, p uintptr) int { return cmpAddr(r.start, p) })
	if !ok {
		i-- // the last range starting before p
	}
	if i < 0 || p+uintptr(len(b)) > s.r[i].end {
		return invalid(op, "host memory [%#x, %#x) is not inside memory from AllocHost (asynchronous copies need page-locked memory)", p, p+uintptr(len(b)))
	}
	return nil
}

func cmpAddr(a, b uintptr) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
