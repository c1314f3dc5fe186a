package algo

import (
	"context"
	"fmt"
)

// Hosts is an optional capability of Peers that know how the group's
// ranks sit on hosts: the machine of the two-level model, which package
// algo/twolevel plans its phases on with the same costs that chose it
// (PlanTwoLevel). Every rank of the group must answer alike, as for
// Segmenter. A Peers without it is one level (TopologyOf).
type Hosts interface {
	// Topology is the group's machine: RanksPerHost ranks a host in
	// aligned blocks (rank r on host ⌊r/L⌋), the Intra and Inter levels
	// and the reductions' γ, as the cost model that picks algorithms for
	// the group assumes them.
	Topology() Topology
}

// TopologyOf is p's machine (Hosts), or, for Peers that do not know
// their hosts, every rank alone on its host under DefaultCostParams:
// the one-level machine of Select.
func TopologyOf(p Peers) Topology {
	if h, ok := p.(Hosts); ok {
		return h.Topology()
	}
	return FlatTopology(DefaultCostParams)
}

// Subgroup is the view of some ranks of a group as a group of their own:
// ranks first, first+stride, ..., first+(size-1)·stride of the parent,
// renumbered 0..size-1, so that an algorithm written for a whole group
// runs unchanged on the ranks of one host (stride 1) or on the ranks of
// the same local index on every host (stride L). Rank and Size are the
// sub-group's; Isend and Irecv take sub-group ranks and go through the
// parent to its ranks; elements, reductions, scratch (Scratcher), copies
// (Copier) and segments (Segmenter) are the parent's.
//
// The parent's messages between two ranks stay in FIFO order, so two
// sub-groups that share a pair of ranks must not run at once; the
// sub-groups of package algo/twolevel share none. A Subgroup does not
// know hosts (Hosts): an algorithm run on it is one level.
type Subgroup struct {
	p                   Peers
	first, stride, size int
}

var (
	_ Peers     = (*Subgroup)(nil)
	_ Scratcher = (*Subgroup)(nil)
	_ Copier    = (*Subgroup)(nil)
	_ Segmenter = (*Subgroup)(nil)
)

// Strided returns the Subgroup of p's ranks first, first+stride, ...,
// first+(size-1)·stride. p's own rank must be one of them, and all of
// them ranks of p.
func Strided(p Peers, first, stride, size int) *Subgroup {
	return &Subgroup{p: p, first: first, stride: max(stride, 1), size: size}
}

// Parent returns the parent rank of sub-group rank i.
func (s *Subgroup) Parent(i int) int { return s.first + i*s.stride }

func (s *Subgroup) Rank() int     { return (s.p.Rank() - s.first) / s.stride }
func (s *Subgroup) Size() int     { return s.size }
func (s *Subgroup) ElemSize() int { return s.p.ElemSize() }

func (s *Subgroup) Reduce(dst, src []byte) error { return s.p.Reduce(dst, src) }

func (s *Subgroup) Isend(to int, b []byte) Request {
	if to < 0 || to >= s.size {
		return failed{errRank("send to", to, s.size)}
	}
	return s.p.Isend(s.Parent(to), b)
}

func (s *Subgroup) Irecv(from int, b []byte) Request {
	if from < 0 || from >= s.size {
		return failed{errRank("receive from", from, s.size)}
	}
	return s.p.Irecv(s.Parent(from), b)
}

func (s *Subgroup) GetScratch(n int) []byte    { return GetScratch(s.p, n) }
func (s *Subgroup) PutScratch(b []byte)        { PutScratch(s.p, b) }
func (s *Subgroup) Copy(dst, src []byte) error { return Copy(s.p, dst, src) }
func (s *Subgroup) SegmentBytes() int          { return SegmentFor(s.p, 0) }

// failed is a request that failed before it started.
type failed struct{ err error }

func (f failed) Wait(context.Context) error { return f.err }

func errRank(what string, r, n int) error {
	return fmt.Errorf("algo: subgroup: %s rank %d of %d", what, r, n)
}
