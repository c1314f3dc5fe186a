// The two-level collectives' plans.
//
// A two-level collective (package algo/twolevel) runs one-level
// algorithms on sub-groups of a Topology's ranks, n = H·L in H hosts of
// L: within each host (its L ranks, at the Intra level, every host at
// once) and across hosts (the H ranks of one local index j, one a host,
// at the Inter level). Its time is the sum of its phases' one-level costs
// (Cost), each phase running the family of least cost for its size:
//
//	I  = (αi, βi, γ)       a phase within the hosts: every rank has its
//	                       own port, no link is shared
//	E1 = (αe, βe, γ)       a phase across hosts on one local index (the
//	                       root's): one message a NIC at a time
//	EL = (αe, L·βe, γ)     a phase across hosts on every local index at
//	                       once: the L ranks of a host share its NIC, each
//	                       at 1/L of its bandwidth
//
//	allreduce       RS(N, L, I) + AR(N/L, H, EL) + AG(N, L, I)
//	reduce-scatter  RS(N, L, I) + RS(N/L, H, EL)
//	allgather       AG(N/L, H, EL) + AG(N, L, I)
//	broadcast       BC(N, H, E1) + BC(N, L, I)
//	reduce          RD(N, L, I) + RD(N, H, E1)
//
// with RS the reduce-scatter of the ring or halving, AR the allreduce of
// the ring, recursive doubling or Rabenseifner's halving, AG the
// allgather of the ring or recursive doubling, BC the broadcast of the
// ring (priced as CostTopo prices its pipeline: (m-1)·(α + s·β) +
// (S-1)·max(α, s·β) on m ranks, S segments of s bytes) or the binomial
// tree, RD the binomial reduce. Across hosts a rank
// moves 1/L of the buffer where a flat algorithm's moves all of it, so
// the bytes through a NIC are those of a flat algorithm on H ranks, and
// the latencies are H's and L's rounds, not n's.
//
// The plan is refused (+Inf) unless the hosts are whole: 1 < L < n and L
// divides n. Package sim holds the sums to the simulator (within 15% from
// 64 to 4,096 ranks of 8 a host, sim/twolevel_test.go).

package algo

import "math"

// Plan is how a two-level collective runs on a machine: the one-level
// family of each of its phases, in order, and its modelled time.
type Plan struct {
	Before Algorithm // the phase within each host before the one across hosts ("" if none)
	Across Algorithm // the phase across hosts
	After  Algorithm // the phase within each host after it ("" if none)
	Time   float64   // modelled seconds; +Inf where the plan is refused
}

// PlanTwoLevel returns the plan of collective c on n ranks for bytes bytes
// (as in Cost) on the machine t: for each phase the family of least Cost
// at its level, ties to the one listed first in Algorithms. Its Time is
// +Inf, and its families empty, where c has no two-level algorithm or t
// does not put n ranks on whole hosts of 1 < L < n ranks.
func PlanTwoLevel(c Collective, bytes, n int, t Topology) Plan {
	L := t.RanksPerHost
	if L <= 1 || L >= n || n%L != 0 || !Implements(TwoLevel, c) {
		return Plan{Time: math.Inf(1)}
	}
	H := n / L
	in := CostParams{Alpha: t.Intra.Alpha, Beta: t.Intra.Beta, Gamma: t.Gamma}
	one := CostParams{Alpha: t.Inter.Alpha, Beta: t.Inter.Beta, Gamma: t.Gamma}
	all := one
	all.Beta *= float64(L)
	share := (bytes + L - 1) / L // the largest share, as EvenCounts cuts it
	var p Plan
	var x, y float64
	switch c {
	case AllReduce:
		p.Before, x = phase(ReduceScatter, bytes, L, in)
		p.Across, y = phase(AllReduce, share, H, all)
		p.After, p.Time = phase(AllGather, bytes, L, in)
	case ReduceScatter:
		p.Before, x = phase(ReduceScatter, bytes, L, in)
		p.Across, y = phase(ReduceScatter, share, H, all)
	case AllGather:
		p.Across, y = phase(AllGather, share, H, all)
		p.After, x = phase(AllGather, bytes, L, in)
	case Broadcast:
		p.Across, y = phase(Broadcast, bytes, H, one)
		p.After, x = phase(Broadcast, bytes, L, in)
	case Reduce:
		p.Before, x = phase(Reduce, bytes, L, in)
		p.Across, y = phase(Reduce, bytes, H, one)
	}
	p.Time += x + y
	return p
}

// phaseFamilies are the one-level families a phase may run, in Select's
// tie-breaking order. The double binary tree allreduce is not among them:
// its formula is its pipeline's, 0.7x..1.4x of the simulated time, too
// loose to hold a sum of phases within 15%; the tree's broadcast and
// reduce are.
var phaseFamilies = []Algorithm{Ring, Halving, Doubling}

// phase returns the one-level family of least Cost for c on n ranks under
// cp, ties to the first listed, and its cost.
func phase(c Collective, bytes, n int, cp CostParams) (Algorithm, float64) {
	as := phaseFamilies
	if c == Broadcast || c == Reduce {
		as = []Algorithm{Ring, Tree}
	}
	best, bestT := Algorithm(""), math.Inf(1)
	for _, a := range as {
		if !Implements(a, c) {
			continue
		}
		x := Cost(c, a, bytes, n, cp)
		if c == Broadcast && a == Ring {
			x = chainBcast(bytes, n, cp)
		}
		if best == "" || x < bestT {
			best, bestT = a, x
		}
	}
	return best, bestT
}

// chainBcast is the ring (chain) broadcast of N bytes on n ranks at one
// level as the two-level model prices it (CostTopo's ring broadcast with
// every hop alike): the first segment's n-1 hops, then one segment a
// link's transfer or latency, whichever is longer. Cost's (n+S-2)·(α +
// s·β) charges every segment α again, which the pipeline pays once a hop
// (7.4 ms for the simulator's 5.9 ms at 64 MiB across 8 hosts then within
// them).
func chainBcast(bytes, n int, cp CostParams) float64 {
	if n <= 1 {
		return 0
	}
	S := math.Max(1, math.Ceil(float64(bytes)/float64(DefaultSegmentBytes)))
	s := float64(bytes) / S
	return float64(n-1)*(cp.Alpha+s*cp.Beta) + (S-1)*math.Max(cp.Alpha, s*cp.Beta)
}
