//go:build linux

package shm_test

import (
	"context"
	"testing"

	"github.com/goccl/goccl/transport"
	"github.com/goccl/goccl/transport/shm"
)

// benchSendRecv times one send from rank 0 to rank 1 and its receive,
// ranks being goroutines of this process with their own mappings. posted:
// the receive is posted before the send.
func benchSendRecv(b *testing.B, n int, posted bool, cfg shm.Config) {
	eps := connectAll(b, 2, cfg)
	b.Cleanup(func() { eps[0].Close(); eps[1].Close() })
	ctx := context.Background()
	src, dst := make([]byte, n), make([]byte, n)
	b.SetBytes(int64(n))
	b.ReportAllocs()
	for b.Loop() {
		if posted {
			r := eps[1].Irecv(0, 1, dst)
			if err := eps[0].Isend(1, 1, src).Wait(ctx); err != nil {
				b.Fatal(err)
			}
			if err := r.Wait(ctx); err != nil {
				b.Fatal(err)
			}
			transport.Release(r)
			continue
		}
		if err := eps[0].Isend(1, 1, src).Wait(ctx); err != nil {
			b.Fatal(err)
		}
		r := eps[1].Irecv(0, 1, dst)
		if err := r.Wait(ctx); err != nil {
			b.Fatal(err)
		}
		transport.Release(r)
	}
}

func BenchmarkSendRecv8B(b *testing.B) {
	b.Run("posted", func(b *testing.B) { benchSendRecv(b, 8, true, shm.Config{}) })
	b.Run("unexpected", func(b *testing.B) { benchSendRecv(b, 8, false, shm.Config{}) })
}

func BenchmarkSendRecv1MiB(b *testing.B) {
	// cma: the receiver pulls the message (one copy); copy: through the
	// ring (two copies, pipelined).
	copyCfg := shm.Config{CMAThreshold: -1}
	b.Run("cma/posted", func(b *testing.B) { benchSendRecv(b, 1<<20, true, shm.Config{}) })
	b.Run("cma/unexpected", func(b *testing.B) { benchSendRecv(b, 1<<20, false, shm.Config{}) })
	b.Run("copy/posted", func(b *testing.B) { benchSendRecv(b, 1<<20, true, copyCfg) })
	b.Run("copy/unexpected", func(b *testing.B) { benchSendRecv(b, 1<<20, false, copyCfg) })
}

// BenchmarkSendRecv512KiB compares the paths of a message that a ring of
// the default size holds (the halves of a 2-rank allreduce of 1 MiB):
// fits, copied in by Isend and out by the drainer (the default); cma,
// pulled by the receiver because the ring (32 slots) cannot hold it;
// stream, the same small ring with CMA off, so the sender goroutine
// streams it slot by slot.
func BenchmarkSendRecv512KiB(b *testing.B) {
	b.Run("fits/posted", func(b *testing.B) { benchSendRecv(b, 512<<10, true, shm.Config{}) })
	b.Run("cma/posted", func(b *testing.B) { benchSendRecv(b, 512<<10, true, shm.Config{Slots: 32}) })
	b.Run("stream/posted", func(b *testing.B) { benchSendRecv(b, 512<<10, true, shm.Config{Slots: 32, CMAThreshold: -1}) })
}

// BenchmarkBoardTurn times one turn on a board between two goroutine
// ranks with their own mappings: each stores the turn's number in its
// line, wakes, and waits for the other's. It is the floor under an
// allreduce on the board: the exchange of a cache line each way.
func BenchmarkBoardTurn(b *testing.B) {
	eps := connectAll(b, 2, shm.Config{})
	b.Cleanup(func() { eps[0].Close(); eps[1].Close() })
	var bs [2]transport.Board
	for i := range 2 {
		var err error
		if bs[i], err = eps[i].Board(1, []int{0, 1}, 128); err != nil {
			b.Fatal(err)
		}
		defer bs[i].Close()
	}
	ctx := context.Background()
	turns := func(me int, n uint64) error {
		mem := bs[me].Bytes()
		mine, theirs := boardWord(mem, 8*me), boardWord(mem, 8*(1-me))
		for i := uint64(1); i <= n; i++ {
			mine.Store(i)
			bs[me].Wake()
			if err := bs[me].Wait(ctx, func() bool { return theirs.Load() >= i }); err != nil {
				return err
			}
		}
		return nil
	}
	b.ReportAllocs()
	b.ResetTimer()
	done := make(chan error, 1)
	go func() { done <- turns(1, uint64(b.N)) }()
	if err := turns(0, uint64(b.N)); err != nil {
		b.Fatal(err)
	}
	if err := <-done; err != nil {
		b.Fatal(err)
	}
}
