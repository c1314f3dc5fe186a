package goccl

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/goccl/goccl/algo"
	"github.com/goccl/goccl/backend"
	"github.com/goccl/goccl/commslog"
	"github.com/goccl/goccl/reduceop"
)

// Barrier returns once every rank of the group has entered it.
func (c *Comm) Barrier(ctx context.Context) error {
	const name = commslog.Barrier
	if c.useBoard(0, true) {
		k := c.newBoardCall(name, 0, 0)
		c.peers(k, reduceop.Uint8, nil)
		return k.do(ctx)
	}
	k := c.newCall(name, 0, 0, algo.Dissemination)
	p := c.peers(k, reduceop.Uint8, nil)
	c.delegate(k, false, backend.Call{Coll: backend.Barrier, DType: reduceop.Uint8})
	k.run = func(ctx context.Context) error { return barrierFunc(ctx, p) }
	return k.exec(ctx)
}

// MonitoredBarrier is a barrier that reports who is missing: rank 0 waits
// up to timeout for every other rank, and the error names the ranks that
// did not arrive (torch's monitored_barrier). With waitAll, rank 0 lists
// every missing rank; otherwise it fails at the first. Other ranks fail
// naming rank 0 if it does not release them in time.
func (c *Comm) MonitoredBarrier(ctx context.Context, timeout time.Duration, waitAll bool) error {
	const name = commslog.MonitoredBarrier
	if timeout <= 0 {
		return invalid(name, c.rank, "timeout must be positive, got %v", timeout)
	}
	k := c.newCall(name, 0, 0, "")
	p := c.peers(k, reduceop.Uint8, nil)
	k.run = func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		if c.rank != 0 {
			p.Isend(0, nil)
			if err := p.Irecv(0, nil).Wait(ctx); err != nil {
				return err
			}
			return nil
		}
		reqs := make([]algo.Request, c.Size())
		for r := 1; r < c.Size(); r++ {
			reqs[r] = p.Irecv(r, nil)
		}
		var missing []int
		for r := 1; r < c.Size(); r++ {
			if err := reqs[r].Wait(ctx); err != nil {
				missing = append(missing, r)
				if !waitAll {
					break
				}
			}
		}
		if len(missing) > 0 {
			return &Error{Op: name, Rank: c.rank, Peer: missing[0],
				Err: fmt.Errorf("%w: ranks %v did not reach the barrier within %v", ErrTimeout, slices.Clip(missing), timeout)}
		}
		for r := 1; r < c.Size(); r++ {
			p.Isend(r, nil)
		}
		return nil
	}
	return k.exec(ctx)
}
