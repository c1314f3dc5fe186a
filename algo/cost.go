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
//	ring allreduce        2(n-1)·α + 2(n-1)/n·N·β + (n-1)/n·N·γ
//	ring reduce-scatter   (n-1)·α + (n-1)/n·N·β + (n-1)/n·N·γ
//	ring allgather        (n-1)·α + (n-1)/n·N·β
//	ring broadcast        (n+S-2)·(α + N/S·β),  S = ⌈N/seg⌉
//	tree allreduce        2(h+S)·α + 2N·β + N·γ,  h = ⌊log2 n⌋, S = ⌈N/(2·seg)⌉
//	tree broadcast        d·(α + N·β)
//	tree reduce           d·(α + N·β + N·γ)
//	tree gather, scatter  d·α + (n-1)/n·N·β
//	doubling allreduce    log2(p)·(α + N·β + N·γ) + f·(2α + 2N·β + N·γ)
//	doubling allgather    log2(p)·α + (p-1)/p·N·β + f·(3α + N·β)
//	halving allreduce     2·log2(p)·α + 2(p-1)/p·N·β + (p-1)/p·N·γ + f·(2α + 2N·β + N·γ)
//	halving reduce-scat.  log2(p)·α + (p-1)/p·N·β + (p-1)/p·N·γ + f·(2α + (1+1/n)·N·β + N·γ)
//	pairwise all-to-all   (n-1)·α + (n-1)/n·N·β
//	dissemination barrier d·α
//
// For one rank every cost is 0. The formulas are the ones in the doc
// comments of the algorithm files, and those files' tests count messages
// and bytes against them.

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
var Algorithms = []Algorithm{Ring, Tree, Halving, Doubling, Pairwise, Dissemination}

var implements = map[Algorithm][]Collective{
	Ring:          {AllReduce, ReduceScatter, AllGather, Broadcast},
	Tree:          {AllReduce, Broadcast, Reduce, Gather, Scatter},
	Halving:       {AllReduce, ReduceScatter},
	Doubling:      {AllReduce, AllGather},
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
	if !Implements(a, c) {
		return math.Inf(1)
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
		return 2*(fn-1)*al + 2*part*be + part*ga
	case a == Ring && c == ReduceScatter:
		return (fn-1)*al + part*be + part*ga
	case a == Ring && c == AllGather:
		return (fn-1)*al + part*be
	case a == Ring && c == Broadcast:
		S := math.Max(1, math.Ceil(N/seg))
		return (fn + S - 2) * (al + N/S*be)
	case a == Tree && c == AllReduce:
		S := math.Max(1, math.Ceil(N/(2*seg)))
		return 2*(lp+S)*al + 2*N*be + N*ga
	case a == Tree && c == Broadcast:
		return d * (al + N*be)
	case a == Tree && c == Reduce:
		return d * (al + N*be + N*ga)
	case a == Tree && (c == Gather || c == Scatter):
		return d*al + part*be
	case a == Doubling && c == AllReduce:
		return lp*(al+N*be+N*ga) + f*(2*al+2*N*be+N*ga)
	case a == Doubling && c == AllGather:
		return lp*al + ppart*be + f*(3*al+N*be)
	case a == Halving && c == AllReduce:
		return 2*lp*al + 2*ppart*be + ppart*ga + f*(2*al+2*N*be+N*ga)
	case a == Halving && c == ReduceScatter:
		return lp*al + ppart*be + ppart*ga + f*(2*al+(1+1/fn)*N*be+N*ga)
	case a == Pairwise && c == AllToAll:
		return (fn-1)*al + part*be
	case a == Dissemination && c == Barrier:
		return d * al
	}
	return math.Inf(1)
}

// Select returns the algorithm with the least modelled cost for c on n
// ranks and bytes bytes, under DefaultCostParams; ties go to the family
// listed first in Algorithms. Small messages get recursive doubling or a
// tree (latency-bound), large ones the ring or Rabenseifner
// (bandwidth-bound).
func Select(c Collective, bytes, n int) Algorithm {
	return SelectParams(c, bytes, n, DefaultCostParams)
}

// SelectParams is Select under the given machine constants. It returns ""
// if no family implements c.
func SelectParams(c Collective, bytes, n int, p CostParams) Algorithm {
	best, bestCost := Algorithm(""), math.Inf(1)
	for _, a := range Algorithms {
		if !Implements(a, c) {
			continue
		}
		if t := Cost(c, a, bytes, n, p); best == "" || t < bestCost {
			best, bestCost = a, t
		}
	}
	return best
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
