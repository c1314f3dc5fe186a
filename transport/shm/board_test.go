//go:build linux

package shm_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/goccl/goccl/transport"
	"github.com/goccl/goccl/transport/shm"
)

func boardWord(b []byte, i int) *atomic.Uint64 { return (*atomic.Uint64)(unsafe.Pointer(&b[8*i])) }

// TestBoardShared: three ranks, each with its own Connect (its own
// mappings), ask for the boards of the world and of a group {2, 0} in
// different orders; each block is 64-byte aligned and shared by exactly
// its members, and once every member has mapped a board no file is left.
func TestBoardShared(t *testing.T) {
	job := fmt.Sprintf("board%d", jobs.Add(1))
	eps := connectAll(t, 3, shm.Config{JobID: job})
	defer func() {
		for _, ep := range eps {
			ep.Close()
		}
	}()
	type boards struct{ world, pair transport.Board }
	got := make([]boards, 3)
	errs := make([]error, 3)
	var wg sync.WaitGroup
	for r := range 3 {
		wg.Go(func() {
			var err error
			if r == 2 { // asks for the group first: no order is needed
				if got[r].pair, err = eps[r].Board(7, []int{2, 0}, 200); err != nil {
					errs[r] = err
					return
				}
			}
			if got[r].world, err = eps[r].Board(0, []int{0, 1, 2}, 3*64); err != nil {
				errs[r] = err
				return
			}
			if r == 0 {
				got[r].pair, errs[r] = eps[r].Board(7, []int{2, 0}, 200)
			}
		})
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	for r := range 3 {
		w := got[r].world.Bytes()
		if len(w) != 3*64 || uintptr(unsafe.Pointer(&w[0]))%64 != 0 {
			t.Fatalf("rank %d: world block of %d bytes at %p", r, len(w), &w[0])
		}
		boardWord(w, 8*r).Store(uint64(100 + r))
		got[r].world.Wake()
	}
	for r := range 3 {
		w := got[r].world.Bytes()
		for q := range 3 {
			if v := boardWord(w, 8*q).Load(); v != uint64(100+q) {
				t.Fatalf("rank %d reads %d in member %d's line, want %d", r, v, q, 100+q)
			}
		}
	}
	p0, p2 := got[0].pair.Bytes(), got[2].pair.Bytes()
	if len(p0) != 200 || uintptr(unsafe.Pointer(&p0[0]))%64 != 0 {
		t.Fatalf("group block of %d bytes at %p", len(p0), &p0[0])
	}
	boardWord(p2, 3).Store(42)
	if v := boardWord(p0, 3).Load(); v != 42 {
		t.Fatalf("rank 0 reads %d where rank 2 wrote 42", v)
	}
	if v := boardWord(got[0].world.Bytes(), 3).Load(); v != 0 {
		t.Fatalf("the group's write shows on the world's board: %d", v)
	}
	if l := leftovers(t, job); len(l) > 0 {
		t.Errorf("files left once every member mapped its boards: %v", l)
	}
	for r := range 3 {
		for _, b := range []transport.Board{got[r].world, got[r].pair} {
			if b != nil {
				if err := b.Close(); err != nil {
					t.Error(err)
				}
			}
		}
	}
}

// TestBoardEarlyClose: a board that not every member has mapped leaves
// no file behind when its holder closes it, or closes its endpoint.
func TestBoardEarlyClose(t *testing.T) {
	job := fmt.Sprintf("board%d", jobs.Add(1))
	eps := connectAll(t, 2, shm.Config{JobID: job})
	defer eps[1].Close()
	b, err := eps[0].Board(1, []int{0, 1}, 64)
	if err != nil {
		t.Fatal(err)
	}
	if l := leftovers(t, job); len(l) != 1 {
		t.Fatalf("before rank 1 maps the board, files %v, want its segment", l)
	}
	b.Close()
	if l := leftovers(t, job); len(l) > 0 {
		t.Fatalf("after Close, files %v", l)
	}
	if _, err := eps[0].Board(2, []int{0, 1}, 64); err != nil {
		t.Fatal(err)
	}
	eps[0].Close()
	if l := leftovers(t, job); len(l) > 0 {
		t.Fatalf("after the endpoint's Close, files %v", l)
	}
	if _, err := eps[0].Board(3, []int{0, 1}, 64); !errors.Is(err, transport.ErrClosed) {
		t.Fatalf("Board after Close: %v", err)
	}
}

// TestBoardArgs: Board refuses groups this rank is not in, ranks out of
// range or repeated, and sizes out of range.
func TestBoardArgs(t *testing.T) {
	eps := connectAll(t, 2, shm.Config{})
	defer eps[0].Close()
	defer eps[1].Close()
	for _, c := range []struct {
		ranks []int
		size  int
	}{{[]int{1}, 8}, {[]int{0, 2}, 8}, {[]int{0, 0}, 8}, {nil, 8}, {[]int{0, 1}, -1}} {
		if b, err := eps[0].Board(1, c.ranks, c.size); err == nil {
			b.Close()
			t.Errorf("Board(%v, %d) accepted", c.ranks, c.size)
		}
	}
}

// TestProcessBoard: rank 1 is another process. Both map a board and take
// a turn on it through Wait and Wake; no file is left once both mapped
// it. Then rank 0 parks in a Wait that only a loss ends, rank 1 is killed
// with SIGKILL, and the Wait returns with Lost naming rank 1 (the pidfd
// monitor's news wakes it), and nothing is left in /dev/shm.
func TestProcessBoard(t *testing.T) {
	ep, cmd, _, job := startChild(t, "board")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// Rank 1 asks for the board once told to: startChild has checked
	// that no file is left by then.
	if err := ep.Isend(1, 8, nil).Wait(ctx); err != nil {
		t.Fatal(err)
	}
	b, err := ep.Board(childBoardID, []int{0, 1}, 128)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	mem := b.Bytes()
	mine, theirs := boardWord(mem, 0), boardWord(mem, 8)
	for i := uint64(1); i <= 100; i++ {
		if err := b.Wait(ctx, func() bool { return theirs.Load() >= i }); err != nil {
			t.Fatalf("round %d: %v", i, err)
		}
		mine.Store(i)
		b.Wake()
	}
	if l := leftovers(t, job); len(l) > 0 {
		t.Errorf("files left once both mapped the board: %v", l)
	}
	if b.Lost(1) != nil {
		t.Fatalf("Lost(1) before the kill: %v", b.Lost(1))
	}
	done := make(chan error, 1)
	go func() { done <- b.Wait(ctx, func() bool { return b.Lost(1) != nil }) }()
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("Wait for the loss: %v", err)
	}
	var pe *transport.PeerError
	if err := b.Lost(1); !errors.As(err, &pe) || pe.Peer != 1 || !errors.Is(err, transport.ErrPeerClosed) {
		t.Fatalf("Lost(1) after the kill: %v", err)
	}
	cmd.Wait()
	b.Close()
	ep.Close()
	if l := leftovers(t, job); len(l) > 0 {
		t.Fatalf("files left after SIGKILL: %v", l)
	}
}

// childBoard is rank 1's side of TestProcessBoard: 100 turns, then it
// waits to be killed.
func childBoard(ep *shm.Endpoint) error {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := ep.Irecv(0, 8, nil).Wait(ctx); err != nil {
		return err
	}
	b, err := ep.Board(childBoardID, []int{0, 1}, 128)
	if err != nil {
		return err
	}
	mem := b.Bytes()
	mine, theirs := boardWord(mem, 8), boardWord(mem, 0)
	for i := uint64(1); i <= 100; i++ {
		mine.Store(i)
		b.Wake()
		if err := b.Wait(ctx, func() bool { return theirs.Load() >= i }); err != nil {
			return err
		}
	}
	select {} // until SIGKILL
}

const childBoardID = 0xb0a4d
