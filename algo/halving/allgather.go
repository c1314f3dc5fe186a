// Recursive-doubling allgather.
//
// In round k each rank swaps everything it has gathered so far (2^k blocks,
// contiguous) with the partner whose rank differs in bit k, so the gathered
// range doubles every round. Four ranks, blocks A B C D:
//
//	round 0 (0<->1, 2<->3):  0,1 have A B       2,3 have C D
//	round 1 (0<->2, 1<->3):  all have A B C D
//
// Blocks may have any sizes (counts). Non-powers of two use the fold-in
// (not Bruck's algorithm): an extra rank first sends its block to its
// partner, which then stands for both blocks (a super-block) in the rounds,
// and at the end the partner sends the extra rank everything else, as two
// messages: the blocks before the extra rank's own and the blocks after it.
//
// Cost, with p = 2^⌊log2 n⌋ and N the bytes of the whole gathered buffer:
//
//	T = log2(p)·α + (p-1)/p·N·β                     n = p
//	  + α + N·β                                      extra for n ≠ p
//
// (the fold-in's α overlaps the first round, and the fold-out's two
// messages leave together; up to 1.37x the formula for large buffers in
// the simulator, where the fold's bytes share links with the rounds).
//
// Counted exactly for n = p and equal non-empty blocks: each rank sends and
// receives log2(p) messages and (p-1)/p·N bytes.

package halving

import (
	"context"
	"fmt"

	"github.com/goccl/goccl/algo"
)

var _ algo.AllGatherFunc = AllGather

// AllGather starts with this rank's block (counts[Rank()] elements at its
// offset) in place in buf and leaves every rank's block in every buf, by
// recursive doubling. It has the shape of algo.AllGatherFunc.
func AllGather(ctx context.Context, p algo.Peers, buf []byte, counts []int) (err error) {
	if err := algo.CheckBlocks(p, buf, counts); err != nil {
		return fmt.Errorf("doubling allgather: %w", err)
	}
	if p.Size() == 1 || len(buf) == 0 {
		return nil
	}
	g := newGroup(p.Size(), p.Rank())
	off := algo.Offsets(counts, p.ElemSize())
	e := g.r &^ 1 // the extra rank of a pair below 2·rem
	// Fold-in: the extra rank's block goes to its partner.
	if own := buf[off[e]:off[e+1]]; len(own) > 0 {
		switch {
		case g.extra():
			err = algo.Send(ctx, p, g.partner(), own)
		case g.folding():
			err = algo.Recv(ctx, p, g.partner(), own)
		}
		if err != nil {
			return fmt.Errorf("doubling allgather: fold-in: %w", err)
		}
	}
	if !g.extra() {
		if err := doublingAllGather(ctx, p, g, buf, g.superOffsets(off)); err != nil {
			return fmt.Errorf("doubling allgather: %w", err)
		}
	}
	if err := foldOut(ctx, p, g, buf[:off[e]]); err != nil {
		return fmt.Errorf("doubling allgather: %w", err)
	}
	if err := foldOut(ctx, p, g, buf[off[e+1]:]); err != nil {
		return fmt.Errorf("doubling allgather: %w", err)
	}
	return nil
}
