//go:build cuda

package cuda_test

// Run on a GPU machine, like cuda_test.go: the primary context, Wrap, the
// asynchronous copies' pinned-memory check, holds, Close against calls in
// flight, the 1-bit steps on a stream, and argument validation.

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"unsafe"

	"github.com/goccl/goccl/device"
	"github.com/goccl/goccl/device/cuda"
	"github.com/goccl/goccl/onebit"
	"github.com/goccl/goccl/reduceop"
)

func openPrivate(t testing.TB) *cuda.Context {
	t.Helper()
	c, err := cuda.OpenPrivate(cuda.LocalDevice())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func allocHost(t testing.TB, c *cuda.Context, n int) []byte {
	t.Helper()
	h, err := c.AllocHost(n)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Free() })
	return h.Bytes()
}

func wantInvalid(t *testing.T, what string, err error) {
	t.Helper()
	if !errors.Is(err, cuda.ErrInvalid) {
		t.Errorf("%s: error %v, want one wrapping ErrInvalid", what, err)
	}
}

// TestPrimaryContext: two Opens share the primary context and its memory;
// a private context is another one, whose memory Wrap refuses; closing one
// Context leaves the other working.
func TestPrimaryContext(t *testing.T) {
	a, b, p := open(t), open(t), openPrivate(t)
	if a.Handle() == 0 || a.Handle() != b.Handle() {
		t.Fatalf("two Opens: contexts %#x and %#x, want the same primary context", a.Handle(), b.Handle())
	}
	if p.Handle() == a.Handle() {
		t.Fatal("OpenPrivate returned the primary context")
	}
	buf := newBuffer(t, a, reduceop.Float32, 256)
	if _, err := b.Wrap(buf.Ptr(), reduceop.Float32, 256); err != nil {
		t.Errorf("Wrap of primary-context memory in another Open: %v", err)
	}
	pb := newBuffer(t, p, reduceop.Float32, 256)
	_, err := a.Wrap(pb.Ptr(), reduceop.Float32, 256)
	wantInvalid(t, "Wrap of private-context memory", err)

	c, err := cuda.Open(cuda.LocalDevice())
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	in := allocHost(t, b, 1024)
	for i := range in {
		in[i] = byte(i)
	}
	s := newStream(t, b)
	if err := s.CopyFromHost(buf, 0, in); err != nil {
		t.Fatal(err)
	}
	out := allocHost(t, b, 1024)
	if err := s.CopyToHost(out, buf, 0); err != nil {
		t.Fatal(err)
	}
	drain(t, s)
	if string(in) != string(out) {
		t.Error("round trip after another Context's Close differs")
	}
	if _, err := c.NewBuffer(reduceop.Float32, 1); !errors.Is(err, cuda.ErrClosed) {
		t.Errorf("NewBuffer after Close: %v, want ErrClosed", err)
	}
}

// TestWrap wraps caller-owned memory: whole, sub-ranges, every dtype, and
// refuses pointers the driver does not know, host memory, misaligned
// pointers and ranges past the allocation.
func TestWrap(t *testing.T) {
	c := open(t)
	const nb = 1024
	raw := newBuffer(t, c, reduceop.Uint8, nb)
	p := raw.Ptr()
	for _, dt := range reduceop.DTypes {
		n := nb / dt.Size()
		w, err := c.Wrap(p, dt, n)
		if err != nil {
			t.Errorf("Wrap(%v, %d): %v", dt, n, err)
			continue
		}
		if w.Len() != n || w.DType() != dt || w.Ptr() != p {
			t.Errorf("Wrap(%v, %d) = %d x %v at %#x", dt, n, w.Len(), w.DType(), w.Ptr())
		}
		if err := w.Free(); err != nil {
			t.Errorf("Free of wrapped memory: %v", err)
		}
		if _, err := c.Wrap(p+uintptr(dt.Size()), dt, n-1); err != nil {
			t.Errorf("Wrap of the tail (%v): %v", dt, err)
		}
		_, err = c.Wrap(p+uintptr(dt.Size()), dt, n)
		wantInvalid(t, fmt.Sprintf("Wrap one %v past the allocation", dt), err)
		if err != nil && !strings.Contains(err.Error(), fmt.Sprintf("%#x", p+uintptr(dt.Size()))) {
			t.Errorf("error %q does not name the pointer", err)
		}
		if dt.Size() > 1 {
			_, err = c.Wrap(p+1, dt, 1)
			wantInvalid(t, fmt.Sprintf("misaligned %v", dt), err)
		}
	}
	// The memory is still the caller's: Free of a wrap left it usable.
	if err := raw.CopyFromHost(context.Background(), 0, make([]byte, nb)); err != nil {
		t.Fatal(err)
	}

	goMem := make([]byte, 64)
	_, err := c.Wrap(uintptr(unsafe.Pointer(&goMem[0])), reduceop.Uint8, 64)
	wantInvalid(t, "Wrap of Go memory", err)
	pinned := allocHost(t, c, 64)
	_, err = c.Wrap(uintptr(unsafe.Pointer(&pinned[0])), reduceop.Uint8, 64)
	wantInvalid(t, "Wrap of pinned host memory", err)
	_, err = c.Wrap(16, reduceop.Float32, 4)
	wantInvalid(t, "Wrap of address 16", err)
	_, err = c.Wrap(p, reduceop.DType(200), 4)
	wantInvalid(t, "Wrap with a bad dtype", err)
	if w, err := c.Wrap(0, reduceop.Float32, 0); err != nil || w.Len() != 0 {
		t.Errorf("Wrap of nothing: %v", err)
	}

	// A wrapped sub-range is the same memory.
	s := newStream(t, c)
	sub, err := c.Wrap(p+256, reduceop.Float32, 16)
	if err != nil {
		t.Fatal(err)
	}
	in := allocHost(t, c, 64)
	for i := range in {
		in[i] = byte(i + 1)
	}
	if err := s.CopyFromHost(sub, 0, in); err != nil {
		t.Fatal(err)
	}
	out := allocHost(t, c, 64)
	if err := s.CopyToHost(out, raw, 256); err != nil {
		t.Fatal(err)
	}
	drain(t, s)
	if string(in) != string(out) {
		t.Error("write through a wrapped sub-range not seen through the owner")
	}
}

// TestWrapStream runs work on a stream goccl did not create and does not
// destroy.
func TestWrapStream(t *testing.T) {
	c := open(t)
	own := newStream(t, c)
	s, err := c.WrapStream(own.Handle())
	if err != nil {
		t.Fatal(err)
	}
	b := newBuffer(t, c, reduceop.Float32, 4)
	h := allocHost(t, c, 16)
	if err := s.CopyFromHost(b, 0, h); err != nil {
		t.Fatal(err)
	}
	drain(t, s)
	if err := s.Destroy(); err != nil {
		t.Fatal(err)
	}
	// own's CUstream is still alive.
	if err := own.CopyToHost(h, b, 0); err != nil {
		t.Fatal(err)
	}
	drain(t, own)

	ps := newStream(t, openPrivate(t))
	_, err = c.WrapStream(ps.Handle())
	wantInvalid(t, "WrapStream of a private context's stream", err)
}

// TestAsyncCopyNeedsPinned: the stream copies refuse host memory that is
// not (or no longer) from AllocHost.
func TestAsyncCopyNeedsPinned(t *testing.T) {
	c := open(t)
	s := newStream(t, c)
	b := newBuffer(t, c, reduceop.Uint8, 64)
	goMem := make([]byte, 64)
	wantInvalid(t, "CopyToHost into Go memory", s.CopyToHost(goMem, b, 0))
	wantInvalid(t, "CopyFromHost from Go memory", s.CopyFromHost(b, 0, goMem))
	h, err := c.AllocHost(64)
	if err != nil {
		t.Fatal(err)
	}
	p := h.Bytes()
	if err := s.CopyToHost(p[8:40], b, 0); err != nil {
		t.Errorf("CopyToHost into part of pinned memory: %v", err)
	}
	wantInvalid(t, "CopyToHost past the end of pinned memory", s.CopyToHost(unsafe.Slice(&p[32], 64), b, 0))
	drain(t, s)
	if err := h.Free(); err != nil {
		t.Fatal(err)
	}
	wantInvalid(t, "CopyToHost into freed pinned memory", s.CopyToHost(p, b, 0))
}

// TestHoldStopsStream: an event recorded after a Hold completes only after
// the Release, and Event.Wait returns when its ctx ends in the meantime.
func TestHoldStopsStream(t *testing.T) {
	c := open(t)
	s := newStream(t, c)
	h, err := s.Hold()
	if errors.Is(err, errors.ErrUnsupported) {
		t.Skipf("holds unsupported here: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	e, err := c.NewEvent()
	if err != nil {
		t.Fatal(err)
	}
	defer e.Destroy()
	if err := s.Record(e); err != nil {
		t.Fatal(err)
	}
	if done, err := e.Done(); err != nil || done {
		t.Fatalf("event behind a Hold: done %v, %v", done, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := e.Wait(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Wait with a cancelled ctx: %v", err)
	}
	h.Release()
	h.Release()
	if err := e.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestDestroyDoesNotWait: Destroy of a stream whose 1-bit scratch memory
// is still in use behind a Hold returns at once, and the work still runs.
func TestDestroyDoesNotWait(t *testing.T) {
	c := open(t)
	st, err := c.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	h, err := st.Hold()
	if errors.Is(err, errors.ErrUnsupported) {
		t.Skipf("holds unsupported here: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	eb, sc := newBuffer(t, c, reduceop.Float32, 1000), newBuffer(t, c, reduceop.Float32, 1)
	must(t, eb.CopyFromHost(context.Background(), 0, make([]byte, 4000)))
	must(t, c.Kernel().CompensateNormOn(st, eb, nil, nil, sc))
	e, err := c.NewEvent()
	if err != nil {
		t.Fatal(err)
	}
	defer e.Destroy()
	must(t, st.Record(e))
	must(t, st.Destroy()) // would never return if it waited for the stream
	h.Release()
	must(t, e.Wait(context.Background()))
}

// TestCloseWhileCallsInFlight: calls racing with Close either complete or
// return ErrClosed; none reaches the driver after the context is gone.
// Run it under -race too.
func TestCloseWhileCallsInFlight(t *testing.T) {
	c, err := cuda.Open(cuda.LocalDevice())
	if err != nil {
		t.Fatal(err)
	}
	s, err := c.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	host, err := c.AllocHost(4096)
	if err != nil {
		t.Fatal(err)
	}
	const workers = 4
	var started, done sync.WaitGroup
	started.Add(workers)
	errs := make(chan error, workers)
	for w := range workers {
		done.Add(1)
		go func() {
			defer done.Done()
			for i := 0; ; i++ {
				if i == 10 {
					started.Done()
				}
				var err error
				switch w {
				case 0:
					var b *cuda.Buffer
					if b, err = c.NewBuffer(reduceop.Float32, 1024); err == nil {
						err = errors.Join(b.CopyFromHost(context.Background(), 0, make([]byte, 4096)), b.Free())
					}
				case 1:
					err = c.Kernel().Reduce(reduceop.Float32, reduceop.Sum, make([]byte, 4096), make([]byte, 4096))
				case 2:
					var b device.Buffer
					if b, err = c.Alloc(reduceop.Float32, 1024); err == nil {
						err = errors.Join(s.CopyFromHost(b, 0, host.Bytes()), s.Reduce(reduceop.Sum, b, 0, b, 0, 1024),
							s.Synchronize(context.Background()), b.Free())
					}
				case 3:
					var e device.Event
					if e, err = c.NewEvent(); err == nil {
						err = errors.Join(s.Record(e), e.Wait(context.Background()), e.Destroy())
					}
				}
				if err != nil {
					if i < 10 {
						started.Done()
					}
					errs <- err
					return
				}
			}
		}()
	}
	started.Wait()
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	done.Wait()
	close(errs)
	for err := range errs {
		if !errors.Is(err, cuda.ErrClosed) {
			t.Errorf("call racing Close: %v, want ErrClosed", err)
		}
	}
}

// TestOneBitOnMatchesHost chains the 1-bit steps on a stream, the scale
// never leaving the device, and checks each against onebit.HostKernel
// given the device's scale: bits and values exactly, the sum of squares and
// the scale to float rounding (the summation order differs).
func TestOneBitOnMatchesHost(t *testing.T) {
	c := open(t)
	k := c.Kernel()
	s := newStream(t, c)
	h := onebit.HostKernel{}
	r := rand.New(rand.NewPCG(7, 8))
	ctx := context.Background()
	f32 := func(v []float32) []byte {
		return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(v))), 4*len(v))
	}
	for _, n := range sizes[1:] {
		for _, nx := range []int{n, n / 2, 0} {
			e0, x := randF32(r, n), randF32(r, nx)
			eb, xb := newBuffer(t, c, reduceop.Float32, n), newBuffer(t, c, reduceop.Float32, max(nx, 1))
			ssb, scb := newBuffer(t, c, reduceop.Float64, 1), newBuffer(t, c, reduceop.Float32, 1)
			bits := newBuffer(t, c, reduceop.Uint8, (n+7)/8)
			acc, dec := newBuffer(t, c, reduceop.Float32, n), newBuffer(t, c, reduceop.Float32, n)
			y0 := randF32(r, n)
			must(t, eb.CopyFromHost(ctx, 0, f32(e0)))
			must(t, acc.CopyFromHost(ctx, 0, f32(y0)))
			var xArg device.Buffer
			if nx > 0 {
				must(t, xb.CopyFromHost(ctx, 0, f32(x)))
				xArg = xb.Slice(0, nx)
			}
			must(t, k.CompensateNormOn(s, eb, xArg, ssb, scb))
			must(t, k.PackUpdateOn(s, bits, eb, scb))
			must(t, k.AccumulateSignsOn(s, acc, bits, scb))
			must(t, k.DecompressOn(s, dec, bits, scb))
			drain(t, s)

			var ss float64
			var scale float32
			must(t, ssb.CopyToHost(ctx, unsafe.Slice((*byte)(unsafe.Pointer(&ss)), 8), 0))
			must(t, scb.CopyToHost(ctx, unsafe.Slice((*byte)(unsafe.Pointer(&scale)), 4), 0))
			eh := append([]float32(nil), e0...)
			ssh := h.CompensateNorm(eh, x)
			if math.Abs(ss-ssh) > 1e-12*ssh {
				t.Errorf("n=%d nx=%d: ss %v, host %v", n, nx, ss, ssh)
			}
			want := float32(math.Sqrt(ssh)) / float32(math.Sqrt(float64(n)))
			if math.Abs(float64(scale-want)) > 1e-6*float64(want) {
				t.Errorf("n=%d nx=%d: scale %v, host %v", n, nx, scale, want)
			}
			bh := make([]uint8, (n+7)/8)
			h.PackUpdate(bh, eh, scale)
			yh, zh := append([]float32(nil), y0...), make([]float32, n)
			h.AccumulateSigns(yh, bh, scale)
			h.Decompress(zh, bh, scale)

			gotBits := make([]byte, len(bh))
			gotE, gotY, gotZ := make([]float32, n), make([]float32, n), make([]float32, n)
			must(t, bits.CopyToHost(ctx, gotBits, 0))
			must(t, eb.CopyToHost(ctx, f32(gotE), 0))
			must(t, acc.CopyToHost(ctx, f32(gotY), 0))
			must(t, dec.CopyToHost(ctx, f32(gotZ), 0))
			if string(gotBits) != string(bh) {
				t.Errorf("n=%d nx=%d: PackUpdateOn bits differ", n, nx)
			}
			if !sameF32(eh, gotE) || !sameF32(yh, gotY) || !sameF32(zh, gotZ) {
				t.Errorf("n=%d nx=%d: values differ (err %v, accumulate %v, decompress %v)", n, nx,
					sameF32(eh, gotE), sameF32(yh, gotY), sameF32(zh, gotZ))
			}
		}
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestArgumentsChecked: every exported function that launches validates
// its arguments first, returning ErrInvalid rather than panicking or
// faulting (issue 21's nil bits buffer among them).
func TestArgumentsChecked(t *testing.T) {
	c, other := open(t), openPrivate(t)
	k := c.Kernel()
	s, os := newStream(t, c), newStream(t, other)
	f := newBuffer(t, c, reduceop.Float32, 64)
	f2 := newBuffer(t, c, reduceop.Float32, 64)
	i32 := newBuffer(t, c, reduceop.Int32, 64)
	bits := newBuffer(t, c, reduceop.Uint8, 8)
	short := newBuffer(t, c, reduceop.Uint8, 7)
	sc := newBuffer(t, c, reduceop.Float32, 1)
	foreign := newBuffer(t, other, reduceop.Float32, 64)
	freed, _ := c.NewBuffer(reduceop.Float32, 64)
	freed.Free()
	var nilBuf *cuda.Buffer
	var nilStream *cuda.Stream
	cases := map[string]error{
		"PackUpdateOn nil bits":          k.PackUpdateOn(s, nilBuf, f, sc),
		"PackUpdateOn untyped nil bits":  k.PackUpdateOn(s, nil, f, sc),
		"PackUpdateOn short bits":        k.PackUpdateOn(s, short, f, sc),
		"PackUpdateOn int32 err":         k.PackUpdateOn(s, bits, i32, sc),
		"PackUpdateOn nil scale":         k.PackUpdateOn(s, bits, f, nil),
		"PackUpdateOn int32 scale":       k.PackUpdateOn(s, bits, f, i32),
		"PackUpdateOn nil stream":        k.PackUpdateOn(nilStream, bits, f, sc),
		"PackUpdateOn foreign stream":    k.PackUpdateOn(os, bits, f, sc),
		"PackUpdateOn foreign err":       k.PackUpdateOn(s, bits, foreign, sc),
		"PackUpdateOn freed err":         k.PackUpdateOn(s, bits, freed, sc),
		"AccumulateSignsOn nil bits":     k.AccumulateSignsOn(s, f, nilBuf, sc),
		"AccumulateSignsOn nil dst":      k.AccumulateSignsOn(s, nil, bits, sc),
		"DecompressOn short bits":        k.DecompressOn(s, f, short, sc),
		"DecompressOn bits as dst":       k.DecompressOn(s, bits, bits, sc),
		"CompensateNormOn nil err":       k.CompensateNormOn(s, nil, f, nil, sc),
		"CompensateNormOn long x":        k.CompensateNormOn(s, f.Slice(0, 8), f2, nil, sc),
		"CompensateNormOn int32 x":       k.CompensateNormOn(s, f, i32, nil, sc),
		"CompensateNormOn float32 ss":    k.CompensateNormOn(s, f, nil, sc, sc),
		"CompensateNormOn nil scale":     k.CompensateNormOn(s, f, nil, nil, nilBuf),
		"Reduce nil dst":                 s.Reduce(reduceop.Sum, nil, 0, f, 0, 1),
		"Reduce nil src":                 s.Reduce(reduceop.Sum, f, 0, nilBuf, 0, 1),
		"Reduce dtype mismatch":          s.Reduce(reduceop.Sum, f, 0, i32, 0, 1),
		"Reduce foreign src":             s.Reduce(reduceop.Sum, f, 0, foreign, 0, 1),
		"Reduce misaligned offset":       s.Reduce(reduceop.Sum, f, 2, f2, 0, 1),
		"Reduce past the end":            s.Reduce(reduceop.Sum, f, 4, f2, 0, 64),
		"Reduce negative count":          s.Reduce(reduceop.Sum, f, 0, f2, 0, -1),
		"Reduce overlapping":             s.Reduce(reduceop.Sum, f, 0, f, 4, 8),
		"Reduce unsupported op":          s.Reduce(reduceop.Op(99), f, 0, f2, 0, 1),
		"Scale integer":                  s.Scale(i32, 0, 4, 2),
		"Scale divisor 0":                s.Scale(f, 0, 4, 0),
		"Copy overlapping":               s.Copy(f, 0, f, 4, 16),
		"Copy past the end":              s.Copy(f, 250, f2, 0, 16),
		"Record nil event":               s.Record(nil),
		"WaitEvent nil event":            s.WaitEvent(nil),
		"NewBuffer negative":             second(c.NewBuffer(reduceop.Float32, -1)),
		"Alloc bad dtype":                second(c.Alloc(reduceop.DType(200), 1)),
		"Kernel.Scale divisor 2^32":      k.Scale(reduceop.Float32, make([]byte, 4), 1<<32),
		"Kernel.Reduce length mismatch":  k.Reduce(reduceop.Float32, reduceop.Sum, make([]byte, 8), make([]byte, 4)),
		"Kernel.Reduce partial elements": k.Reduce(reduceop.Float32, reduceop.Sum, make([]byte, 6), make([]byte, 6)),
	}
	for what, err := range cases {
		wantInvalid(t, what, err)
	}
	drain(t, s)
}

func second[T any](_ T, err error) error { return err }
