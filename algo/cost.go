// The alpha-beta cost model.
//
// A message of m bytes costs α + m·β (latency plus bandwidth), and reducing
// m bytes costs m·γ. The time of a collective is the sum over its steps of
// the slowest rank's cost in that step. With N the bytes of the buffer
// (for allgather, gather and scatter the whole gathered buffer, for
// reduce-scatter the whole input buffer, for all-to-all the bytes one rank
// sends in all), n ranks, d = ⌈log2 n⌉, p = 2^⌊log2 n⌋, f = 1 when n ≠ p
// (the fold-in of package halving) and 0 otherwise, S the number of
// segments of DefaultSegmentBytes:
//
//	ring allreduce        2(n-1)·α + 2(n-1)/n·N·β + (n-1)·s·γ
//	ring reduce-scatter   (n-1)·α + (n-1)/n·N·β + (n-1)·s·γ
//	ring allgather        (n-1)·α + (n-1)/n·N·β
//	ring broadcast        (n+S-2)·(α + N/S·β),  S = ⌈N/seg⌉
//	tree allreduce        (2h+S-1)·α + 2N·β + N·γ + (h-1)·(4m·β + 2m·γ),
//	                      h = ⌊log2 n⌋, S = ⌈N/(2·seg)⌉, m = min(seg, N/2)
//	tree broadcast        W(n): W(2^k) = k·(α + N·β), otherwise, with
//	                      c = ⌈log2 n⌉, max(α + N·β + W(n - 2^(c-1)),
//	                      c·N·β + (c-1)·α)
//	tree reduce           d·(α + N·β + N·γ)
//	tree gather, scatter  d·α + (n-1)/n·N·β
//	doubling allreduce    log2(p)·(α + N·β + N·γ) + f·(α + (2 + log2(p)/2)·N·β + N·γ)
//	doubling allgather    log2(p)·α + (p-1)/p·N·β + f·(α + N·β)
//	halving allreduce     2·log2(p)·α + 2(p-1)/p·N·β + (p-1)/p·N·γ
//	                      + f·(α + (2 + (p-1)/p)·N·β + N·γ)
//	halving reduce-scat.  log2(p)·α + (p-1)/p·N·β + (p-1)/p·N·γ
//	                      + f·(α + (1 + 1/n + (p-1)/p)·N·β + N·γ)
//	pairwise all-to-all   (n-1)·α + (n-1)/n·N·β
//	dissemination barrier d·α
//
// In the ring's γ term s is the last segment of a block of N/n bytes
// (N/n - (⌈N/(n·seg)⌉-1)·seg) when γ ≤ β: the ring reduces segment k while
// k+1 arrives, so only the last one's reduction shows (for γ > β see
// ringGamma). The tree allreduce's formula is its pipeline's; for n = 2
// and 3 its β term is n/2·N·β and for n = 2 its γ term N/2·γ (see
// package tree). The fold terms (f) are what the simulator measures, not
// the sum of the fold's messages: the fold-in's α overlaps the first
// round of the ranks that do not fold, and its bytes share the folding
// rank's link with the rounds, which wait for it (the halving's extra
// (p-1)/p·N·β; the doubling's log2(p)/2·N·β, a fit: the delay spreads
// through the rounds, by 0.5 to 1.5 N·β more or less, depending on n).
//
// For one rank every cost is 0. The formulas are the ones in the doc
// comments of the algorithm files, and those files' tests count messages
// and bytes against them. Package sim runs every algorithm on a simulated
// network and holds these formulas to the simulated times: exact for
// powers of two except the tree allreduce (0.75x..1.35x), and within
// 0.45x..1.6x where rounds of a non-power of two overlap (see
// sim/costmodel_test.go).

package algo

import (
	"fmt"
	"math"
	"strings"
)

// CostParams are the machine constants of the alpha-beta model.
type CostParams struct {
	Alpha float64 // seconds per message (latency)
	Beta  float64 // seconds per byte sent (inverse bandwidth)
	Gamma float64 // seconds per byte reduced
}

// DefaultCostParams describe a LAN-ish cluster: 20 µs per message, about
// 1 GB/s per link (10 GbE with overheads), reductions at 4 GB/s.
var DefaultCostParams = CostParams{Alpha: 20e-6, Beta: 1e-9, Gamma: 0.25e-9}

// Algorithms lists every algorithm family, in Select's tie-breaking order.
var Algorithms = []Algorithm{Ring, Tree, Halving, Doubling, TwoLevel, Pairwise, Dissemination}

var implements = map[Algorithm][]Collective{
	Ring:          {AllReduce, ReduceScatter, AllGather, Broadcast},
	Tree:          {AllReduce, Broadcast, Reduce, Gather, Scatter},
	Halving:       {AllReduce, ReduceScatter},
	Doubling:      {AllReduce, AllGather},
	TwoLevel:      {AllReduce, ReduceScatter, AllGather, Broadcast, Reduce},
	Pairwise:      {AllToAll},
	Dissemination: {Barrier},
}

// Implements reports whether family a has an algorithm for collective c.
func Implements(a Algorithm, c Collective) bool {
	for _, x := range implements[a] {
		if x == c {
			return true
		}
	}
	return false
}

// String returns the lower-case name of c ("allreduce").
func (c Collective) String() string {
	names := [...]string{"", "allreduce", "broadcast", "reduce", "allgather", "reducescatter", "alltoall", "gather", "scatter", "barrier"}
	if int(c) < len(names) && c > 0 {
		return names[c]
	}
	return fmt.Sprintf("Collective(%d)", uint8(c))
}

// ParseAlgorithm returns the Algorithm named s (case-insensitive).
func ParseAlgorithm(s string) (Algorithm, error) {
	for _, a := range Algorithms {
		if strings.EqualFold(strings.TrimSpace(s), string(a)) {
			return a, nil
		}
	}
	return "", fmt.Errorf("algo: unknown algorithm %q (want one of %v)", s, Algorithms)
}

// Cost returns the modelled time in seconds of collective c with algorithm
// a on n ranks for a buffer of bytes bytes (see the table above for what
// the byte count means per collective), or +Inf if a does not implement c.
func Cost(c Collective, a Algorithm, bytes, n int, p CostParams) float64 {
	if !Implements(a, c) || a == TwoLevel {
		return math.Inf(1) // one level has no hosts to run a two-level algorithm on
	}
	if n <= 1 {
		return 0
	}
	N, fn := float64(bytes), float64(n)
	al, be, ga := p.Alpha, p.Beta, p.Gamma
	d := float64(CeilLog2(n))
	pp := 1 << Log2(n)
	lp, fp := float64(Log2(n)), float64(pp)
	f := 0.0
	if pp != n {
		f = 1
	}
	part := (fn - 1) / fn * N // (n-1)/n·N
	ppart := (fp - 1) / fp * N
	seg := float64(DefaultSegmentBytes)
	switch {
	case a == Ring && c == AllReduce:
		return 2*(fn-1)*al + 2*part*be + ringGamma(N, fn, be, ga)
	case a == Ring && c == ReduceScatter:
		return (fn-1)*al + part*be + ringGamma(N, fn, be, ga)
	case a == Ring && c == AllGather:
		return (fn-1)*al + part*be
	case a == Ring && c == Broadcast:
		S := math.Max(1, math.Ceil(N/seg))
		return (fn + S - 2) * (al + N/S*be)
	case a == Tree && c == AllReduce:
		S := math.Max(1, math.Ceil(N/(2*seg)))
		m := math.Min(seg, math.Ceil(N/2))
		k := math.Min(fn, 4) // busiest rank sends k·m bytes a slot
		return (2*lp+S-1)*al + k/2*N*be + math.Min(fn-1, 2)/2*N*ga + (lp-1)*(4*m*be+2*m*ga)
	case a == Tree && c == Broadcast:
		return binomialBcast(n, al, N*be)
	case a == Tree && c == Reduce:
		return d * (al + N*be + N*ga)
	case a == Tree && (c == Gather || c == Scatter):
		return d*al + part*be
	case a == Doubling && c == AllReduce:
		return lp*(al+N*be+N*ga) + f*(al+(2+lp/2)*N*be+N*ga)
	case a == Doubling && c == AllGather:
		return lp*al + ppart*be + f*(al+N*be)
	case a == Halving && c == AllReduce:
		return 2*lp*al + 2*ppart*be + ppart*ga + f*(al+2*N*be+ppart*be+N*ga)
	case a == Halving && c == ReduceScatter:
		return lp*al + ppart*be + ppart*ga + f*(al+(1+1/fn)*N*be+ppart*be+N*ga)
	case a == Pairwise && c == AllToAll:
		return (fn-1)*al + part*be
	case a == Dissemination && c == Barrier:
		return d * al
	}
	return math.Inf(1)
}

// ringGamma is the reduction time of the ring's n-1 reduce-scatter steps,
// beyond their transfer time. A step's block of B = N/n bytes arrives in
// segments of seg, and segment k is reduced while k+1 arrives: with
// γ ≤ β a step ends one reduction of its last segment (B - (⌈B/seg⌉-1)·seg
// bytes) after its last byte arrives, with γ > β one transfer of its first
// segment (min(seg, B) bytes) plus B·γ after it starts.
func ringGamma(N, fn, be, ga float64) float64 {
	B := N / fn
	seg := float64(DefaultSegmentBytes)
	if ga <= be {
		return (fn - 1) * (B - (math.Max(1, math.Ceil(B/seg))-1)*seg) * ga
	}
	return (fn - 1) * (math.Min(seg, B)*be + B*ga - B*be)
}

// binomialBcast is the time of the binomial broadcast on n ranks with
// messages of latency al and transfer time nb: a rank sends to its
// children one after the other, largest subtree first, each send leaving
// nb after the one before it and arriving al later. A full subtree of 2^k
// ranks takes k·(al+nb); the root of a subtree of s ranks (c = ⌈log2 s⌉
// children) finishes with its first child's partial subtree of
// s - 2^(c-1) ranks at al + nb + W(s - 2^(c-1)), or with its second
// child's full one at c·nb + (c-1)·al.
func binomialBcast(n int, al, nb float64) float64 {
	if n <= 1 {
		return 0
	}
	c := CeilLog2(n)
	w := al + nb + binomialBcast(n-1<<(c-1), al, nb)
	if c >= 2 {
		w = math.Max(w, float64(c)*nb+float64(c-1)*al)
	}
	return w
}

// Select returns the algorithm with the least modelled cost for c on n
// ranks and bytes bytes, under DefaultCostParams; ties go to the family
// listed first in Algorithms. Small messages get recursive doubling or a
// tree (latency-bound), mid sizes on many ranks Rabenseifner or the
// double-binary tree, large ones the ring, which hides its reductions
// behind its transfers (bandwidth-bound).
//
// Package sim holds Select to the simulated best on a flat network from
// 2 to 4096 ranks and 8 B to 1 GiB, under these constants and under the
// simulator's: its pick is within 15% of the fastest everywhere (worst
// 1.09x: the tree over the ring for allreduce on 3 ranks at 256 KiB).
// Select is host-blind: where several ranks share a host (fast links
// within it, one NIC out of it) use SelectTopo, whose model counts which
// steps cross hosts and how many ranks share a NIC (see topology.go).
func Select(c Collective, bytes, n int) Algorithm {
	return SelectParams(c, bytes, n, DefaultCostParams)
}

// SelectParams is Select under the given machine constants. It returns ""
// if no family implements c.
func SelectParams(c Collective, bytes, n int, p CostParams) Algorithm {
	return cheapest(c, bytes, n, Algorithms, FlatTopology(p))
}

// EnvAlgo is the environment variable that forces an algorithm.
const EnvAlgo = "GOCCL_ALGO"

// ParseAlgorithms parses a comma-separated list of algorithm families
// ("ring", "tree,halving"), as GOCCL_ALGO takes it. Empty means none.
func ParseAlgorithms(s string) ([]Algorithm, error) {
	var as []Algorithm
	for name := range strings.SplitSeq(s, ",") {
		if strings.TrimSpace(name) == "" {
			continue
		}
		a, err := ParseAlgorithm(name)
		if err != nil {
			return nil, err
		}
		as = append(as, a)
	}
	return as, nil
}

// SelectFrom is Select restricted to the families in allowed: the
// cheapest of them that implements c wins; if none does (or allowed is
// empty), Select chooses, as NCCL_ALGO does for a collective its setting
// does not cover.
func SelectFrom(c Collective, bytes, n int, allowed []Algorithm) Algorithm {
	best, bestCost := Algorithm(""), math.Inf(1)
	for _, a := range allowed {
		if !Implements(a, c) {
			continue
		}
		if t := Cost(c, a, bytes, n, DefaultCostParams); best == "" || t < bestCost {
			best, bestCost = a, t
		}
	}
	if best == "" {
		return Select(c, bytes, n)
	}
	return best
}

// SelectEnv is SelectFrom with the list read from the environment through
// getenv (os.Getenv in production): GOCCL_ALGO names one algorithm family
// or a comma-separated list of them. An unset or empty variable means
// Select; an unknown name is an error.
func SelectEnv(c Collective, bytes, n int, getenv func(string) string) (Algorithm, error) {
	allowed, err := ParseAlgorithms(getenv(EnvAlgo))
	if err != nil {
		return "", fmt.Errorf("%s: %w", EnvAlgo, err)
	}
	return SelectFrom(c, bytes, n, allowed), nil
}
