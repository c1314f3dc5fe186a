package mem_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/goccl/goccl/transport"
	"github.com/goccl/goccl/transport/mem"
)

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func closeAll(t *testing.T, eps []transport.Endpoint) {
	t.Cleanup(func() {
		for _, ep := range eps {
			ep.Close()
		}
	})
}

// sendSeq sends n one-byte messages 0..n-1 from rank 0 to rank 1 on tag 0.
func sendSeq(eps []transport.Endpoint, n int) []transport.Request {
	var rs []transport.Request
	for i := range n {
		rs = append(rs, eps[0].Isend(1, 0, []byte{byte(i)}))
	}
	return rs
}

func TestFaultDrop(t *testing.T) {
	ctx := ctxFor(t)
	eps := mem.NewWithConfig(2, mem.Config{Faults: []mem.Fault{{Kind: mem.Drop, From: 0, To: 1, After: 1}}})
	closeAll(t, eps)
	for i, r := range sendSeq(eps, 3) {
		if err := r.Wait(ctx); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
	}
	b := []byte{0}
	for _, want := range []byte{0, 2} {
		if err := eps[1].Irecv(0, 0, b).Wait(ctx); err != nil || b[0] != want {
			t.Fatalf("got %v %v, want %d", b, err, want)
		}
	}
	short, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
	defer cancel()
	if err := eps[1].Irecv(0, 0, b).Wait(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("dropped message arrived: %v", err)
	}
}

func TestFaultCorruptIsSeeded(t *testing.T) {
	ctx := ctxFor(t)
	var diffs []int
	for range 2 {
		eps := mem.NewWithConfig(2, mem.Config{Seed: 42, Faults: []mem.Fault{{Kind: mem.Corrupt, From: 0, To: 1, After: 0}}})
		closeAll(t, eps)
		src := bytes.Repeat([]byte{7}, 1000)
		got := make([]byte, len(src))
		r := eps[1].Irecv(0, 0, got)
		if err := eps[0].Isend(1, 0, src).Wait(ctx); err != nil {
			t.Fatal(err)
		}
		if err := r.Wait(ctx); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(src, bytes.Repeat([]byte{7}, 1000)) {
			t.Fatal("sender's buffer was modified")
		}
		var where []int
		for i := range got {
			if got[i] != src[i] {
				where = append(where, i)
			}
		}
		if len(where) != 1 {
			t.Fatalf("%d bytes differ, want 1", len(where))
		}
		diffs = append(diffs, where[0])
	}
	if diffs[0] != diffs[1] {
		t.Fatalf("same seed corrupted bytes %d and %d", diffs[0], diffs[1])
	}
}

func TestFaultDelayKeepsOrder(t *testing.T) {
	ctx := ctxFor(t)
	for _, eager := range []int{0, -1} {
		eps := mem.NewWithConfig(2, mem.Config{EagerLimit: eager,
			Faults: []mem.Fault{{Kind: mem.Delay, From: 0, To: 1, After: 2, Delay: 5 * time.Millisecond}}})
		closeAll(t, eps)
		sends := sendSeq(eps, 6)
		b := []byte{0}
		for i := range 6 {
			if err := eps[1].Irecv(0, 0, b).Wait(ctx); err != nil || b[0] != byte(i) {
				t.Fatalf("eager=%d message %d: got %v %v", eager, i, b, err)
			}
		}
		for _, s := range sends {
			if err := s.Wait(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func TestFaultDelayThenClose(t *testing.T) {
	ctx := ctxFor(t)
	eps := mem.NewWithConfig(2, mem.Config{EagerLimit: -1,
		Faults: []mem.Fault{{Kind: mem.Delay, From: 0, To: 1, After: 0, Delay: time.Hour}}})
	closeAll(t, eps)
	s := eps[0].Isend(1, 0, []byte{1})
	eps[0].Close()
	if err := s.Wait(ctx); !errors.Is(err, transport.ErrClosed) {
		t.Fatalf("held send after Close: %v", err)
	}
}

func wantPeerClosed(t *testing.T, err error, peer int) {
	t.Helper()
	var pe *transport.PeerError
	if !errors.Is(err, transport.ErrPeerClosed) || !errors.As(err, &pe) || pe.Peer != peer {
		t.Fatalf("got %v, want PeerError{Peer: %d} wrapping ErrPeerClosed", err, peer)
	}
}

func TestFaultCloseLink(t *testing.T) {
	ctx := ctxFor(t)
	eps := mem.NewWithConfig(3, mem.Config{Faults: []mem.Fault{{Kind: mem.CloseLink, From: 0, To: 1, After: 2}}})
	closeAll(t, eps)
	back := eps[0].Irecv(1, 0, make([]byte, 1)) // the reverse direction breaks too
	sends := sendSeq(eps, 3)
	for i, s := range sends[:2] {
		if err := s.Wait(ctx); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
	}
	wantPeerClosed(t, sends[2].Wait(ctx), 1)
	wantPeerClosed(t, back.Wait(ctx), 1)
	b := []byte{0}
	for i := range 2 { // what arrived before the break is still delivered
		if err := eps[1].Irecv(0, 0, b).Wait(ctx); err != nil || b[0] != byte(i) {
			t.Fatalf("message %d: %v %v", i, b, err)
		}
	}
	wantPeerClosed(t, eps[1].Irecv(0, 0, b).Wait(ctx), 0)
	wantPeerClosed(t, eps[1].Isend(0, 0, b).Wait(ctx), 0)
	// Rank 2 still talks to both.
	r := eps[2].Irecv(0, 0, b)
	if err := eps[0].Isend(2, 0, []byte{9}).Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if err := r.Wait(ctx); err != nil || b[0] != 9 {
		t.Fatalf("0->2: %v %v", b, err)
	}
}

func TestFaultKill(t *testing.T) {
	ctx := ctxFor(t)
	const size = 4
	eps := mem.NewWithConfig(size, mem.Config{Faults: []mem.Fault{{Kind: mem.Kill, From: 2, After: 1}}})
	closeAll(t, eps)
	var pending []transport.Request
	for r := range size {
		if r != 2 {
			pending = append(pending, eps[r].Irecv(2, 5, make([]byte, 4)))
		}
	}
	if err := eps[2].Isend(0, 1, []byte{1}).Wait(ctx); err != nil {
		t.Fatalf("first send: %v", err)
	}
	if err := eps[2].Isend(1, 1, []byte{1}).Wait(ctx); !errors.Is(err, transport.ErrClosed) {
		t.Fatalf("send that kills: %v", err)
	}
	for _, r := range pending {
		wantPeerClosed(t, r.Wait(ctx), 2)
	}
}

func TestRendezvous(t *testing.T) {
	ctx := ctxFor(t)
	eps := mem.NewWithConfig(2, mem.Config{EagerLimit: 8})
	closeAll(t, eps)
	small := eps[0].Isend(1, 0, make([]byte, 8))
	if err := small.Err(); err != nil || !isDone(small) {
		t.Fatal("eager send did not complete at once")
	}
	src := bytes.Repeat([]byte{3}, 9)
	big := eps[0].Isend(1, 0, src)
	if isDone(big) {
		t.Fatal("rendezvous send completed before the receive")
	}
	eps[1].Irecv(0, 0, make([]byte, 8))
	got := make([]byte, 9)
	if err := eps[1].Irecv(0, 0, got).Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if err := big.Wait(ctx); err != nil || !bytes.Equal(got, src) {
		t.Fatalf("rendezvous: %v %v", err, got)
	}
	// A rendezvous send whose sender closes fails with ErrClosed and its
	// buffer is never read.
	pend := eps[0].Isend(1, 1, src)
	eps[0].Close()
	if err := pend.Wait(ctx); !errors.Is(err, transport.ErrClosed) {
		t.Fatalf("pending send after Close: %v", err)
	}
	wantPeerClosed(t, eps[1].Irecv(0, 1, got).Wait(ctx), 0)
	// And one whose receiver closes fails with ErrPeerClosed.
	eps = mem.NewWithConfig(2, mem.Config{EagerLimit: -1})
	closeAll(t, eps)
	pend = eps[0].Isend(1, 1, src)
	eps[1].Close()
	wantPeerClosed(t, pend.Wait(ctx), 1)
}

func isDone(r transport.Request) bool {
	select {
	case <-r.Done():
		return true
	default:
		return false
	}
}

// Example runs 4 ranks as goroutines: each sends its rank to the right
// neighbour of a ring and receives from the left.
func Example() {
	const size = 4
	eps := mem.New(size)
	defer func() {
		for _, ep := range eps {
			ep.Close()
		}
	}()
	ctx := context.Background()
	got := make([][]byte, size)
	done := make(chan error, size)
	for _, ep := range eps {
		go func() {
			r := ep.Rank()
			got[r] = make([]byte, 1)
			recv := ep.Irecv((r+size-1)%size, 0, got[r])
			send := ep.Isend((r+1)%size, 0, []byte{byte(r)})
			if err := recv.Wait(ctx); err != nil {
				done <- err
				return
			}
			done <- send.Wait(ctx)
		}()
	}
	for range size {
		if err := <-done; err != nil {
			fmt.Println(err)
		}
	}
	for r := range size {
		fmt.Printf("rank %d got %d\n", r, got[r][0])
	}
	// Output:
	// rank 0 got 3
	// rank 1 got 0
	// rank 2 got 1
	// rank 3 got 2
}
