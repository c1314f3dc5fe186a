package devicetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/goccl/goccl/device"
	"github.com/goccl/goccl/reduceop"
)

// hangGuard bounds every wait of the suite, so that a device that never
// finishes fails the test instead of hanging it. It is not a timing
// assertion: correct devices finish in milliseconds.
const hangGuard = 2 * time.Minute

// Counts are the element counts the reduction tests use: empty, one, fewer
// and more than a warp or a vector, and one past a page of float32.
var Counts = []int{0, 1, 7, 33, 4097}

// Run checks dev against the contract of package device, each part a
// subtest of t. It uses only the device interfaces and host memory from
// dev.AllocHost, so it runs unchanged on every implementation. dev stays
// open; the caller closes it.
func Run(t *testing.T, dev device.Device) {
	t.Run("Alloc", func(t *testing.T) { testAlloc(t, dev) })
	t.Run("AllocHost", func(t *testing.T) { testAllocHost(t, dev) })
	t.Run("CopyRoundTrip", func(t *testing.T) { testCopyRoundTrip(t, dev) })
	t.Run("CopyOnDevice", func(t *testing.T) { testCopyOnDevice(t, dev) })
	t.Run("RangeErrors", func(t *testing.T) { testRangeErrors(t, dev) })
	t.Run("InOrder", func(t *testing.T) { testInOrder(t, dev) })
	t.Run("EventJoinsStreams", func(t *testing.T) { testEventJoinsStreams(t, dev) })
	t.Run("WaitEventTakesLastRecord", func(t *testing.T) { testWaitEventTakesLastRecord(t, dev) })
	t.Run("NeverRecordedEvent", func(t *testing.T) { testNeverRecorded(t, dev) })
	t.Run("Hold", func(t *testing.T) { testHold(t, dev) })
	t.Run("HoldsReleasedOutOfOrder", func(t *testing.T) { testHoldsOutOfOrder(t, dev) })
	t.Run("SynchronizeContext", func(t *testing.T) { testSynchronizeContext(t, dev) })
	t.Run("DestroyRunsPendingWork", func(t *testing.T) { testDestroyPending(t, dev) })
	t.Run("ConcurrentStreams", func(t *testing.T) { testConcurrentStreams(t, dev) })
	t.Run("Reduce", func(t *testing.T) { testReduce(t, dev) })
	t.Run("Scale", func(t *testing.T) { testScale(t, dev) })
	t.Run("Sub", func(t *testing.T) { testSub(t, dev) })
}

// RunMisuse checks that dev refuses, with an error and without a panic,
// work that the contract forbids but a Go implementation can detect
// cheaply: enqueueing on a destroyed stream, using a freed buffer or a
// destroyed event. The contract does not require this, so it is separate
// from Run; hostsim passes it.
func RunMisuse(t *testing.T, dev device.Device) {
	t.Run("DestroyedStream", func(t *testing.T) {
		b := alloc(t, dev, reduceop.Uint8, 16)
		h := allocHost(t, dev, 16)
		s, err := dev.NewStream()
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Destroy(); err != nil {
			t.Fatal(err)
		}
		e := newEvent(t, dev)
		mustFail(t, "CopyFromHost on a destroyed stream", s.CopyFromHost(b, 0, h))
		mustFail(t, "CopyToHost on a destroyed stream", s.CopyToHost(h, b, 0))
		mustFail(t, "Copy on a destroyed stream", s.Copy(b, 0, b, 8, 8))
		mustFail(t, "Reduce on a destroyed stream", s.Reduce(reduceop.Sum, b, 0, b, 8, 8))
		mustFail(t, "Record on a destroyed stream", s.Record(e))
		mustFail(t, "WaitEvent on a destroyed stream", s.WaitEvent(e))
		mustFail(t, "Synchronize on a destroyed stream", s.Synchronize(context.Background()))
		_, err = s.Hold()
		mustFail(t, "Hold on a destroyed stream", err)
	})
	t.Run("FreedBuffer", func(t *testing.T) {
		s := newStream(t, dev)
		h := allocHost(t, dev, 16)
		b, err := dev.Alloc(reduceop.Float32, 4)
		if err != nil {
			t.Fatal(err)
		}
		ok := alloc(t, dev, reduceop.Float32, 4)
		if err := b.Free(); err != nil {
			t.Fatal(err)
		}
		mustFail(t, "CopyFromHost to a freed buffer", s.CopyFromHost(b, 0, h))
		mustFail(t, "CopyToHost from a freed buffer", s.CopyToHost(h, b, 0))
		mustFail(t, "Copy to a freed buffer", s.Copy(b, 0, ok, 0, 16))
		mustFail(t, "Copy from a freed buffer", s.Copy(ok, 0, b, 0, 16))
		mustFail(t, "Reduce into a freed buffer", s.Reduce(reduceop.Sum, b, 0, ok, 0, 4))
		mustFail(t, "Reduce from a freed buffer", s.Reduce(reduceop.Sum, ok, 0, b, 0, 4))
		mustFail(t, "Scale of a freed buffer", s.Scale(b, 0, 4, 2))
		mustFail(t, "second Free", b.Free())
		synchronize(t, s)
	})
	t.Run("DestroyedEvent", func(t *testing.T) {
		s := newStream(t, dev)
		e, err := dev.NewEvent()
		if err != nil {
			t.Fatal(err)
		}
		if err := e.Destroy(); err != nil {
			t.Fatal(err)
		}
		mustFail(t, "Record of a destroyed event", s.Record(e))
		mustFail(t, "WaitEvent on a destroyed event", s.WaitEvent(e))
		mustFail(t, "Wait on a destroyed event", e.Wait(context.Background()))
		_, err = e.Done()
		mustFail(t, "Done of a destroyed event", err)
		synchronize(t, s)
	})
}

func mustFail(t *testing.T, what string, err error) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: no error", what)
	}
}

// ctx returns a context bounded by hangGuard.
func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), hangGuard)
	t.Cleanup(cancel)
	return c
}

func alloc(t *testing.T, dev device.Device, dt reduceop.DType, n int) device.Buffer {
	t.Helper()
	b, err := dev.Alloc(dt, n)
	if err != nil {
		t.Fatalf("Alloc(%v, %d): %v", dt, n, err)
	}
	t.Cleanup(func() {
		if err := b.Free(); err != nil {
			t.Errorf("Free of %d x %v: %v", n, dt, err)
		}
	})
	return b
}

// allocHost returns n bytes of dev's host memory, freed when t ends.
func allocHost(t *testing.T, dev device.Device, n int) []byte {
	t.Helper()
	h, err := dev.AllocHost(n)
	if err != nil {
		t.Fatalf("AllocHost(%d): %v", n, err)
	}
	t.Cleanup(func() {
		if err := h.Free(); err != nil {
			t.Errorf("Free of %d host bytes: %v", n, err)
		}
	})
	return h.Bytes()
}

// newStream returns a stream that is synchronized and destroyed when t
// ends.
func newStream(t *testing.T, dev device.Device) device.Stream {
	t.Helper()
	s, err := dev.NewStream()
	if err != nil {
		t.Fatalf("NewStream: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Synchronize(ctx(t)); err != nil {
			t.Errorf("Synchronize at cleanup: %v", err)
		}
		if err := s.Destroy(); err != nil {
			t.Errorf("Destroy: %v", err)
		}
	})
	return s
}

func newEvent(t *testing.T, dev device.Device) device.Event {
	t.Helper()
	e, err := dev.NewEvent()
	if err != nil {
		t.Fatalf("NewEvent: %v", err)
	}
	t.Cleanup(func() {
		if err := e.Destroy(); err != nil {
			t.Errorf("event Destroy: %v", err)
		}
	})
	return e
}

func synchronize(t *testing.T, s device.Stream) {
	t.Helper()
	c, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	if err := s.Synchronize(c); err != nil {
		t.Fatalf("Synchronize: %v", err)
	}
}

func check(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// stuckFor is how long stuck watches an event that must not complete. A
// correct device never completes it, so this bounds how long a broken one
// has to show itself, not how fast a correct one is.
const stuckFor = 20 * time.Millisecond

// stuck fails t if e is done or completes within stuckFor.
func stuck(t *testing.T, e device.Event, what string) {
	t.Helper()
	if done(t, e) {
		t.Fatalf("%s is done", what)
	}
	c, cancel := context.WithTimeout(context.Background(), stuckFor)
	defer cancel()
	if err := e.Wait(c); err == nil {
		t.Fatalf("%s completed", what)
	}
}

// done reports e.Done, failing t on an error.
func done(t *testing.T, e device.Event) bool {
	t.Helper()
	ok, err := e.Done()
	if err != nil {
		t.Fatalf("Done: %v", err)
	}
	return ok
}

// upload copies data into b at byte 0 through host memory of dev and
// waits for it.
func upload(t *testing.T, dev device.Device, s device.Stream, b device.Buffer, data []byte) {
	t.Helper()
	h := allocHost(t, dev, len(data))
	copy(h, data)
	check(t, "CopyFromHost", s.CopyFromHost(b, 0, h))
	synchronize(t, s)
}

// download returns n bytes of b from byte 0.
func download(t *testing.T, dev device.Device, s device.Stream, b device.Buffer, n int) []byte {
	t.Helper()
	h := allocHost(t, dev, n)
	check(t, "CopyToHost", s.CopyToHost(h, b, 0))
	synchronize(t, s)
	return bytes.Clone(h)
}

func randBytes(r *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func seed(t *testing.T) *rand.Rand {
	return rand.New(rand.NewPCG(uint64(len(t.Name())), 0x600cc1))
}

func testAlloc(t *testing.T, dev device.Device) {
	for _, dt := range reduceop.DTypes {
		for _, n := range []int{0, 1, 7, 33} {
			b, err := dev.Alloc(dt, n)
			if err != nil {
				t.Fatalf("Alloc(%v, %d): %v", dt, n, err)
			}
			if b.DType() != dt || b.Len() != n {
				t.Errorf("Alloc(%v, %d) holds %d x %v", dt, n, b.Len(), b.DType())
			}
			if got := b.Device(); got == nil || got.String() != dev.String() {
				t.Errorf("Alloc(%v, %d).Device() = %v, want %v", dt, n, got, dev)
			}
			if err := b.Free(); err != nil {
				t.Errorf("Free of Alloc(%v, %d): %v", dt, n, err)
			}
		}
	}
	if b, err := dev.Alloc(reduceop.DType(0), 1); err == nil {
		t.Errorf("Alloc of an invalid dtype: no error")
		b.Free()
	}
	if b, err := dev.Alloc(reduceop.Float32, -1); err == nil {
		t.Errorf("Alloc of -1 elements: no error")
		b.Free()
	}
}

func testAllocHost(t *testing.T, dev device.Device) {
	for _, n := range []int{0, 1, 4097} {
		h, err := dev.AllocHost(n)
		if err != nil {
			t.Fatalf("AllocHost(%d): %v", n, err)
		}
		b := h.Bytes()
		if len(b) != n {
			t.Errorf("AllocHost(%d).Bytes() has %d bytes", n, len(b))
		}
		for i := range b {
			b[i] = byte(i)
		}
		if err := h.Free(); err != nil {
			t.Errorf("Free of AllocHost(%d): %v", n, err)
		}
	}
	if h, err := dev.AllocHost(-1); err == nil {
		t.Errorf("AllocHost(-1): no error")
		h.Free()
	}
}

// testCopyRoundTrip writes ranges at odd offsets and sizes into a buffer
// whose other bytes hold a known pattern, and reads them back through host
// memory at odd addresses.
func testCopyRoundTrip(t *testing.T, dev device.Device) {
	const size = 4099
	r := seed(t)
	s := newStream(t, dev)
	b := alloc(t, dev, reduceop.Uint8, size)
	in := allocHost(t, dev, size+16)
	out := allocHost(t, dev, size+16)
	for _, c := range []struct{ off, n int }{{0, 0}, {0, 1}, {1, 7}, {3, 4096}, {4098, 1}, {0, size}, {17, 33}, {size, 0}} {
		want := randBytes(r, size)
		upload(t, dev, s, b, want)
		data := randBytes(r, c.n)
		copy(want[c.off:], data)
		// Host ranges start 5 bytes into the allocations: odd addresses.
		copy(in[5:], data)
		check(t, "CopyFromHost", s.CopyFromHost(b, c.off, in[5:5+c.n]))
		check(t, "CopyToHost", s.CopyToHost(out[3:3+size], b, 0))
		synchronize(t, s)
		if !bytes.Equal(out[3:3+size], want) {
			t.Errorf("after CopyFromHost of %d bytes at %d the buffer differs at byte %d", c.n, c.off, firstDiff(out[3:3+size], want))
		}
		// Read the range alone, into the middle of a host range.
		for i := range out {
			out[i] = 0xee
		}
		check(t, "CopyToHost", s.CopyToHost(out[7:7+c.n], b, c.off))
		synchronize(t, s)
		if !bytes.Equal(out[7:7+c.n], data) {
			t.Errorf("CopyToHost of %d bytes at %d differs at byte %d", c.n, c.off, firstDiff(out[7:7+c.n], data))
		}
		if out[6] != 0xee || out[7+c.n] != 0xee {
			t.Errorf("CopyToHost of %d bytes at %d wrote outside its host range", c.n, c.off)
		}
	}
}

func testCopyOnDevice(t *testing.T, dev device.Device) {
	const size = 4099
	r := seed(t)
	s := newStream(t, dev)
	src := alloc(t, dev, reduceop.Uint8, size)
	dst := alloc(t, dev, reduceop.Uint8, size)
	for _, c := range []struct{ doff, soff, n int }{{0, 0, 0}, {0, 0, size}, {1, 2, 7}, {4098, 0, 1}, {3, 5, 4093}, {0, 4066, 33}} {
		sdata, want := randBytes(r, size), randBytes(r, size)
		upload(t, dev, s, src, sdata)
		upload(t, dev, s, dst, want)
		copy(want[c.doff:c.doff+c.n], sdata[c.soff:])
		check(t, "Copy", s.Copy(dst, c.doff, src, c.soff, c.n))
		if got := download(t, dev, s, dst, size); !bytes.Equal(got, want) {
			t.Errorf("Copy of %d bytes from %d to %d: destination differs at byte %d", c.n, c.soff, c.doff, firstDiff(got, want))
		}
		if got := download(t, dev, s, src, size); !bytes.Equal(got, sdata) {
			t.Errorf("Copy of %d bytes from %d to %d changed the source", c.n, c.soff, c.doff)
		}
	}
}

// testSub checks device.Sub on a Buffer of dev (skipped if dev's Buffers
// are not Slicers): a sub-buffer shares its parent's memory at the right
// place, belongs to dev, and ranges outside the parent are errors.
func testSub(t *testing.T, dev device.Device) {
	const size = 4099
	b := alloc(t, dev, reduceop.Uint8, size)
	if _, ok := b.(device.Slicer); !ok {
		t.Skipf("%T is not a device.Slicer", b)
	}
	r := seed(t)
	s := newStream(t, dev)
	data := randBytes(r, size)
	upload(t, dev, s, b, data)
	sub, err := device.Sub(b, 100, 133)
	check(t, "Sub(100, 133)", err)
	if sub.Len() != 33 || sub.DType() != reduceop.Uint8 || sub.Device() != dev {
		t.Fatalf("Sub(100, 133): %d x %v on %v, want 33 x uint8 on %v", sub.Len(), sub.DType(), sub.Device(), dev)
	}
	if got := download(t, dev, s, sub, 33); !bytes.Equal(got, data[100:133]) {
		t.Errorf("Sub(100, 133) reads other bytes than [100,133) of its parent")
	}
	patch := randBytes(r, 33)
	upload(t, dev, s, sub, patch)
	copy(data[100:], patch)
	if got := download(t, dev, s, b, size); !bytes.Equal(got, data) {
		t.Errorf("a write into Sub(100, 133) landed elsewhere in its parent (first difference at byte %d)", firstDiff(got, data))
	}
	for _, c := range [][2]int{{-1, 3}, {5, 4}, {0, size + 1}} {
		if _, err := device.Sub(b, c[0], c[1]); err == nil {
			t.Errorf("Sub(%d, %d) of %d elements: no error", c[0], c[1], size)
		}
	}
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// testRangeErrors checks that each bad call returns an error and enqueues
// nothing: the buffers keep their contents and the stream keeps working.
func testRangeErrors(t *testing.T, dev device.Device) {
	r := seed(t)
	s := newStream(t, dev)
	a := alloc(t, dev, reduceop.Float32, 16) // 64 bytes
	b := alloc(t, dev, reduceop.Float32, 16)
	ia := alloc(t, dev, reduceop.Int32, 16)
	ib := alloc(t, dev, reduceop.Int32, 16)
	h := allocHost(t, dev, 128)
	pa, pb := randBytes(r, 64), randBytes(r, 64)
	upload(t, dev, s, a, pa)
	upload(t, dev, s, b, pb)
	for i := range h {
		h[i] = 0x5a
	}
	bad := []struct {
		what string
		err  error
	}{
		{"CopyToHost past the end", s.CopyToHost(h[:8], a, 60)},
		{"CopyToHost of more than the buffer", s.CopyToHost(h[:65], a, 0)},
		{"CopyToHost at -1", s.CopyToHost(h[:1], a, -1)},
		{"CopyFromHost past the end", s.CopyFromHost(a, 57, h[:8])},
		{"CopyFromHost at -1", s.CopyFromHost(a, -1, h[:1])},
		{"Copy from past the end", s.Copy(a, 0, b, 60, 8)},
		{"Copy to past the end", s.Copy(a, 60, b, 0, 8)},
		{"Copy of -1 bytes", s.Copy(a, 0, b, 0, -1)},
		{"Copy to -4", s.Copy(a, -4, b, 0, 4)},
		{"Copy from -4", s.Copy(a, 0, b, -4, 4)},
		{"Reduce of 17 elements of 16", s.Reduce(reduceop.Sum, a, 0, b, 0, 17)},
		{"Reduce into past the end", s.Reduce(reduceop.Sum, a, 4, b, 0, 16)},
		{"Reduce from past the end", s.Reduce(reduceop.Sum, a, 0, b, 8, 15)},
		{"Reduce of -1 elements", s.Reduce(reduceop.Sum, a, 0, b, 0, -1)},
		{"Reduce at -4", s.Reduce(reduceop.Sum, a, -4, b, 0, 1)},
		{"Reduce avg on int32", s.Reduce(reduceop.Avg, ia, 0, ib, 0, 16)},
		{"Reduce band on float32", s.Reduce(reduceop.BAnd, a, 0, b, 0, 16)},
		{"Reduce with an invalid op", s.Reduce(reduceop.Op(0), a, 0, b, 0, 16)},
		{"Scale of 17 elements of 16", s.Scale(a, 0, 17, 2)},
		{"Scale past the end", s.Scale(a, 8, 15, 2)},
		{"Scale at -4", s.Scale(a, -4, 1, 2)},
		{"Scale of -1 elements", s.Scale(a, 0, -1, 2)},
		{"Scale by 0", s.Scale(a, 0, 16, 0)},
		{"Scale by -2", s.Scale(a, 0, 16, -2)},
		{"Scale of int32", s.Scale(ia, 0, 16, 2)},
	}
	for _, c := range bad {
		if c.err == nil {
			t.Errorf("%s: no error", c.what)
		}
	}
	synchronize(t, s)
	if got := download(t, dev, s, a, 64); !bytes.Equal(got, pa) {
		t.Errorf("refused calls changed buffer a at byte %d", firstDiff(got, pa))
	}
	if got := download(t, dev, s, b, 64); !bytes.Equal(got, pb) {
		t.Errorf("refused calls changed buffer b at byte %d", firstDiff(got, pb))
	}
	for i, c := range h {
		if c != 0x5a {
			t.Fatalf("refused calls changed host byte %d", i)
		}
	}
}

// testInOrder enqueues work whose result depends on its order: a chain of
// copies through eight buffers, each source overwritten right after it is
// read, and many writes to one range of which the last must win.
func testInOrder(t *testing.T, dev device.Device) {
	const size, chain, writes = 4096, 8, 64
	r := seed(t)
	s := newStream(t, dev)
	bufs := make([]device.Buffer, chain)
	for i := range bufs {
		bufs[i] = alloc(t, dev, reduceop.Uint8, size)
	}
	first := randBytes(r, size)
	junk := allocHost(t, dev, size)
	copy(junk, randBytes(r, size))
	h := allocHost(t, dev, size)
	copy(h, first)
	check(t, "CopyFromHost", s.CopyFromHost(bufs[0], 0, h))
	for i := 1; i < chain; i++ {
		check(t, "Copy", s.Copy(bufs[i], 0, bufs[i-1], 0, size))
		check(t, "CopyFromHost", s.CopyFromHost(bufs[i-1], 0, junk))
	}
	if got := download(t, dev, s, bufs[chain-1], size); !bytes.Equal(got, first) {
		t.Errorf("a chain of copies on one stream ended with other bytes (differs at %d)", firstDiff(got, first))
	}
	if got := download(t, dev, s, bufs[0], size); !bytes.Equal(got, junk) {
		t.Errorf("the last write to the first buffer did not win")
	}

	src := allocHost(t, dev, writes*16)
	copy(src, randBytes(r, len(src)))
	for i := range writes {
		check(t, "CopyFromHost", s.CopyFromHost(bufs[0], 100, src[i*16:(i+1)*16]))
	}
	if got := download(t, dev, s, bufs[0], size)[100:116]; !bytes.Equal(got, src[(writes-1)*16:]) {
		t.Errorf("of %d writes to one range the last did not win", writes)
	}
}

// held returns a stream stopped by a Hold and the Hold, released when t
// ends at the latest. The caller also defers settle: deferred calls run
// before cleanups, so a test that fails still lets the held work run
// before the memory it uses is freed (on CUDA that Free would wait for the
// held stream for ever; hostsim fails the device).
// settle releases h and waits for s.
func settle(t *testing.T, s device.Stream, h device.Hold) {
	h.Release()
	if err := s.Synchronize(ctx(t)); err != nil {
		t.Errorf("Synchronize after Release: %v", err)
	}
}

func held(t *testing.T, dev device.Device) (device.Stream, device.Hold) {
	t.Helper()
	s, err := dev.NewStream()
	if err != nil {
		t.Fatalf("NewStream: %v", err)
	}
	h, err := s.Hold()
	if err != nil {
		t.Fatalf("Hold: %v", err)
	}
	t.Cleanup(func() {
		h.Release()
		if err := s.Synchronize(ctx(t)); err != nil {
			t.Errorf("Synchronize at cleanup: %v", err)
		}
		if err := s.Destroy(); err != nil {
			t.Errorf("Destroy: %v", err)
		}
	})
	return s, h
}

// testEventJoinsStreams: work on s2 after WaitEvent(e) sees what s1 wrote
// before Record(e). A Hold keeps s1 stopped, so that s2 provably waits.
func testEventJoinsStreams(t *testing.T, dev device.Device) {
	const size = 1 << 16
	r := seed(t)
	s1, h := held(t, dev)
	defer settle(t, s1, h)
	s2 := newStream(t, dev)
	a := alloc(t, dev, reduceop.Uint8, size)
	b := alloc(t, dev, reduceop.Uint8, size)
	e := newEvent(t, dev)
	e2 := newEvent(t, dev)
	in := allocHost(t, dev, size)
	out := allocHost(t, dev, size)
	data := randBytes(r, size)
	copy(in, data)

	check(t, "CopyFromHost", s1.CopyFromHost(a, 0, in))
	check(t, "Record", s1.Record(e))
	check(t, "WaitEvent", s2.WaitEvent(e))
	check(t, "Copy", s2.Copy(b, 0, a, 0, size))
	check(t, "CopyToHost", s2.CopyToHost(out, b, 0))
	check(t, "Record", s2.Record(e2))
	if done(t, e) {
		t.Fatal("event recorded behind a Hold is done before the Release")
	}
	stuck(t, e2, "work after WaitEvent on an event behind a Hold")
	h.Release()
	check(t, "Wait", e2.Wait(ctx(t)))
	if !done(t, e) || !done(t, e2) {
		t.Fatal("events not done after Wait returned")
	}
	if !bytes.Equal(out, data) {
		t.Errorf("s2 read other bytes than s1 wrote before the event (differs at %d)", firstDiff(out, data))
	}
}

// testWaitEventTakesLastRecord: WaitEvent waits for the Record before it,
// not for one made later; Wait waits for the last Record.
func testWaitEventTakesLastRecord(t *testing.T, dev device.Device) {
	s1, h := held(t, dev)
	defer settle(t, s1, h)
	s2 := newStream(t, dev)
	s3 := newStream(t, dev)
	e := newEvent(t, dev)
	e2 := newEvent(t, dev)
	check(t, "Record", s1.Record(e))
	check(t, "WaitEvent", s2.WaitEvent(e))
	check(t, "Record", s2.Record(e2))
	// Re-record e on an idle stream: e completes, but s2 still waits for
	// the Record on s1.
	check(t, "Record", s3.Record(e))
	check(t, "Wait", e.Wait(ctx(t)))
	synchronize(t, s3)
	stuck(t, e2, "work after a WaitEvent whose Record is behind a Hold (re-recorded elsewhere since)")
	h.Release()
	check(t, "Wait", e2.Wait(ctx(t)))

	// And the other way: a Record on a held stream after a WaitEvent
	// does not hold the waiting stream back.
	s4, h4 := held(t, dev)
	defer settle(t, s4, h4)
	f := newEvent(t, dev)
	f2 := newEvent(t, dev)
	check(t, "Record", s3.Record(f))
	check(t, "WaitEvent", s2.WaitEvent(f))
	check(t, "Record", s4.Record(f))
	check(t, "Record", s2.Record(f2))
	check(t, "Wait", f2.Wait(ctx(t)))
	if done(t, f) {
		t.Fatal("event recorded on a held stream is done")
	}
	h4.Release()
	check(t, "Wait", f.Wait(ctx(t)))
}

func testNeverRecorded(t *testing.T, dev device.Device) {
	e := newEvent(t, dev)
	if !done(t, e) {
		t.Error("a never-recorded event is not done")
	}
	check(t, "Wait", e.Wait(ctx(t)))
	s := newStream(t, dev)
	b := alloc(t, dev, reduceop.Uint8, 8)
	check(t, "WaitEvent", s.WaitEvent(e))
	want := []byte{1, 2, 3, 4, 5, 6, 7, 8}
	upload(t, dev, s, b, want)
	if got := download(t, dev, s, b, 8); !bytes.Equal(got, want) {
		t.Errorf("after waiting for a never-recorded event: got %v, want %v", got, want)
	}
}

// testHold: work after a Hold waits for its Release while other streams
// run on; releasing twice is harmless.
func testHold(t *testing.T, dev device.Device) {
	const size = 4096
	r := seed(t)
	s, h := held(t, dev)
	defer settle(t, s, h)
	other := newStream(t, dev)
	b := alloc(t, dev, reduceop.Uint8, size)
	old := randBytes(r, size)
	upload(t, dev, other, b, old)
	data := randBytes(r, size)
	in := allocHost(t, dev, size)
	copy(in, data)
	e := newEvent(t, dev)
	check(t, "CopyFromHost", s.CopyFromHost(b, 0, in))
	check(t, "Record", s.Record(e))
	// Another stream runs and sees the held write has not happened.
	if got := download(t, dev, other, b, size); !bytes.Equal(got, old) {
		t.Fatal("work behind a Hold ran before the Release")
	}
	stuck(t, e, "event behind a Hold")
	h.Release()
	h.Release()
	synchronize(t, s)
	if !done(t, e) {
		t.Fatal("event not done after Synchronize")
	}
	if got := download(t, dev, other, b, size); !bytes.Equal(got, data) {
		t.Fatal("work behind a released Hold did not run")
	}
}

// testHoldsOutOfOrder: two Holds on one stream released last-first.
func testHoldsOutOfOrder(t *testing.T, dev device.Device) {
	s := newStream(t, dev)
	h1, err := s.Hold()
	check(t, "Hold", err)
	defer h1.Release()
	h2, err := s.Hold()
	check(t, "Hold", err)
	defer h2.Release()
	e := newEvent(t, dev)
	check(t, "Record", s.Record(e))
	h2.Release()
	stuck(t, e, "event after two Holds with only the second released")
	h1.Release()
	check(t, "Wait", e.Wait(ctx(t)))
}

// testSynchronizeContext: Synchronize and Wait return when ctx ends, with
// an error that wraps ctx's.
func testSynchronizeContext(t *testing.T, dev device.Device) {
	s, h := held(t, dev)
	defer settle(t, s, h)
	e := newEvent(t, dev)
	check(t, "Record", s.Record(e))

	c, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := s.Synchronize(c); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Synchronize of a held stream with a timeout: %v, want an error wrapping %v", err, context.DeadlineExceeded)
	}
	c, cancel = context.WithCancel(context.Background())
	cancel()
	if err := s.Synchronize(c); !errors.Is(err, context.Canceled) {
		t.Errorf("Synchronize of a held stream with a cancelled ctx: %v, want an error wrapping %v", err, context.Canceled)
	}
	if err := e.Wait(c); !errors.Is(err, context.Canceled) {
		t.Errorf("Wait for a held event with a cancelled ctx: %v, want an error wrapping %v", err, context.Canceled)
	}
	// A wait cancelled while it blocks.
	c, cancel = context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- s.Synchronize(c) }()
	time.Sleep(10 * time.Millisecond)
	cancel()
	select {
	case err := <-errc:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Synchronize cancelled while blocked: %v, want an error wrapping %v", err, context.Canceled)
		}
	case <-time.After(hangGuard):
		t.Fatal("Synchronize did not return after its ctx was cancelled")
	}
	h.Release()
	synchronize(t, s)
}

// testDestroyPending: Destroy does not drop the work already enqueued.
func testDestroyPending(t *testing.T, dev device.Device) {
	const size = 1024
	r := seed(t)
	s, err := dev.NewStream()
	check(t, "NewStream", err)
	h, err := s.Hold()
	check(t, "Hold", err)
	b := alloc(t, dev, reduceop.Uint8, size)
	in := allocHost(t, dev, size)
	data := randBytes(r, size)
	copy(in, data)
	e := newEvent(t, dev)
	defer func() {
		h.Release()
		e.Wait(ctx(t))
	}()
	check(t, "CopyFromHost", s.CopyFromHost(b, 0, in))
	check(t, "Record", s.Record(e))
	check(t, "Destroy", s.Destroy())
	h.Release()
	check(t, "Wait", e.Wait(ctx(t)))
	other := newStream(t, dev)
	if got := download(t, dev, other, b, size); !bytes.Equal(got, data) {
		t.Error("work enqueued before Destroy did not run")
	}
}

// testConcurrentStreams: goroutines each drive their own stream at once.
func testConcurrentStreams(t *testing.T, dev device.Device) {
	const workers, rounds, size = 4, 8, 4097
	errc := make(chan error, workers)
	for w := range workers {
		s := newStream(t, dev)
		a := alloc(t, dev, reduceop.Uint8, size)
		b := alloc(t, dev, reduceop.Uint8, size)
		in := allocHost(t, dev, size)
		out := allocHost(t, dev, size)
		go func() {
			errc <- func() error {
				r := rand.New(rand.NewPCG(uint64(w), 1))
				for i := range rounds {
					data := randBytes(r, size)
					copy(in, data)
					if err := s.CopyFromHost(a, 0, in); err != nil {
						return err
					}
					if err := s.Copy(b, 0, a, 0, size); err != nil {
						return err
					}
					if err := s.CopyToHost(out, b, 0); err != nil {
						return err
					}
					c, cancel := context.WithTimeout(context.Background(), hangGuard)
					err := s.Synchronize(c)
					cancel()
					if err != nil {
						return err
					}
					if !bytes.Equal(out, data) {
						return fmt.Errorf("worker %d round %d: data differs at byte %d", w, i, firstDiff(out, data))
					}
				}
				return nil
			}()
		}()
	}
	for range workers {
		if err := <-errc; err != nil {
			t.Error(err)
		}
	}
}

// floatSpecials are mixed into float inputs: NaN, signed zeros,
// infinities and exact small values.
var floatSpecials = []float64{math.NaN(), 0, math.Copysign(0, -1), math.Inf(1), math.Inf(-1), 1, -1, 0.5}

// randElems returns n random elements of dt as bytes; floats are normally
// distributed with one element in eight special.
func randElems(r *rand.Rand, dt reduceop.DType, n int) []byte {
	if !dt.IsFloat() {
		return randBytes(r, n*dt.Size())
	}
	b := make([]byte, n*dt.Size())
	for i := range n {
		v := r.NormFloat64() * 100
		if r.IntN(8) == 0 {
			v = floatSpecials[r.IntN(len(floatSpecials))]
		}
		switch dt {
		case reduceop.Float32:
			putUint(b[i*4:], uint64(math.Float32bits(float32(v))), 4)
		case reduceop.Float64:
			putUint(b[i*8:], math.Float64bits(v), 8)
		case reduceop.Float16:
			putUint(b[i*2:], uint64(reduceop.F16FromFloat32(float32(v))), 2)
		case reduceop.BFloat16:
			putUint(b[i*2:], uint64(reduceop.BF16FromFloat32(float32(v))), 2)
		}
	}
	return b
}

func putUint(b []byte, v uint64, size int) {
	for i := range size {
		b[i] = byte(v >> (8 * i))
	}
}

func getUint(b []byte, size int) uint64 {
	var v uint64
	for i := range size {
		v |= uint64(b[i]) << (8 * i)
	}
	return v
}

// isNaN reports whether the element of dt in b is a NaN.
func isNaN(dt reduceop.DType, b []byte) bool {
	v := getUint(b, dt.Size())
	switch dt {
	case reduceop.Float32:
		return math.IsNaN(float64(math.Float32frombits(uint32(v))))
	case reduceop.Float64:
		return math.IsNaN(math.Float64frombits(v))
	case reduceop.Float16:
		return v&0x7c00 == 0x7c00 && v&0x03ff != 0
	case reduceop.BFloat16:
		return v&0x7f80 == 0x7f80 && v&0x007f != 0
	}
	return false
}

// diffElem returns the index of the first element of dt where got and want
// differ, or -1. Two NaNs are equal whatever their payloads; everything
// else, the sign of zero included, must match bit for bit.
func diffElem(dt reduceop.DType, got, want []byte) int {
	sz := dt.Size()
	for i := 0; i < len(want); i += sz {
		g, w := got[i:i+sz], want[i:i+sz]
		if bytes.Equal(g, w) || dt.IsFloat() && isNaN(dt, g) && isNaN(dt, w) {
			continue
		}
		return i / sz
	}
	return -1
}

// testReduce compares Reduce with reduceop.Apply for every dtype and op
// with a device kernel at every count of Counts, at offset 0 and at odd
// element offsets, with guard elements around the range that must keep
// their values; a dtype without a kernel (device.CheckReduce) must be
// refused.
func testReduce(t *testing.T, dev device.Device) {
	const guard = 8
	r := seed(t)
	s := newStream(t, dev)
	maxBytes := (Counts[len(Counts)-1] + 2*guard) * 8
	hin := allocHost(t, dev, maxBytes)
	hout := allocHost(t, dev, maxBytes)
	for _, dt := range reduceop.DTypes {
		sz := dt.Size()
		for _, op := range reduceop.Ops {
			if reduceop.Check(op, dt) != nil {
				continue
			}
			if device.CheckReduce(op, dt) != nil {
				// No kernel for dt: Reduce must refuse it.
				dst, err := dev.Alloc(dt, 4)
				check(t, "Alloc", err)
				src, err := dev.Alloc(dt, 4)
				check(t, "Alloc", err)
				if err := s.Reduce(op, dst, 0, src, 0, 4); err == nil {
					t.Errorf("Reduce %v %v: no error, but the device has no kernel for %v", op, dt, dt)
				}
				synchronize(t, s)
				check(t, "Free", dst.Free())
				check(t, "Free", src.Free())
				continue
			}
			for _, n := range Counts {
				for _, offs := range [][2]int{{0, 0}, {3, 5}} {
					total := n + 2*guard
					dst, err := dev.Alloc(dt, total)
					check(t, "Alloc", err)
					src, err := dev.Alloc(dt, total)
					check(t, "Alloc", err)
					dbytes, sbytes := randElems(r, dt, total), randElems(r, dt, total)
					copy(hin, dbytes)
					check(t, "CopyFromHost", s.CopyFromHost(dst, 0, hin[:total*sz]))
					synchronize(t, s)
					copy(hin, sbytes)
					check(t, "CopyFromHost", s.CopyFromHost(src, 0, hin[:total*sz]))
					doff, soff := offs[0]*sz, offs[1]*sz
					check(t, "Reduce", s.Reduce(op, dst, doff, src, soff, n))
					check(t, "CopyToHost", s.CopyToHost(hout[:total*sz], dst, 0))
					synchronize(t, s)

					want := bytes.Clone(dbytes)
					check(t, "reduceop.Apply", reduceop.Apply(dt, op, want[doff:doff+n*sz], sbytes[soff:soff+n*sz]))
					if i := diffElem(dt, hout[:total*sz], want); i >= 0 {
						where := "in the range"
						if i < offs[0] || i >= offs[0]+n {
							where = "outside the range"
						}
						t.Errorf("Reduce %v %v of %d at element offsets %d, %d: element %d (%s) is %x, want %x",
							op, dt, n, offs[0], offs[1], i, where, hout[i*sz:(i+1)*sz], want[i*sz:(i+1)*sz])
					}
					check(t, "CopyToHost", s.CopyToHost(hout[:total*sz], src, 0))
					synchronize(t, s)
					if !bytes.Equal(hout[:total*sz], sbytes) {
						t.Errorf("Reduce %v %v of %d changed its source", op, dt, n)
					}
					check(t, "Free", dst.Free())
					check(t, "Free", src.Free())
				}
			}
		}
	}
}

// testScale compares Scale with reduceop.Scale for every float dtype with
// a device kernel.
func testScale(t *testing.T, dev device.Device) {
	const guard = 8
	r := seed(t)
	s := newStream(t, dev)
	maxBytes := (Counts[len(Counts)-1] + 2*guard) * 8
	hin := allocHost(t, dev, maxBytes)
	hout := allocHost(t, dev, maxBytes)
	for _, dt := range reduceop.DTypes {
		if device.CheckReduce(reduceop.Avg, dt) != nil {
			continue
		}
		sz := dt.Size()
		for _, n := range Counts {
			for _, div := range []int{1, 2, 3, 7, 1000} {
				total := n + 2*guard
				b, err := dev.Alloc(dt, total)
				check(t, "Alloc", err)
				data := randElems(r, dt, total)
				copy(hin, data)
				check(t, "CopyFromHost", s.CopyFromHost(b, 0, hin[:total*sz]))
				off := 3 * sz
				check(t, "Scale", s.Scale(b, off, n, div))
				check(t, "CopyToHost", s.CopyToHost(hout[:total*sz], b, 0))
				synchronize(t, s)
				want := bytes.Clone(data)
				check(t, "reduceop.Scale", reduceop.Scale(dt, want[off:off+n*sz], div))
				if i := diffElem(dt, hout[:total*sz], want); i >= 0 {
					t.Errorf("Scale %v of %d by %d: element %d is %x, want %x", dt, n, div, i, hout[i*sz:(i+1)*sz], want[i*sz:(i+1)*sz])
				}
				check(t, "Free", b.Free())
			}
		}
	}
}
