package algo_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/goccl/goccl/algo"
	"github.com/goccl/goccl/algo/algotest"
	"github.com/goccl/goccl/algo/halving"
	"github.com/goccl/goccl/algo/ring"
	"github.com/goccl/goccl/algo/tree"
	"github.com/goccl/goccl/reduceop"
)

// TestAllReduceOps runs every allreduce algorithm with the real host
// kernels of package reduceop, for several dtypes and ops, and checks that
// all ranks end bit-identical and, for the exact ops, equal to the
// sequential reduction.
func TestAllReduceOps(t *testing.T) {
	algs := map[string]algo.AllReduceFunc{
		"ring":     ring.Options{SegmentBytes: 16}.AllReduce,
		"tree":     tree.Options{SegmentBytes: 16}.AllReduce,
		"halving":  halving.AllReduce,
		"doubling": halving.DoublingAllReduce,
	}
	cases := []struct {
		dt    reduceop.DType
		op    reduceop.Op
		exact bool
	}{
		{reduceop.Float32, reduceop.Sum, false},
		{reduceop.Float32, reduceop.Max, true},
		{reduceop.Float32, reduceop.Min, true},
		{reduceop.Int32, reduceop.Sum, true},
		{reduceop.Int32, reduceop.Prod, true},
		{reduceop.Int32, reduceop.BXor, true},
	}
	for name, fn := range algs {
		for _, c := range cases {
			es := c.dt.Size()
			reduce := func(dst, src []byte) error { return reduceop.Apply(c.dt, c.op, dst, src) }
			for n := 1; n <= 9; n++ {
				for _, count := range []int{0, 1, 5, 31, 257} {
					in := make([][]byte, n)
					for r := range in {
						in[r] = make([]byte, count*es)
						rng := rand.New(rand.NewPCG(uint64(r), uint64(count)))
						for i := 0; i < count; i++ {
							if c.dt == reduceop.Float32 {
								binary.LittleEndian.PutUint32(in[r][4*i:], math.Float32bits(float32(rng.NormFloat64())))
							} else {
								binary.LittleEndian.PutUint32(in[r][4*i:], uint32(rng.IntN(7)-3))
							}
						}
					}
					want := append([]byte(nil), in[0]...)
					for r := 1; r < n; r++ {
						if err := reduce(want, in[r]); err != nil {
							t.Fatal(err)
						}
					}
					out := make([]*algotest.Guarded, n)
					for r := range out {
						out[r] = algotest.NewGuarded(in[r])
					}
					err := algotest.Run(n, es, reduce, func(ctx context.Context, p algo.Peers) error {
						return fn(ctx, p, out[p.Rank()].Buf())
					})
					if err != nil {
						t.Fatalf("%s %v %v n=%d count=%d: %v", name, c.dt, c.op, n, count, err)
					}
					for r := range out {
						if err := out[r].Check(); err != nil {
							t.Fatalf("%s %v %v n=%d count=%d rank %d: %v", name, c.dt, c.op, n, count, r, err)
						}
						if !bytes.Equal(out[r].Buf(), out[0].Buf()) {
							t.Fatalf("%s %v %v n=%d count=%d: rank %d not bit-identical to rank 0", name, c.dt, c.op, n, count, r)
						}
					}
					if c.exact && !bytes.Equal(out[0].Buf(), want) {
						t.Fatalf("%s %v %v n=%d count=%d: result differs from the sequential reduction", name, c.dt, c.op, n, count)
					}
				}
			}
		}
	}
}
