package sim

import (
	"context"
	"math"
	"os"
	"testing"

	"github.com/goccl/goccl/algo"
)

// The two-level cost model (algo.CostTopo) and algo.SelectTopo checked
// against the simulator on its default machine: 8 ranks a host, each with
// its own NVLink-class port within the host, one NIC a host between
// hosts, the messages crossing a link at once sharing it.
//
// Before the model knew hosts, Select (algo.SelectParams under the
// simulator's inter-host constants, which is what it had to go on) was
// up to 8x slower than the simulated best on this machine: Rabenseifner's
// halving for allreduce and reduce-scatter, recursive doubling for
// allgather, from 256 KiB to 64 MiB on 16 to 1,024 ranks (all 8 ranks of a
// host share its NIC in every round between hosts; the ring crosses each
// NIC once a step), and at 1,024 ranks halving where the tree is 1.8x
// faster (1 MiB). TestSelectTwoLevel failed at 42 of its points then (worst
// 8.1x: doubling for allgather, 96 ranks, 4 MiB). Now
// the worst pick on the short grid is 1.04x (allreduce, 96 ranks, 16 KiB:
// the tree where recursive doubling is best); see BENCHMARKS.md for the
// full sweep. The bound is the flat one, selectBound.

// twoLevelMachines are the two-level constants the model is checked
// under: the simulator's defaults, and algo.DefaultTopology's (what a
// communicator assumes between processes: TCP between hosts, shared memory
// within one).
var twoLevelMachines = []struct {
	name string
	t    algo.Topology
}{
	{"sim's", algo.Topology{RanksPerHost: 8,
		Intra: algo.Level{Alpha: DefaultIntraAlpha, Beta: DefaultIntraBeta},
		Inter: algo.Level{Alpha: DefaultInterAlpha, Beta: DefaultInterBeta}, Gamma: DefaultGamma}},
	{"algo's default", algo.DefaultTopology(8)},
}

// simTopology is the simulator's machine for t on n ranks. The simulator
// puts rank r on host ⌊r·hosts/n⌋, the model on ⌊r/L⌋: the same blocks
// when L divides n, which the callers keep to.
func simTopology(t algo.Topology, n int) Topology {
	return Topology{Hosts: n / t.RanksPerHost,
		Intra: Level{Alpha: t.Intra.Alpha, Beta: t.Intra.Beta},
		Inter: Level{Alpha: t.Inter.Alpha, Beta: t.Inter.Beta}}
}

// twoLevelBand is how far the simulated time of a on the two-level
// machine may be from algo.CostTopo's, and why (measured on 16 to 1,024
// ranks, 8 B to 1 GiB, under both machines).
func twoLevelBand(c algo.Collective, a algo.Algorithm, n, size, elem int) band {
	pow2 := n&(n-1) == 0
	if a == algo.TwoLevel {
		if h := n / 8; h&(h-1) == 0 {
			return band{0.9, 1.1, "exact: the sum of its phases, each a one-level algorithm on a power of two"}
		}
		if c == algo.Reduce {
			return band{0.5, 1.1, "the binomial reduce's rounds across a non-power of two of hosts overlap their latencies"}
		}
		return band{0.8, 1.5, "the phases across a non-power of two of hosts fold, as the one-level halving and doubling do"}
	}
	switch {
	case (c == algo.Gather || c == algo.Scatter || c == algo.AllToAll) && size/elem < n:
		return band{0, 1.1, "empty blocks are not sent"}
	case a == algo.Dissemination:
		return band{0.5, 1.05, "a round between hosts costs αe only on the ranks at a host's edge; the model charges every round αe"}
	case a == algo.Pairwise:
		return band{0.5, 1.05, "steps overlap: a rank's step k+1 need not wait for the NIC's other senders of step k"}
	case c == algo.AllReduce && a == algo.Tree:
		return band{0.85, 1.1, "double-tree pipeline: the fill is charged each level's busiest NIC"}
	case a == algo.Ring || pow2 || (a == algo.Tree && c == algo.Broadcast):
		return band{0.9, 1.1, "exact"}
	case a == algo.Tree:
		return band{0.5, 1.1, "binomial rounds of a non-power of two overlap their latencies (0.62 at 24 ranks, 8 B)"}
	}
	if c == algo.AllReduce && a == algo.Doubling {
		return band{0.8, 1.65, "hosts without folded pairs finish a round within the host early and start the next between hosts, sharing the NICs of hosts still in the earlier one (1.3x..1.6x for large buffers)"}
	}
	return band{0.8, 1.5, "the fold-in's ranks start the rounds late, and hosts without folded pairs start rounds between hosts early, sharing NICs (up to 1.45x: allgather, 40 ranks)"}
}

// checkTwoLevel simulates every algorithm of every collective at every
// point whose estimated messages stay within budget, under each of
// twoLevelMachines, and fails where algo.CostTopo leaves its band or
// where algo.SelectTopo's pick is more than selectBound slower than the
// fastest. A point whose pick is over budget is listed as skipped (the
// others are still compared).
func checkTwoLevel(t *testing.T, machines int, ns, sizes []int, budget float64) {
	p := picks{skipFree: true}
	for _, m := range twoLevelMachines[:machines] {
		p.worst, p.worstAt = 0, ""
		for c := algo.AllReduce; c <= algo.Barrier; c++ {
			for _, n := range ns {
				if n%m.t.RanksPerHost != 0 {
					t.Fatalf("%d ranks are not whole hosts of %d", n, m.t.RanksPerHost)
				}
				for _, size := range sizes {
					best, bestT := algo.Algorithm(""), 0.0
					times := map[algo.Algorithm]float64{}
					for _, a := range algo.Algorithms {
						if Func(c, a) == nil || estMsgs(c, a, n, size) > budget {
							continue
						}
						cfg := Config{Ranks: n, Topology: simTopology(m.t, n), Gamma: m.t.Gamma, SizeOnly: true}
						res, err := RunCollective(context.Background(), cfg, c, a, size)
						if err != nil {
							t.Fatal(err)
						}
						model := algo.CostTopo(c, a, size, n, m.t)
						if r, b := res.Time/model, twoLevelBand(c, a, n, size, 4); r < b.lo || r > b.hi || math.IsNaN(r) {
							t.Errorf("model: %s %s n=%d %d B, %s constants: simulated %.2f us, model %.2f us: ratio %.3f outside %.2f..%.2f (%s)",
								a, c, n, size, m.name, res.Time*1e6, model*1e6, r, b.lo, b.hi, b.why)
						}
						times[a] = res.Time
						if best == "" || res.Time < bestT {
							best, bestT = a, res.Time
						}
					}
					p.judge(t, c, n, size, m.name, algo.SelectTopo(c, size, n, m.t), best, bestT, times)
				}
			}
		}
		t.Logf("worst pick under %s constants: %s", m.name, p.worstAt)
	}
	p.logSkipped(t, budget)
}

// TestSelectTwoLevel checks the two-level model and Select on a short
// grid under the simulator's constants; GOCCL_SIM_FULL=1 runs
// TestSelectTwoLevelFull's big one under both machines. At 1,024
// ranks the ring is over the budget here (2n(n-1) messages): the points
// where Select picks it are listed as skipped, and TestSelectTwoLevelFull
// runs them.
func TestSelectTwoLevel(t *testing.T) {
	checkTwoLevel(t, 1, []int{16, 64, 96, 256, 1024}, []int{8, 16 << 10, 256 << 10, 1 << 20, 4 << 20, 64 << 20}, 2e5)
}

// TestSelectTwoLevelFull checks 8 B to 1 GiB on 16 to 1,024 ranks, 8 a
// host, under both machines (about 7 minutes each on 2 shared cores,
// 2026-11-24; worst pick under the simulator's constants 1.11x: allreduce,
// 24 ranks, 16 KiB, doubling where the tree is best).
func TestSelectTwoLevelFull(t *testing.T) {
	if os.Getenv("GOCCL_SIM_FULL") == "" {
		t.Skip("set GOCCL_SIM_FULL=1 for the full sweep (minutes)")
	}
	sizes := []int{8, 1 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20, 256 << 20, 1 << 30}
	checkTwoLevel(t, len(twoLevelMachines), []int{16, 24, 40, 64, 96, 128, 200, 256, 512, 1000, 1024}, sizes, 1.2e7)
}
