package algo_test

import (
	"testing"

	"github.com/goccl/goccl/algo"
	"github.com/goccl/goccl/algo/tree"
)

// TestCostTopoFlat: a topology of one level is Cost under that level,
// to the bit, and SelectTopo on FlatTopology(DefaultCostParams) is Select.
func TestCostTopoFlat(t *testing.T) {
	p := algo.CostParams{Alpha: 3e-6, Beta: 2e-10, Gamma: 1e-10}
	intra := algo.Level{Alpha: 1e-7, Beta: 1e-12}
	for _, n := range []int{2, 3, 5, 8, 13, 64, 100} {
		for _, bytes := range []int{0, 8, 1000, 1 << 20, 100 << 20} {
			for c := algo.AllReduce; c <= algo.Barrier; c++ {
				for _, a := range algo.Algorithms {
					want := algo.Cost(c, a, bytes, n, p)
					for _, l := range []int{0, 1} {
						tp := algo.Topology{RanksPerHost: l, Inter: algo.Level{Alpha: p.Alpha, Beta: p.Beta}, Intra: intra, Gamma: p.Gamma}
						if got := algo.CostTopo(c, a, bytes, n, tp); got != want && !(got != got && want != want) {
							t.Errorf("%s %s n=%d %d B, %d a host: CostTopo %g, Cost %g", a, c, n, bytes, l, got, want)
						}
					}
					one := algo.Topology{RanksPerHost: n, Inter: algo.Level{Alpha: 1, Beta: 1}, Intra: algo.Level{Alpha: p.Alpha, Beta: p.Beta}, Gamma: p.Gamma}
					if got := algo.CostTopo(c, a, bytes, n, one); got != want {
						t.Errorf("%s %s n=%d %d B on one host: CostTopo %g, Cost under Intra %g", a, c, n, bytes, got, want)
					}
				}
				if got, want := algo.SelectTopo(c, bytes, n, algo.FlatTopology(algo.DefaultCostParams)), algo.Select(c, bytes, n); got != want {
					t.Errorf("%s n=%d %d B: SelectTopo on one level %s, Select %s", c, n, bytes, got, want)
				}
			}
		}
	}
}

// TestTreeShape holds the two-level model's count of the double binary
// tree (algo.CostTopo's tree allreduce) to package tree's own trees: per
// depth, the most edges whose messages leave or enter one host at once,
// and the most tree edges between one host and the others.
func TestTreeShape(t *testing.T) {
	for _, l := range []int{2, 3, 4, 8} {
		for n := l + 1; n <= 70; n++ {
			h := algo.Log2(n)
			type key struct{ d, host int }
			tx, rx := map[key]int{}, map[key]int{}
			nic := map[int]int{}
			wantLevels := make([]int, h)
			wantNIC := 0
			for r := 0; r < n; r++ {
				for _, nd := range tree.DoubleTree(n, r) {
					for _, c := range nd.Children {
						a, b := r/l, c/l
						if a == b {
							continue
						}
						tx[key{nd.Depth, b}]++
						rx[key{nd.Depth, a}]++
						wantLevels[nd.Depth] = max(wantLevels[nd.Depth], tx[key{nd.Depth, b}], rx[key{nd.Depth, a}])
						nic[a]++
						nic[b]++
						wantNIC = max(wantNIC, nic[a], nic[b])
					}
				}
			}
			gotNIC, gotLevels := algo.TreeShape(n, l)
			if gotNIC != wantNIC || len(gotLevels) != h {
				t.Fatalf("n=%d, %d a host: model counts %d edges a NIC over %d levels, the trees %d over %d", n, l, gotNIC, len(gotLevels), wantNIC, h)
			}
			for d := range wantLevels {
				if gotLevels[d] != wantLevels[d] {
					t.Errorf("n=%d, %d a host, depth %d: model %d messages a NIC, the trees %d", n, l, d, gotLevels[d], wantLevels[d])
				}
			}
		}
	}
}

// TestAllGatherRingTie: an allgather goes by the ring where the model
// calls it within 2% of the doubling (large messages), by the doubling
// where its fewer latencies count, never by a family that was not
// allowed, and a list that allows nothing for it falls back to the pick.
func TestAllGatherRingTie(t *testing.T) {
	tp := algo.DefaultTopology(1)
	for _, tc := range []struct {
		bytes, n int
		allowed  []algo.Algorithm
		want     algo.Algorithm
	}{
		{64, 4, nil, algo.Doubling},
		{256 << 10, 4, nil, algo.Doubling},
		{16 << 20, 4, nil, algo.Ring},
		{16 << 20, 4, []algo.Algorithm{algo.Doubling}, algo.Doubling},
		{16 << 20, 4, []algo.Algorithm{algo.Doubling, algo.Ring}, algo.Ring},
		{64, 4, []algo.Algorithm{algo.Tree}, algo.Doubling}, // the tree has no allgather: the pick
		{16 << 20, 1024, nil, algo.Doubling},                // 1,023 latencies against 10
	} {
		if got := algo.SelectFromTopo(algo.AllGather, tc.bytes, tc.n, tc.allowed, tp); got != tc.want {
			t.Errorf("allgather of %d bytes on %d ranks, allowed %v: %s, want %s", tc.bytes, tc.n, tc.allowed, got, tc.want)
		}
	}
}
