package goccl_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/goccl/goccl"
	"github.com/goccl/goccl/algo"
	"github.com/goccl/goccl/reduceop"
)

// coalescedLens are the element counts of the buffers of one coalesced
// call: empty ones, one element, counts no world size divides, and one
// long enough to span the ring's segments.
var coalescedLens = []int{0, 1, 7, 0, 3001, 2, 70_000, 5}

// coalescedInput is rank r's buffer i, element j.
func coalescedInput(r, i, j int) float64 { return float64((r+1)*(i+3)) + float64(j%11) }

// The coalesced collectives on the ring run on the caller's slices: no
// byte is packed, and the result is each buffer's own allreduce or
// allgather. The same calls on the latency path pack (and say so in the
// count), with the same results.
func TestCoalescedInPlace(t *testing.T) {
	for _, tc := range []struct {
		name   string
		algo   algo.Algorithm
		packed bool // whether the call packs its slices
	}{
		{"ring", algo.Ring, false},
		{"doubling", algo.Doubling, true},
	} {
		for _, n := range []int{2, 3, 5} {
			t.Run(fmt.Sprintf("%s/n=%d", tc.name, n), func(t *testing.T) {
				runRanks(t, n, tc.algo, func(ctx context.Context, c *goccl.Comm) error {
					for _, op := range []reduceop.Op{reduceop.Sum, reduceop.Avg, reduceop.Max} {
						bufs := make([]any, len(coalescedLens))
						for i, m := range coalescedLens {
							b := make([]float64, m)
							for j := range b {
								b[j] = coalescedInput(c.Rank(), i, j)
							}
							bufs[i] = b
						}
						before := goccl.PackedBytes(c)
						if err := c.AllReduceCoalesced(ctx, bufs, op); err != nil {
							return err
						}
						if packed := goccl.PackedBytes(c) - before; (packed != 0) != tc.packed {
							return fmt.Errorf("%v: %d bytes packed, want packing %v", op, packed, tc.packed)
						}
						for i, b := range bufs {
							for j, x := range b.([]float64) {
								var want float64
								for r := range n {
									v := coalescedInput(r, i, j)
									switch op {
									case reduceop.Max:
										want = max(want, v)
									default:
										want += v
									}
								}
								if op == reduceop.Avg {
									want /= float64(n)
								}
								if x != want {
									return fmt.Errorf("%v: buffer %d element %d = %v, want %v", op, i, j, x, want)
								}
							}
						}
					}

					send, recv := make([]any, len(coalescedLens)), make([]any, len(coalescedLens))
					for i, m := range coalescedLens {
						s := make([]int32, m)
						for j := range s {
							s[j] = int32(c.Rank()*1000 + i*100 + j)
						}
						send[i], recv[i] = s, make([]int32, m*n)
					}
					before := goccl.PackedBytes(c)
					if err := c.AllGatherCoalesced(ctx, send, recv); err != nil {
						return err
					}
					if packed := goccl.PackedBytes(c) - before; (packed != 0) != tc.packed {
						return fmt.Errorf("allgather: %d bytes packed, want packing %v", packed, tc.packed)
					}
					for i, m := range coalescedLens {
						got := recv[i].([]int32)
						for r := range n {
							for j := range m {
								if want := int32(r*1000 + i*100 + j); got[r*m+j] != want {
									return fmt.Errorf("allgather: recv[%d] rank %d element %d = %d, want %d", i, r, j, got[r*m+j], want)
								}
							}
						}
					}
					return nil
				})
			})
		}
	}
}

// Ranks whose lists hold the same total in buffers of other lengths fail
// with ErrMismatch naming the lists (the fingerprint's layout), on every
// transport, on the ring and packed alike, and never leave a rank with
// misplaced bytes and nil: over shm a range of slices is one vectored
// message whatever its cut, so the message lengths alone cannot tell.
func TestCoalescedLayoutsDiffer(t *testing.T) {
	for name, world := range cancelWorlds {
		for _, a := range []algo.Algorithm{algo.Ring, algo.Doubling} {
			t.Run(fmt.Sprintf("%s/%s", name, a), func(t *testing.T) {
				comms := world(t, 2)
				defer closeAll(comms)
				lists := [][]any{
					{make([]float32, 1), make([]float32, 3)},
					{make([]float32, 2), make([]float32, 2)},
				}
				errs := make([]error, 2)
				var wg sync.WaitGroup
				for r, c := range comms {
					if err := c.SetAlgorithm(a); err != nil {
						t.Fatal(err)
					}
					wg.Go(func() { errs[r] = c.AllReduceCoalesced(context.Background(), lists[r], reduceop.Sum) })
				}
				wg.Wait()
				for r, err := range errs {
					if !errors.Is(err, goccl.ErrMismatch) {
						t.Errorf("rank %d: %v, want ErrMismatch", r, err)
					}
				}
				if err := errs[0]; err != nil && !strings.Contains(err.Error(), "buffer lengths #") {
					t.Errorf("%v does not name the lists", err)
				}
			})
		}
	}
}

// A coalesced list of one buffer is the plain collective on it: nothing
// is packed, whatever the algorithm.
func TestCoalescedOne(t *testing.T) {
	runRanks(t, 3, "", func(ctx context.Context, c *goccl.Comm) error {
		a := []float32{1, float32(c.Rank())}
		before := goccl.PackedBytes(c)
		if err := c.AllReduceCoalesced(ctx, []any{a}, reduceop.Sum); err != nil {
			return err
		}
		g := make([]float32, 6)
		if err := c.AllGatherCoalesced(ctx, []any{a}, []any{g}); err != nil {
			return err
		}
		if packed := goccl.PackedBytes(c) - before; packed != 0 {
			return fmt.Errorf("%d bytes packed for one buffer", packed)
		}
		if !slices.Equal(a, []float32{3, 3}) || !slices.Equal(g, []float32{3, 3, 3, 3, 3, 3}) {
			return fmt.Errorf("got %v, %v", a, g)
		}
		return nil
	})
}
