package twolevel

import (
	"github.com/goccl/goccl/algo"
	"github.com/goccl/goccl/algo/halving"
	"github.com/goccl/goccl/algo/ring"
	"github.com/goccl/goccl/algo/tree"
)

// layout is where this rank sits on the hosts, and the plan of its call.
type layout struct {
	t    algo.Topology
	plan algo.Plan
	L, H int // ranks a host, hosts
	h, j int // this rank's host and local index
}

// layoutOf returns the layout of a call of c on bytes bytes on p, and
// whether its plan stands; where it does not, the call runs one level
// with l.t's pick (oneLevel).
func layoutOf(p algo.Peers, c algo.Collective, bytes int) (l layout, ok bool) {
	l.t = algo.TopologyOf(p)
	l.plan = algo.PlanTwoLevel(c, bytes, p.Size(), l.t)
	if l.plan.Across == "" {
		return l, false
	}
	l.L = l.t.RanksPerHost
	l.H = p.Size() / l.L
	l.h, l.j = p.Rank()/l.L, p.Rank()%l.L
	return l, true
}

// within is the sub-group of this rank's host: its L ranks.
func (l layout) within(p algo.Peers) algo.Peers { return algo.Strided(p, l.h*l.L, 1, l.L) }

// across is the sub-group of local index j: rank j of every host.
func (l layout) across(p algo.Peers, j int) algo.Peers { return algo.Strided(p, j, l.L, l.H) }

// oneLevelFamilies are the families a refused plan falls back to.
var oneLevelFamilies = []algo.Algorithm{algo.Ring, algo.Tree, algo.Halving, algo.Doubling}

// oneLevel is the family a call of c on bytes bytes runs where the plan
// is refused: the cost model's pick on the machine.
func (l layout) oneLevel(c algo.Collective, bytes, n int) algo.Algorithm {
	return algo.SelectFromTopo(c, bytes, n, oneLevelFamilies, l.t)
}

// The one-level algorithms of each family, as the phases run them.

func allReduceFunc(a algo.Algorithm) algo.AllReduceFunc {
	switch a {
	case algo.Tree:
		return tree.AllReduce
	case algo.Halving:
		return halving.AllReduce
	case algo.Doubling:
		return halving.DoublingAllReduce
	}
	return ring.AllReduce
}

func reduceScatterFunc(a algo.Algorithm) algo.ReduceScatterFunc {
	if a == algo.Halving {
		return halving.ReduceScatter
	}
	return ring.ReduceScatter
}

func allGatherFunc(a algo.Algorithm) algo.AllGatherFunc {
	if a == algo.Doubling {
		return halving.AllGather
	}
	return ring.AllGather
}

func broadcastFunc(a algo.Algorithm) algo.BroadcastFunc {
	if a == algo.Tree {
		return tree.Broadcast
	}
	return ring.Broadcast
}

// copyBlock copies src into dst through p (algo.Copy); empty blocks are
// skipped.
func copyBlock(p algo.Peers, dst, src []byte) error {
	if len(src) == 0 {
		return nil
	}
	return algo.Copy(p, dst, src)
}
