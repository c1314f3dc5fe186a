package algo_test

import (
	"context"
	"math"
	"testing"

	"github.com/goccl/goccl/algo"
	"github.com/goccl/goccl/algo/algotest"
)

// TestPlanTwoLevelRefused: the two-level plan needs whole hosts of
// 1 < L < n ranks; elsewhere its cost is +Inf, so neither SelectTopo nor
// Select ever picks it.
func TestPlanTwoLevelRefused(t *testing.T) {
	for _, tc := range []struct{ n, l int }{{8, 0}, {8, 1}, {8, 8}, {8, 16}, {9, 2}, {10, 4}, {1, 1}} {
		for c := algo.AllReduce; c <= algo.Barrier; c++ {
			tp := algo.DefaultTopology(tc.l)
			if p := algo.PlanTwoLevel(c, 1<<20, tc.n, tp); !math.IsInf(p.Time, 1) || p.Across != "" {
				t.Errorf("%s n=%d, %d a host: plan %+v, want refused", c, tc.n, tc.l, p)
			}
			if got := algo.SelectTopo(c, 1<<20, tc.n, tp); got == algo.TwoLevel {
				t.Errorf("%s n=%d, %d a host: SelectTopo picks the refused two-level", c, tc.n, tc.l)
			}
		}
	}
	for _, c := range []algo.Collective{algo.AllToAll, algo.Gather, algo.Scatter, algo.Barrier} {
		if p := algo.PlanTwoLevel(c, 1<<20, 16, algo.DefaultTopology(4)); !math.IsInf(p.Time, 1) {
			t.Errorf("%s has a two-level plan: %+v", c, p)
		}
	}
}

// TestPlanTwoLevelSum: the plan's time is the sum of its phases'
// one-level costs at their levels, as algo/twolevel.go's table says.
func TestPlanTwoLevelSum(t *testing.T) {
	tp := algo.DefaultTopology(4)
	in := algo.CostParams{Alpha: tp.Intra.Alpha, Beta: tp.Intra.Beta, Gamma: tp.Gamma}
	all := algo.CostParams{Alpha: tp.Inter.Alpha, Beta: 4 * tp.Inter.Beta, Gamma: tp.Gamma}
	one := algo.CostParams{Alpha: tp.Inter.Alpha, Beta: tp.Inter.Beta, Gamma: tp.Gamma}
	const n, N = 32, 1 << 20
	for _, tc := range []struct {
		c    algo.Collective
		want func(p algo.Plan) float64
	}{
		{algo.AllReduce, func(p algo.Plan) float64 {
			return algo.Cost(algo.ReduceScatter, p.Before, N, 4, in) + algo.Cost(algo.AllReduce, p.Across, N/4, 8, all) + algo.Cost(algo.AllGather, p.After, N, 4, in)
		}},
		{algo.ReduceScatter, func(p algo.Plan) float64 {
			return algo.Cost(algo.ReduceScatter, p.Before, N, 4, in) + algo.Cost(algo.ReduceScatter, p.Across, N/4, 8, all)
		}},
		{algo.AllGather, func(p algo.Plan) float64 {
			return algo.Cost(algo.AllGather, p.Across, N/4, 8, all) + algo.Cost(algo.AllGather, p.After, N, 4, in)
		}},
		{algo.Broadcast, func(p algo.Plan) float64 {
			// The chain as its pipeline runs: (m-1)·(α + s·β) + (S-1)·max(α, s·β).
			bc := func(a algo.Algorithm, m int, cp algo.CostParams) float64 {
				if a == algo.Tree {
					return algo.Cost(algo.Broadcast, a, N, m, cp)
				}
				S := float64(N / algo.DefaultSegmentBytes)
				s := float64(algo.DefaultSegmentBytes)
				return float64(m-1)*(cp.Alpha+s*cp.Beta) + (S-1)*max(cp.Alpha, s*cp.Beta)
			}
			return bc(p.Across, 8, one) + bc(p.After, 4, in)
		}},
		{algo.Reduce, func(p algo.Plan) float64 {
			return algo.Cost(algo.Reduce, algo.Tree, N, 4, in) + algo.Cost(algo.Reduce, algo.Tree, N, 8, one)
		}},
	} {
		p := algo.PlanTwoLevel(tc.c, N, n, tp)
		if w := tc.want(p); math.Abs(p.Time-w) > 1e-12*w {
			t.Errorf("%s: plan %+v, want time %g", tc.c, p, w)
		}
		if got := algo.CostTopo(tc.c, algo.TwoLevel, N, n, tp); got != p.Time {
			t.Errorf("%s: CostTopo %g, plan %g", tc.c, got, p.Time)
		}
	}
}

// TestStrided: a Subgroup renumbers its ranks and sends through the
// parent to the right ones; a rank outside it is an error, not a send.
func TestStrided(t *testing.T) {
	st, err := algotest.World{Size: 6, ElemSize: 1, Record: true}.Run(context.Background(), func(ctx context.Context, p algo.Peers) error {
		if p.Rank()%2 != 1 {
			return nil
		}
		s := algo.Strided(p, 1, 2, 3) // ranks 1, 3, 5
		if s.Size() != 3 || s.Rank() != p.Rank()/2 || s.Parent(s.Rank()) != p.Rank() {
			t.Errorf("rank %d: sub-rank %d of %d", p.Rank(), s.Rank(), s.Size())
		}
		if err := s.Isend(3, []byte{1}).Wait(ctx); err == nil {
			t.Errorf("rank %d: a send to sub-rank 3 of 3 did not fail", p.Rank())
		}
		next, prev := (s.Rank()+1)%3, (s.Rank()+2)%3
		return algo.Exchange(ctx, s, next, []byte{byte(p.Rank())}, prev, make([]byte, 1))
	})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := st.TranscriptText(), "step 1: rank 1 -> rank 3: 1 bytes\nstep 1: rank 3 -> rank 5: 1 bytes\nstep 1: rank 5 -> rank 1: 1 bytes\n"; got != want {
		t.Errorf("transcript:\n%s\nwant:\n%s", got, want)
	}
}
