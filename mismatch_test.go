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

// Ranks that disagree about a collective get ErrMismatch naming both calls,
// within the timeout, instead of a hang or silently misread bytes.
func TestMismatchIsCaught(t *testing.T) {
	type call func(ctx context.Context, c *goccl.Comm) error
	allreduce := func(buf any, op reduceop.Op) call {
		return func(ctx context.Context, c *goccl.Comm) error { return c.AllReduce(ctx, buf, op) }
	}
	broadcast := func(buf any, root int) call {
		return func(ctx context.Context, c *goccl.Comm) error { return c.Broadcast(ctx, buf, root) }
	}
	cases := []struct {
		name  string
		calls []call   // one per rank
		words []string // in the ErrMismatch error
	}{
		{"count", []call{allreduce(make([]float32, 8), reduceop.Sum), allreduce(make([]float32, 16), reduceop.Sum)}, []string{"count=8", "count=16"}},
		{"large count", []call{allreduce(make([]float32, 10000), reduceop.Sum), allreduce(make([]float32, 20000), reduceop.Sum)}, []string{"count=10000", "count=20000"}},
		{"small vs large", []call{allreduce(make([]float32, 10), reduceop.Sum), allreduce(make([]float32, 5000), reduceop.Sum)}, []string{"count=10", "count=5000"}},
		// Same bytes, other dtype: without the check this would add
		// int32 bit patterns as floats.
		{"dtype", []call{allreduce(make([]float32, 8), reduceop.Sum), allreduce(make([]int32, 8), reduceop.Sum)}, []string{"float32", "int32"}},
		{"op", []call{allreduce(make([]int64, 3), reduceop.Sum), allreduce(make([]int64, 3), reduceop.Max)}, []string{"op=sum", "op=max"}},
		// Rank 2 expects the tree rooted at 1; its parent in that tree
		// sends from the tree rooted at 0. (Roots that differ are caught
		// when some rank receives from a rank with the other root; when
		// every disagreeing rank only sends, nothing is received to check.)
		{"root", []call{broadcast(make([]int8, 5), 0), broadcast(make([]int8, 5), 0), broadcast(make([]int8, 5), 1)}, []string{"root=0", "root=1"}},
		{"collective", []call{allreduce(make([]float64, 4), reduceop.Sum), broadcast(make([]float64, 4), 0)}, []string{"all_reduce", "broadcast"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			n := len(tc.calls)
			comms, err := goccl.NewLocal(n, goccl.WithTimeout(10*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			errs := make([]error, n)
			var wg sync.WaitGroup
			for i, f := range tc.calls {
				wg.Add(1)
				go func() {
					defer wg.Done()
					errs[i] = f(ctx, comms[i])
				}()
			}
			wg.Wait()
			for _, c := range comms {
				c.Close()
			}
			// A rank that receives from a disagreeing rank reports
			// ErrMismatch naming that peer and both calls; it aborts, so
			// the ranks waiting on it fail too rather than hang.
			found := -1
			for r, err := range errs {
				var ge *goccl.Error
				if errors.Is(err, goccl.ErrMismatch) && errors.As(err, &ge) && ge.Peer != r {
					found = r
					for _, w := range tc.words {
						if !strings.Contains(err.Error(), w) {
							t.Errorf("rank %d: %q does not say %q", r, err, w)
						}
					}
				}
			}
			if found < 0 {
				t.Fatalf("no rank reported ErrMismatch: %v", errs)
			}
			// That communicator is aborted: later calls fail at once.
			if err := comms[found].AllReduce(ctx, []float32{1}, reduceop.Sum); !errors.Is(err, goccl.ErrAborted) {
				t.Fatalf("after a mismatch: %v, want ErrAborted", err)
			}
		})
	}
}

// With the check off, matching calls still work (the option only drops the
// fingerprint).
func TestMismatchCheckOff(t *testing.T) {
	err := goccl.RunLocal(context.Background(), 3, func(ctx context.Context, c *goccl.Comm) error {
		v := []int32{int32(c.Rank())}
		if err := c.AllReduce(ctx, v, reduceop.Sum); err != nil || v[0] != 3 {
			return errors.Join(err, errors.New("wrong sum"))
		}
		return nil
	}, goccl.WithMismatchCheck(false))
	if err != nil {
		t.Fatal(err)
	}
}
