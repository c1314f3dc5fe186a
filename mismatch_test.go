package goccl_test

import (
	"context"
	"errors"
	"fmt"
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
	reduce := func(buf any, root int) call {
		return func(ctx context.Context, c *goccl.Comm) error { return c.Reduce(ctx, buf, reduceop.Sum, root) }
	}
	gather := func(root int) call {
		return func(ctx context.Context, c *goccl.Comm) error {
			return c.Gather(ctx, make([]int32, 3), make([]int32, 3*c.Size()), root)
		}
	}
	scatter := func(root int) call {
		return func(ctx context.Context, c *goccl.Comm) error {
			return c.Scatter(ctx, make([]int32, 3*c.Size()), make([]int32, 3), root)
		}
	}
	alltoall := func(count int) call {
		return func(ctx context.Context, c *goccl.Comm) error {
			return c.AllToAll(ctx, make([]float32, count), make([]float32, count))
		}
	}
	alltoallSplit := func(send, recv []int) call {
		return func(ctx context.Context, c *goccl.Comm) error {
			return c.AllToAllSplit(ctx, make([]int64, sum(send)), send, make([]int64, sum(recv)), recv)
		}
	}
	// roots gives rank i the call f(roots[i]), on side roots[i].
	roots := func(f func(root int) call, roots ...int) (calls []call, sides []int) {
		for _, r := range roots {
			calls = append(calls, f(r))
		}
		return calls, roots
	}
	type tcase struct {
		name  string
		calls []call   // one per rank
		sides []int    // which side of the disagreement each rank is on
		words []string // in the ErrMismatch error
	}
	cases := []tcase{
		{"count", []call{allreduce(make([]float32, 8), reduceop.Sum), allreduce(make([]float32, 16), reduceop.Sum)}, []int{0, 1}, []string{"count=8", "count=16"}},
		{"large count", []call{allreduce(make([]float32, 10000), reduceop.Sum), allreduce(make([]float32, 20000), reduceop.Sum)}, []int{0, 1}, []string{"count=10000", "count=20000"}},
		{"small vs large", []call{allreduce(make([]float32, 10), reduceop.Sum), allreduce(make([]float32, 5000), reduceop.Sum)}, []int{0, 1}, []string{"count=10", "count=5000"}},
		// Same bytes, other dtype: without the check this would add
		// int32 bit patterns as floats.
		{"dtype", []call{allreduce(make([]float32, 8), reduceop.Sum), allreduce(make([]int32, 8), reduceop.Sum)}, []int{0, 1}, []string{"float32", "int32"}},
		{"op", []call{allreduce(make([]int64, 3), reduceop.Sum), allreduce(make([]int64, 3), reduceop.Max)}, []int{0, 1}, []string{"op=sum", "op=max"}},
		// The dtypes added later are named too, on both sides.
		{"dtype uint32", []call{allreduce(make([]uint32, 8), reduceop.Max), allreduce(make([]float32, 8), reduceop.Max)}, []int{0, 1}, []string{"uint32", "float32"}},
		{"dtype complex64", []call{broadcast(make([]complex64, 4), 0), broadcast(make([]uint64, 4), 0)}, []int{0, 1}, []string{"complex64", "uint64"}},
		{"dtype bool", []call{allreduce(make([]bool, 8), reduceop.BOr), allreduce(make([]uint8, 8), reduceop.BOr)}, []int{0, 1}, []string{"dtype=bool", "dtype=uint8"}},
		{"collective", []call{allreduce(make([]float64, 4), reduceop.Sum), broadcast(make([]float64, 4), 0)}, []int{0, 1}, []string{"all_reduce", "broadcast"}},
		{"all-to-all count", []call{alltoall(4), alltoall(8)}, []int{0, 1}, []string{"count=4", "count=8"}},
		{"all-to-all count, large", []call{alltoall(3000), alltoall(6000), alltoall(3000)}, []int{0, 1, 0}, []string{"count=3000", "count=6000"}},
		// Splits: rank 0 sends 2 elements to rank 1, which expects 3. Only
		// the receiver can tell (side -1: not bound to report).
		{"all-to-all splits", []call{alltoallSplit([]int{1, 2}, []int{1, 1}), alltoallSplit([]int{1, 1}, []int{3, 1})}, []int{-1, 1}, []string{"all_to_all_single", "expecting 24 bytes from peer 0, which sent 16 bytes"}},
	}
	// Roots that differ, for every rooted collective: ranks that only send
	// (a broadcast's root, a reduce's leaves) must be caught too, and
	// ranks that each wait on the other as the root must not hang.
	for _, rc := range []struct {
		name string
		f    func(root int) call
	}{
		{"broadcast", func(r int) call { return broadcast(make([]int8, 5), r) }},
		{"broadcast large", func(r int) call { return broadcast(make([]float32, 100000), r) }},
		{"reduce", func(r int) call { return reduce(make([]float64, 4), r) }},
		{"gather", gather},
		{"scatter", scatter},
	} {
		for _, rs := range [][]int{{0, 1}, {0, 0, 1}, {0, 1, 1}, {0, 0, 0, 3}, {2, 2, 0, 0, 2}} {
			calls, sides := roots(rc.f, rs...)
			cases = append(cases, tcase{fmt.Sprintf("root %s %v", rc.name, rs), calls, sides, []string{
				fmt.Sprintf("root=%d", rs[0]), fmt.Sprintf("root=%d", rs[len(rs)-1])}})
		}
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
			// ErrMismatch naming that peer, on the other side, and both
			// calls; it aborts, and the others fail with its verdict
			// (also ErrMismatch) or, having met no disagreement, return
			// nil and find the communicator aborted later. No rank waits
			// out the timeout.
			found := -1
			for r, err := range errs {
				if err == nil {
					continue
				}
				if !errors.Is(err, goccl.ErrMismatch) {
					t.Errorf("rank %d: %v, want ErrMismatch", r, err)
					continue
				}
				if !strings.HasPrefix(err.Error(), "goccl: ") {
					t.Errorf("rank %d: %q does not read as goccl's errors do", r, err)
				}
				for _, w := range tc.words {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("rank %d: %q does not say %q", r, err, w)
					}
				}
				if !errors.Is(err, goccl.ErrAborted) {
					t.Errorf("rank %d: %v, want ErrAborted too (the communicator is aborted)", r, err)
				}
				var ge *goccl.Error
				if !errors.As(err, &ge) {
					t.Errorf("rank %d: %v is no *goccl.Error", r, err)
					continue
				}
				// Relayed or not, the error names a rank whose call
				// differs from this rank's, never one that only passed the
				// news on.
				if ge.Peer < 0 || ge.Peer == r || tc.sides[ge.Peer] == tc.sides[r] && tc.sides[r] >= 0 {
					t.Errorf("rank %d blames rank %d, not one on the other side: %v", r, ge.Peer, err)
				}
				if relayed := (*goccl.PeerReport)(nil); !errors.As(err, &relayed) {
					found = r
				}
			}
			if found < 0 {
				t.Fatalf("no rank reported ErrMismatch itself: %v", errs)
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

func sum(xs []int) (s int) {
	for _, x := range xs {
		s += x
	}
	return s
}
