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
// messages) over the fake fabric on 3 ranks and, mid-stream, moves rank
// 1's queue pair to rank 2 into the error state. Ranks 1 and 2 must fail
// with an error that names the other and wraps ErrPeerClosed; until then
// the sums are right.
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
	f.Device(devName(1)).QPTo(devName(2)).Break()
	wg.Wait()
	// Rank 1 sees its posted receives flush the moment its queue pair
	// breaks, ahead of anything that arrives later, so it names rank 2.
	// The others fail too: rank 2 when its next request towards rank 1
	// fails, or when an abort that blames it reaches it first.
	var ge *goccl.Error
	if err := errs[1]; !errors.As(err, &ge) || ge.Peer != 2 || !errors.Is(err, transport.ErrPeerClosed) {
		t.Errorf("rank 1: %v, want a goccl.Error naming peer 2 and wrapping ErrPeerClosed", err)
	}
	for _, r := range []int{0, 2} {
		if errs[r] == nil || !errors.As(errs[r], &ge) {
			t.Errorf("rank %d: %v, want a goccl.Error", r, errs[r])
		}
		t.Logf("rank %d: %v", r, errs[r])
	}
}
