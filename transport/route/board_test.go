package route_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/goccl/goccl/transport"
)

func TestBoardMem(t *testing.T) { testBoard(t, memLocal) }

// testBoard: on a job of 5 ranks on two pretend hosts ({4, 2, 0} and
// {3, 1}, numbered otherwise by their local endpoints), a group of one
// host's ranks gets the local route's board, shared by its members; a
// group across hosts gets an error; and Lost names the job rank of a
// member whose endpoint closed.
func testBoard(t *testing.T, newLocal localFunc) {
	eps := routed(t, 5, newLocal)
	defer func() {
		for _, ep := range eps {
			ep.Close()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	group := []int{0, 2, 4} // group member m is job rank group[m]
	boards := make([]transport.Board, 5)
	errs := make([]error, 5)
	var wg sync.WaitGroup
	for _, r := range group {
		wg.Go(func() { boards[r], errs[r] = eps[r].Board(9, group, 64) })
	}
	wg.Wait()
	for _, r := range group {
		if errs[r] != nil {
			t.Fatalf("rank %d: %v", r, errs[r])
		}
		defer boards[r].Close()
	}
	w := func(r int) *atomic.Uint64 { return (*atomic.Uint64)(unsafe.Pointer(&boards[r].Bytes()[0])) }
	w(4).Store(77)
	boards[4].Wake()
	if err := boards[0].Wait(ctx, func() bool { return w(0).Load() == 77 }); err != nil {
		t.Fatalf("rank 0 waiting for rank 4's word: %v", err)
	}
	for _, m := range []int{0, 1, 2} {
		if err := boards[0].Lost(m); err != nil {
			t.Fatalf("Lost(%d) while every member is up: %v", m, err)
		}
	}
	if b, err := eps[0].Board(10, []int{0, 1}, 64); err == nil {
		b.Close()
		t.Fatal("a board across hosts was given")
	}
	if b, err := eps[0].Board(10, []int{0, 5}, 64); err == nil {
		b.Close()
		t.Fatal("a board with a rank out of range was given")
	}
	eps[2].Close() // group member 1, local rank 1 on its host
	if err := boards[0].Wait(ctx, func() bool { return boards[0].Lost(1) != nil }); err != nil {
		t.Fatalf("waiting for member 1's loss: %v", err)
	}
	var pe *transport.PeerError
	if err := boards[0].Lost(1); !errors.As(err, &pe) || pe.Peer != 2 || !errors.Is(err, transport.ErrPeerClosed) {
		t.Fatalf("Lost(1) = %v, want a PeerError naming job rank 2", err)
	}
}
