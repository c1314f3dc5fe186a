package hostsim

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/goccl/goccl/device"
	"github.com/goccl/goccl/reduceop"
)

// Stream is an in-order queue of work run by one goroutine. It implements
// device.Stream; Launch adds host functions as kernels.
type Stream struct {
	d    *Device
	id   int
	wake chan struct{} // a token when the queue grows or the stream is destroyed

	mu        sync.Mutex // guards the fields below
	queue     []*work
	enqueued  uint64        // ops ever enqueued
	completed uint64        // ops run (or skipped), a prefix of those enqueued
	progress  chan struct{} // closed and replaced whenever completed grows
	destroyed bool
}

var _ device.Stream = (*Stream)(nil)

// work is one piece of work on a stream.
type work struct {
	kind  Kind
	name  string
	bytes int
	delay time.Duration
	// check, if set, runs just before the work and fails the device if the
	// memory was freed since the op was enqueued.
	check func() error
	// run does the work; a blocking run selects on the device's closedCh.
	run func()
}

// ID returns the stream's number on its device, from 0 in creation order;
// Span.Stream names it.
func (s *Stream) ID() int { return s.id }

// String names the stream, "hostsim:N stream I".
func (s *Stream) String() string { return fmt.Sprintf("%s stream %d", s.d.name, s.id) }

// run is the stream's goroutine.
func (s *Stream) run() {
	d := s.d
	defer d.wg.Done()
	for {
		s.mu.Lock()
		for len(s.queue) == 0 {
			if s.destroyed {
				s.mu.Unlock()
				return
			}
			s.mu.Unlock()
			select {
			case <-s.wake:
			case <-d.closedCh:
				return
			}
			s.mu.Lock()
		}
		o := s.queue[0]
		s.queue[0] = nil
		s.queue = s.queue[1:]
		s.mu.Unlock()
		if d.closed.Load() {
			return
		}
		s.exec(o)
		s.mu.Lock()
		s.completed++
		close(s.progress)
		s.progress = make(chan struct{})
		s.mu.Unlock()
	}
}

// exec runs o unless the device has failed, and records it on the timeline.
func (s *Stream) exec(o *work) {
	d := s.d
	d.mu.Lock()
	failed := d.sticky != nil
	d.mu.Unlock()
	if failed {
		return
	}
	if o.check != nil {
		if err := o.check(); err != nil {
			d.fail(fmt.Errorf("%s: %s %s: %w", s, o.kind, o.name, err))
			return
		}
	}
	start := time.Now()
	if o.delay > 0 {
		t := time.NewTimer(o.delay)
		select {
		case <-t.C:
		case <-d.closedCh:
			t.Stop()
			return
		}
	}
	if o.run != nil {
		o.run()
	}
	d.record(Span{Stream: s.id, Kind: o.kind, Name: o.name, Bytes: o.bytes, Start: start, End: time.Now()})
}

// enqueue appends o after checking that the device and stream are usable.
func (s *Stream) enqueue(what string, o *work) error {
	if err := s.d.check(what); err != nil {
		return err
	}
	s.mu.Lock()
	if s.destroyed {
		s.mu.Unlock()
		return s.errorf(what, ErrDestroyed)
	}
	s.queue = append(s.queue, o)
	s.enqueued++
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
	return nil
}

func (s *Stream) errorf(op string, format any, args ...any) error {
	return s.d.errorf(fmt.Sprintf("stream %d: %s", s.id, op), format, args...)
}

// waitFor blocks until the stream has completed seq ops, ctx ends or the
// device closes. On return without error, the memory effects of those ops
// happen before the caller's next step.
func (s *Stream) waitFor(ctx context.Context, what string, seq uint64) error {
	for {
		if s.d.closed.Load() {
			return s.d.errorf(what, ErrClosed)
		}
		s.mu.Lock()
		done, ch := s.completed >= seq, s.progress
		s.mu.Unlock()
		if done {
			return s.d.check(what)
		}
		if ctx == nil {
			select {
			case <-ch:
			case <-s.d.closedCh:
			}
			continue
		}
		select {
		case <-ch:
		case <-s.d.closedCh:
		case <-ctx.Done():
			return s.d.errorf(what, "%w", context.Cause(ctx))
		}
	}
}

// buffer returns b as this device's Buffer, or an error if it is another's
// or was freed.
func (s *Stream) buffer(op, name string, b device.Buffer) (*Buffer, error) {
	hb, ok := b.(*Buffer)
	if !ok || hb == nil {
		return nil, s.errorf(op, "%s buffer %T: %w", name, b, ErrForeign)
	}
	if hb.a.d != s.d {
		return nil, s.errorf(op, "%s buffer of %s: %w", name, hb.a.d, ErrForeign)
	}
	if hb.gone() {
		return nil, s.errorf(op, "%s buffer: %w", name, ErrFreed)
	}
	return hb, nil
}

// span checks that bytes [off, off+n) lie in b.
func (s *Stream) span(op, name string, b *Buffer, off, n int) error {
	if off < 0 || n < 0 || off > len(b.mem) || n > len(b.mem)-off {
		return s.errorf(op, "%s range [%d,%d) outside buffer of %d bytes: %w", name, off, off+n, len(b.mem), ErrRange)
	}
	return nil
}

// freedCheck returns a work.check that fails if any of bs or hs was freed.
func freedCheck(bs []*Buffer, hs []*Host) func() error {
	return func() error {
		for _, b := range bs {
			if b.gone() {
				return fmt.Errorf("buffer used after Free: %w", ErrFreed)
			}
		}
		for _, h := range hs {
			if h != nil && h.freed.Load() {
				return fmt.Errorf("host memory used after Free: %w", ErrFreed)
			}
		}
		return nil
	}
}

// CopyToHost copies len(dst) bytes of src from byte off to dst, which must
// lie inside memory from AllocHost.
func (s *Stream) CopyToHost(dst []byte, src device.Buffer, off int) error {
	const what = "copy to host"
	b, err := s.buffer(what, "source", src)
	if err != nil {
		return err
	}
	if err := s.span(what, "source", b, off, len(dst)); err != nil {
		return err
	}
	h, err := s.d.pinned(s.opName(what), dst)
	if err != nil {
		return err
	}
	n := len(dst)
	return s.enqueue(what, &work{
		kind: KindCopyToHost, name: fmt.Sprintf("%d bytes", n), bytes: n, delay: s.d.lat.copyTime(n),
		check: freedCheck([]*Buffer{b}, []*Host{h}),
		run:   func() { copy(dst, b.mem[off:off+n]) },
	})
}

// CopyFromHost copies src, which must lie inside memory from AllocHost, to
// dst from byte off.
func (s *Stream) CopyFromHost(dst device.Buffer, off int, src []byte) error {
	const what = "copy from host"
	b, err := s.buffer(what, "destination", dst)
	if err != nil {
		return err
	}
	if err := s.span(what, "destination", b, off, len(src)); err != nil {
		return err
	}
	h, err := s.d.pinned(s.opName(what), src)
	if err != nil {
		return err
	}
	n := len(src)
	return s.enqueue(what, &work{
		kind: KindCopyFromHost, name: fmt.Sprintf("%d bytes", n), bytes: n, delay: s.d.lat.copyTime(n),
		check: freedCheck([]*Buffer{b}, []*Host{h}),
		run:   func() { copy(b.mem[off:off+n], src) },
	})
}

func (s *Stream) opName(what string) string { return fmt.Sprintf("stream %d: %s", s.id, what) }

// overlap reports whether [a, a+n) of x and [b, b+n) of y share a byte but
// are not the same range.
func overlap(x *Buffer, a int, y *Buffer, b int, n int) bool {
	if n == 0 {
		return false
	}
	xs, ys := addr(x.mem[a:a+n]), addr(y.mem[b:b+n])
	return xs != ys && xs < ys+uintptr(n) && ys < xs+uintptr(n)
}

// Copy copies n bytes from src at soff to dst at doff. The ranges must not
// overlap unless they are the same range (CUDA leaves that undefined).
func (s *Stream) Copy(dst device.Buffer, doff int, src device.Buffer, soff int, n int) error {
	const what = "copy"
	db, err := s.buffer(what, "destination", dst)
	if err != nil {
		return err
	}
	sb, err := s.buffer(what, "source", src)
	if err != nil {
		return err
	}
	if err := s.span(what, "destination", db, doff, n); err != nil {
		return err
	}
	if err := s.span(what, "source", sb, soff, n); err != nil {
		return err
	}
	if overlap(db, doff, sb, soff, n) {
		return s.errorf(what, "source and destination ranges of %d bytes overlap", n)
	}
	return s.enqueue(what, &work{
		kind: KindCopy, name: fmt.Sprintf("%d bytes", n), bytes: n, delay: s.d.lat.copyTime(n),
		check: freedCheck([]*Buffer{db, sb}, nil),
		run:   func() { copy(db.mem[doff:doff+n], sb.mem[soff:soff+n]) },
	})
}

// elems checks an element range given as a byte offset and a count of
// elements of dt in b and returns its length in bytes.
func (s *Stream) elems(what, name string, b *Buffer, off, n int) (int, error) {
	sz := b.dt.Size()
	if n < 0 {
		return 0, s.errorf(what, "negative count %d", n)
	}
	if off%sz != 0 {
		return 0, s.errorf(what, "%s offset %d is not a multiple of the %d-byte %v", name, off, sz, b.dt)
	}
	if err := s.span(what, name, b, off, n*sz); err != nil {
		return 0, err
	}
	return n * sz, nil
}

// Reduce computes dst[i] = dst[i] op src[i] for n elements with
// reduceop.Apply. dst and src must have the same dtype, the offsets must be
// multiples of its size and the ranges must be the same or disjoint. As on
// CUDA, a dtype without a device kernel is refused (device.CheckReduce).
func (s *Stream) Reduce(op reduceop.Op, dst device.Buffer, doff int, src device.Buffer, soff int, n int) error {
	what := "reduce " + op.String()
	db, err := s.buffer(what, "destination", dst)
	if err != nil {
		return err
	}
	sb, err := s.buffer(what, "source", src)
	if err != nil {
		return err
	}
	if err := device.CheckReduce(op, db.dt); err != nil {
		return s.errorf(what, err)
	}
	if sb.dt != db.dt {
		return s.errorf(what, "source is %v, destination %v", sb.dt, db.dt)
	}
	nb, err := s.elems(what, "destination", db, doff, n)
	if err != nil {
		return err
	}
	if _, err := s.elems(what, "source", sb, soff, n); err != nil {
		return err
	}
	if overlap(db, doff, sb, soff, nb) {
		return s.errorf(what, "source and destination ranges of %d bytes overlap", nb)
	}
	dt := db.dt
	return s.enqueue(what, &work{
		kind: KindReduce, name: fmt.Sprintf("%v %v x %d", op, dt, n), bytes: nb, delay: s.d.lat.Kernel,
		check: freedCheck([]*Buffer{db, sb}, nil),
		run: func() {
			if err := reduceop.Apply(dt, op, db.mem[doff:doff+nb], sb.mem[soff:soff+nb]); err != nil {
				s.d.fail(fmt.Errorf("%s: %s: %w", s, what, err))
			}
		},
	})
}

// Scale divides n elements of dst from byte off by div with reduceop.Scale.
func (s *Stream) Scale(dst device.Buffer, off int, n int, div int) error {
	const what = "scale"
	db, err := s.buffer(what, "destination", dst)
	if err != nil {
		return err
	}
	if err := device.CheckReduce(reduceop.Avg, db.dt); err != nil {
		return s.errorf(what, err)
	}
	if div <= 0 {
		return s.errorf(what, "divisor %d is not positive", div)
	}
	nb, err := s.elems(what, "destination", db, off, n)
	if err != nil {
		return err
	}
	dt := db.dt
	return s.enqueue(what, &work{
		kind: KindScale, name: fmt.Sprintf("%v x %d / %d", dt, n, div), bytes: nb, delay: s.d.lat.Kernel,
		check: freedCheck([]*Buffer{db}, nil),
		run: func() {
			if err := reduceop.Scale(dt, db.mem[off:off+nb], div); err != nil {
				s.d.fail(fmt.Errorf("%s: %s: %w", s, what, err))
			}
		},
	})
}

// Launch enqueues f as a kernel named name: the stream's goroutine calls f
// when the work before it has run, after the device's Launch latency, and
// the work after it waits until f returns. f must return, or Close cannot.
func (s *Stream) Launch(name string, f func()) error {
	what := "launch " + name
	if f == nil {
		return s.errorf(what, "nil function")
	}
	return s.enqueue(what, &work{kind: KindLaunch, name: name, delay: s.d.lat.Launch, run: f})
}

// Record marks the current end of the stream with e.
func (s *Stream) Record(e device.Event) error {
	const what = "record event"
	ev, err := s.event(what, e)
	if err != nil {
		return err
	}
	if err := s.d.check(what); err != nil {
		return err
	}
	// Lock order: event, then stream.
	ev.mu.Lock()
	defer ev.mu.Unlock()
	if ev.destroyed {
		return s.errorf(what, "event: %w", ErrDestroyed)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.destroyed {
		return s.errorf(what, ErrDestroyed)
	}
	ev.s, ev.seq = s, s.enqueued
	return nil
}

// WaitEvent makes the work enqueued after it wait until e completes, as of
// e's last Record before this call.
func (s *Stream) WaitEvent(e device.Event) error {
	const what = "wait event"
	ev, err := s.event(what, e)
	if err != nil {
		return err
	}
	es, seq, err := ev.mark(what)
	if err != nil {
		return err
	}
	o := &work{kind: KindWaitEvent}
	if es != nil {
		o.name = fmt.Sprintf("stream %d op %d", es.id, seq)
		o.run = func() { _ = es.waitFor(nil, what, seq) }
	} else {
		o.name = "never recorded"
	}
	return s.enqueue(what, o)
}

func (s *Stream) event(what string, e device.Event) (*Event, error) {
	ev, ok := e.(*Event)
	if !ok || ev == nil {
		return nil, s.errorf(what, "event %T: %w", e, ErrForeign)
	}
	if ev.d != s.d {
		return nil, s.errorf(what, "event of %s: %w", ev.d, ErrForeign)
	}
	return ev, nil
}

// Hold makes the work enqueued after it wait until the Hold is released.
func (s *Stream) Hold() (device.Hold, error) {
	h := &hold{released: make(chan struct{})}
	err := s.enqueue("hold", &work{kind: KindHold, run: func() {
		select {
		case <-h.released:
		case <-s.d.closedCh:
		}
	}})
	if err != nil {
		return nil, err
	}
	return h, nil
}

type hold struct {
	once     sync.Once
	released chan struct{}
}

func (h *hold) Release() { h.once.Do(func() { close(h.released) }) }

// Synchronize waits until all work enqueued so far has run, ctx ends (the
// error wraps context.Cause(ctx)) or the device closes.
func (s *Stream) Synchronize(ctx context.Context) error {
	const what = "synchronize"
	if err := s.d.check(what); err != nil {
		return err
	}
	s.mu.Lock()
	seq, destroyed := s.enqueued, s.destroyed
	s.mu.Unlock()
	if destroyed {
		return s.errorf(what, ErrDestroyed)
	}
	return s.waitFor(ctx, s.opName(what), seq)
}

// Destroy ends the stream: later calls on it return an error wrapping
// ErrDestroyed, and its goroutine exits once the work already enqueued has
// run. Destroy does not wait for that work.
func (s *Stream) Destroy() error {
	const what = "destroy"
	if err := s.d.check(what); err != nil {
		return err
	}
	s.mu.Lock()
	already := s.destroyed
	s.destroyed = true
	s.mu.Unlock()
	if already {
		return s.errorf(what, ErrDestroyed)
	}
	select {
	case s.wake <- struct{}{}:
	default:
	}
	return nil
}

// Event marks a point on a stream: the number of ops enqueued on it when
// it was last recorded. It implements device.Event.
type Event struct {
	d *Device

	mu        sync.Mutex // guards the fields below
	s         *Stream    // nil until recorded
	seq       uint64
	destroyed bool
}

var _ device.Event = (*Event)(nil)

// mark returns the stream and position of the event's last Record; a nil
// stream means never recorded.
func (e *Event) mark(what string) (*Stream, uint64, error) {
	if err := e.d.check(what); err != nil {
		return nil, 0, err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.destroyed {
		return nil, 0, e.d.errorf(what, "event: %w", ErrDestroyed)
	}
	return e.s, e.seq, nil
}

// Wait blocks until the work before the event's last Record has run, ctx
// ends or the device closes.
func (e *Event) Wait(ctx context.Context) error {
	const what = "wait for event"
	s, seq, err := e.mark(what)
	if err != nil || s == nil {
		return err
	}
	return s.waitFor(ctx, what, seq)
}

// Done reports whether Wait would return at once.
func (e *Event) Done() (bool, error) {
	const what = "query event"
	s, seq, err := e.mark(what)
	if err != nil || s == nil {
		return err == nil, err
	}
	s.mu.Lock()
	done := s.completed >= seq
	s.mu.Unlock()
	return done, e.d.check(what)
}

// Destroy ends the event; waits already enqueued on it still complete.
func (e *Event) Destroy() error {
	if err := e.d.check("destroy event"); err != nil {
		return err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.destroyed {
		return e.d.errorf("destroy event", ErrDestroyed)
	}
	e.destroyed = true
	return nil
}
