package goccl_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goccl/goccl"
	"github.com/goccl/goccl/algo"
	"github.com/goccl/goccl/internal/elems"
	"github.com/goccl/goccl/reduceop"
)

// The suite runs every collective, with every algorithm that implements
// it, for world sizes 1..9 and awkward counts, and compares each rank's
// result with a sequential reference built from reduceop.Apply. Inputs are
// small integers so that every dtype and every reduction order gives
// exactly the same answer. Every buffer the library writes sits between
// guard bands that must come back untouched.

const guard = 3 // guard elements on each side

// val is rank r's element i for op: small, exact in every dtype.
func val(op reduceop.Op, r, i int) float64 {
	switch op {
	case reduceop.Prod:
		return float64(1 + (r+i)%2)
	case reduceop.Min, reduceop.Max:
		return float64((r*7 + i*3) % 11)
	}
	return float64((r + i) % 5)
}

// guarded is a buffer of n elements with guard bands around it.
type guarded struct {
	full any
	dt   reduceop.DType
	n    int
}

const poison = 77

func newGuarded(dt reduceop.DType, n int) guarded {
	g := guarded{full: elems.Make(dt, n+2*guard), dt: dt, n: n}
	for i := 0; i < n+2*guard; i++ {
		elems.Set(g.full, i, poison)
	}
	return g
}

// buf is the middle of the guarded buffer, capacity-limited so appends
// cannot reach the guards either.
func (g guarded) buf() any {
	lo, hi := guard, guard+g.n
	switch s := g.full.(type) {
	case []float32:
		return s[lo:hi:hi]
	case []float64:
		return s[lo:hi:hi]
	case []reduceop.F16:
		return s[lo:hi:hi]
	case []reduceop.BF16:
		return s[lo:hi:hi]
	case []int8:
		return s[lo:hi:hi]
	case []uint8:
		return s[lo:hi:hi]
	case []int32:
		return s[lo:hi:hi]
	case []int64:
		return s[lo:hi:hi]
	case []uint16:
		return s[lo:hi:hi]
	case []uint32:
		return s[lo:hi:hi]
	case []uint64:
		return s[lo:hi:hi]
	case []int16:
		return s[lo:hi:hi]
	case []bool:
		return s[lo:hi:hi]
	case []complex64:
		return s[lo:hi:hi]
	case []complex128:
		return s[lo:hi:hi]
	}
	panic("unreachable")
}

// poisonVal is what a guard element reads back as: poison, or 1 for bool.
func (g guarded) poisonVal() float64 {
	if g.dt == reduceop.Bool {
		return 1
	}
	return poison
}

func (g guarded) set(i int, v float64) { elems.Set(g.full, guard+i, v) }
func (g guarded) get(i int) float64    { return elems.Get(g.full, guard+i) }

func (g guarded) checkGuards(t *testing.T, what string) {
	t.Helper()
	for i := 0; i < guard; i++ {
		if elems.Get(g.full, i) != g.poisonVal() || elems.Get(g.full, guard+g.n+i) != g.poisonVal() {
			t.Fatalf("%s: guard band overwritten", what)
		}
	}
}

// reference folds element i of every rank's input in rank order.
func reference(dt reduceop.DType, op reduceop.Op, n int, idx []int) []float64 {
	acc := elems.Make(dt, len(idx))
	tmp := elems.Make(dt, len(idx))
	applyOp := op
	if op == reduceop.Avg {
		applyOp = reduceop.Sum
	}
	for r := 0; r < n; r++ {
		dst := acc
		if r > 0 {
			dst = tmp
		}
		for k, i := range idx {
			elems.Set(dst, k, val(op, r, i))
		}
		if r > 0 {
			if err := reduceop.Apply(dt, applyOp, goccl.Bytes(acc), goccl.Bytes(tmp)); err != nil {
				panic(err)
			}
		}
	}
	if op == reduceop.Avg {
		reduceop.Scale(dt, goccl.Bytes(acc), n)
	}
	out := make([]float64, len(idx))
	for k := range idx {
		out[k] = elems.Get(acc, k)
	}
	return out
}

func span(lo, n int) []int {
	idx := make([]int, n)
	for i := range idx {
		idx[i] = lo + i
	}
	return idx
}

// runRanks runs f on n in-process ranks with algorithm a forced.
func runRanks(t *testing.T, n int, a algo.Algorithm, f func(ctx context.Context, c *goccl.Comm) error, more ...goccl.Option) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	opts := append([]goccl.Option{goccl.WithTimeout(20 * time.Second)}, more...)
	if a != "" {
		opts = append(opts, goccl.WithAlgorithm(a))
	}
	if err := goccl.RunLocal(ctx, n, f, opts...); err != nil {
		t.Fatal(err)
	}
}

func algorithmsFor(c algo.Collective) []algo.Algorithm {
	var out []algo.Algorithm
	for _, a := range algo.Algorithms {
		if algo.Implements(a, c) {
			out = append(out, a)
		}
	}
	return out
}

var worldSizes = []int{1, 2, 3, 4, 5, 6, 7, 8, 9}

func counts(n int) []int {
	return slices.Compact(slices.Sorted(slices.Values([]int{0, 1, 2, 7, 13, n - 1, n + 1, 64, 1031})))
}

// check compares a guarded result with want and reports the first
// difference.
func check(g guarded, want []float64) error {
	for i, w := range want {
		if got := g.get(i); got != w {
			return fmt.Errorf("element %d = %v, want %v", i, got, w)
		}
	}
	return nil
}

type caseSpec struct {
	dt reduceop.DType
	op reduceop.Op
}

// reductionCases: every dtype with Sum (BOr for bool, which has no Sum),
// and every valid op on a float, a 16-bit float, signed and unsigned
// integers of several widths, bool and complex.
func reductionCases() []caseSpec {
	var cs []caseSpec
	for _, dt := range reduceop.DTypes {
		cs = append(cs, caseSpec{dt, firstOp(dt)})
	}
	for _, dt := range []reduceop.DType{reduceop.Float32, reduceop.BFloat16, reduceop.Int32, reduceop.Uint8,
		reduceop.Uint64, reduceop.Int16, reduceop.Bool, reduceop.Complex128} {
		for _, op := range reduceop.Ops {
			if op != firstOp(dt) && reduceop.Check(op, dt) == nil {
				cs = append(cs, caseSpec{dt, op})
			}
		}
	}
	return cs
}

// firstOp is Sum, or for a dtype without Sum (bool) its first valid op.
func firstOp(dt reduceop.DType) reduceop.Op {
	for _, op := range reduceop.Ops {
		if reduceop.Check(op, dt) == nil {
			return op
		}
	}
	panic("no op for " + dt.String())
}

func TestAllReduce(t *testing.T) {
	for _, a := range algorithmsFor(algo.AllReduce) {
		for _, n := range worldSizes {
			for _, cnt := range counts(n) {
				cases := []caseSpec{{reduceop.Float32, reduceop.Sum}, {reduceop.Int64, reduceop.Sum}}
				if cnt == 13 && (n == 3 || n == 4) {
					cases = reductionCases()
				}
				for _, cs := range cases {
					name := fmt.Sprintf("%s/n=%d/count=%d/%v/%v", a, n, cnt, cs.dt, cs.op)
					t.Run(name, func(t *testing.T) {
						want := reference(cs.dt, cs.op, n, span(0, cnt))
						runRanks(t, n, a, func(ctx context.Context, c *goccl.Comm) error {
							g := newGuarded(cs.dt, cnt)
							for i := 0; i < cnt; i++ {
								g.set(i, val(cs.op, c.Rank(), i))
							}
							if err := c.AllReduce(ctx, g.buf(), cs.op); err != nil {
								return err
							}
							g.checkGuards(t, name)
							return check(g, want)
						})
					})
				}
			}
		}
	}
}

func TestBroadcastReduce(t *testing.T) {
	for _, n := range worldSizes {
		for _, cnt := range []int{0, 1, 13, 1031} {
			for root := 0; root < n; root++ {
				for _, a := range algorithmsFor(algo.Broadcast) {
					name := fmt.Sprintf("broadcast/%s/n=%d/count=%d/root=%d", a, n, cnt, root)
					t.Run(name, func(t *testing.T) {
						runRanks(t, n, a, func(ctx context.Context, c *goccl.Comm) error {
							g := newGuarded(reduceop.Int32, cnt)
							for i := 0; i < cnt; i++ {
								g.set(i, val(reduceop.Sum, c.Rank(), i))
							}
							if err := c.Broadcast(ctx, g.buf(), root); err != nil {
								return err
							}
							g.checkGuards(t, name)
							want := make([]float64, cnt)
							for i := range want {
								want[i] = val(reduceop.Sum, root, i)
							}
							return check(g, want)
						})
					})
				}
				for _, a := range algorithmsFor(algo.Reduce) {
					name := fmt.Sprintf("reduce/%s/n=%d/count=%d/root=%d", a, n, cnt, root)
					t.Run(name, func(t *testing.T) {
						want := reference(reduceop.Float64, reduceop.Sum, n, span(0, cnt))
						runRanks(t, n, a, func(ctx context.Context, c *goccl.Comm) error {
							g := newGuarded(reduceop.Float64, cnt)
							mine := make([]float64, cnt)
							for i := 0; i < cnt; i++ {
								mine[i] = val(reduceop.Sum, c.Rank(), i)
								g.set(i, mine[i])
							}
							if err := c.Reduce(ctx, g.buf(), reduceop.Sum, root); err != nil {
								return err
							}
							g.checkGuards(t, name)
							if c.Rank() != root {
								return check(g, mine) // untouched
							}
							return check(g, want)
						})
					})
				}
			}
		}
	}
}

func TestAllGatherReduceScatter(t *testing.T) {
	for _, n := range worldSizes {
		for _, m := range []int{0, 1, 2, 5, 257} {
			for _, a := range algorithmsFor(algo.AllGather) {
				name := fmt.Sprintf("allgather/%s/n=%d/block=%d", a, n, m)
				t.Run(name, func(t *testing.T) {
					runRanks(t, n, a, func(ctx context.Context, c *goccl.Comm) error {
						send := make([]int64, m)
						for i := range send {
							send[i] = int64(val(reduceop.Sum, c.Rank(), i))
						}
						g := newGuarded(reduceop.Int64, n*m)
						if err := c.AllGather(ctx, send, g.buf()); err != nil {
							return err
						}
						g.checkGuards(t, name)
						want := make([]float64, n*m)
						for i := range want {
							want[i] = val(reduceop.Sum, i/m, i%m)
						}
						return check(g, want)
					})
				})
			}
			for _, a := range algorithmsFor(algo.ReduceScatter) {
				for _, cs := range []caseSpec{{reduceop.Float32, reduceop.Sum}, {reduceop.BFloat16, reduceop.Avg}, {reduceop.Int8, reduceop.Max}} {
					name := fmt.Sprintf("reducescatter/%s/n=%d/block=%d/%v/%v", a, n, m, cs.dt, cs.op)
					t.Run(name, func(t *testing.T) {
						runRanks(t, n, a, func(ctx context.Context, c *goccl.Comm) error {
							send := elems.Make(cs.dt, n*m)
							for i := 0; i < n*m; i++ {
								elems.Set(send, i, val(cs.op, c.Rank(), i))
							}
							g := newGuarded(cs.dt, m)
							if err := c.ReduceScatter(ctx, send, g.buf(), cs.op); err != nil {
								return err
							}
							g.checkGuards(t, name)
							return check(g, reference(cs.dt, cs.op, n, span(c.Rank()*m, m)))
						})
					})
				}
			}
		}
	}
}

// uneven returns per-rank lengths that differ and include zeros.
func uneven(n int) []int {
	out := make([]int, n)
	for r := range out {
		out[r] = (r * 5) % 7
	}
	return out
}

func TestListForms(t *testing.T) {
	for _, n := range worldSizes {
		lens := uneven(n)
		t.Run(fmt.Sprintf("allgather_list/n=%d", n), func(t *testing.T) {
			runRanks(t, n, "", func(ctx context.Context, c *goccl.Comm) error {
				send := make([]float32, lens[c.Rank()])
				for i := range send {
					send[i] = float32(val(reduceop.Sum, c.Rank(), i))
				}
				recv := make([]any, n)
				for r := range recv {
					recv[r] = make([]float32, lens[r])
				}
				if err := c.AllGatherList(ctx, send, recv); err != nil {
					return err
				}
				for r := range recv {
					for i, v := range recv[r].([]float32) {
						if float64(v) != val(reduceop.Sum, r, i) {
							return fmt.Errorf("recv[%d][%d] = %v", r, i, v)
						}
					}
				}
				return nil
			})
		})
		t.Run(fmt.Sprintf("reducescatter_list/n=%d", n), func(t *testing.T) {
			runRanks(t, n, "", func(ctx context.Context, c *goccl.Comm) error {
				send := make([]any, n)
				off := 0
				for r := range send {
					s := make([]int32, lens[r])
					for i := range s {
						s[i] = int32(val(reduceop.Sum, c.Rank(), off+i))
					}
					send[r] = s
					off += lens[r]
				}
				recv := make([]int32, lens[c.Rank()])
				if err := c.ReduceScatterList(ctx, send, recv, reduceop.Sum); err != nil {
					return err
				}
				lo := 0
				for _, l := range lens[:c.Rank()] {
					lo += l
				}
				want := reference(reduceop.Int32, reduceop.Sum, n, span(lo, lens[c.Rank()]))
				for i, v := range recv {
					if float64(v) != want[i] {
						return fmt.Errorf("recv[%d] = %v, want %v", i, v, want[i])
					}
				}
				return nil
			})
		})
	}
}

func TestAllToAll(t *testing.T) {
	for _, n := range worldSizes {
		for _, m := range []int{0, 1, 3, 100} {
			t.Run(fmt.Sprintf("equal/n=%d/block=%d", n, m), func(t *testing.T) {
				runRanks(t, n, "", func(ctx context.Context, c *goccl.Comm) error {
					send := make([]int64, n*m)
					for i := range send {
						send[i] = int64(c.Rank()*1000 + i)
					}
					g := newGuarded(reduceop.Int64, n*m)
					if err := c.AllToAll(ctx, send, g.buf()); err != nil {
						return err
					}
					g.checkGuards(t, "alltoall")
					want := make([]float64, n*m)
					for i := range want {
						j := i / m
						want[i] = float64(j*1000 + c.Rank()*m + i%m)
					}
					return check(g, want)
				})
			})
		}
		// Uneven splits: rank r sends (r+j)%3 elements to rank j.
		t.Run(fmt.Sprintf("split/n=%d", n), func(t *testing.T) {
			runRanks(t, n, "", func(ctx context.Context, c *goccl.Comm) error {
				r := c.Rank()
				sc, rc := make([]int, n), make([]int, n)
				var send []float64
				for j := 0; j < n; j++ {
					sc[j], rc[j] = (r+j)%3, (j+r)%3
					for i := 0; i < sc[j]; i++ {
						send = append(send, float64(r*100+j*10+i))
					}
				}
				recv := make([]float64, 0)
				for j := 0; j < n; j++ {
					recv = append(recv, make([]float64, rc[j])...)
				}
				if err := c.AllToAllSplit(ctx, send, sc, recv, rc); err != nil {
					return err
				}
				k := 0
				for j := 0; j < n; j++ {
					for i := 0; i < rc[j]; i++ {
						if want := float64(j*100 + r*10 + i); recv[k] != want {
							return fmt.Errorf("from %d element %d = %v, want %v", j, i, recv[k], want)
						}
						k++
					}
				}
				return nil
			})
		})
	}
}

func TestGatherScatter(t *testing.T) {
	for _, n := range worldSizes {
		for _, m := range []int{0, 1, 7} {
			for root := 0; root < n; root++ {
				t.Run(fmt.Sprintf("n=%d/block=%d/root=%d", n, m, root), func(t *testing.T) {
					runRanks(t, n, "", func(ctx context.Context, c *goccl.Comm) error {
						send := make([]uint8, m)
						for i := range send {
							send[i] = uint8(c.Rank()*10 + i)
						}
						var g guarded
						var recv []uint8
						if c.Rank() == root {
							g = newGuarded(reduceop.Uint8, n*m)
							recv = g.buf().([]uint8)
						}
						if err := c.Gather(ctx, send, recv, root); err != nil {
							return err
						}
						if c.Rank() == root {
							g.checkGuards(t, "gather")
							for i, v := range recv {
								if int(v) != (i/m)*10+i%m {
									return fmt.Errorf("gather: recv[%d] = %d", i, v)
								}
							}
						}
						// Scatter it back: every rank gets its own block.
						got := newGuarded(reduceop.Uint8, m)
						if err := c.Scatter(ctx, recv, got.buf(), root); err != nil {
							return err
						}
						got.checkGuards(t, "scatter")
						for i := 0; i < m; i++ {
							if got.get(i) != float64(send[i]) {
								return fmt.Errorf("scatter: element %d = %v, want %d", i, got.get(i), send[i])
							}
						}
						return nil
					})
				})
			}
		}
	}
}

func TestSendRecvAndBarrier(t *testing.T) {
	for _, n := range []int{2, 3, 5} {
		runRanks(t, n, "", func(ctx context.Context, c *goccl.Comm) error {
			next, prev := (c.Rank()+1)%n, (c.Rank()+n-1)%n
			// Two tags, received in the opposite order to the sends.
			w1 := c.SendAsync(ctx, []int32{int32(c.Rank())}, next, 1)
			w2 := c.SendAsync(ctx, []int32{int32(c.Rank() + 100)}, next, 2)
			b2, b1 := make([]int32, 1), make([]int32, 1)
			if err := c.Recv(ctx, b2, prev, 2); err != nil {
				return err
			}
			if err := c.Recv(ctx, b1, prev, 1); err != nil {
				return err
			}
			if err := errors.Join(w1.Wait(ctx), w2.Wait(ctx)); err != nil {
				return err
			}
			if b1[0] != int32(prev) || b2[0] != int32(prev+100) {
				return fmt.Errorf("got %d, %d from %d", b1[0], b2[0], prev)
			}
			return c.Barrier(ctx)
		})
	}
}

func TestCoalesced(t *testing.T) {
	runRanks(t, 3, "", func(ctx context.Context, c *goccl.Comm) error {
		a, b := []float32{1, 2}, []float32{float32(c.Rank())}
		if err := c.AllReduceCoalesced(ctx, []any{a, b}, reduceop.Sum); err != nil {
			return err
		}
		if !slices.Equal(a, []float32{3, 6}) || b[0] != 3 {
			return fmt.Errorf("allreduce_coalesced: %v %v", a, b)
		}
		x, y := []int32{int32(c.Rank())}, []int32{int32(10 * c.Rank()), 1}
		gx, gy := make([]int32, 3), make([]int32, 6)
		if err := c.AllGatherCoalesced(ctx, []any{x, y}, []any{gx, gy}); err != nil {
			return err
		}
		if !slices.Equal(gx, []int32{0, 1, 2}) || !slices.Equal(gy, []int32{0, 1, 10, 1, 20, 1}) {
			return fmt.Errorf("allgather_coalesced: %v %v", gx, gy)
		}
		return nil
	})
}

func TestAsyncOverlap(t *testing.T) {
	runRanks(t, 4, "", func(ctx context.Context, c *goccl.Comm) error {
		bufs := make([][]float64, 5)
		works := make([]*goccl.Work, len(bufs))
		for i := range bufs {
			bufs[i] = []float64{float64(i), float64(c.Rank())}
			works[i] = c.AllReduceAsync(ctx, bufs[i], reduceop.Max)
		}
		for i, w := range works {
			if err := w.Wait(ctx); err != nil {
				return err
			}
			if bufs[i][0] != float64(i) || bufs[i][1] != 3 {
				return fmt.Errorf("work %d: %v", i, bufs[i])
			}
		}
		return nil
	})
}

func TestObjects(t *testing.T) {
	type msg struct {
		Name string
		Vals []int
	}
	runRanks(t, 3, "", func(ctx context.Context, c *goccl.Comm) error {
		me := msg{Name: fmt.Sprint("rank", c.Rank()), Vals: make([]int, c.Rank())}
		all, err := goccl.AllGatherObject(ctx, c, me)
		if err != nil {
			return err
		}
		if len(all) != 3 || all[2].Name != "rank2" || len(all[1].Vals) != 1 {
			return fmt.Errorf("all_gather_object: %+v", all)
		}
		b, err := goccl.BroadcastObject(ctx, c, me, 1)
		if err != nil || b.Name != "rank1" {
			return fmt.Errorf("broadcast_object: %+v %v", b, err)
		}
		g, err := goccl.GatherObject(ctx, c, me.Name, 2)
		if err != nil || (c.Rank() == 2) != (g != nil) || (g != nil && g[0] != "rank0") {
			return fmt.Errorf("gather_object: %v %v", g, err)
		}
		var objs []string
		if c.Rank() == 0 {
			objs = []string{"a", "bb", ""}
		}
		s, err := goccl.ScatterObject(ctx, c, objs, 0)
		if err != nil || s != []string{"a", "bb", ""}[c.Rank()] {
			return fmt.Errorf("scatter_object: %q %v", s, err)
		}
		return nil
	})
}

func TestGroups(t *testing.T) {
	runRanks(t, 6, "", func(ctx context.Context, c *goccl.Comm) error {
		evens, err := c.NewGroup([]int{4, 0, 2})
		if err != nil {
			return err
		}
		if (c.Rank()%2 == 0) != (evens != nil) {
			return fmt.Errorf("rank %d: membership wrong", c.Rank())
		}
		if evens != nil {
			if evens.Size() != 3 || evens.Rank() != c.Rank()/2 {
				return fmt.Errorf("evens: rank %d size %d", evens.Rank(), evens.Size())
			}
			v := []int64{int64(c.Rank())}
			if err := evens.AllReduce(ctx, v, reduceop.Sum); err != nil {
				return err
			}
			if v[0] != 6 {
				return fmt.Errorf("evens allreduce = %d", v[0])
			}
		}
		// Split by rank%3, ordered by descending key.
		sub, err := c.Split(ctx, c.Rank()%3, -c.Rank())
		if err != nil {
			return err
		}
		if sub.Size() != 2 {
			return fmt.Errorf("split size %d", sub.Size())
		}
		if g, _ := sub.GlobalRank(0); g != c.Rank()%3+3 {
			return fmt.Errorf("split order: group rank 0 is world %d", g)
		}
		v := []int32{1}
		if err := sub.AllReduce(ctx, v, reduceop.Sum); err != nil {
			return err
		}
		if v[0] != 2 {
			return fmt.Errorf("split allreduce = %d", v[0])
		}
		none, err := c.Split(ctx, goccl.NoColor, 0)
		if none != nil || err != nil {
			return fmt.Errorf("NoColor: %v %v", none, err)
		}
		return c.Barrier(ctx)
	})
}

// localComms returns n goroutine ranks over transport/mem (goccl.NewLocal),
// closed when the test ends.
func localComms(t testing.TB, n int, opts ...goccl.Option) []*goccl.Comm {
	t.Helper()
	comms, err := goccl.NewLocal(n, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, c := range comms {
			c.Close()
		}
	})
	return comms
}

func TestInvalidArguments(t *testing.T) {
	comms := localComms(t, 2)
	ctx := context.Background()
	c := comms[0]
	cases := map[string]error{
		"nil buffer":         c.AllReduce(ctx, nil, reduceop.Sum),
		"wrong type":         c.AllReduce(ctx, []string{"x"}, reduceop.Sum),
		"avg on int":         c.AllReduce(ctx, []int32{1}, reduceop.Avg),
		"band on float":      c.AllReduce(ctx, []float32{1}, reduceop.BAnd),
		"root out of range":  c.Broadcast(ctx, []float32{1}, 2),
		"negative root":      c.Reduce(ctx, []float32{1}, reduceop.Sum, -1),
		"allgather length":   c.AllGather(ctx, []float32{1}, make([]float32, 3)),
		"dtype mismatch":     c.AllGather(ctx, []float32{1}, make([]float64, 2)),
		"reducescatter len":  c.ReduceScatter(ctx, make([]int8, 3), make([]int8, 1), reduceop.Sum),
		"alltoall divisible": c.AllToAll(ctx, make([]int8, 3), make([]int8, 3)),
		"alltoall counts":    c.AllToAllSplit(ctx, make([]int8, 3), []int{1, 1}, make([]int8, 2), nil),
		"peer out of range":  c.Send(ctx, []int8{1}, 5, 0),
		"not in group":       func() error { _, err := c.NewGroup([]int{0, 7}); return err }(),
		"duplicate rank":     func() error { _, err := c.NewGroup([]int{1, 1}); return err }(),
	}
	for name, err := range cases {
		var ge *goccl.Error
		if !errors.Is(err, goccl.ErrInvalid) || !errors.As(err, &ge) {
			t.Errorf("%s: got %v, want an *Error wrapping ErrInvalid", name, err)
		}
	}
	// Nothing was sent: the communicator still works.
	var wg sync.WaitGroup
	for _, c := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := c.AllReduce(ctx, []float32{1}, reduceop.Sum); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
}

func TestMonitoredBarrierNamesMissingRanks(t *testing.T) {
	comms, err := goccl.NewLocal(4, goccl.WithTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var wg sync.WaitGroup
	var rootErr error
	// Ranks 2 and 3 never arrive.
	for _, c := range comms[:2] {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := c.MonitoredBarrier(ctx, 200*time.Millisecond, true)
			if c.Rank() == 0 {
				rootErr = err
			}
		}()
	}
	wg.Wait()
	for _, c := range comms {
		c.Close()
	}
	var ge *goccl.Error
	if !errors.Is(rootErr, goccl.ErrTimeout) || !errors.As(rootErr, &ge) || ge.Peer != 2 {
		t.Fatalf("got %v, want ErrTimeout naming rank 2", rootErr)
	}
	if want := "ranks [2 3]"; !strings.Contains(rootErr.Error(), want) {
		t.Fatalf("error %q does not name %s", rootErr, want)
	}
}
