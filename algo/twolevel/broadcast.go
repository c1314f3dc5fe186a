// Two-level broadcast.
//
// The root, rank h·L + j, broadcasts across hosts to rank j of every
// host; then each of those broadcasts within its host. Two hosts of two
// ranks, root 0:
//
//	                host 0              host 1
//	                rank 0    rank 1    rank 2    rank 3
//	across hosts    x ->2                (x)
//	within hosts    x ->1     (x)       x ->3     (x)
//
// Each phase runs the pipelined ring (chain) or the binomial tree, as
// algo.PlanTwoLevel picks for its size. Only the root's local index
// crosses hosts, one message a NIC at a time.
//
// Cost in the two-level model, N the bytes of the buffer, S = ⌈N/seg⌉
// segments of s = N/S bytes, with the ring in both phases:
//
//	T = (H-1)·(αe + s·βe) + (S-1)·max(αe, s·βe)    across the hosts
//	  + (L-1)·(αi + s·βi) + (S-1)·max(αi, s·βi)    within them
//
// and with the tree in both, for H and L powers of two,
// log2(H)·(αe + N·βe) + log2(L)·(αi + N·βi). The chain's latency is H's
// and L's hops where the flat chain's is n's; the flat binomial tree with
// the root at a host's first rank already sends its rounds between hosts
// first, so for the tree the two levels change little.
//
// Counted exactly (N > 0): rank j of every host but the root's receives
// N bytes from another host, and every rank but rank j of its host
// receives N bytes from its own host (TestBroadcastBytes).

package twolevel

import (
	"context"
	"fmt"

	"github.com/goccl/goccl/algo"
)

var _ algo.BroadcastFunc = Broadcast

// Broadcast copies root's buf into every rank's buf: across hosts, then
// within them.
func Broadcast(ctx context.Context, p algo.Peers, buf []byte, root int) error {
	if err := algo.CheckRoot(p, root); err != nil {
		return fmt.Errorf("twolevel broadcast: %w", err)
	}
	l, ok := layoutOf(p, algo.Broadcast, len(buf))
	if !ok {
		return broadcastFunc(l.oneLevel(algo.Broadcast, len(buf), p.Size()))(ctx, p, buf, root)
	}
	if len(buf) == 0 {
		return nil
	}
	rh, rj := root/l.L, root%l.L
	if l.j == rj {
		if err := broadcastFunc(l.plan.Across)(ctx, l.across(p, rj), buf, rh); err != nil {
			return fmt.Errorf("twolevel broadcast: across hosts, local rank %d: %w", rj, err)
		}
	}
	if err := broadcastFunc(l.plan.After)(ctx, l.within(p), buf, rj); err != nil {
		return fmt.Errorf("twolevel broadcast: within host %d: %w", l.h, err)
	}
	return nil
}
