package hostsim_test

import (
	"bytes"
	"context"
	"errors"
	"math"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/goccl/goccl/device"
	"github.com/goccl/goccl/device/hostsim"
	"github.com/goccl/goccl/reduceop"
)

// hangGuard bounds waits so that a bug fails a test instead of hanging it.
const hangGuard = time.Minute

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), hangGuard)
	t.Cleanup(cancel)
	return c
}

func newDevice(t *testing.T, opts ...hostsim.Option) *hostsim.Device {
	dev := hostsim.New(opts...)
	t.Cleanup(func() { dev.Close() })
	return dev
}

// must returns v, or panics (failing the test) on a setup error.
func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func ok(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func wantErr(t *testing.T, what string, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Errorf("%s: %v, want an error wrapping %q", what, err, target)
	}
}

func TestNotPinned(t *testing.T) {
	dev := newDevice(t)
	s := must(dev.NewStream())
	b := must(dev.Alloc(reduceop.Uint8, 64))
	h := must(dev.AllocHost(64))

	goMem := make([]byte, 16)
	wantErr(t, "CopyToHost into Go memory", s.CopyToHost(goMem, b, 0), hostsim.ErrNotPinned)
	wantErr(t, "CopyFromHost from Go memory", s.CopyFromHost(b, 0, goMem), hostsim.ErrNotPinned)
	// A range inside the pinned memory, even at an odd address, is fine;
	// an empty one needs no memory at all.
	ok(t, s.CopyToHost(h.Bytes()[3:19], b, 0))
	ok(t, s.CopyFromHost(b, 0, h.Bytes()[63:]))
	ok(t, s.CopyFromHost(b, 0, goMem[:0]))
	ok(t, s.Synchronize(ctx(t)))
	// Two pinned allocations next to each other in Go's heap would not make
	// one range: a slice reaching past the end of an allocation (through
	// its capacity) is refused.
	long := unsafe.Slice(&h.Bytes()[60], 8)
	wantErr(t, "CopyToHost past the end of host memory", s.CopyToHost(long, b, 0), hostsim.ErrNotPinned)

	ok(t, h.Free())
	wantErr(t, "CopyToHost into freed host memory", s.CopyToHost(h.Bytes()[:8], b, 0), hostsim.ErrNotPinned)
	wantErr(t, "second Free of host memory", h.Free(), hostsim.ErrFreed)
	ok(t, s.Synchronize(ctx(t)))
}

// TestFreedWhilePending: memory freed while work using it is still queued
// fails the device when that work comes up, as a CUDA context fails.
func TestFreedWhilePending(t *testing.T) {
	for _, what := range []string{"host", "buffer", "slice origin"} {
		t.Run(what, func(t *testing.T) {
			dev := newDevice(t)
			s := must(dev.NewStream())
			b := must(dev.Alloc(reduceop.Uint8, 64))
			h := must(dev.AllocHost(64))
			hold := must(s.Hold())
			switch what {
			case "host":
				ok(t, s.CopyFromHost(b, 0, h.Bytes()))
				ok(t, h.Free())
			case "buffer":
				ok(t, s.CopyToHost(h.Bytes(), b, 0))
				ok(t, b.Free())
			case "slice origin":
				ok(t, s.CopyToHost(h.Bytes()[:8], b.(*hostsim.Buffer).Slice(8, 16), 0))
				ok(t, b.Free())
			}
			hold.Release()
			err := s.Synchronize(ctx(t))
			wantErr(t, "Synchronize after the work met freed memory", err, hostsim.ErrFreed)
			_, err = dev.NewStream()
			wantErr(t, "a later call on the failed device", err, hostsim.ErrFreed)
		})
	}
}

func TestWrapAndSlice(t *testing.T) {
	dev := newDevice(t)
	s := must(dev.NewStream())
	mem := make([]byte, 64)
	w := must(dev.Wrap(reduceop.Float32, mem))
	if w.Len() != 16 || w.DType() != reduceop.Float32 || w.Device() != device.Device(dev) {
		t.Fatalf("Wrap of 64 bytes as float32: %d x %v on %v", w.Len(), w.DType(), w.Device())
	}
	sl := w.Slice(4, 8)
	if sl.Len() != 4 || &sl.Bytes()[0] != &mem[16] {
		t.Fatalf("Slice(4, 8) is %d elements at another address", sl.Len())
	}
	h := must(dev.AllocHost(16))
	copy(h.Bytes(), "0123456789abcdef")
	ok(t, s.CopyFromHost(sl, 0, h.Bytes()))
	wantErr(t, "CopyFromHost past the slice's end", s.CopyFromHost(sl, 1, h.Bytes()), hostsim.ErrRange)
	ok(t, s.Synchronize(ctx(t)))
	if string(mem[16:32]) != "0123456789abcdef" || !bytes.Equal(mem[:16], make([]byte, 16)) || !bytes.Equal(mem[32:], make([]byte, 32)) {
		t.Fatalf("a copy into Slice(4, 8) left the wrapped memory as %q", mem)
	}

	ok(t, sl.Free()) // ends the slice only
	wantErr(t, "CopyToHost from a freed slice", s.CopyToHost(h.Bytes(), sl, 0), hostsim.ErrFreed)
	ok(t, s.CopyToHost(h.Bytes(), w, 16))
	ok(t, s.Synchronize(ctx(t)))
	if string(h.Bytes()) != "0123456789abcdef" {
		t.Fatalf("read back %q", h.Bytes())
	}
	sl2 := w.Slice(0, 1)
	ok(t, w.Free())
	wantErr(t, "CopyToHost from a slice of a freed buffer", s.CopyToHost(h.Bytes()[:4], sl2, 0), hostsim.ErrFreed)
	if string(mem[16:32]) != "0123456789abcdef" {
		t.Fatalf("Free of a wrapped buffer changed its memory")
	}
	ok(t, s.Synchronize(ctx(t)))

	if _, err := dev.Wrap(reduceop.Float32, mem[:7]); err == nil {
		t.Error("Wrap of 7 bytes as float32: no error")
	}
	if _, err := dev.Wrap(reduceop.Float32, mem[1:9]); err == nil {
		t.Error("Wrap of misaligned memory as float32: no error")
	}
	if _, err := dev.Wrap(reduceop.DType(0), mem); err == nil {
		t.Error("Wrap with an invalid dtype: no error")
	}
	defer func() {
		if recover() == nil {
			t.Error("Slice(3, 2) did not panic")
		}
	}()
	w.Slice(3, 2)
}

func TestAllocAligned(t *testing.T) {
	dev := newDevice(t)
	for n := range 40 {
		b := must(dev.Alloc(reduceop.Int8, n+1)).(*hostsim.Buffer)
		if p := uintptr(unsafe.Pointer(&b.Bytes()[0])); p%16 != 0 {
			t.Errorf("Alloc of %d bytes starts at %#x", n+1, p)
		}
		h := must(dev.AllocHost(n + 1))
		if p := uintptr(unsafe.Pointer(&h.Bytes()[0])); p%16 != 0 {
			t.Errorf("AllocHost of %d bytes starts at %#x", n+1, p)
		}
	}
}

func TestArgumentErrors(t *testing.T) {
	dev := newDevice(t)
	other := newDevice(t)
	s := must(dev.NewStream())
	a := must(dev.Alloc(reduceop.Float32, 16)).(*hostsim.Buffer)
	i32 := must(dev.Alloc(reduceop.Int32, 16))
	foreign := must(other.Alloc(reduceop.Float32, 16))
	fe := must(other.NewEvent())
	h := must(dev.AllocHost(64))

	err := s.CopyToHost(h.Bytes()[:8], a, 60)
	wantErr(t, "CopyToHost past the end", err, hostsim.ErrRange)
	for _, part := range []string{dev.String(), "copy to host", "[60,68)", "64 bytes"} {
		if err == nil || !strings.Contains(err.Error(), part) {
			t.Errorf("error %q does not say %q", err, part)
		}
	}
	wantErr(t, "Copy from another device's buffer", s.Copy(a, 0, foreign, 0, 4), hostsim.ErrForeign)
	wantErr(t, "Reduce into another device's buffer", s.Reduce(reduceop.Sum, foreign, 0, a, 0, 1), hostsim.ErrForeign)
	wantErr(t, "Record of another device's event", s.Record(fe), hostsim.ErrForeign)
	wantErr(t, "WaitEvent on another device's event", s.WaitEvent(fe), hostsim.ErrForeign)
	wantErr(t, "Reduce with an unsupported op", s.Reduce(reduceop.Avg, i32, 0, i32, 0, 1), reduceop.ErrUnsupported)

	_, hugeErr := dev.Alloc(reduceop.Float64, math.MaxInt/4)
	bad := map[string]error{
		"Alloc of MaxInt/4 float64":         hugeErr,
		"Copy between overlapping ranges":   s.Copy(a, 0, a, 4, 8),
		"Copy into a slice overlapping src": s.Copy(a.Slice(1, 4), 0, a, 0, 8),
		"Reduce of overlapping ranges":      s.Reduce(reduceop.Sum, a, 0, a, 4, 2),
		"Reduce at a misaligned offset":     s.Reduce(reduceop.Sum, a, 2, a, 32, 1),
		"Reduce of mixed dtypes":            s.Reduce(reduceop.Sum, a, 0, i32, 0, 1),
		"Scale at a misaligned offset":      s.Scale(a, 1, 1, 2),
		"Launch of nil":                     s.(*hostsim.Stream).Launch("nil", nil),
	}
	for what, err := range bad {
		if err == nil {
			t.Errorf("%s: no error", what)
		}
	}
	// The same range is no overlap: a copy onto itself and x op x are fine.
	ok(t, s.Copy(a, 8, a, 8, 8))
	ok(t, s.Reduce(reduceop.Sum, a, 0, a, 0, 16))
	ok(t, s.Synchronize(ctx(t)))
}

// TestTimeline: a consumer that waits for an event starts after the
// producer's work ended, the spans name streams, kinds and launches, and
// every span lasts at least its injected latency.
func TestTimeline(t *testing.T) {
	const copyLat, launchLat, kernelLat = 2 * time.Millisecond, 3 * time.Millisecond, time.Millisecond
	dev := newDevice(t, hostsim.Latency{Copy: copyLat, CopyBandwidth: 1e6, Launch: launchLat, Kernel: kernelLat})
	if dev.Timeline() != nil {
		t.Fatal("Timeline before StartTimeline is not nil")
	}
	dev.StartTimeline()
	producer := must(dev.NewStream()).(*hostsim.Stream)
	consumer := must(dev.NewStream()).(*hostsim.Stream)
	b := must(dev.Alloc(reduceop.Float32, 1000))
	h := must(dev.AllocHost(4000))
	e := must(dev.NewEvent())

	var collectiveRan bool
	ok(t, producer.CopyFromHost(b, 0, h.Bytes()))
	ok(t, producer.Launch("collective", func() { collectiveRan = true }))
	ok(t, producer.Record(e))
	ok(t, consumer.WaitEvent(e))
	ok(t, consumer.Launch("consumer", func() {
		if !collectiveRan {
			t.Error("consumer ran before the collective")
		}
	}))
	ok(t, consumer.Scale(b, 0, 1000, 2))
	ok(t, consumer.Synchronize(ctx(t)))

	spans := dev.Timeline()
	find := func(stream int, k hostsim.Kind) hostsim.Span {
		t.Helper()
		for _, sp := range spans {
			if sp.Stream == stream && sp.Kind == k {
				return sp
			}
		}
		t.Fatalf("no %v span on stream %d in %v", k, stream, spans)
		return hostsim.Span{}
	}
	cp := find(producer.ID(), hostsim.KindCopyFromHost)
	coll := find(producer.ID(), hostsim.KindLaunch)
	wait := find(consumer.ID(), hostsim.KindWaitEvent)
	cons := find(consumer.ID(), hostsim.KindLaunch)
	sc := find(consumer.ID(), hostsim.KindScale)
	if coll.Name != "collective" || cons.Name != "consumer" || cp.Bytes != 4000 {
		t.Errorf("spans name %q and %q with %d bytes copied", coll.Name, cons.Name, cp.Bytes)
	}
	if cons.Start.Before(coll.End) || cons.Start.Before(wait.End) || coll.Start.Before(cp.End) {
		t.Errorf("out of order: copy %v-%v, collective %v-%v, wait ended %v, consumer started %v",
			cp.Start, cp.End, coll.Start, coll.End, wait.End, cons.Start)
	}
	// Lower bounds only: sleeping never takes less than asked.
	if d := cp.End.Sub(cp.Start); d < copyLat+4*time.Millisecond {
		t.Errorf("a 4000-byte copy at 1 MB/s plus %v took %v", copyLat, d)
	}
	if d := coll.End.Sub(coll.Start); d < launchLat {
		t.Errorf("a launch with latency %v took %v", launchLat, d)
	}
	if d := sc.End.Sub(sc.Start); d < kernelLat {
		t.Errorf("a scale with latency %v took %v", kernelLat, d)
	}
	if hostsim.KindCopyFromHost.String() != "copy from host" || hostsim.Kind(99).String() != "Kind(99)" {
		t.Error("Kind.String")
	}
}

// TestStreamsRunConcurrently: two launches on two streams each wait until
// the other has started, which only works if the streams run at once.
func TestStreamsRunConcurrently(t *testing.T) {
	dev := newDevice(t)
	s1 := must(dev.NewStream())
	s2 := must(dev.NewStream())
	a, b := make(chan struct{}), make(chan struct{})
	met := make(chan bool, 2)
	meet := func(mine, theirs chan struct{}) func() {
		return func() {
			close(mine)
			select {
			case <-theirs:
				met <- true
			case <-time.After(hangGuard):
				met <- false
			}
		}
	}
	ok(t, s1.(*hostsim.Stream).Launch("a", meet(a, b)))
	ok(t, s2.(*hostsim.Stream).Launch("b", meet(b, a)))
	if !<-met || !<-met {
		t.Fatal("launches on two streams did not run at the same time")
	}
}

// TestCopiesOverlap: copies with latency on two streams overlap in time.
// Each stream runs 5 copies of 40 ms, 200 ms in all; their spans fail to
// overlap only if one stream is kept from starting for all of the other's
// 200 ms, a margin no scheduler hiccup reaches.
func TestCopiesOverlap(t *testing.T) {
	if testing.Short() {
		t.Skip("sleeps 200 ms")
	}
	dev := newDevice(t, hostsim.Latency{Copy: 40 * time.Millisecond})
	s1 := must(dev.NewStream()).(*hostsim.Stream)
	s2 := must(dev.NewStream()).(*hostsim.Stream)
	b := must(dev.Alloc(reduceop.Uint8, 128))
	dev.StartTimeline()
	for range 5 {
		ok(t, s1.Copy(b, 0, b, 64, 32))
		ok(t, s2.Copy(b, 32, b, 96, 32))
	}
	ok(t, s1.Synchronize(ctx(t)))
	ok(t, s2.Synchronize(ctx(t)))
	var overlap bool
	spans := dev.Timeline()
	for _, x := range spans {
		for _, y := range spans {
			if x.Stream == s1.ID() && y.Stream == s2.ID() && x.Start.Before(y.End) && y.Start.Before(x.End) {
				overlap = true
			}
		}
	}
	if len(spans) != 10 || !overlap {
		t.Errorf("%d spans, overlapping: %v", len(spans), overlap)
	}
}

// TestEnqueueDoesNotBlock: enqueueing behind a Hold returns at once however
// much is queued.
func TestEnqueueDoesNotBlock(t *testing.T) {
	dev := newDevice(t, hostsim.Latency{Copy: time.Hour})
	s := must(dev.NewStream())
	b := must(dev.Alloc(reduceop.Uint8, 16))
	must(s.Hold())
	for range 10000 {
		ok(t, s.Copy(b, 0, b, 8, 8))
	}
	// The hold is never released: Close must still end the stream.
	ok(t, dev.Close())
}

// TestClose: Close while many goroutines enqueue, wait and allocate is
// race-free; waits it interrupts and every later call return ErrClosed;
// no goroutine is left behind.
func TestClose(t *testing.T) {
	before := runtime.NumGoroutine()
	dev := hostsim.New(hostsim.Latency{Copy: 100 * time.Microsecond})
	s := must(dev.NewStream())
	b := must(dev.Alloc(reduceop.Float32, 256))
	h := must(dev.AllocHost(1024))
	e := must(dev.NewEvent())
	hold := must(s.Hold())
	ok(t, s.Record(e))

	// Waits blocked behind a Hold that is never released.
	blocked := make(chan error, 2)
	go func() { blocked <- s.Synchronize(context.Background()) }()
	go func() { blocked <- e.Wait(context.Background()) }()

	var wg sync.WaitGroup
	stop := make(chan struct{})
	for w := range 16 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				ws, err := dev.NewStream()
				if err != nil {
					continue
				}
				wb, _ := dev.Alloc(reduceop.Float32, 16)
				wh, _ := dev.AllocHost(64)
				if wb != nil && wh != nil {
					ws.CopyFromHost(wb, 0, wh.Bytes())
					ws.Reduce(reduceop.Sum, wb, 0, b, 4*w, 16)
					ws.Scale(wb, 0, 16, 3)
					ws.CopyToHost(wh.Bytes(), wb, 0)
				}
				we, _ := dev.NewEvent()
				if we != nil {
					ws.Record(we)
					s.WaitEvent(we)
					we.Done()
					c, cancel := context.WithTimeout(context.Background(), time.Millisecond)
					we.Wait(c)
					cancel()
				}
				if i%3 == 0 {
					ws.Synchronize(context.Background())
				}
				ws.Destroy()
			}
		})
	}
	time.Sleep(20 * time.Millisecond)
	ok(t, dev.Close())
	close(stop)
	wg.Wait()
	for range 2 {
		wantErr(t, "a wait interrupted by Close", <-blocked, hostsim.ErrClosed)
	}
	hold.Release()

	calls := map[string]error{
		"Close":         dev.Close(),
		"Synchronize":   s.Synchronize(context.Background()),
		"CopyToHost":    s.CopyToHost(h.Bytes(), b, 0),
		"CopyFromHost":  s.CopyFromHost(b, 0, h.Bytes()),
		"Copy":          s.Copy(b, 0, b, 512, 16),
		"Reduce":        s.Reduce(reduceop.Sum, b, 0, b, 512, 4),
		"Scale":         s.Scale(b, 0, 4, 2),
		"Record":        s.Record(e),
		"WaitEvent":     s.WaitEvent(e),
		"Launch":        s.(*hostsim.Stream).Launch("f", func() {}),
		"Destroy":       s.Destroy(),
		"Wait":          e.Wait(context.Background()),
		"event Destroy": e.Destroy(),
		"Free":          b.Free(),
		"host Free":     h.Free(),
	}
	_, calls["Done"] = e.Done()
	_, calls["Hold"] = s.Hold()
	_, calls["Alloc"] = dev.Alloc(reduceop.Float32, 1)
	_, calls["AllocHost"] = dev.AllocHost(1)
	_, calls["NewStream"] = dev.NewStream()
	_, calls["NewEvent"] = dev.NewEvent()
	_, calls["Wrap"] = dev.Wrap(reduceop.Uint8, make([]byte, 4))
	for what, err := range calls {
		wantErr(t, what+" after Close", err, hostsim.ErrClosed)
	}

	// Stream goroutines are gone once Close returns; the test's own
	// goroutines may take a moment to be reaped.
	deadline := time.Now().Add(hangGuard)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		t.Errorf("%d goroutines after Close, %d before", n, before)
	}
}
