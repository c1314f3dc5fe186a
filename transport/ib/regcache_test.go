package ib_test

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/goccl/goccl/transport/ib"
	"github.com/goccl/goccl/transport/ib/ibfake"
)

// sendBig sends out from rank 0 to rank 1 into in, the receive posted
// first so that the data is written straight into in.
func sendBig(t *testing.T, eps []*ib.Endpoint, out, in []byte) {
	t.Helper()
	ctx := testCtx(t)
	r := eps[1].Irecv(0, 1, in)
	if err := eps[0].Isend(1, 1, out).Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if err := r.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(in, out) {
		t.Fatal("payload differs")
	}
}

// TestRegCacheReuse: a buffer reused across calls is registered once, at
// the sender (the source of the write) and at the receiver (its target).
func TestRegCacheReuse(t *testing.T) {
	eps := connect(t, ibfake.New(), 2, nil)
	closeAll(t, eps)
	out, in := bytes.Repeat([]byte{7}, 1<<20), make([]byte, 1<<20)
	for i := range 10 {
		out[0] = byte(i)
		sendBig(t, eps, out, in)
	}
	for r, ep := range eps {
		if s := ep.RegCache(); s.Registrations != 1 || s.Hits != 9 || s.Bytes != 1<<20 {
			t.Errorf("rank %d: %+v, want 1 registration, 9 hits, 1 MiB", r, s)
		}
	}
}

// TestRegCacheBound: the cache keeps at most RegCacheBytes registered,
// deregistering the least recently used buffers.
func TestRegCacheBound(t *testing.T) {
	f := ibfake.New()
	eps := connect(t, f, 2, func(c *ib.Config) { c.RegCacheBytes = 3 << 20 })
	closeAll(t, eps)
	base := f.Device(devName(0)).Regions()
	in := make([]byte, 1<<20)
	for i := range 8 {
		sendBig(t, eps, bytes.Repeat([]byte{byte(i)}, 1<<20), in)
		if n := f.Device(devName(0)).Regions() - base; n > 3 {
			t.Fatalf("after %d buffers: %d regions registered beyond the slots, want at most 3", i+1, n)
		}
	}
	s := eps[0].RegCache()
	if s.Registrations != 8 || s.Deregistrations != 5 || s.Bytes != 3<<20 {
		t.Fatalf("%+v: want 8 registrations, 5 deregistrations, 3 MiB", s)
	}
}

// TestRegCacheForget: Forget deregisters a buffer at once (it is not in
// flight), and its next use registers it again.
func TestRegCacheForget(t *testing.T) {
	f := ibfake.New()
	eps := connect(t, f, 2, nil)
	closeAll(t, eps)
	out, in := bytes.Repeat([]byte{1}, 1<<20), make([]byte, 1<<20)
	sendBig(t, eps, out, in)
	before := f.Device(devName(0)).Regions()
	if !eps[0].Forget(out) {
		t.Fatal("Forget: the buffer was not cached")
	}
	if eps[0].Forget(out) {
		t.Fatal("Forget twice: still cached")
	}
	if n := f.Device(devName(0)).Regions(); n != before-1 {
		t.Fatalf("%d regions after Forget, want %d", n, before-1)
	}
	sendBig(t, eps, out, in)
	if s := eps[0].RegCache(); s.Registrations != 2 || s.Deregistrations != 1 {
		t.Fatalf("%+v: want 2 registrations, 1 deregistration", s)
	}
}

// TestRegCacheOff: with a negative RegCacheBytes every rendezvous
// registers its buffer and deregisters it when done.
func TestRegCacheOff(t *testing.T) {
	f := ibfake.New()
	eps := connect(t, f, 2, func(c *ib.Config) { c.RegCacheBytes = -1 })
	closeAll(t, eps)
	base := f.Device(devName(0)).Regions()
	out, in := bytes.Repeat([]byte{3}, 1<<20), make([]byte, 1<<20)
	for range 4 {
		sendBig(t, eps, out, in)
	}
	if s := eps[0].RegCache(); s.Registrations != 4 || s.Deregistrations != 4 || s.Bytes != 0 {
		t.Fatalf("%+v: want 4 registrations and deregistrations, nothing kept", s)
	}
	if n := f.Device(devName(0)).Regions(); n != base {
		t.Fatalf("%d regions, want %d", n, base)
	}
}

// TestLongWriteInPieces: a message longer than one RDMA WRITE may carry
// goes as several writes, the last with the immediate (or several reads),
// receive posted or not, at unaligned lengths.
func TestLongWriteInPieces(t *testing.T) {
	for _, read := range []bool{false, true} {
		t.Run(fmt.Sprint("read ", read), func(t *testing.T) { testLongInPieces(t, read) })
	}
}

func testLongInPieces(t *testing.T, read bool) {
	defer ib.SetMaxWrite(64 << 10)()
	ctx := testCtx(t)
	eps := connect(t, ibfake.New(), 2, func(c *ib.Config) { c.RendezvousRead = read })
	closeAll(t, eps)
	for _, n := range []int{64<<10 + 1, 1<<20 + 17, 2 << 20} {
		want := bytes.Repeat([]byte{byte(n), byte(n >> 8), 3}, n/3+1)[:n]
		in := make([]byte, n)
		sendBig(t, eps, want, in)
		// Receive posted late: the pieces land in a pooled buffer.
		s := eps[0].Isend(1, 2, want)
		late := make([]byte, n)
		if err := eps[1].Irecv(0, 2, late).Wait(ctx); err != nil {
			t.Fatal(err)
		}
		if err := s.Wait(ctx); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(late, want) {
			t.Fatalf("%d bytes, receive posted late: payload differs", n)
		}
	}
}
