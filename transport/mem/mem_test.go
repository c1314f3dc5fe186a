package mem_test

import (
	"bytes"
	"context"
	"errors"
	"time"

	"testing"

	"github.com/goccl/goccl/transport"
	"github.com/goccl/goccl/transport/mem"
	"github.com/goccl/goccl/transport/transporttest"
)

func TestConformance(t *testing.T) {
	transporttest.Run(t, func(t *testing.T, size int) []transport.Endpoint { return mem.New(size) })
}

func TestConformanceRendezvousOnly(t *testing.T) {
	transporttest.Run(t, func(t *testing.T, size int) []transport.Endpoint {
		return mem.NewWithConfig(size, mem.Config{EagerLimit: -1})
	})
}

func TestConformanceNoSpin(t *testing.T) {
	transporttest.Run(t, func(t *testing.T, size int) []transport.Endpoint {
		return mem.NewWithConfig(size, mem.Config{Spin: -1})
	})
}

// sendRecv sends 8 bytes from rank 0 to rank 1 and receives them, the
// receive posted first or not, and releases the receive.
func sendRecv(tb testing.TB, eps []transport.Endpoint, src, dst []byte, posted bool) {
	ctx := context.Background()
	var r transport.Request
	if posted {
		r = eps[1].Irecv(0, 1, dst)
	}
	if err := eps[0].Isend(1, 1, src).Wait(ctx); err != nil {
		tb.Fatal(err)
	}
	if !posted {
		r = eps[1].Irecv(0, 1, dst)
	}
	if err := r.Wait(ctx); err != nil {
		tb.Fatal(err)
	}
	transport.Release(r)
}

// A small message costs no allocation once the receive is released,
// whether it finds its receive posted or waits for it (the unexpected
// buffer comes from the scratch pool, which under -race drops a quarter
// of what it is given: still below one allocation per run on average).
func TestSmallMessageAllocatesNothing(t *testing.T) {
	eps := mem.New(2)
	defer eps[0].Close()
	defer eps[1].Close()
	src, dst := []byte("12345678"), make([]byte, 8)
	for _, posted := range []bool{true, false} {
		sendRecv(t, eps, src, dst, posted) // fill the pools
		if n := testing.AllocsPerRun(100, func() { sendRecv(t, eps, src, dst, posted) }); n != 0 {
			t.Errorf("posted=%v: %v allocations per message, want 0", posted, n)
		}
		if !bytes.Equal(dst, src) {
			t.Fatalf("received %q, want %q", dst, src)
		}
	}
}

// A released receive is reused by a later Post, and the result a caller
// read before releasing is the one it got: a failed receive's error does
// not leak into the next one.
func TestReleasedReceiveReused(t *testing.T) {
	ctx := context.Background()
	eps := mem.New(2)
	defer eps[0].Close()
	defer eps[1].Close()
	r := eps[1].Irecv(0, 1, make([]byte, 4))
	eps[0].Isend(1, 1, make([]byte, 8)) // wrong length: the receive fails
	if err := r.Wait(ctx); !errors.Is(err, transport.ErrLength) {
		t.Fatalf("got %v, want ErrLength", err)
	}
	transport.Release(r)
	r2 := eps[1].Irecv(0, 1, make([]byte, 8))
	if r2 != r {
		t.Fatalf("released receive not reused")
	}
	if r2.Err() != nil {
		t.Fatalf("reused receive starts with error %v", r2.Err())
	}
	select {
	case <-r2.Done():
		t.Fatal("reused receive is complete before its message came")
	default:
	}
	eps[0].Isend(1, 1, make([]byte, 8))
	if err := r2.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	// A pending receive released (its wait cancelled) is not reused.
	r3 := eps[1].Irecv(0, 2, make([]byte, 8))
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := r3.Wait(cctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
	transport.Release(r2)
	transport.Release(r3)
	if r4 := eps[1].Irecv(0, 3, make([]byte, 8)); r4 == r3 {
		t.Fatal("a pending receive was reused")
	}
	eps[0].Isend(1, 2, make([]byte, 8))
	if err := r3.Wait(ctx); err != nil {
		t.Fatal(err)
	}
}

func benchSendRecv(b *testing.B, cfg mem.Config, posted bool) {
	eps := mem.NewWithConfig(2, cfg)
	b.Cleanup(func() { eps[0].Close(); eps[1].Close() })
	src, dst := make([]byte, 8), make([]byte, 8)
	b.SetBytes(8)
	b.ReportAllocs()
	for b.Loop() {
		sendRecv(b, eps, src, dst, posted)
	}
}

func BenchmarkSendRecv8B(b *testing.B) {
	b.Run("posted", func(b *testing.B) { benchSendRecv(b, mem.Config{}, true) })
	b.Run("unexpected", func(b *testing.B) { benchSendRecv(b, mem.Config{}, false) })
}

// BenchmarkPingPong8B times a round trip of 8 bytes between two goroutine
// ranks: each waits for the other's message, so every wait is a real one,
// spinning (the default) or parking at once (nospin).
func BenchmarkPingPong8B(b *testing.B) {
	for _, c := range []struct {
		name string
		spin time.Duration
	}{{"spin", 0}, {"nospin", -1}} {
		b.Run(c.name, func(b *testing.B) {
			eps := mem.NewWithConfig(2, mem.Config{Spin: c.spin})
			b.Cleanup(func() { eps[0].Close(); eps[1].Close() })
			ctx := context.Background()
			done := make(chan error, 1)
			go func() {
				buf := make([]byte, 8)
				for {
					r := eps[1].Irecv(0, 1, buf)
					if err := r.Wait(ctx); err != nil {
						done <- err
						return
					}
					transport.Release(r)
					if buf[0] == 1 {
						done <- nil
						return
					}
					eps[1].Isend(0, 1, buf)
				}
			}()
			buf := make([]byte, 8)
			b.ReportAllocs()
			for b.Loop() {
				r := eps[0].Irecv(1, 1, buf)
				eps[0].Isend(1, 1, buf)
				if err := r.Wait(ctx); err != nil {
					b.Fatal(err)
				}
				transport.Release(r)
			}
			buf[0] = 1
			eps[0].Isend(1, 1, buf)
			if err := <-done; err != nil {
				b.Fatal(err)
			}
		})
	}
}
