// Two-level reduce-scatter.
//
// Rank r = h·L + j must end with block r reduced over all ranks. Share j
// is the blocks of local rank j of every host (blocks j, L+j, 2L+j, ...):
// the buffer is copied into scratch share by share, the reduce-scatter
// within each host leaves share j reduced over the host at its rank j,
// and the reduce-scatter across hosts, on every local index at once,
// leaves block h of share j, reduced over every host, at rank j of host
// h, which copies it to its place. Two hosts of two ranks, blocks A B C D
// ("A01" is A reduced over ranks 0 and 1, "A*" over all):
//
//	                host 0              host 1
//	                rank 0    rank 1    rank 2    rank 3
//	start           A B C D   A B C D   A B C D   A B C D
//	by share        A C|B D   A C|B D   A C|B D   A C|B D
//	within hosts    BD ->1    AC ->0    BD ->3    AC ->2
//	                A01 C01   B01 D01   A23 C23   B23 D23
//	across hosts    C01 ->2   D01 ->3   A23 ->0   B23 ->1
//	after           A*        B*        C*        D*
//
// Each phase runs the ring or recursive halving, as algo.PlanTwoLevel
// picks for its size. Blocks may have any sizes (counts).
//
// Cost in the two-level model, N the bytes of the whole buffer, n = H·L,
// with the ring in both phases:
//
//	T = (L-1)·αi + (L-1)/L·N·βi            within the hosts
//	  + (H-1)·αe + (H-1)/H·(N/L)·(L·βe)    across: L ranks share a NIC
//	  + the rings' γ terms
//
// plus a local copy of N bytes into the scratch and of the rank's block
// out of it (algo.Copy), which the model does not charge. Through each
// host's NIC go (H-1)/H·N bytes each way, where the flat ring sends
// (n-1)/n·N.
//
// Counted exactly (equal blocks, H and L powers of two): rank r sends
// (L-1)/L·N bytes within its host and (H-1)/H·N/L to other hosts
// (TestReduceScatterBytes).

package twolevel

import (
	"context"
	"fmt"

	"github.com/goccl/goccl/algo"
)

var _ algo.ReduceScatterFunc = ReduceScatter

// ReduceScatter reduces buf (block i holding counts[i] elements) across
// the hosts and leaves block Rank() reduced in place; the other blocks
// are scratch afterwards.
func ReduceScatter(ctx context.Context, p algo.Peers, buf []byte, counts []int) (err error) {
	if err := algo.CheckBlocks(p, buf, counts); err != nil {
		return fmt.Errorf("twolevel reduce-scatter: %w", err)
	}
	l, ok := layoutOf(p, algo.ReduceScatter, len(buf))
	if !ok {
		return reduceScatterFunc(l.oneLevel(algo.ReduceScatter, len(buf), p.Size()))(ctx, p, buf, counts)
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
	if err := s.pack(p, scr, buf); err != nil {
		return fmt.Errorf("twolevel reduce-scatter: %w", err)
	}
	if err := reduceScatterFunc(l.plan.Before)(ctx, l.within(p), scr, s.shares); err != nil {
		return fmt.Errorf("twolevel reduce-scatter: within host %d: %w", l.h, err)
	}
	mine := s.share(scr, l.j)
	if err := reduceScatterFunc(l.plan.Across)(ctx, l.across(p, l.j), mine, s.blocks(l.j)); err != nil {
		return fmt.Errorf("twolevel reduce-scatter: across hosts, local rank %d: %w", l.j, err)
	}
	r := p.Rank()
	if err := copyBlock(p, buf[s.off[r]:s.off[r+1]], s.block(scr, r)); err != nil {
		return fmt.Errorf("twolevel reduce-scatter: %w", err)
	}
	return nil
}
