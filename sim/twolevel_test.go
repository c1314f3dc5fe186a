package sim

import (
	"context"
	"fmt"
	"math"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/goccl/goccl/algo"
)

// The two-level collectives (algo/twolevel) on the simulator's default
// machine, 8 ranks a host: algo.CostTopo's sum of phases against the
// simulated time, and algo.SelectTopo's pick, flat or two-level, against
// the fastest algorithm the simulation finds.

// twoLevelModelBound is how far the simulated time of a two-level
// collective may be from its model, either way.
const twoLevelModelBound = 0.15

// twoLevelPickBound is how much slower than the simulation's fastest
// algorithm SelectTopo's pick may be where two-level algorithms compete.
const twoLevelPickBound = 1.05

// twoLevelCollectives are the collectives with a two-level algorithm.
var twoLevelCollectives = []algo.Collective{algo.AllReduce, algo.ReduceScatter, algo.AllGather, algo.Broadcast, algo.Reduce}

// pickTable is SelectTopo's pick at each point of a sweep, for the
// table in BENCHMARKS.md.
type pickTable struct {
	ns, sizes []int
	pick      map[string]algo.Algorithm
}

func (pt *pickTable) key(c algo.Collective, n, size int) string { return fmt.Sprint(c, n, size) }

// log prints, per collective, sizes down and rank counts across.
func (pt *pickTable) log(t *testing.T) {
	for _, c := range twoLevelCollectives {
		var b strings.Builder
		fmt.Fprintf(&b, "%s: SelectTopo's picks, 8 ranks a host\n| size |", c)
		for _, n := range pt.ns {
			fmt.Fprintf(&b, " %d |", n)
		}
		b.WriteString("\n|---|")
		for range pt.ns {
			b.WriteString("---|")
		}
		for _, size := range pt.sizes {
			fmt.Fprintf(&b, "\n| %s |", sizeName(size))
			for _, n := range pt.ns {
				a, ok := pt.pick[pt.key(c, n, size)]
				if !ok {
					a = "."
				}
				fmt.Fprintf(&b, " %s |", a)
			}
		}
		t.Log(b.String())
	}
}

func sizeName(b int) string {
	switch {
	case b >= 1<<20:
		return fmt.Sprintf("%d MiB", b>>20)
	case b >= 1<<10:
		return fmt.Sprintf("%d KiB", b>>10)
	}
	return fmt.Sprintf("%d B", b)
}

// checkTwoLevelAlgos simulates, at every point, the two-level algorithm
// and every one-level one whose estimated messages stay within budget,
// on the simulator's machine of 8 ranks a host; it fails where the
// two-level model is more than twoLevelModelBound off the simulated time
// or where SelectTopo's pick is more than twoLevelPickBound slower than
// the fastest.
func checkTwoLevelAlgos(t *testing.T, ns, sizes []int, budget float64) {
	checkTwoLevelGrid(t, ns, sizes, func(n, size int) bool { return true }, budget)
}

// checkTwoLevelGrid is checkTwoLevelAlgos at the points of ns x sizes
// that in keeps.
func checkTwoLevelGrid(t *testing.T, ns, sizes []int, in func(n, size int) bool, budget float64) {
	m := twoLevelMachines[0]
	p := picks{skipFree: true, bound: twoLevelPickBound}
	pt := pickTable{ns: ns, sizes: sizes, pick: map[string]algo.Algorithm{}}
	worstModel, worstModelAt := 0.0, ""
	start := time.Now()
	for _, c := range twoLevelCollectives {
		for _, n := range ns {
			for _, size := range sizes {
				if !in(n, size) {
					continue
				}
				best, bestT := algo.Algorithm(""), 0.0
				times := map[algo.Algorithm]float64{}
				for _, a := range algo.Algorithms {
					if Func(c, a) == nil || (a != algo.TwoLevel && estMsgs(c, a, n, size) > budget) {
						continue
					}
					cfg := Config{Ranks: n, Topology: simTopology(m.t, n), Gamma: m.t.Gamma, SizeOnly: true}
					res, err := RunCollective(context.Background(), cfg, c, a, size)
					if err != nil {
						t.Fatal(err)
					}
					if a == algo.TwoLevel {
						model := algo.CostTopo(c, a, size, n, m.t)
						plan := algo.PlanTwoLevel(c, size, n, m.t)
						r := res.Time / model
						at := fmt.Sprintf("%s n=%d %s (%s/%s/%s): simulated %.2f us, model %.2f us: %.3f",
							c, n, sizeName(size), plan.Before, plan.Across, plan.After, res.Time*1e6, model*1e6, r)
						if d := math.Abs(r - 1); d > worstModel && res.Time > 0 {
							worstModel, worstModelAt = d, at
						}
						if res.Time > 0 && (math.Abs(r-1) > twoLevelModelBound || math.IsNaN(r)) {
							t.Errorf("model: %s, outside 1 ± %.2f", at, twoLevelModelBound)
						}
						if testing.Verbose() {
							t.Logf("model: %s", at)
						}
					}
					times[a] = res.Time
					if best == "" || res.Time < bestT {
						best, bestT = a, res.Time
					}
				}
				sel := algo.SelectTopo(c, size, n, m.t)
				pt.pick[pt.key(c, n, size)] = sel
				p.judge(t, c, n, size, m.name, sel, best, bestT, times)
			}
		}
	}
	t.Logf("worst two-level model: %s", worstModelAt)
	t.Logf("worst pick: %s", p.worstAt)
	p.logSkipped(t, budget)
	pt.log(t)
	t.Logf("%.1f s", time.Since(start).Seconds())
}

// TestTwoLevel runs a sample of the grid in well under a minute: 64 and
// 512 ranks from 8 B to 256 MiB, and 4,096 ranks at 8 B, 64 KiB and
// 4 MiB. GOCCL_SIM_FULL=1 runs TestTwoLevelFull's whole grid.
func TestTwoLevel(t *testing.T) {
	sizes := []int{8, 1 << 10, 16 << 10, 64 << 10, 256 << 10, 4 << 20, 64 << 20, 256 << 20}
	checkTwoLevelGrid(t, []int{64, 512, 4096}, sizes, func(n, size int) bool {
		return n < 4096 || size == 8 || size == 64<<10 || size == 4<<20
	}, 2e5)
}

// TestTwoLevelFull checks 64 to 4,096 ranks, 8 a host, from 8 B to
// 256 MiB in steps of 4x.
func TestTwoLevelFull(t *testing.T) {
	if os.Getenv("GOCCL_SIM_FULL") == "" {
		t.Skip("set GOCCL_SIM_FULL=1 for the full sweep (minutes)")
	}
	var sizes []int
	for s := 8; s <= 256<<20; s *= 4 {
		sizes = append(sizes, s)
	}
	checkTwoLevelAlgos(t, []int{64, 128, 256, 512, 1024, 2048, 4096}, sizes, 1.2e7)
}
