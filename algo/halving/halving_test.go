package halving_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/goccl/goccl/algo"
	"github.com/goccl/goccl/algo/algotest"
	"github.com/goccl/goccl/algo/halving"
)

func TestDoublingAllReduce(t *testing.T) { algotest.TestAllReduce(t, halving.DoublingAllReduce) }
func TestAllReduce(t *testing.T)         { algotest.TestAllReduce(t, halving.AllReduce) }
func TestReduceScatter(t *testing.T)     { algotest.TestReduceScatter(t, halving.ReduceScatter) }
func TestAllGather(t *testing.T)         { algotest.TestAllGather(t, halving.AllGather) }

// run returns the per-rank message counts of fn on n ranks.
func run(t *testing.T, n int, fn func(ctx context.Context, p algo.Peers) error) *algotest.Stats {
	t.Helper()
	st, err := algotest.World{Size: n, ElemSize: 8, Reduce: algotest.SumInt64}.Run(context.Background(), fn)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// role returns "extra", "folding" or "" for rank r of n under the fold-in.
func role(n, r int) string {
	rem := n - 1<<algo.Log2(n)
	switch {
	case r >= 2*rem:
		return ""
	case r%2 == 0:
		return "extra"
	}
	return "folding"
}

func check(t *testing.T, what string, n, r int, got, want algotest.Count) {
	t.Helper()
	if got != want {
		t.Errorf("%s n=%d rank %d: %+v, want %+v", what, n, r, got, want)
	}
}

// TestCost holds each algorithm to the message and byte counts stated in
// its doc comment, for counts that p divides (and, for the fold-in cases,
// any n).
func TestCost(t *testing.T) {
	for n := 1; n <= 9; n++ {
		p := 1 << algo.Log2(n)
		lg := algo.Log2(n)
		count := 8 * 9 * 7 * 5 // divisible by every p and n here
		N := 8 * count
		in := func(ctx context.Context, p algo.Peers) []byte { return make([]byte, N) }
		dbl := run(t, n, func(ctx context.Context, p algo.Peers) error { return halving.DoublingAllReduce(ctx, p, in(ctx, p)) })
		rab := run(t, n, func(ctx context.Context, p algo.Peers) error { return halving.AllReduce(ctx, p, in(ctx, p)) })
		counts := algo.EvenCounts(count, n)
		rs := run(t, n, func(ctx context.Context, p algo.Peers) error {
			return halving.ReduceScatter(ctx, p, in(ctx, p), counts)
		})
		ag := run(t, n, func(ctx context.Context, p algo.Peers) error { return halving.AllGather(ctx, p, in(ctx, p), counts) })
		for r := range n {
			c := func(msgs, bytes int) algotest.Count { return algotest.Count{Msgs: msgs, Bytes: bytes} }
			switch role(n, r) {
			case "extra":
				check(t, "doubling sent", n, r, dbl.Sent[r], c(1, N))
				check(t, "doubling recv", n, r, dbl.Recv[r], c(1, N))
				check(t, "rabenseifner sent", n, r, rab.Sent[r], c(1, N))
				check(t, "rabenseifner recv", n, r, rab.Recv[r], c(1, N))
				check(t, "reduce-scatter sent", n, r, rs.Sent[r], c(1, N))
				check(t, "reduce-scatter recv", n, r, rs.Recv[r], c(1, N/n))
				check(t, "allgather sent", n, r, ag.Sent[r], c(1, N/n))
				check(t, "allgather recv", n, r, ag.Recv[r], c(2-b2i(r == 0), N-N/n))
			case "folding":
				check(t, "doubling sent", n, r, dbl.Sent[r], c(lg+1, (lg+1)*N))
				check(t, "doubling recv", n, r, dbl.Recv[r], c(lg+1, (lg+1)*N))
				check(t, "rabenseifner sent", n, r, rab.Sent[r], c(2*lg+1, 2*(p-1)*N/p+N))
				check(t, "rabenseifner recv", n, r, rab.Recv[r], c(2*lg+1, 2*(p-1)*N/p+N))
			default:
				check(t, "doubling sent", n, r, dbl.Sent[r], c(lg, lg*N))
				check(t, "doubling recv", n, r, dbl.Recv[r], c(lg, lg*N))
				check(t, "rabenseifner sent", n, r, rab.Sent[r], c(2*lg, 2*(p-1)*N/p))
				check(t, "rabenseifner recv", n, r, rab.Recv[r], c(2*lg, 2*(p-1)*N/p))
				if n == p {
					check(t, "reduce-scatter sent", n, r, rs.Sent[r], c(lg, (p-1)*N/p))
					check(t, "reduce-scatter recv", n, r, rs.Recv[r], c(lg, (p-1)*N/p))
					check(t, "allgather sent", n, r, ag.Sent[r], c(lg, (p-1)*N/p))
					check(t, "allgather recv", n, r, ag.Recv[r], c(lg, (p-1)*N/p))
				}
			}
		}
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

func bench(b *testing.B, fn algo.AllReduceFunc) {
	const size = 1 << 20
	bufs := make([][]byte, 4)
	for i := range bufs {
		bufs[i] = make([]byte, size)
	}
	b.SetBytes(size)
	for b.Loop() {
		err := algotest.Run(4, 8, algotest.SumFloat64, func(ctx context.Context, p algo.Peers) error {
			return fn(ctx, p, bufs[p.Rank()])
		})
		if err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkAllReduce1MiB4(b *testing.B)         { bench(b, halving.AllReduce) }
func BenchmarkDoublingAllReduce1MiB4(b *testing.B) { bench(b, halving.DoublingAllReduce) }

func ExampleAllReduce() {
	out := make([][]int64, 3)
	err := algotest.Run(3, 8, algotest.SumInt64, func(ctx context.Context, p algo.Peers) error {
		r := int64(p.Rank())
		buf := algotest.Int64Bytes([]int64{r, 10 * r, 100 * r, 1})
		if err := halving.AllReduce(ctx, p, buf); err != nil {
			return err
		}
		out[p.Rank()] = algotest.Int64s(buf)
		return nil
	})
	fmt.Println(out, err)
	// Output: [[3 30 300 3] [3 30 300 3] [3 30 300 3]] <nil>
}
