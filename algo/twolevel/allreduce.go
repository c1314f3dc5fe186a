// Two-level allreduce.
//
// Reduce-scatter within each host, allreduce across hosts on each rank's
// share, allgather within each host. The buffer is cut into L shares on
// element boundaries (algo.EvenCounts); the reduce-scatter leaves share j
// reduced over its host at the host's rank j, the allreduce across hosts
// runs on every local index at once, rank j of every host on share j,
// and the allgather copies the complete shares back to every rank of the
// host. Two hosts of two ranks, shares x and y ("x01" is x reduced over
// ranks 0 and 1, "x*" over all):
//
//	                host 0              host 1
//	                rank 0    rank 1    rank 2    rank 3
//	start           x0 y0     x1 y1     x2 y2     x3 y3
//	within hosts    y0 ->1    x1 ->0    y2 ->3    x3 ->2
//	                x01       y01       x23       y23
//	across hosts    x01 <->2  y01 <->3  x23 <->0  y23 <->1
//	                x*        y*        x*        y*
//	within hosts    x* ->1    y* ->0    x* ->3    y* ->2
//	after           x* y*     x* y*     x* y*     x* y*
//
// Each phase runs the one-level family algo.PlanTwoLevel picks for its
// size: the ring or recursive halving within the hosts, and the ring,
// recursive doubling or Rabenseifner's halving across them. Every element
// is reduced across hosts by one sub-group, whose algorithm leaves it
// bit-identical on its ranks, and copied within the hosts, so every rank
// ends with the same bytes.
//
// Cost in the two-level model (algo/twolevel.go), N the bytes of the
// buffer, n = H·L, with the ring in every phase:
//
//	T = 2(L-1)·αi + 2(L-1)/L·N·βi          within the hosts
//	  + 2(H-1)·αe + 2(H-1)/H·(N/L)·(L·βe)  across: L ranks share a NIC
//	  + the rings' γ terms
//
// and with recursive doubling across hosts (H a power of two) the middle
// line is log2(H)·(αe + N/L·L·βe + N/L·γ). Its latency is L's and H's
// rounds where the flat ring's is n's, and through each host's NIC go
// 2(H-1)/H·N bytes each way where the flat ring sends 2(n-1)/n·N.
//
// Counted exactly (L divides the element count, H a power of two): rank
// r sends 2(L-1)/L·N bytes to ranks of its own host, and 2(H-1)/H·N/L
// (ring, halving) or log2(H)·N/L (doubling) to other hosts
// (TestAllReduceBytes).

package twolevel

import (
	"context"
	"fmt"

	"github.com/goccl/goccl/algo"
)

var _ algo.AllReduceFunc = AllReduce

// AllReduce reduces buf across the hosts in place: every rank ends with
// the reduction of every rank's buf.
func AllReduce(ctx context.Context, p algo.Peers, buf []byte) error {
	es := p.ElemSize()
	if es <= 0 || len(buf)%es != 0 {
		return fmt.Errorf("twolevel allreduce: buffer of %d bytes is not whole elements of %d bytes", len(buf), es)
	}
	l, ok := layoutOf(p, algo.AllReduce, len(buf))
	if !ok {
		return allReduceFunc(l.oneLevel(algo.AllReduce, len(buf), p.Size()))(ctx, p, buf)
	}
	if len(buf) == 0 {
		return nil
	}
	shares := algo.EvenCounts(len(buf)/es, l.L)
	off := algo.Offsets(shares, es)
	in := l.within(p)
	if err := reduceScatterFunc(l.plan.Before)(ctx, in, buf, shares); err != nil {
		return fmt.Errorf("twolevel allreduce: within host %d: %w", l.h, err)
	}
	if err := allReduceFunc(l.plan.Across)(ctx, l.across(p, l.j), buf[off[l.j]:off[l.j+1]]); err != nil {
		return fmt.Errorf("twolevel allreduce: across hosts, local rank %d: %w", l.j, err)
	}
	if err := allGatherFunc(l.plan.After)(ctx, in, buf, shares); err != nil {
		return fmt.Errorf("twolevel allreduce: within host %d: %w", l.h, err)
	}
	return nil
}
