// Two-level allgather.
//
// The reduce-scatter's steps run backwards. Rank r = h·L + j starts with
// its block r; share j is the blocks of local rank j of every host
// (blocks j, L+j, 2L+j, ...), laid out share by share in scratch. The
// allgather across hosts, on every local index at once, gives rank j of
// every host share j; the allgather within each host gives every rank
// every share; each rank copies the blocks from the scratch to their
// places. Two hosts of two ranks, blocks A B C D:
//
//	                host 0              host 1
//	                rank 0    rank 1    rank 2    rank 3
//	start           A         B         C         D
//	across hosts    A ->2     B ->3     C ->0     D ->1
//	                A C       B D       A C       B D
//	within hosts    AC ->1    BD ->0    AC ->3    BD ->2
//	after           A B C D   A B C D   A B C D   A B C D
//
// Each phase runs the ring or recursive doubling, as algo.PlanTwoLevel
// picks for its size. Blocks may have any sizes (counts).
//
// Cost in the two-level model, N the bytes of the whole gathered buffer,
// n = H·L, with the ring in both phases:
//
//	T = (H-1)·αe + (H-1)/H·(N/L)·(L·βe)    across: L ranks share a NIC
//	  + (L-1)·αi + (L-1)/L·N·βi            within the hosts
//
// plus local copies of the rank's block into the scratch and of the
// others out of it (algo.Copy), which the model does not charge. Through
// each host's NIC go (H-1)/H·N bytes each way, where the flat ring sends
// (n-1)/n·N.
//
// Counted exactly (equal blocks, H and L powers of two): rank r sends
// (H-1)/H·N/L bytes to other hosts and (L-1)/L·N within its host
// (TestAllGatherBytes).

package twolevel

import (
	"context"
	"fmt"

	"github.com/goccl/goccl/algo"
)

var _ algo.AllGatherFunc = AllGather

// AllGather starts with this rank's block (counts[Rank()] elements at
// its offset) in place in buf and leaves every rank's block in every
// buf.
func AllGather(ctx context.Context, p algo.Peers, buf []byte, counts []int) (err error) {
	if err := algo.CheckBlocks(p, buf, counts); err != nil {
		return fmt.Errorf("twolevel allgather: %w", err)
	}
	l, ok := layoutOf(p, algo.AllGather, len(buf))
	if !ok {
		return allGatherFunc(l.oneLevel(algo.AllGather, len(buf), p.Size()))(ctx, p, buf, counts)
	}
	if len(buf) == 0 {
		return nil
	}
	s := newShares(p, l, counts)
	scr := algo.GetScratch(p, len(buf))
	defer func() {
		if err == nil {
			algo.PutScratch(p, scr)
		}
	}()
	r := p.Rank()
	if err := copyBlock(p, s.block(scr, r), buf[s.off[r]:s.off[r+1]]); err != nil {
		return fmt.Errorf("twolevel allgather: %w", err)
	}
	if err := allGatherFunc(l.plan.Across)(ctx, l.across(p, l.j), s.share(scr, l.j), s.blocks(l.j)); err != nil {
		return fmt.Errorf("twolevel allgather: across hosts, local rank %d: %w", l.j, err)
	}
	if err := allGatherFunc(l.plan.After)(ctx, l.within(p), scr, s.shares); err != nil {
		return fmt.Errorf("twolevel allgather: within host %d: %w", l.h, err)
	}
	if err := s.unpack(p, buf, scr, r); err != nil {
		return fmt.Errorf("twolevel allgather: %w", err)
	}
	return nil
}
