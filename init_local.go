package goccl

import (
	"context"
	"fmt"
	"sync"

	"github.com/goccl/goccl/transport/mem"
)

// NewLocal returns n communicators that talk in memory, one per rank, for
// running ranks as goroutines in one process (tests, threads as ranks).
// Close each one when done. GOCCL_SPIN sets how long their waits poll.
func NewLocal(n int, opts ...Option) ([]*Comm, error) {
	if n < 1 {
		return nil, fmt.Errorf("goccl: NewLocal: %w: needs at least one rank, got %d", ErrInvalid, n)
	}
	o, err := buildOptions(opts)
	if err != nil {
		return nil, err
	}
	eps := mem.NewWithConfig(n, mem.Config{Spin: o.spin})
	comms := make([]*Comm, n)
	for i, ep := range eps {
		c, err := newComm(ep, o)
		if err != nil {
			for j := range eps {
				if j < i {
					comms[j].Close() // and its endpoint
				} else {
					eps[j].Close()
				}
			}
			return nil, err
		}
		comms[i] = c
	}
	return comms, nil
}

// RunLocal runs f on n in-process ranks at once and returns the first
// error, after every rank has returned. It closes the communicators.
func RunLocal(ctx context.Context, n int, f func(ctx context.Context, c *Comm) error, opts ...Option) error {
	comms, err := NewLocal(n, opts...)
	if err != nil {
		return err
	}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i, c := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = f(ctx, c)
		}()
	}
	wg.Wait()
	for _, c := range comms {
		c.Close()
	}
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
