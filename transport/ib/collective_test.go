package ib_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goccl/goccl"
	"github.com/goccl/goccl/reduceop"
	"github.com/goccl/goccl/transport"
	"github.com/goccl/goccl/transport/ib"
	"github.com/goccl/goccl/transport/ib/ibfake"
)

// TestAllReduceQPError runs goccl's AllReduce of 1 MiB (rendezvous
// messages) over the fake fabric on 3 ranks and, mid-stream, moves every
// queue pair of rank 1's adapter into the error state at once, as a fatal
// adapter error does. Ranks 0 and 2 must fail with an error that names
// rank 1 and wraps ErrPeerClosed; rank 1, cut off from both, names one of
// them. Until then the sums are right.
//
// Breaking a single queue pair (1 to 2) leaves two live ranks that each
// blame the other, and which verdict rank 1 hears first (its own flushed
// receives, or rank 2's blame relayed by rank 0 over a healthy link) is a
// race: the test named rank 2 from rank 1 only most of the time.
func TestAllReduceQPError(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	f := ibfake.New()
	eps := connect(t, f, 3, func(c *ib.Config) { c.Heartbeat = 5 * time.Millisecond })
	comms := make([]*goccl.Comm, 3)
	for r, ep := range eps {
		c, err := goccl.New(ep, goccl.WithTimeout(20*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		comms[r] = c
		defer c.Close()
	}
	var rounds atomic.Int64
	errs := make([]error, 3)
	var wg sync.WaitGroup
	for r, c := range comms {
		wg.Go(func() {
			buf := make([]float32, 1<<18)
			for i := 0; ; i++ {
				for j := range buf {
					buf[j] = float32(r + 1)
				}
				if err := c.AllReduce(ctx, buf, reduceop.Sum); err != nil {
					errs[r] = err
					return
				}
				if buf[0] != 6 || buf[len(buf)-1] != 6 {
					errs[r] = errors.New("wrong sum")
					return
				}
				if r == 0 {
					rounds.Add(1)
				}
			}
		})
	}
	for rounds.Load() < 3 && ctx.Err() == nil {
		time.Sleep(time.Millisecond)
	}
	f.Device(devName(1)).Break()
	wg.Wait()
	var ge *goccl.Error
	for _, r := range []int{0, 2} {
		if err := errs[r]; !errors.As(err, &ge) || ge.Peer != 1 || !errors.Is(err, transport.ErrPeerClosed) {
			t.Errorf("rank %d: %v, want a goccl.Error naming peer 1 and wrapping ErrPeerClosed", r, err)
		}
	}
	if err := errs[1]; !errors.As(err, &ge) || (ge.Peer != 0 && ge.Peer != 2) || !errors.Is(err, transport.ErrPeerClosed) {
		t.Errorf("rank 1: %v, want a goccl.Error naming peer 0 or 2 and wrapping ErrPeerClosed", err)
	}
	for r, err := range errs {
		t.Logf("rank %d: %v", r, err)
	}
}
