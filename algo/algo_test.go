package algo_test

import (
	"context"
	"fmt"
	"math"
	"testing"

	"github.com/goccl/goccl/algo"
	"github.com/goccl/goccl/algo/algotest"
)

func TestPairwiseAllToAll(t *testing.T)     { algotest.TestAllToAll(t, algo.PairwiseAllToAll) }
func TestDisseminationBarrier(t *testing.T) { algotest.TestBarrier(t, algo.DisseminationBarrier) }

// TestCounts: the barrier sends ⌈log2 n⌉ empty messages per rank; the
// all-to-all sends n-1 messages of (n-1)/n·N bytes for equal blocks.
func TestCounts(t *testing.T) {
	for n := 1; n <= 9; n++ {
		st, err := algotest.World{Size: n, ElemSize: 1}.Run(context.Background(), algo.DisseminationBarrier)
		if err != nil {
			t.Fatal(err)
		}
		const c = 5
		counts := make([]int, n)
		for i := range counts {
			counts[i] = c
		}
		st2, err := algotest.World{Size: n, ElemSize: 8}.Run(context.Background(), func(ctx context.Context, p algo.Peers) error {
			return algo.PairwiseAllToAll(ctx, p, make([]byte, 8*c*n), counts, make([]byte, 8*c*n), counts)
		})
		if err != nil {
			t.Fatal(err)
		}
		for r := range n {
			if g := st.Sent[r]; g.Msgs != algo.CeilLog2(n) || g.Bytes != 0 {
				t.Errorf("barrier n=%d rank %d: sent %+v, want ⌈log2 n⌉ = %d empty messages", n, r, g, algo.CeilLog2(n))
			}
			if g := st2.Sent[r]; g.Msgs != n-1 || g.Bytes != (n-1)*8*c {
				t.Errorf("alltoall n=%d rank %d: sent %+v", n, r, g)
			}
		}
	}
}

func TestEvenCounts(t *testing.T) {
	if got := fmt.Sprint(algo.EvenCounts(10, 4)); got != "[3 3 2 2]" {
		t.Errorf("EvenCounts(10, 4) = %s", got)
	}
	if got := fmt.Sprint(algo.EvenCounts(2, 4)); got != "[1 1 0 0]" {
		t.Errorf("EvenCounts(2, 4) = %s", got)
	}
}

func TestCostRingFormula(t *testing.T) {
	p := algo.CostParams{Alpha: 1, Beta: 1e-3, Gamma: 1e-6}
	// 2(n-1)α + 2(n-1)/n·Nβ + (n-1)/n·Nγ with n = 4, N = 4000.
	want := 6 + 6000e-3 + 3000e-6
	if got := algo.Cost(algo.AllReduce, algo.Ring, 4000, 4, p); math.Abs(got-want) > 1e-12 {
		t.Errorf("ring allreduce cost = %v, want %v", got, want)
	}
	if got := algo.Cost(algo.Barrier, algo.Ring, 0, 4, p); !math.IsInf(got, 1) {
		t.Errorf("ring barrier cost = %v, want +Inf", got)
	}
}

// TestCostShapes checks the formulas that are more than a sum of terms:
// the binomial broadcast's recursion and the ring's overlapped reductions.
func TestCostShapes(t *testing.T) {
	p := algo.CostParams{Alpha: 1, Beta: 1e-3, Gamma: 1e-4}
	const N = 1000 // N·β = 1
	for _, tt := range []struct {
		n    int
		want float64
	}{
		{2, 2},  // α + N·β
		{3, 3},  // α + 2N·β: the second send's α overlaps the first
		{4, 4},  // 2(α + N·β)
		{5, 5},  // rank 2 at α + 2N·β, its child 3 at 2α + 3N·β
		{8, 6},  // 3(α + N·β)
		{16, 8}, // 4(α + N·β)
	} {
		if got := algo.Cost(algo.Broadcast, algo.Tree, N, tt.n, p); math.Abs(got-tt.want) > 1e-9 {
			t.Errorf("tree broadcast on %d ranks: cost %v, want %v", tt.n, got, tt.want)
		}
	}
	// Ring reduce-scatter on 4 ranks, blocks of 3 segments (the last one a
	// quarter segment): 3 steps of α + B·β + (last segment)·γ.
	seg := algo.DefaultSegmentBytes
	B := 2*seg + seg/4
	want := 3 * (1 + float64(B)*1e-3 + float64(seg/4)*1e-4)
	if got := algo.Cost(algo.ReduceScatter, algo.Ring, 4*B, 4, p); math.Abs(got-want) > 1e-6*want {
		t.Errorf("ring reduce-scatter: cost %v, want %v", got, want)
	}
}

func TestImplements(t *testing.T) {
	for _, c := range []algo.Collective{algo.AllReduce, algo.Broadcast, algo.Reduce, algo.AllGather, algo.ReduceScatter, algo.AllToAll, algo.Gather, algo.Scatter, algo.Barrier} {
		n := 0
		for _, a := range algo.Algorithms {
			if algo.Implements(a, c) {
				n++
			}
		}
		if n == 0 {
			t.Errorf("no algorithm implements %v", c)
		}
	}
}

func TestSelect(t *testing.T) {
	tests := []struct {
		c     algo.Collective
		bytes int
		n     int
		want  algo.Algorithm
	}{
		{algo.AllReduce, 8, 8, algo.Doubling},
		{algo.AllReduce, 256 << 20, 8, algo.Ring}, // the ring hides its reductions behind its transfers
		{algo.AllReduce, 1 << 20, 8, algo.Halving},
		{algo.AllReduce, 256 << 20, 6, algo.Ring},
		{algo.Broadcast, 8, 9, algo.Tree},
		{algo.Broadcast, 256 << 20, 9, algo.Ring},
		{algo.AllGather, 64, 8, algo.Doubling},
		{algo.AllToAll, 1 << 20, 8, algo.Pairwise},
		{algo.Barrier, 0, 8, algo.Dissemination},
		{algo.Reduce, 1 << 20, 8, algo.Tree},
	}
	for _, tt := range tests {
		if got := algo.Select(tt.c, tt.bytes, tt.n); got != tt.want {
			t.Errorf("Select(%v, %d, %d) = %v, want %v", tt.c, tt.bytes, tt.n, got, tt.want)
		}
	}
}

func TestSelectEnv(t *testing.T) {
	env := func(v string) func(string) string {
		return func(k string) string {
			if k == algo.EnvAlgo {
				return v
			}
			return ""
		}
	}
	tests := []struct {
		env  string
		c    algo.Collective
		want algo.Algorithm
		err  bool
	}{
		{"", algo.AllReduce, algo.Select(algo.AllReduce, 1<<20, 8), false},
		{"ring", algo.AllReduce, algo.Ring, false},
		{" TREE ", algo.AllReduce, algo.Tree, false},
		{"ring", algo.Reduce, algo.Tree, false},               // ring has no reduce: fall back
		{"ring", algo.Barrier, algo.Dissemination, false},     // likewise
		{"tree,halving", algo.AllReduce, algo.Halving, false}, // cheapest listed
		{"bogus", algo.AllReduce, "", true},
	}
	for _, tt := range tests {
		got, err := algo.SelectEnv(tt.c, 1<<20, 8, env(tt.env))
		if (err != nil) != tt.err || got != tt.want {
			t.Errorf("SelectEnv(%v) with %s=%q = %v, %v; want %v (error %v)", tt.c, algo.EnvAlgo, tt.env, got, err, tt.want, tt.err)
		}
	}
}

func ExampleSelect() {
	fmt.Println(algo.Select(algo.AllReduce, 64, 8), algo.Select(algo.AllReduce, 64<<20, 8))
	// Output: doubling ring
}

func ExamplePairwiseAllToAll() {
	out := make([][]int64, 3)
	err := algotest.Run(3, 8, nil, func(ctx context.Context, p algo.Peers) error {
		r := int64(p.Rank())
		send := algotest.Int64Bytes([]int64{10*r + 0, 10*r + 1, 10*r + 2})
		recv := make([]byte, len(send))
		ones := []int{1, 1, 1}
		if err := algo.PairwiseAllToAll(ctx, p, send, ones, recv, ones); err != nil {
			return err
		}
		out[p.Rank()] = algotest.Int64s(recv)
		return nil
	})
	fmt.Println(out, err)
	// Output: [[0 10 20] [1 11 21] [2 12 22]] <nil>
}

func TestBruckAllGather(t *testing.T) { algotest.TestAllGather(t, algo.BruckAllGather) }

// segPeers is Peers that asks for segments of seg bytes.
type segPeers struct {
	algo.Peers
	seg int
}

func (p segPeers) SegmentBytes() int { return p.seg }

// TestSegmentFor: an algorithm's own option wins, then the Peers' own,
// then the default (0, which SegmentLen reads as DefaultSegmentBytes).
func TestSegmentFor(t *testing.T) {
	for _, tc := range []struct {
		p         algo.Peers
		opt, want int
	}{
		{segPeers{seg: 4 << 20}, 0, 4 << 20},
		{segPeers{seg: 4 << 20}, 1 << 10, 1 << 10},
		{segPeers{seg: -5}, 0, 0},
		{segPeers{}, 0, 0},
		{nil, 0, 0},
		{nil, 1 << 10, 1 << 10},
	} {
		if got := algo.SegmentFor(tc.p, tc.opt); got != tc.want {
			t.Errorf("SegmentFor(%#v, %d) = %d, want %d", tc.p, tc.opt, got, tc.want)
		}
	}
	if got := algo.SegmentLen(algo.SegmentFor(nil, 0), 4); got != algo.DefaultSegmentBytes {
		t.Errorf("no option, no Segmenter: segments of %d bytes, want %d", got, algo.DefaultSegmentBytes)
	}
}
