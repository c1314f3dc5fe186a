package goccl_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/goccl/goccl"
	"github.com/goccl/goccl/algo"
	"github.com/goccl/goccl/reduceop"
)

// TestStallBlame: one rank never joins a collective. Every other rank
// times out waiting on someone, often not on the absent rank itself (in a
// ring, rank 0 waits on rank 3, which waits on rank 2), yet every one must
// name the absent rank, within the timeout and its grace period.
//
// The blame follows who waits on whom at the timeout, so every present
// rank must have reached its wait by then: with a timeout of 400 ms a
// loaded machine (three -race runs of this test at once on 2 cores) left a
// rank still computing, and the chain ended at it (1 run in 45). 1.5 s
// leaves them time.
func TestStallBlame(t *testing.T) {
	const timeout = 1500 * time.Millisecond
	for _, tc := range []struct {
		algo   algo.Algorithm
		n, bad int
	}{
		{algo.Ring, 4, 2}, {algo.Ring, 5, 0}, {algo.Tree, 6, 5}, {algo.Halving, 5, 3},
	} {
		t.Run(fmt.Sprintf("%s/n=%d/absent=%d", tc.algo, tc.n, tc.bad), func(t *testing.T) {
			comms, err := goccl.NewLocal(tc.n, goccl.WithTimeout(timeout), goccl.WithAlgorithm(tc.algo))
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				for _, c := range comms {
					c.Close()
				}
			}()
			errs := make([]error, tc.n)
			took := make([]time.Duration, tc.n)
			var wg sync.WaitGroup
			for r, c := range comms {
				if r == tc.bad {
					continue
				}
				wg.Go(func() {
					buf := make([]float32, 1<<16)
					start := time.Now()
					errs[r] = c.AllReduce(context.Background(), buf, reduceop.Sum)
					took[r] = time.Since(start)
				})
			}
			wg.Wait()
			for r, err := range errs {
				if r == tc.bad {
					continue
				}
				var ge *goccl.Error
				switch {
				case !errors.Is(err, goccl.ErrTimeout) || !errors.As(err, &ge):
					t.Errorf("rank %d: %v, want ErrTimeout", r, err)
				case ge.Peer != tc.bad:
					t.Errorf("rank %d names peer %d, want the absent rank %d: %v", r, ge.Peer, tc.bad, err)
				case took[r] > timeout+time.Second+3*time.Second: // the grace, and room for a loaded machine: no hang
					t.Errorf("rank %d took %v", r, took[r])
				}
				if err := comms[r].Barrier(context.Background()); !errors.Is(err, goccl.ErrAborted) {
					t.Errorf("rank %d: next call: %v, want ErrAborted", r, err)
				}
			}
		})
	}
}
