package goccl_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goccl/goccl"
	"github.com/goccl/goccl/reduceop"
)

// A call whose context ended before it started sends nothing and leaves
// the communicator usable: the next calls of every rank still pair up.
func TestCancelBeforeStart(t *testing.T) {
	err := goccl.RunLocal(context.Background(), 3, func(ctx context.Context, c *goccl.Comm) error {
		if c.Rank() == 1 {
			done, cancel := context.WithCancel(ctx)
			cancel()
			err := c.AllReduce(done, []float32{1}, reduceop.Sum)
			var ge *goccl.Error
			if !errors.Is(err, context.Canceled) || errors.Is(err, goccl.ErrAborted) || !errors.As(err, &ge) || ge.Op != "all_reduce" {
				return errors.Join(errors.New("want context.Canceled in a *goccl.Error, not ErrAborted"), err)
			}
			w := c.AllReduceAsync(done, []float32{1}, reduceop.Sum)
			if err := w.Wait(ctx); !errors.Is(err, context.Canceled) {
				return errors.Join(errors.New("async: want context.Canceled"), err)
			}
		}
		v := []float32{float32(c.Rank())}
		if err := c.AllReduce(ctx, v, reduceop.Sum); err != nil || v[0] != 3 {
			return errors.Join(errors.New("the call after the cancelled one"), err)
		}
		return nil
	}, goccl.WithTimeout(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
}

// A call cancelled while it waits on its peers aborts the communicator;
// the canceller's error wraps context.Canceled and ErrAborted, and every
// peer's error names the rank that cancelled and says it cancelled.
func TestCancelInFlight(t *testing.T) {
	const n, canceller = 4, 2
	comms, err := goccl.NewLocal(n, goccl.WithTimeout(20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	errs := make([]error, n)
	cctx, cancel := context.WithCancel(ctx)
	started := make(chan struct{})
	var wg sync.WaitGroup
	for r, c := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if r == canceller {
				close(started)
				errs[r] = c.AllReduce(cctx, make([]float32, 1000), reduceop.Sum)
				return
			}
			<-started
			time.Sleep(20 * time.Millisecond) // not a timing assertion: only lets the cancel land mid-call more often
			errs[r] = c.AllReduce(ctx, make([]float32, 1000), reduceop.Sum)
		}()
	}
	<-started
	time.Sleep(10 * time.Millisecond)
	cancel()
	wg.Wait()
	for _, c := range comms {
		c.Close()
	}
	if e := errs[canceller]; !errors.Is(e, context.Canceled) || !errors.Is(e, goccl.ErrAborted) {
		t.Errorf("canceller: %v, want context.Canceled and ErrAborted", e)
	}
	for r, e := range errs {
		if r == canceller {
			continue
		}
		var ge *goccl.Error
		switch {
		case e == nil:
			t.Errorf("rank %d returned nil from a call its peer cancelled", r)
		case !errors.Is(e, goccl.ErrAborted) || errors.Is(e, context.Canceled):
			t.Errorf("rank %d: %v, want ErrAborted and not context.Canceled (it did not cancel)", r, e)
		case !errors.As(e, &ge) || ge.Peer != canceller:
			t.Errorf("rank %d: %v does not name rank %d", r, e, canceller)
		case !strings.Contains(e.Error(), "cancelled"):
			t.Errorf("rank %d: %q does not say rank %d cancelled", r, e, canceller)
		}
	}
}
