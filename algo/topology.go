// The two-level cost model: ranks on hosts.
//
// A Topology puts the ranks of a group on hosts in contiguous blocks of
// L = RanksPerHost (rank r on host ⌊r/L⌋; the last host may hold fewer),
// as launchers number them. Within a host every rank has its own link at
// the Intra level; between hosts a message leaves through its host's one
// NIC and enters through the other host's, at the Inter level, and the
// messages that cross one NIC at once share its bandwidth. That is the
// machine package sim simulates by default (sim.DefaultTopology). With
// H = ⌈n/L⌉ hosts, N the bytes as in [Cost], and c_k the most ranks of one
// host whose partner in round k of the power-of-two group (after the
// fold-in of package halving) is on another host (L for partners at
// distance ≥ L, 0 for partners within an aligned block; counted, not
// assumed, so non-powers of two and folds come out right):
//
//	ring (each of its n-1 or 2(n-1) steps, B = N/n)
//	                      max(B·βe, B·γ, g + (H·(αe + B·βe) + (n-H)·(αi + B·βi))/n)
//	                      the average hop of the cycle, or the NIC's transfer:
//	                      H of the n ring edges cross hosts, one per NIC, so
//	                      no NIC is shared, and the ranks within hosts have
//	                      slack to hide their reductions; g (Cost's ring γ
//	                      term a step) and B·γ count in reduce-scatter
//	                      steps only
//	ring broadcast        (H-1)·(αe + s·βe) + (n-H)·(αi + s·βi)
//	                      + (S-1)·max(αe, s·βe),  s = N/S
//	tree broadcast        the binomial recursion with the child at distance
//	                      m sent at the Inter level when m ≥ L (one rank per
//	                      host sends between hosts in a round: no sharing)
//	tree reduce           per round α + N·β + N·γ at its level
//	tree gather, scatter  per round α at its level, (Li-1)/n·N·βi
//	                      + (n-Li)/n·N·βe, Li = 2^(intra rounds)
//	tree allreduce        Σ_depth 2·(α_d + max(2m·βi, c_d·m·βe))
//	                      + (S-1)·max(αe, b) + γ terms as in Cost,
//	                      c_d the most edges from depth d (both trees)
//	                      whose segments leave or enter one NIC in the same
//	                      slot (α_d = αi and c_d = 0 for a level within
//	                      hosts), b = max(min(n,4)·m·βi, k·m·βe) a full
//	                      slot, k the most tree edges between one host and
//	                      the others: the first segment's trip, then one
//	                      slot per segment paced by the busiest NIC
//	doubling allreduce    Σ_k (c_k > 0 ? αe + c_k·N·βe : αi + N·βi) + N·γ
//	                      + the fold as in Cost, at the level of its pairs
//	doubling allgather    Σ_k (c_k > 0 ? αe + a_k·N/n·βe : αi + 2^k·N/p·βi)
//	                      + the fold, a_k the most blocks through one NIC
//	                      in round k (a rank sends the range it gathered; a
//	                      folded rank's super-block is two blocks)
//	halving reduce-scat.  the same with r_k (a rank sends its partner's half
//	                      of its range), + (p-1)/p·N·γ + the fold
//	halving allreduce     the reduce-scatter's rounds and the allgather's
//	                      (no γ), + the fold
//	pairwise all-to-all   (n-1)·αe + Σ_k min(k, L, n-k)·N/n·βe
//	dissemination barrier d·αe (every round crosses a host boundary)
//	two-level             the sum of its phases' one-level costs, each
//	                      phase's family the cheapest (PlanTwoLevel in
//	                      twolevel.go); +Inf unless L divides n, 1 < L < n
//
// Ring, binomial and fold formulas reduce to Cost's with one level; the
// terms for sharing a NIC (c_k, k) are where the host-blind model went
// wrong: on 1,024 ranks of 8 per host Rabenseifner's first rounds (partners
// 512..8 apart, the halves of the buffer) put all 8 ranks of a host on one
// NIC at once, 8x the ring's time at 64 MiB, and its latency-bound rounds
// within a host are cheaper than Cost thought. Package sim holds these
// formulas and SelectTopo to the simulator (sim/topology_test.go).

package algo

import (
	"math"
	"sync"
)

// Level is the alpha-beta pair of one level of the network.
type Level struct {
	Alpha float64 // seconds per message (latency)
	Beta  float64 // seconds per byte (inverse bandwidth)
}

// Topology is the machine of the two-level model (see topology.go's
// comment): RanksPerHost ranks per host in contiguous blocks, Intra
// between ranks of one host, Inter between hosts through one NIC per host
// that the host's ranks share, Gamma seconds per byte reduced.
//
// RanksPerHost 0 or 1 means every rank alone on its host (Cost under the
// Inter level); RanksPerHost ≥ n means one host (Cost under the Intra
// level). Hosts whose ranks are not contiguous blocks are outside the
// model: describe them as RanksPerHost 1.
type Topology struct {
	RanksPerHost int
	Intra, Inter Level
	Gamma        float64
}

// DefaultIntra is the Intra level of DefaultTopology: a message through
// shared memory between processes of one host, 2 µs and 10 GB/s, against
// DefaultCostParams' 20 µs and 1 GB/s between hosts.
var DefaultIntra = Level{Alpha: 2e-6, Beta: 0.1e-9}

// DefaultTopology is ranksPerHost ranks a host under DefaultCostParams
// between hosts and DefaultIntra within one.
func DefaultTopology(ranksPerHost int) Topology {
	p := DefaultCostParams
	return Topology{RanksPerHost: ranksPerHost, Intra: DefaultIntra, Inter: Level{p.Alpha, p.Beta}, Gamma: p.Gamma}
}

// FlatTopology is the one-level machine of Cost: every rank alone on its
// host under p.
func FlatTopology(p CostParams) Topology {
	return Topology{RanksPerHost: 1, Inter: Level{p.Alpha, p.Beta}, Intra: Level{p.Alpha, p.Beta}, Gamma: p.Gamma}
}

// flat returns the CostParams under which the group of n ranks is one
// level, and whether it is.
func (t Topology) flat(n int) (CostParams, bool) {
	switch {
	case t.RanksPerHost <= 1:
		return CostParams{Alpha: t.Inter.Alpha, Beta: t.Inter.Beta, Gamma: t.Gamma}, true
	case t.RanksPerHost >= n:
		return CostParams{Alpha: t.Intra.Alpha, Beta: t.Intra.Beta, Gamma: t.Gamma}, true
	}
	return CostParams{}, false
}

// shape is what the two-level formulas need to know about n ranks on
// hosts of L: which rounds and tree edges cross hosts, and how many share
// a NIC. It depends on n and L only; shapes are computed once (O(n log n))
// and kept.
type shape struct {
	hosts int
	// rounds[k] is c_k: the most ranks of one host whose partner in round
	// k (mask 2^k) of the power-of-two group is on another host.
	rounds []int
	// ag[k] and rs[k] are the most blocks (of the n real ranks' blocks)
	// that leave or enter one host's NIC in round k of the recursive-
	// doubling allgather (a rank sends the range it has gathered) and of
	// the recursive-halving reduce-scatter (it sends the partner's half of
	// its range). A folded rank's super-block holds two blocks.
	ag, rs []int
	// foldInter: some fold-in pair (2i, 2i+1), i < n-p, spans two hosts.
	foldInter bool
	// treeNIC is the most edges of the double binary tree (both trees)
	// between one host and the others.
	treeNIC int
	// treeLevel[d] is the most edges from depth d to d+1 (both trees)
	// whose messages leave one host's NIC, or enter it, at once: the
	// segments of both trees cross depth d in the same slot.
	treeLevel []int
}

type shapeKey struct{ n, l int }

var shapes sync.Map // shapeKey -> *shape

func shapeOf(n, l int) *shape {
	k := shapeKey{n, l}
	if s, ok := shapes.Load(k); ok {
		return s.(*shape)
	}
	s, _ := shapes.LoadOrStore(k, newShape(n, l))
	return s.(*shape)
}

func newShape(n, l int) *shape {
	host := func(r int) int { return r / l }
	s := &shape{hosts: (n + l - 1) / l}
	cnt := make([]int, s.hosts)
	// The power-of-two group of package halving: new rank v is real rank
	// 2v+1 below rem, v+rem above.
	p := 1 << Log2(n)
	rem := n - p
	real := func(v int) int {
		if v < rem {
			return 2*v + 1
		}
		return v + rem
	}
	for i := 0; i < rem; i++ {
		if host(2*i) != host(2*i+1) {
			s.foldInter = true
			break
		}
	}
	first := func(v int) int { // v's super-block's first real block
		if v < rem {
			return 2 * v
		}
		return v + rem
	}
	txA, rxA := make([]int, s.hosts), make([]int, s.hosts)
	txR, rxR := make([]int, s.hosts), make([]int, s.hosts)
	for mask := 1; mask < p; mask *= 2 {
		for _, x := range [][]int{cnt, txA, rxA, txR, rxR} {
			clear(x)
		}
		c, ag, rs := 0, 0, 0
		for v := 0; v < p; v++ {
			u := v ^ mask
			a, b := host(real(v)), host(real(u))
			if a == b {
				continue
			}
			cnt[a]++
			c = max(c, cnt[a])
			gv, gu := v&^(mask-1), u&^(mask-1)
			own, theirs := first(gv+mask)-first(gv), first(gu+mask)-first(gu)
			txA[a] += own
			rxA[b] += own
			txR[a] += theirs
			rxR[b] += theirs
			ag = max(ag, txA[a], rxA[b])
			rs = max(rs, txR[a], rxR[b])
		}
		s.rounds = append(s.rounds, c)
		s.ag = append(s.ag, ag)
		s.rs = append(s.rs, rs)
	}
	// The double binary tree of package tree: in-order over positions
	// 1..n, the children of v being v - lowbit(v)/2 and v + h (h the
	// largest power of two with v+h ≤ min(n, v+lowbit(v)-1)); tree 0 puts
	// rank v-1 at v, tree 1 rank n-v (n even) or v mod n (n odd). A
	// parent's lowbit exceeds its children's, so depths fill from the
	// root down in order of decreasing lowbit.
	root := 1 << Log2(n)
	depth := make([]int32, n+1)
	s.treeLevel = make([]int, Log2(n))
	clear(cnt)
	// Per depth, the messages up one tree's edge leave the child's host
	// and enter the parent's (down, the reverse): tx and rx counts.
	type key struct{ d, h int }
	tx, rx := map[key]int{}, map[key]int{}
	for t := range 2 {
		rank := func(v int) int {
			switch {
			case t == 0:
				return v - 1
			case n%2 == 0:
				return n - v
			}
			return v % n
		}
		edge := func(v, c int) {
			depth[c] = depth[v] + 1
			a, b := host(rank(v)), host(rank(c))
			if a != b {
				d := int(depth[v])
				tx[key{d, b}]++
				rx[key{d, a}]++
				s.treeLevel[d] = max(s.treeLevel[d], tx[key{d, b}], rx[key{d, a}])
				cnt[a]++
				cnt[b]++
				s.treeNIC = max(s.treeNIC, cnt[a], cnt[b])
			}
		}
		depth[root] = 0
		for lb := root; lb >= 2; lb /= 2 {
			for v := lb; v <= n; v += 2 * lb {
				edge(v, v-lb/2)
				if v+1 <= n {
					m := min(n, v+lb-1) - v
					edge(v, v+1<<Log2(m))
				}
			}
		}
	}
	return s
}

// CostTopo is Cost on the two-level machine t: the modelled seconds of
// collective c with algorithm a on n ranks for bytes bytes, +Inf if a does
// not implement c. On one level (t.RanksPerHost ≤ 1, or ≥ n) it is Cost
// under that level.
func CostTopo(c Collective, a Algorithm, bytes, n int, t Topology) float64 {
	if p, ok := t.flat(n); ok || !Implements(a, c) {
		return Cost(c, a, bytes, n, p)
	}
	if a == TwoLevel {
		return PlanTwoLevel(c, bytes, n, t).Time
	}
	L := t.RanksPerHost
	s := shapeOf(n, L)
	N, fn, H := float64(bytes), float64(n), float64(s.hosts)
	ai, bi, ae, be, ga := t.Intra.Alpha, t.Intra.Beta, t.Inter.Alpha, t.Inter.Beta, t.Gamma
	seg := float64(DefaultSegmentBytes)
	d := CeilLog2(n)
	pp := 1 << Log2(n)
	lp, fp := float64(Log2(n)), float64(pp)
	ppart := (fp - 1) / fp * N
	f := 0.0
	if pp != n {
		f = 1
	}
	fa, fb := ai, bi // the fold's pairs' level
	if s.foldInter {
		fa, fb = ae, be
	}
	// round is the time of round k of the power-of-two group moving m
	// bytes a rank, nic bytes through the busiest NIC if it crosses hosts.
	round := func(k int, m, nic float64) float64 {
		if s.rounds[k] > 0 {
			return ae + nic*be
		}
		return ai + m*bi
	}
	blk := N / fn
	// ringStep is one step of the ring with blocks of B bytes, reducing
	// them or not: the average hop of the cycle with the reduction that
	// shows (see ringGamma), or, when that leaves the ranks within hosts
	// slack to hide theirs, the NIC's transfer (or the reduction).
	ringStep := func(B float64, reduce bool) float64 {
		g, red := 0.0, 0.0
		if reduce {
			g, red = ringGamma(N, fn, be, ga)/(fn-1), B*ga
		}
		return max(B*be, red, g+(H*(ae+B*be)+(fn-H)*(ai+B*bi))/fn)
	}
	intraRounds := min(d, CeilLog2(L))
	switch {
	case a == Ring && c == AllReduce:
		return (fn - 1) * (ringStep(N/fn, true) + ringStep(N/fn, false))
	case a == Ring && c == ReduceScatter:
		return (fn - 1) * ringStep(N/fn, true)
	case a == Ring && c == AllGather:
		return (fn - 1) * ringStep(N/fn, false)
	case a == Ring && c == Broadcast:
		S := math.Max(1, math.Ceil(N/seg))
		sb := N / S
		return (H-1)*(ae+sb*be) + (fn-H)*(ai+sb*bi) + (S-1)*math.Max(ae, sb*be)
	case a == Tree && c == AllReduce:
		S := math.Max(1, math.Ceil(N/(2*seg)))
		m := math.Min(seg, math.Ceil(N/2))
		b := math.Max(math.Min(fn, 4)*m*bi, float64(s.treeNIC)*m*be)
		fill := 0.0 // one segment up and down the tree
		for _, c := range s.treeLevel {
			if c > 0 {
				fill += 2 * (ae + math.Max(2*m*bi, float64(c)*m*be))
			} else {
				fill += 2 * (ai + 2*m*bi)
			}
		}
		return fill + (S-1)*math.Max(ae, b) + math.Min(fn-1, 2)/2*N*ga + (lp-1)*2*m*ga
	case a == Tree && c == Broadcast:
		return leveledBcast(n, L, ai, N*bi, ae, N*be)
	case a == Tree && c == Reduce:
		return float64(intraRounds)*(ai+N*bi+N*ga) + float64(d-intraRounds)*(ae+N*be+N*ga)
	case a == Tree && (c == Gather || c == Scatter):
		li := float64(min(n, 1<<intraRounds))
		return float64(intraRounds)*ai + float64(d-intraRounds)*ae + (li-1)/fn*N*bi + (fn-li)/fn*N*be
	case a == Doubling && c == AllReduce:
		x := f * (fa + (2+lp/2)*N*fb + N*ga)
		for k, c := range s.rounds {
			x += round(k, N, float64(c)*N) + N*ga
		}
		return x
	case a == Doubling && c == AllGather:
		x := f * (fa + N*fb)
		for k := range s.rounds {
			x += round(k, float64(int(1)<<k)*N/fp, float64(s.ag[k])*blk)
		}
		return x
	case a == Halving && c == AllReduce:
		x := ppart*ga + f*(fa+2*N*fb+ppart*fb+N*ga)
		for k := range s.rounds {
			m := float64(int(1)<<k) * N / fp
			x += round(k, m, float64(s.rs[k])*blk) + round(k, m, float64(s.ag[k])*blk)
		}
		return x
	case a == Halving && c == ReduceScatter:
		x := ppart*ga + f*(fa+(1+1/fn)*N*fb+ppart*fb+N*ga)
		for k := range s.rounds {
			x += round(k, float64(int(1)<<k)*N/fp, float64(s.rs[k])*blk)
		}
		return x
	case a == Pairwise && c == AllToAll:
		// Step k sends N/n bytes to rank r+k: min(k, L, n-k) ranks of a
		// host leave it at once.
		shared := 0
		if n >= 2*L {
			shared = L * (n - L)
		} else {
			for k := 1; k < n; k++ {
				shared += min(k, L, n-k)
			}
		}
		return (fn-1)*ae + float64(shared)*N/fn*be
	case a == Dissemination && c == Barrier:
		return float64(d) * ae
	}
	return math.Inf(1)
}

// leveledBcast is the time of the binomial broadcast on n ranks when a
// child at distance m ≥ l is sent at the Inter level (latency ae, transfer
// time nbe) and a nearer one at the Intra level (ai, nbi): a root sends to
// its children largest subtree first, each send leaving when the one
// before it has left and arriving its latency later (see binomialBcast).
func leveledBcast(n, l int, ai, nbi, ae, nbe float64) float64 {
	c := CeilLog2(n)
	lv := func(m int) (al, nb float64) {
		if m >= l {
			return ae, nbe
		}
		return ai, nbi
	}
	// full[k]: the subtree of 2^k ranks.
	full := make([]float64, c+1)
	for k := 1; k <= c; k++ {
		sent, w := 0.0, 0.0
		for j := k - 1; j >= 0; j-- {
			al, nb := lv(1 << j)
			sent += nb
			w = math.Max(w, sent+al+full[j])
		}
		full[k] = w
	}
	var part func(s int) float64
	part = func(s int) float64 {
		if s <= 1 {
			return 0
		}
		c := CeilLog2(s)
		sent, w := 0.0, 0.0
		for j := c - 1; j >= 0; j-- {
			al, nb := lv(1 << j)
			sent += nb
			sub := full[j]
			if j == c-1 {
				sub = part(s - 1<<j)
			}
			w = math.Max(w, sent+al+sub)
		}
		return w
	}
	return part(n)
}

// SelectTopo is Select on the two-level machine t: the family with the
// least CostTopo, ties to the one listed first in Algorithms, "" if none
// implements c. With t.RanksPerHost ≤ 1 under DefaultCostParams it is
// Select.
func SelectTopo(c Collective, bytes, n int, t Topology) Algorithm {
	return SelectFromTopo(c, bytes, n, Algorithms, t)
}

// SelectFromTopo is SelectFrom on the two-level machine t: the cheapest of
// allowed that implements c, or SelectTopo's pick if none does (or allowed
// is empty).
func SelectFromTopo(c Collective, bytes, n int, allowed []Algorithm, t Topology) Algorithm {
	if a := cheapest(c, bytes, n, allowed, t); a != "" {
		return a
	}
	return cheapest(c, bytes, n, Algorithms, t)
}

// cheapest returns the family of as with the least CostTopo for c, ties to
// the first, or "" if none implements c. An allgather goes by the ring
// (if as has it) where the ring costs at most ringTie more than the
// cheapest: see ringTie.
func cheapest(c Collective, bytes, n int, as []Algorithm, t Topology) Algorithm {
	best, bestCost, ringCost := Algorithm(""), math.Inf(1), math.Inf(1)
	for _, a := range as {
		if !Implements(a, c) {
			continue
		}
		x := CostTopo(c, a, bytes, n, t)
		if a == Ring {
			ringCost = x
		}
		if best == "" || x < bestCost {
			best, bestCost = a, x
		}
	}
	if c == AllGather && best != "" && best != Ring && ringCost <= bestCost*(1+ringTie) {
		return Ring
	}
	return best
}

// ringTie: an allgather's ring and recursive doubling move the same bytes
// over each link, and the model tells them apart only by the doubling's
// fewer latencies, which stop counting as the size grows. Measured, the
// two are level on one host, and on 4 emulated hosts of one rank (2
// Gbit/s, 100 us) the ring reached 0.80-0.84 of the link limit at 16 MiB
// where the doubling reached 0.49-0.55, with no loss on either (BENCHMARKS.md,
// "Allgather and reduce-scatter on emulated hosts"). So where the model
// calls them within 2%, the ring goes.
const ringTie = 0.02
