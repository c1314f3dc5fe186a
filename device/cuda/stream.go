//go:build cuda

package cuda

/*
#include <cuda.h>

static CUresult goccl_wait_value(CUstream s, CUdeviceptr addr, cuuint32_t v) {
	// v2: available by default from driver 11.7 on; the v1 entry point
	// needs a kernel module parameter on Linux.
	return cuStreamWaitValue32_v2(s, addr, v, CU_STREAM_WAIT_VALUE_GEQ);
}

static CUresult goccl_stream_ctx(CUstream s, CUcontext *ctx) {
	return cuStreamGetCtx(s, ctx);
}

static CUresult goccl_host_device_pointer(CUdeviceptr *d, void *p) {
	return cuMemHostGetDevicePointer(d, p, 0);
}
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"gorgonia.org/cu"

	"github.com/goccl/goccl/device"
	"github.com/goccl/goccl/kernels"
	"github.com/goccl/goccl/reduceop"
)

var (
	_ device.Stream = (*Stream)(nil)
	_ device.Event  = (*Event)(nil)
	_ device.Hold   = (*hold)(nil)
)

// Stream is a CUDA stream: its own (NewStream) or the caller's
// (WrapStream). It implements device.Stream.
type Stream struct {
	c   *Context
	s   cu.Stream
	own bool

	mu        sync.Mutex   // guards the fields below
	destroyed bool         // by Destroy
	scratch   cu.DevicePtr // 1-bit partial sums, then the sum of squares; see scratchMem
}

// NewStream creates a stream that does not synchronize with the null
// stream; the Stream is a *Stream.
func (c *Context) NewStream() (device.Stream, error) {
	s, err := c.newStream()
	if err != nil {
		return nil, err
	}
	return s, nil
}

func (c *Context) newStream() (*Stream, error) {
	s := &Stream{c: c, own: true}
	err := c.do("create stream", func() (err error) {
		s.s, err = cu.MakeStream(cu.NonBlocking)
		return err
	})
	if err != nil {
		return nil, err
	}
	return s, nil
}

// WrapStream returns a Stream over a CUstream the caller owns (a
// torch.cuda.Stream's cuda_stream, a CuPy stream's ptr), so goccl's copies
// and kernels are ordered with the framework's work on it. Destroy does not
// destroy the CUstream, which must outlive every use of the Stream; 0 is
// the legacy null stream. The stream must belong to c's CUDA context (with
// Open, the framework's streams on the same device do): the driver is
// asked (cuStreamGetCtx), and a stream of another context, or a handle it
// does not know, gives an error wrapping ErrInvalid.
func (c *Context) WrapStream(s uintptr) (*Stream, error) {
	st := &Stream{c: c}
	*(*uintptr)(unsafe.Pointer(&st.s)) = s
	var ctx C.CUcontext
	err := c.do("wrap stream", func() error {
		if r := C.goccl_stream_ctx(raw(st.s), &ctx); r != C.CUDA_SUCCESS {
			return invalid("wrap stream", "cuStreamGetCtx(%#x): CUresult %d", s, int(r))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if uintptr(unsafe.Pointer(ctx)) != c.Handle() {
		return nil, invalid("wrap stream", "stream %#x belongs to CUDA context %#x, not %v's %#x", s, uintptr(unsafe.Pointer(ctx)), c, c.Handle())
	}
	return st, nil
}

// Handle returns the CUstream, for a framework to wait on or use.
func (s *Stream) Handle() uintptr { return *(*uintptr)(unsafe.Pointer(&s.s)) }

// raw returns the C handle of gorgonia's stream s.
func raw(s cu.Stream) C.CUstream { return *(*C.CUstream)(unsafe.Pointer(&s)) }

// enqueue runs f, which enqueues work on the stream, inside do, unless the
// stream was destroyed.
func (s *Stream) enqueue(op string, f func() error) error {
	s.mu.Lock()
	destroyed := s.destroyed
	s.mu.Unlock()
	if destroyed {
		return invalid(op, "stream used after Destroy")
	}
	return s.c.do(op, f)
}

// CopyToHost enqueues a copy of len(dst) bytes of src from byte off to dst,
// which must lie inside memory from AllocHost (cuMemcpyDtoHAsync).
func (s *Stream) CopyToHost(dst []byte, src device.Buffer, off int) error {
	const op = "stream copy to host"
	b, err := s.c.buffer(op, "source", src)
	if err != nil {
		return err
	}
	if err := checkSpan(op, "source", b.bytes(), off, len(dst)); err != nil {
		return err
	}
	if err := s.c.hosts.check(op, dst); err != nil || len(dst) == 0 {
		return err
	}
	return s.enqueue(op, func() error {
		return cu.MemcpyDtoHAsync(unsafe.Pointer(&dst[0]), b.ptr+cu.DevicePtr(off), int64(len(dst)), s.s)
	})
}

// CopyFromHost enqueues a copy of src, which must lie inside memory from
// AllocHost, to dst from byte off (cuMemcpyHtoDAsync).
func (s *Stream) CopyFromHost(dst device.Buffer, off int, src []byte) error {
	const op = "stream copy from host"
	b, err := s.c.buffer(op, "destination", dst)
	if err != nil {
		return err
	}
	if err := checkSpan(op, "destination", b.bytes(), off, len(src)); err != nil {
		return err
	}
	if err := s.c.hosts.check(op, src); err != nil || len(src) == 0 {
		return err
	}
	return s.enqueue(op, func() error {
		return cu.MemcpyHtoDAsync(b.ptr+cu.DevicePtr(off), unsafe.Pointer(&src[0]), int64(len(src)), s.s)
	})
}

// Copy enqueues a copy of n bytes from src at soff to dst at doff on the
// device (cuMemcpyDtoDAsync). The ranges must not overlap unless they are
// the same range.
func (s *Stream) Copy(dst device.Buffer, doff int, src device.Buffer, soff int, n int) error {
	const op = "stream copy"
	db, err := s.c.buffer(op, "destination", dst)
	if err != nil {
		return err
	}
	sb, err := s.c.buffer(op, "source", src)
	if err != nil {
		return err
	}
	if err := checkSpan(op, "destination", db.bytes(), doff, n); err != nil {
		return err
	}
	if err := checkSpan(op, "source", sb.bytes(), soff, n); err != nil {
		return err
	}
	d, from := db.ptr+cu.DevicePtr(doff), sb.ptr+cu.DevicePtr(soff)
	if overlapping(uintptr(d), uintptr(from), n) {
		return invalid(op, "%d bytes from %#x to %#x overlap", n, uintptr(from), uintptr(d))
	}
	if n == 0 || d == from {
		return nil
	}
	return s.enqueue(op, func() error { return cu.MemcpyDtoDAsync(d, from, int64(n), s.s) })
}

// Reduce enqueues dst[i] = dst[i] op src[i] for n elements of dst's dtype
// from the byte offsets doff and soff, with reduceop's arithmetic (Avg
// sums; Scale divides):
//
//	for i := range n { dst[doff/size+i] = op(dst[doff/size+i], src[soff/size+i]) }
//
// src must have dst's dtype, and the ranges must not overlap unless they are
// the same range.
func (s *Stream) Reduce(op reduceop.Op, dst device.Buffer, doff int, src device.Buffer, soff int, n int) error {
	const what = "stream reduce"
	db, err := s.c.buffer(what, "destination", dst)
	if err != nil {
		return err
	}
	sb, err := s.c.buffer(what, "source", src)
	if err != nil {
		return err
	}
	if sb.dt != db.dt {
		return invalid(what, "destination is %v, source is %v", db.dt, sb.dt)
	}
	name, err := kernels.ReduceKernelName(db.dt, op)
	if err != nil {
		return fmt.Errorf("goccl: cuda: %s: %w (%w)", what, err, ErrInvalid)
	}
	if err := checkElems(what, "destination", db.dt, db.bytes(), doff, n); err != nil {
		return err
	}
	if err := checkElems(what, "source", sb.dt, sb.bytes(), soff, n); err != nil {
		return err
	}
	d, from := db.ptr+cu.DevicePtr(doff), sb.ptr+cu.DevicePtr(soff)
	if overlapping(uintptr(d), uintptr(from), n*db.dt.Size()) {
		return invalid(what, "%d x %v at %#x and %#x overlap", n, db.dt, uintptr(d), uintptr(from))
	}
	if n == 0 {
		return nil
	}
	return s.enqueue(what, func() error {
		return s.c.launch(s.s, name, vectors(db.dt, n), uint64(d), uint64(from), uint64(n))
	})
}

// Scale enqueues the division of n elements of dst's dtype from byte off by
// div, the last step of Avg, as reduceop.Scale does:
//
//	for i := range n { x[i] = T(C(x[i]) / C(div)) } // C: float32, or float64 for float64
func (s *Stream) Scale(dst device.Buffer, off int, n int, div int) error {
	const what = "stream scale"
	b, err := s.c.buffer(what, "buffer", dst)
	if err != nil {
		return err
	}
	name, err := kernels.ScaleKernelName(b.dt)
	if err != nil {
		return fmt.Errorf("goccl: cuda: %s: %w (%w)", what, err, ErrInvalid)
	}
	if err := checkDivisor(what, b.dt, div); err != nil {
		return err
	}
	if err := checkElems(what, "buffer", b.dt, b.bytes(), off, n); err != nil {
		return err
	}
	if n == 0 || div == 1 {
		return nil
	}
	x := b.ptr + cu.DevicePtr(off)
	return s.enqueue(what, func() error {
		return s.c.launch(s.s, name, vectors(b.dt, n), uint64(x), uint64(n), uint64(div))
	})
}

// event returns x as an Event of c, or an error wrapping ErrInvalid.
func (c *Context) event(op string, x device.Event) (*Event, error) {
	e, ok := x.(*Event)
	switch {
	case x == nil || (ok && e == nil):
		return nil, invalid(op, "event is nil")
	case !ok:
		return nil, invalid(op, "event is a %T, not an event of %v", x, c)
	case e.c.cuctx != c.cuctx:
		return nil, invalid(op, "event of CUDA context %#x, not %#x (%v)", e.c.Handle(), c.Handle(), c)
	case e.destroyed.Load():
		return nil, invalid(op, "event used after Destroy")
	}
	return e, nil
}

// Record records e at the current end of the stream (cuEventRecord).
func (s *Stream) Record(e device.Event) error {
	ev, err := s.c.event("record event", e)
	if err != nil {
		return err
	}
	return s.enqueue("record event", func() error { return ev.e.Record(s.s) })
}

// WaitEvent makes work enqueued after it wait for e (cuStreamWaitEvent).
func (s *Stream) WaitEvent(e device.Event) error {
	ev, err := s.c.event("wait event", e)
	if err != nil {
		return err
	}
	return s.enqueue("wait event", func() error { return s.s.Wait(ev.e, 0) })
}

// Synchronize waits until the work enqueued so far has run, or ctx ends. It
// polls the stream (cuStreamQuery) with a backoff from 2µs to 1ms, so a
// cancelled ctx returns within about a millisecond.
func (s *Stream) Synchronize(ctx context.Context) error {
	s.mu.Lock()
	destroyed := s.destroyed
	s.mu.Unlock()
	if destroyed {
		return invalid("synchronize stream", "stream used after Destroy")
	}
	return s.c.poll(ctx, "synchronize stream", s.s.Query)
}

// Destroy releases the stream after the work enqueued on it has run
// (cuStreamDestroy), without waiting for it; for a wrapped stream it only
// drops goccl's state. Scratch memory of 1-bit steps that ran on the stream
// is freed once an event recorded at the stream's end has completed.
func (s *Stream) Destroy() error {
	s.mu.Lock()
	destroyed := s.destroyed
	s.destroyed = true
	s.mu.Unlock()
	if destroyed {
		return nil
	}
	return s.c.do("destroy stream", func() error {
		s.mu.Lock()
		scratch := s.scratch
		s.scratch = 0
		s.mu.Unlock()
		var errs []error
		if scratch != 0 {
			errs = append(errs, s.c.retire(s.s, scratch))
		}
		if s.own {
			errs = append(errs, s.s.Destroy())
		}
		return errors.Join(errs...)
	})
}

// retired is device memory that work on a destroyed stream may still use,
// to be freed when the event recorded at the stream's end completes.
type retired struct {
	p cu.DevicePtr
	e cu.Event
}

// retire frees p once the work enqueued on s so far has run, without
// waiting for it: an event is recorded on s and p is freed by a later
// sweep, or by Close. Call inside do.
func (c *Context) retire(s cu.Stream, p cu.DevicePtr) error {
	e, err := cu.MakeEvent(cu.DisableTiming)
	if err == nil {
		if err = e.Record(s); err != nil {
			cu.DestroyEvent(&e)
		}
	}
	if err != nil {
		return fmt.Errorf("retire scratch memory: %w", err)
	}
	c.retiredMu.Lock()
	c.retired = append(c.retired, retired{p, e})
	c.retiredMu.Unlock()
	return c.sweep(false)
}

// sweep frees the retired memory whose event has completed, or all of it
// if all (Close, after the device has finished). Call inside do or Close.
func (c *Context) sweep(all bool) error {
	c.retiredMu.Lock()
	defer c.retiredMu.Unlock()
	var errs []error
	keep := c.retired[:0]
	for _, r := range c.retired {
		if !all {
			if err := r.e.Query(); err == cu.NotReady {
				keep = append(keep, r)
				continue
			}
		}
		errs = append(errs, cu.MemFree(r.p), cu.DestroyEvent(&r.e))
	}
	clear(c.retired[len(keep):])
	c.retired = keep
	return errors.Join(errs...)
}

// poll calls query inside do until it reports done (nil) or fails (not
// cu.NotReady), sleeping between calls from 2µs doubling to 1ms, or until
// ctx ends.
func (c *Context) poll(ctx context.Context, op string, query func() error) error {
	wait := 2 * time.Microsecond
	var t *time.Timer
	for {
		done := false
		err := c.do(op, func() error {
			switch err := query(); err {
			case nil:
				done = true
			case cu.NotReady:
			default:
				return err
			}
			return nil
		})
		if err != nil || done {
			return err
		}
		if t == nil {
			t = time.NewTimer(wait)
			defer t.Stop()
		} else {
			t.Reset(wait)
		}
		select {
		case <-ctx.Done():
			if cause := context.Cause(ctx); cause != ctx.Err() {
				return fmt.Errorf("goccl: cuda: %s on %v: %w (%w)", op, c, ctx.Err(), cause)
			}
			return fmt.Errorf("goccl: cuda: %s on %v: %w", op, c, ctx.Err())
		case <-t.C:
		}
		wait = min(2*wait, time.Millisecond)
	}
}

// Event is a CUDA event. It implements device.Event.
type Event struct {
	c         *Context
	e         cu.Event
	destroyed atomic.Bool
}

// NewEvent creates an event (with timing, for Elapsed); the Event is an
// *Event.
func (c *Context) NewEvent() (device.Event, error) {
	e, err := c.newEvent()
	if err != nil {
		return nil, err
	}
	return e, nil
}

func (c *Context) newEvent() (*Event, error) {
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

// Wait blocks until the work before e's last Record has run, or ctx ends.
// It polls the event (cuEventQuery) as Stream.Synchronize polls a stream.
func (e *Event) Wait(ctx context.Context) error {
	if _, err := e.c.event("wait event", e); err != nil {
		return err
	}
	return e.c.poll(ctx, "wait event", e.e.Query)
}

// Done reports whether the work before e's last Record has run.
func (e *Event) Done() (bool, error) {
	if _, err := e.c.event("query event", e); err != nil {
		return false, err
	}
	done := false
	err := e.c.do("query event", func() error {
		switch err := e.e.Query(); err {
		case nil:
			done = true
		case cu.NotReady:
		default:
			return err
		}
		return nil
	})
	return done, err
}

// Destroy releases the event. Destroying twice is an error wrapping
// ErrInvalid.
func (e *Event) Destroy() error {
	if e.destroyed.Swap(true) {
		return invalid("destroy event", "event destroyed twice")
	}
	return e.c.do("destroy event", func() error { return cu.DestroyEvent(&e.e) })
}

// Elapsed returns the device time between two completed events recorded on
// streams of one Context.
func Elapsed(start, end *Event) (time.Duration, error) {
	if start == nil || end == nil || start.c.cuctx != end.c.cuctx {
		return 0, invalid("elapsed", "events nil or of two contexts")
	}
	var ms float64
	err := start.c.do("elapsed", func() (err error) {
		ms, err = start.e.Elapsed(end.e)
		return err
	})
	return time.Duration(ms * float64(time.Millisecond)), err
}

// Hold enqueues a wait (cuStreamWaitValue32_v2) on a word of page-locked,
// device-mapped host memory that the returned Hold's Release writes: work
// enqueued after it waits until then, and the host never blocks. It needs a
// driver of CUDA 11.7 or later, where these stream memory operations are
// available by default; otherwise it returns an error wrapping
// errors.ErrUnsupported, decided once at Open.
func (s *Stream) Hold() (device.Hold, error) {
	const op = "stream hold"
	if s.c.holdErr != nil {
		return nil, fmt.Errorf("goccl: cuda: %s on %v: %w", op, s.c, s.c.holdErr)
	}
	var h *hold
	err := s.enqueue(op, func() error {
		slot, err := s.c.holds.get()
		if err != nil {
			return err
		}
		slot.gen++
		if r := C.goccl_wait_value(raw(s.s), C.CUdeviceptr(slot.dev), C.cuuint32_t(slot.gen)); r != C.CUDA_SUCCESS {
			slot.gen--
			s.c.holds.put(slot)
			if r == C.CUDA_ERROR_NOT_SUPPORTED {
				return fmt.Errorf("cuStreamWaitValue32_v2: %w", errors.ErrUnsupported)
			}
			return fmt.Errorf("cuStreamWaitValue32_v2: CUresult %d", int(r))
		}
		h = &hold{c: s.c, slot: slot, gen: slot.gen}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return h, nil
}

// holdSupport says why holds cannot work on dev, or nil: the v2 stream
// memory operations exist from driver 11.7 on, and the device must answer
// the v2 attribute query (CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR_V2;
// its value is about NOR waits, which holds do not use).
func holdSupport(dev cu.Device) error {
	if v := cu.Version(); v < 11070 {
		return fmt.Errorf("driver version %d lacks the v2 stream memory operations (need 11070): %w", v, errors.ErrUnsupported)
	}
	if _, err := dev.Attribute(cu.DeviceAttribute(C.CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR_V2)); err != nil {
		return fmt.Errorf("stream memory operations: %v: %w", err, errors.ErrUnsupported)
	}
	return nil
}

// hold is one Stream.Hold: its slot's word reaching gen releases it.
type hold struct {
	c    *Context
	slot *holdSlot
	gen  uint32
	once sync.Once
}

// Release writes the hold's generation to its word, which lets the stream
// run on, and returns the slot to the pool. After Close it does nothing.
func (h *hold) Release() {
	h.once.Do(func() {
		h.c.mu.RLock()
		defer h.c.mu.RUnlock()
		if h.c.closed {
			return
		}
		atomic.StoreUint32(h.slot.host, h.gen)
		h.c.holds.put(h.slot)
	})
}

// holdPool hands out words of page-locked, device-mapped host memory, a
// page at a time. A slot's generation only grows: a hold waits for its word
// to reach (>=, modulo 2^32) its own generation, which only its Release
// writes, while an older hold on the same slot, already released, sees a
// value at least as large as its own. So a slot is reused as soon as it is
// released, even if the stream has not reached the old wait yet.
type holdPool struct {
	mu    sync.Mutex
	pages []unsafe.Pointer
	all   []*holdSlot
	idle  []*holdSlot
}

type holdSlot struct {
	host *uint32
	dev  cu.DevicePtr
	gen  uint32 // guarded by the pool: changed only while taken
}

const holdPage = 4096

// get returns a free slot, allocating a page if none is. Call inside do.
func (p *holdPool) get() (*holdSlot, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.idle) == 0 {
		page, err := hostAlloc(holdPage)
		if err != nil {
			return nil, err
		}
		var dev C.CUdeviceptr
		if r := C.goccl_host_device_pointer(&dev, page); r != C.CUDA_SUCCESS {
			cu.MemFreeHost(page)
			return nil, fmt.Errorf("cuMemHostGetDevicePointer: CUresult %d", int(r))
		}
		p.pages = append(p.pages, page)
		words := unsafe.Slice((*uint32)(page), holdPage/4)
		for i := range words {
			words[i] = 0
			s := &holdSlot{host: &words[i], dev: cu.DevicePtr(dev) + cu.DevicePtr(4*i)}
			p.all = append(p.all, s)
			p.idle = append(p.idle, s)
		}
	}
	s := p.idle[len(p.idle)-1]
	p.idle = p.idle[:len(p.idle)-1]
	return s, nil
}

func (p *holdPool) put(s *holdSlot) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.idle = append(p.idle, s)
}

// releaseAll releases every hold still taken, so no stream waits for good
// on a word about to be freed.
func (p *holdPool) releaseAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, s := range p.all {
		atomic.StoreUint32(s.host, s.gen)
	}
}

// free releases the pages. Call inside onThread, once no stream can reach a
// wait on them any more.
func (p *holdPool) free() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	var errs []error
	for _, page := range p.pages {
		errs = append(errs, cu.MemFreeHost(page))
	}
	p.pages, p.all, p.idle = nil, nil, nil
	return errors.Join(errs...)
}
