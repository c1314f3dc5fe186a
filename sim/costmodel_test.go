package sim

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"os"
	"strings"
	"testing"

	"github.com/goccl/goccl/algo"
)

// The cost model checked against the simulator.
//
// On the Flat topology (every rank alone on a host with one NIC, so a
// message costs α + m·β and ranks contend only for their own NIC) the
// simulated time of every algorithm is compared with algo.Cost. Where the
// formula claims to be exact it must hold within 10%; elsewhere the
// expected band says by how much it misses and why. Measured on
// n = 2..256 and 8 B..256 MiB, γ = 0 and γ = β/4:
//
//   - Exact (0.9..1.1): every algorithm on a power of two except the
//     tree allreduce, and the ring algorithms, the binomial broadcast, the
//     pairwise all-to-all and the barrier on any n. Measured: 1.000 to
//     1.012, except the ring broadcast, 0.93..1.0 (the formula charges α
//     per segment, the pipeline pays it once per hop).
//   - n not a power of two, for the algorithms whose rounds the formula
//     counts as ⌈log2 n⌉ or adds a fold-in to: the binomial reduce, gather
//     and scatter are faster than the formula for small messages, down to
//     (d-1)/d of it (0.5 at n = 3), since a rank's sends of different
//     rounds overlap their latencies. The fold-in terms are fitted to the
//     simulator (see algo/cost.go): halving within 0.8..1.33, doubling
//     allreduce 0.85..1.5, doubling allgather up to 1.37. Band 0.45..1.6.
//   - Blocks smaller than an element (gather, scatter, all-to-all with
//     fewer elements than ranks): empty blocks are not sent, so the
//     formula's α terms are not all paid. Band 0..1.1.
//   - The double-binary-tree allreduce: its formula is the pipeline's
//     (see algo/tree/allreduce.go); measured 0.76 (4 ranks, 1 MiB: the
//     fill is overcounted) to 1.33 (100 ranks, 256 MiB: links idle
//     between slots). Band 0.7..1.4.
//
// Fixed since the first sweep: the tree allreduce's slots each waited for a
// whole sweep up and down the tree (6.3x the formula at 16 ranks, 11.7x
// at 128); the binomial scatter started all its sends at once, so the
// largest subtree got its blocks last (1.94x); the ring's γ term charged
// reductions that overlap transfers (0.80); the binomial broadcast's
// formula charged ⌈log2 n⌉ full rounds (0.5 at n = 3).
type band struct {
	lo, hi float64
	why    string
}

func expectBand(c algo.Collective, a algo.Algorithm, n, size, elem int, gamma float64) band {
	pow2 := n&(n-1) == 0
	switch {
	case c == algo.AllReduce && a == algo.Tree:
		return band{0.7, 1.4, "double-tree pipeline: fill overcounted at mid sizes, slots leave links idle at large ones"}
	case (c == algo.Gather || c == algo.Scatter || c == algo.AllToAll) && size/elem < n:
		return band{0, 1.1, "empty blocks are not sent"}
	case a == algo.Ring || a == algo.Pairwise || a == algo.Dissemination || pow2 ||
		(c == algo.Broadcast && a == algo.Tree):
		return band{0.9, 1.1, "exact"}
	}
	return band{0.45, 1.6, "rounds overlap; the fold shares links with the rounds"}
}

// costPoint simulates one point on the Flat topology and returns the
// simulated and modelled seconds.
func costPoint(t testing.TB, c algo.Collective, a algo.Algorithm, n, size int, cp algo.CostParams) (simT, model float64) {
	cfg := Config{Ranks: n, Topology: Flat(n, Level{Alpha: cp.Alpha, Beta: cp.Beta}), Gamma: cp.Gamma, SizeOnly: true}
	res, err := RunCollective(context.Background(), cfg, c, a, size)
	if err != nil {
		t.Fatal(err)
	}
	return res.Time, algo.Cost(c, a, size, n, cp)
}

// estMsgs guesses the messages a point sends, to keep the sweep bounded.
func estMsgs(c algo.Collective, a algo.Algorithm, n, size int) float64 {
	fn, seg := float64(n), float64(algo.DefaultSegmentBytes)
	switch {
	case a == algo.Ring && c == algo.Broadcast:
		return fn * (float64(size)/seg + 1)
	case a == algo.Ring || a == algo.Pairwise:
		return 2 * fn * (fn - 1) * (float64(size)/fn/seg + 1)
	case a == algo.Tree && c == algo.AllReduce:
		return 4 * fn * (float64(size)/2/seg + 1)
	}
	return 2 * fn * (math.Log2(fn) + 2)
}

// sweep checks every algorithm at every n and size whose estimated
// messages stay within budget; γ > 0 only changes the reducing algorithms'
// figures by their γ term, so above gammaMaxN ranks it runs γ = 0 only.
func sweep(t *testing.T, ns, sizes []int, budget float64, gammaMaxN int) {
	var skipped []string
	for _, ca := range allPairs() {
		c, a := ca[0].(algo.Collective), ca[1].(algo.Algorithm)
		if a == algo.TwoLevel {
			continue // one level has no hosts: it runs a one-level pick (sim/twolevel_test.go)
		}
		for _, n := range ns {
			for _, size := range sizes {
				if estMsgs(c, a, n, size) > budget {
					skipped = append(skipped, fmt.Sprintf("%s %s n=%d %d B", a, c, n, size))
					continue
				}
				gammas := []float64{0, algo.DefaultCostParams.Gamma}
				if n > gammaMaxN {
					gammas = gammas[:1]
				}
				for _, g := range gammas {
					cp := algo.CostParams{Alpha: algo.DefaultCostParams.Alpha, Beta: algo.DefaultCostParams.Beta, Gamma: g}
					simT, model := costPoint(t, c, a, n, size, cp)
					r := simT / model
					b := expectBand(c, a, n, size, 4, g)
					if r < b.lo || r > b.hi || math.IsNaN(r) {
						t.Errorf("%s %s n=%d %d B γ=%g: simulated %.2f us, model %.2f us: ratio %.3f outside %.3f..%.3f (%s)",
							a, c, n, size, g, simT*1e6, model*1e6, r, b.lo, b.hi, b.why)
					}
				}
			}
		}
	}
	if len(skipped) > 0 {
		t.Logf("skipped %d points over %.0g messages: %s", len(skipped), budget, strings.Join(skipped, "; "))
	}
}

// TestCostModel compares every algorithm with its formula on a small
// grid; GOCCL_SIM_FULL=1 runs TestCostModelFull's big one.
func TestCostModel(t *testing.T) {
	sweep(t, []int{2, 3, 4, 7, 8, 16, 33, 64}, []int{8, 1 << 10, 64 << 10, 1 << 20, 16 << 20}, 2e5, 64)
}

// TestCostModelFull sweeps 8 B to 1 GiB on 2 to 4096 ranks, powers of
// two and not (31 minutes of wall time on 2 cores shared under a load
// average of 10 to 50, 2026-11-24; TestSelectFull took 25 more). Points
// that would send more than 1.2e7 messages are skipped and listed: the
// ring and the pairwise all-to-all at 4095 and 4096 ranks (2n(n-1) =
// 3.4e7 messages at any size), the ring broadcast and the tree allreduce
// at 1 GiB on 4095 and 4096 ranks. TestScale runs the ring at 1,024 ranks
// and 1 GiB.
func TestCostModelFull(t *testing.T) {
	if os.Getenv("GOCCL_SIM_FULL") == "" {
		t.Skip("set GOCCL_SIM_FULL=1 for the full sweep (minutes)")
	}
	sizes := []int{8, 1 << 10, 64 << 10, 1 << 20, 16 << 20, 256 << 20, 1 << 30}
	sweep(t, []int{2, 3, 5, 8, 13, 64, 100, 256, 1000, 1024, 4095, 4096}, sizes, 1.2e7, 256)
}

// Select is checked against the simulated best on Flat topologies, the
// machine algo.Cost models (every rank alone on a host with one link, so a
// message costs α + m·β), under two sets of constants: Select's own
// (algo.DefaultCostParams: 20 µs, 1 GB/s, 4 GB/s reductions) and the
// simulator's default inter-host level with its reductions (5 µs,
// 100 Gbit/s, 500 GB/s), passed to algo.SelectParams. At every point the
// collectives with a choice (allreduce, broadcast, allgather,
// reduce-scatter) run every algorithm, and Select's pick must be within
// selectBound of the fastest.
//
// Before the model was fixed to match the simulator, Select took the
// double-binary tree for allreduce on 7, 33 and 100 ranks at 16 KiB..4 MiB
// (1.4x..7.7x slower than the best: the tree's schedule did not pipeline),
// Rabenseifner's halving over the ring for allreduce and reduce-scatter at
// 4 MiB and up (1.10x..1.24x: the formula charged the ring every
// reduction, which it overlaps), the ring broadcast on 3 ranks (up to 2x:
// the binomial tree's sends overlap their latencies), and ring or halving
// over the fold-in algorithms on 5 ranks (1.3x: the fold was charged 2α
// where one shows). Now the worst pick over the full sweep is 1.09x
// (allreduce, 3 ranks, 256 KiB, the simulator's constants: the tree where
// the ring is best).
const selectBound = 1.15

// selectMachines are the constants Select is checked under.
var selectMachines = []struct {
	name string
	cp   algo.CostParams
}{
	{"Select's", algo.DefaultCostParams},
	{"sim's inter-host", algo.CostParams{Alpha: DefaultInterAlpha, Beta: DefaultInterBeta, Gamma: DefaultGamma}},
}

// checkSelect simulates every algorithm at every point whose estimated
// messages stay within budget and fails where Select's pick is more than
// selectBound slower than the fastest. A point where Select's pick is over
// budget is listed as skipped.
func checkSelect(t *testing.T, ns, sizes []int, budget float64) {
	var p picks
	for _, m := range selectMachines {
		for _, c := range []algo.Collective{algo.AllReduce, algo.Broadcast, algo.AllGather, algo.ReduceScatter} {
			for _, n := range ns {
				for _, size := range sizes {
					sel := algo.SelectParams(c, size, n, m.cp)
					best, bestT := algo.Algorithm(""), 0.0
					times := map[algo.Algorithm]float64{}
					for _, a := range algo.Algorithms {
						if Func(c, a) == nil || a == algo.TwoLevel || estMsgs(c, a, n, size) > budget {
							continue
						}
						simT, _ := costPoint(t, c, a, n, size, m.cp)
						times[a] = simT
						if best == "" || simT < bestT {
							best, bestT = a, simT
						}
					}
					p.judge(t, c, n, size, m.name, sel, best, bestT, times)
				}
			}
		}
	}
	t.Logf("worst pick: %s", p.worstAt)
	p.logSkipped(t, budget)
}

// picks gathers how Select's picks compare with the fastest algorithm in
// the simulation, point by point.
type picks struct {
	skipFree bool    // a point where the fastest takes no time is not judged
	bound    float64 // the most a pick may be slower than the fastest; 0 means selectBound
	skipped  []string
	worst    float64
	worstAt  string
}

// judge compares the simulated time of sel, Select's pick at one point,
// with the fastest of times (best, bestT), and fails t where it is more
// than selectBound slower. A pick that was not simulated (over the
// message budget) is listed as skipped.
func (p *picks) judge(t *testing.T, c algo.Collective, n, size int, machine string, sel, best algo.Algorithm, bestT float64, times map[algo.Algorithm]float64) {
	t.Helper()
	selT, ok := times[sel]
	if !ok {
		p.skipped = append(p.skipped, fmt.Sprintf("%s %s n=%d %d B (%s)", c, sel, n, size, machine))
		return
	}
	if p.skipFree && bestT == 0 {
		return // nothing to send: every pick is free
	}
	r := selT / bestT
	at := fmt.Sprintf("%s n=%d %d B, %s constants: Select takes %s (%.1f us), the simulation's best is %s (%.1f us): %.2fx",
		c, n, size, machine, sel, selT*1e6, best, bestT*1e6, r)
	if r > p.worst {
		p.worst, p.worstAt = r, at
	}
	if bound := cmp.Or(p.bound, selectBound); r > bound {
		t.Error(at)
	}
}

// logSkipped lists the points that judge skipped.
func (p *picks) logSkipped(t *testing.T, budget float64) {
	if len(p.skipped) > 0 {
		t.Logf("skipped %d points whose pick sends over %.0g messages: %s", len(p.skipped), budget, strings.Join(p.skipped, "; "))
	}
}

// TestSelect checks Select on a small grid; GOCCL_SIM_FULL=1 runs
// TestSelectFull's big one.
func TestSelect(t *testing.T) {
	checkSelect(t, []int{2, 3, 4, 5, 7, 8, 13, 16, 33, 64, 100}, []int{8, 1 << 10, 16 << 10, 256 << 10, 4 << 20, 64 << 20}, 2e5)
}

// TestSelectFull checks Select from 8 B to 1 GiB on 2 to 4096 ranks. The
// ring at 4095 and 4096 ranks is over the budget (see TestCostModelFull),
// so there the check compares the others.
func TestSelectFull(t *testing.T) {
	if os.Getenv("GOCCL_SIM_FULL") == "" {
		t.Skip("set GOCCL_SIM_FULL=1 for the full sweep (minutes)")
	}
	sizes := []int{8, 1 << 10, 16 << 10, 256 << 10, 4 << 20, 64 << 20, 1 << 30}
	checkSelect(t, []int{2, 3, 5, 6, 7, 8, 9, 13, 16, 33, 64, 100, 256, 1000, 1024, 2048, 4095, 4096}, sizes, 1.2e7)
}
